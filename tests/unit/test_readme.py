"""The README runs as written: every shell block's commands are run (the cheap ones) or parsed by the real parsers.

`dra-conformance` commands go through the CLI's own argument parser (`cli.parse_command_line`), and what `run` and
`explore` hand to pytest through pytest's parser with the plugin loaded (`pytester.parseconfig`), as do `pytest`
commands; tox commands name environments of tox.ini. A README example this machine cannot run carries
`<!-- not run here: REASON -->` on the line before its fence.
"""

from __future__ import annotations

import configparser
import contextlib
import io
import re
from collections.abc import Callable

import pytest

from dra_conformance import cli, paths, settings
from dra_conformance.errors import UsageError
from tests.unit import readme_commands
from tests.unit.readme_commands import Block, Command

README = paths.CHECKOUT / "README.md"
BLOCKS = readme_commands.blocks(README.read_text())
SHELL_BLOCKS = [block for block in BLOCKS if block.shell]
# Programs that are not ours: their commands are listed, never run or parsed here.
EXTERNAL = "external"


def _is_cheap(argv: tuple[str, ...]) -> bool:
    """A command this test runs: help, the version, profile validation, the obligations document on stdout."""
    if {"--help", "-h", "--version"} & set(argv):
        return True
    return argv[:2] == ("profile", "check") or (argv[:1] == ("obligations",) and "--output" not in argv)


def _absolute(words: tuple[str, ...]) -> list[str]:
    """Test paths of the checkout made absolute, so their conftests load as they would in the checkout."""
    return [str(paths.CHECKOUT / word) if (paths.CHECKOUT / word.split("::")[0]).exists() else word for word in words]


class Checker:
    """Runs or parses one command; returns what it did, raising AssertionError naming the README line if wrong."""

    def __init__(self, pytester: pytest.Pytester) -> None:
        self.pytester = pytester

    def check(self, command: Command) -> str:
        program, *rest = command.words
        where = f"README.md:{command.line}: `{command}`"
        if program == "dra-conformance":
            return self.dra_conformance(tuple(rest), where)
        if program == "pytest":
            self.pytest_args(tuple(rest), where)
            return "parsed (pytest with the plugin)"
        if program == "tox" or (program.startswith("python") and rest[:2] == ["-m", "tox"]):
            return self.tox(tuple(rest), where)
        named = " ".join(command.words[:3]) if rest[:1] == ["-m"] else program
        return f"{EXTERNAL}: {named} is not ours, listed only"

    def dra_conformance(self, argv: tuple[str, ...], where: str) -> str:
        if _is_cheap(argv):
            code, out, err = _in_process(lambda: cli.main(list(argv)))
            assert code == 0, f"{where}: exit {code}; stderr: {err.strip()}"
            return f"ran: exit 0, {len(out.splitlines())} lines of output"
        code, out, err = _in_process(lambda: _parse_cli(argv, self, where))
        assert code == 0, f"{where}: {err.strip() or out.strip()}"
        return out.strip()

    def pytest_args(self, args: tuple[str, ...], where: str) -> None:
        try:
            self.pytester.parseconfig(*_absolute(args))
        except pytest.UsageError as error:
            raise AssertionError(f"{where}: pytest: {cli.one_line_usage_error(str(error))}") from None

    def tox(self, argv: tuple[str, ...], where: str) -> str:
        envs = [name for index, word in enumerate(argv) if argv[index - 1] == "-e" for name in word.split(",")]
        ini = configparser.ConfigParser(interpolation=None)
        ini.read(paths.CHECKOUT / "tox.ini")
        known = {section.removeprefix("testenv:") for section in ini.sections() if section.startswith("testenv:")}
        unknown = [env for env in envs if env not in known]
        assert not unknown, f"{where}: no such tox environment {unknown} in tox.ini (it has {sorted(known)})"
        return f"parsed (tox environments {', '.join(envs)} exist)"


def _parse_cli(argv: tuple[str, ...], checker: Checker, where: str) -> int:
    args, rest = cli.parse_command_line(list(argv))
    if args.command in ("run", "explore"):
        checker.pytest_args(tuple(rest), where)
        print(f"parsed (CLI {args.command}, then pytest with the plugin: {len(rest)} arguments)")
    elif args.command in cli.PASSES_ON and rest:
        # What Sonobuoy's pods hand to `dra-conformance run`.
        _, run_rest = cli.parse_command_line(["run", *rest])
        checker.pytest_args(tuple(run_rest), where)
        print(f"parsed (CLI {args.command}, its run arguments by run and pytest)")
    else:
        print(f"parsed (CLI {args.command})")
    return 0


def _in_process(call: Callable[[], int]) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of `call`; argparse's exits and one-line usage errors become codes."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = call()
        except SystemExit as exited:
            code = exited.code if isinstance(exited.code, int) else 1
        except UsageError as error:
            print(f"dra-conformance: {error}", file=err)
            code = cli.EXIT_USAGE
    return code, out.getvalue(), err.getvalue()


