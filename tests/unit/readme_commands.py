"""The shell blocks of a Markdown file, split into commands, each with the line it starts on.

A block is shell when its fence says `sh`, `bash`, `shell` or `console` (a console block's commands are its `$ `
lines); a GitHub workflow in a `yaml` block contributes its `run:` steps. `<!-- not run here: REASON -->` on the
line before a fence marks an example this machine cannot run, with the reason.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

SHELL_INFO = frozenset({"sh", "bash", "shell", "console"})
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+)(?P<info>[\w-]*)\s*$")
NOT_RUN = re.compile(r"^\s*<!--\s*not run here:\s*(?P<reason>.*?)\s*-->\s*$")
# `[--nodes 2]` and `[--metrics fake|metrics-server|none]` in an example are optional parts: taken, first choice.
OPTIONAL = re.compile(r"\[([^\[\]]*)\]")
OPERATORS = frozenset({"&&", "||", ";", "|", "&"})
REDIRECTS = frozenset({">", ">>", "<", "2>", "&>"})
# A bare block whose line starts so is a command left untagged.
LOOKS_LIKE_A_COMMAND = re.compile(r"^\s*(\$ |dra-conformance |pytest |python3? -m |tox )")


@dataclass(frozen=True)
class Command:
    """One command of a block: the README line it starts on, and its words."""

    line: int
    words: tuple[str, ...]

    def __str__(self) -> str:
        return shlex.join(self.words)


@dataclass
class Block:
    """One fenced block: where it starts, its info string, its lines, and why it is not run here (if marked)."""

    line: int
    info: str
    lines: list[tuple[int, str]] = field(default_factory=list)
    not_run: str | None = None

    @property
    def shell(self) -> bool:
        """True when its commands are to be checked."""
        return self.info in SHELL_INFO or (self.info == "yaml" and any("run:" in text for _, text in self.lines))

    def commands(self) -> list[Command]:
        """The commands of the block, continuation lines joined, comments and redirections left out."""
        found: list[Command] = []
        for line, text in self._logical_lines():
            words: list[str] = []
            for word in _words(text):
                if word in OPERATORS:
                    found += [Command(line, tuple(words))] if words else []
                    words = []
                else:
                    words.append(word)
            found += [Command(line, tuple(words))] if words else []
        return found

    def _logical_lines(self) -> list[tuple[int, str]]:
        logical: list[tuple[int, str]] = []
        pending: tuple[int, str] | None = None
        for line, text in self.lines:
            text = text.strip()
            if self.info == "console":
                if pending is None and not text.startswith("$ "):
                    continue
                text = text.removeprefix("$ ") if pending is None else text
            elif self.info == "yaml":
                match = re.match(r"^-?\s*run:\s*(.*)$", text)
                if match is None:
                    continue
                text = match.group(1)
            start, joined = pending if pending else (line, "")
            if text.endswith("\\"):
                pending = (start, joined + text[:-1] + " ")
                continue
            pending = None
            logical.append((start, joined + text))
        return logical


def _words(text: str) -> list[str]:
    text = OPTIONAL.sub(lambda match: match.group(1).split("|")[0], text)
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = list(lexer)
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in REDIRECTS:
            skip = True
        else:
            kept.append(word)
    return kept


def blocks(markdown: str) -> list[Block]:
    """Every fenced block of `markdown`, in order, with its `not run here` marker."""
    found: list[Block] = []
    current: Block | None = None
    fence = ""
    previous = ""
    for number, text in enumerate(markdown.splitlines(), start=1):
        match = FENCE.match(text)
        if current is None and match:
            marker = NOT_RUN.match(previous)
            current = Block(number, match.group("info"), not_run=marker.group("reason") if marker else None)
            fence = match.group("fence")
        elif current is not None and match and match.group("fence") == fence and not match.group("info"):
            found.append(current)
            current = None
        elif current is not None:
            current.lines.append((number, text))
        if text.strip():
            previous = text
    return found


def untagged_commands(block: Block) -> list[int]:
    """Lines of a block without an info string that look like commands (they would go unchecked)."""
    if block.info:
        return []
    return [line for line, text in block.lines if LOOKS_LIKE_A_COMMAND.match(text)]