def test_the_readme_has_shell_blocks_and_every_command_is_tagged() -> None:
    untagged = [line for block in BLOCKS for line in readme_commands.untagged_commands(block)]
    assert len(SHELL_BLOCKS) >= 10, f"found only {len(SHELL_BLOCKS)} shell blocks in {README}"
    assert not untagged, f"README.md lines {untagged}: commands in a block with no language; tag it sh or console"


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=[f"README.md:{block.line}" for block in SHELL_BLOCKS])
def test_every_command_of_a_readme_block_runs_or_parses(
    block: Block, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(paths.CHECKOUT)  # the README's relative paths are the checkout's
    monkeypatch.delenv("KUBECONFIG", raising=False)
    checker = Checker(pytester)
    done = [(command, checker.check(command)) for command in block.commands()]
    assert done, f"README.md:{block.line}: a {block.info} block with no command"
    print(f"README.md:{block.line} ({block.info}){f': not run here: {block.not_run}' if block.not_run else ''}")
    for command, what in done:
        print(f"  {command.line}: {command}\n      -> {what}")
    not_run = [command for command, what in done if not what.startswith("ran")]
    print(f"  {len(done) - len(not_run)} ran, {len(not_run)} parsed or listed")
    if not_run:
        assert block.not_run, (
            f"README.md:{block.line}: `{not_run[0]}` is not run here; mark the block with "
            "<!-- not run here: REASON --> on the line before its fence"
        )


# `--dra-<name>` in the README's prose; `--dra-timeout-<name>` is the pattern of a family, and a spelling followed
# by "is now" quotes a rename.
PROSE_OPTION = re.compile(r"--dra-[a-z0-9]+(?:-[a-z0-9]+)*(?![-<\w])(?! is now)")


def test_every_plugin_option_the_readme_names_is_one(pytester: pytest.Pytester) -> None:
    parser = pytester.parseconfig(str(paths.suites_dir() / "explore"))._parser
    known = {name for group in parser._groups for option in group.options for name in option.names()}
    named = [
        (number, found)
        for number, text in enumerate(README.read_text().splitlines(), start=1)
        for found in PROSE_OPTION.findall(text)
    ]
    unknown = [f"README.md:{number}: {option}" for number, option in named if option not in known]
    former = [f"README.md:{n}: {line}" for n, option in named if (line := settings.former_spelling(option))]
    assert len(named) > 20, f"found only {len(named)} --dra- options in the README"
    assert not unknown and not former, "\n".join(unknown + former)


def test_ci_runs_the_readmes_test_command_verbatim() -> None:
    command = next(
        str(command)
        for block in SHELL_BLOCKS
        for command in block.commands()
        if command.words[:4] == ("python3", "-m", "tox", "-e") and "lint,tests" in command.words
    )
    ci = (paths.CHECKOUT / ".ci" / "run").read_text()
    assert 'python3 -m pip install -q "tox>=4.20,<5" && python3 -m tox -e lint,tests' in ci, ci
    assert command == "python3 -m tox -e lint,tests", command


def test_the_readmes_option_reference_is_the_table_it_is_generated_from() -> None:
    text = README.read_text()
    generated = settings.reference_markdown()
    assert generated in text, (
        "README.md's option reference differs from dra_conformance.settings; paste `python -c 'from "
        'dra_conformance import settings; print(settings.reference_markdown(), end="")\'`:\n' + generated
    )


def test_a_renamed_option_in_a_readme_block_fails_naming_its_line(pytester: pytest.Pytester) -> None:
    """The check bites: a block with a former spelling and one with an unknown option each fail with their line."""
    markdown = (
        "text\n\n<!-- not run here: a cluster -->\n```sh\n"
        "dra-conformance run --cluster existing --kubeconfig K \\\n    suites/rollback --rollback-phase before\n"
        "pytest suites --dra-no-such-option -n 2\n```\n"
    )
    (block,) = readme_commands.blocks(markdown)
    first, second = block.commands()
    checker = Checker(pytester)
    with pytest.raises(AssertionError, match=r"^README.md:5: .*--rollback-phase is now --dra-rollback-phase"):
        checker.check(first)
    with pytest.raises(AssertionError, match=r"^README.md:7: .*unrecognized arguments: --dra-no-such-option"):
        checker.check(second)
    assert block.not_run == "a cluster", block


def test_commands_split_at_operators_with_optional_parts_taken() -> None:
    markdown = (
        "```sh\npython3 -m pip install -q 'tox>=4' && python3 -m tox -e unit   # comment\n"
        "dra-conformance cluster up [--nodes 2] [--metrics fake|metrics-server|none] > out.txt\n```\n"
        "```console\n$ dra-conformance --version\ndra-conformance 0.1.0\n```\n"
    )
    found = [str(command) for block in readme_commands.blocks(markdown) for command in block.commands()]
    assert found == [
        "python3 -m pip install -q 'tox>=4'",
        "python3 -m tox -e unit",
        "dra-conformance cluster up --nodes 2 --metrics fake",
        "dra-conformance --version",
    ], found


def test_path_arguments_are_made_absolute_only_where_the_checkout_has_them() -> None:
    made = _absolute(("suites/rollback", "-k", "x", "nope/"))
    assert made == [str(paths.CHECKOUT / "suites/rollback"), "-k", "x", "nope/"], made
