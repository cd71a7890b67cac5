"""Every citation of the obligations registry resolves in the pinned module source.

The quoted text must be at or near the cited line of the cited file, in the Go module cache the build fills.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest

from dra_conformance import versions
from dra_conformance.model.obligations import Citation, Registry

# How far from the cited line the quote may start: line numbers drift by a few lines when a comment is reworded.
NEAR_LINES = 10
# `go mod download` of a module already in the cache answers at once; a cold download of k8s.io/kubernetes does not.
DOWNLOAD_TIMEOUT = 600
COMMENT_MARKERS = re.compile(r"^\s*(//+|#+|\*+|/\*+)?\s?")


def pinned_version(module: str) -> str:
    """The version every citation of `module` must name: the pinned Kubernetes release or its staging tag."""
    return versions.KUBERNETES if module == "k8s.io/kubernetes" else "v0." + versions.KUBERNETES.removeprefix("v1.")


@cache
def module_dir(module: str, version: str) -> Path:
    """The module's source in the Go module cache, downloaded if the build has not yet."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("not applicable: citations resolve in the Go module cache, and go is not on PATH")
    answer = subprocess.run(
        [go, "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        timeout=DOWNLOAD_TIMEOUT,
        check=False,
        cwd="/",
    )
    directory = json.loads(answer.stdout or "{}").get("Dir")
    assert directory, f"go mod download {module}@{version}: {answer.stdout} {answer.stderr}"
    return Path(directory)


def _normalized(text: str) -> str:
    return " ".join(text.split())


def locate(citation: Citation, source: str) -> int | None:
    """The 1-based line where the quote starts, if it starts within NEAR_LINES of the cited line; else None.

    Comment markers and line breaks are ignored, so a quote may wrap over several comment lines.
    """
    text, starts = "", []  # the whitespace-normalized text, and the offset where each line begins in it
    for raw in source.splitlines():
        starts.append(len(text))
        words = _normalized(COMMENT_MARKERS.sub("", raw))
        text += words + " " if words else ""
    quote = _normalized(citation.quote)
    offset = text.find(quote)
    while offset != -1:
        number = max(i for i, begin in enumerate(starts, start=1) if begin <= offset)
        if abs(number - citation.line) <= NEAR_LINES:
            return number
        offset = text.find(quote, offset + 1)
    return None


def _citations() -> list[tuple[str, Citation]]:
    return [(o.id, c) for o in Registry.load() for c in o.sources]


@pytest.mark.needs_go
@pytest.mark.parametrize(("obligation", "citation"), _citations(), ids=lambda value: str(value)[:80])
def test_citation_quotes_pinned_source_at_its_line(obligation: str, citation: Citation) -> None:
    assert citation.version == pinned_version(citation.module), (
        f"{obligation}: cites {citation.module}@{citation.version}, the pinned version is "
        f"{pinned_version(citation.module)}"
    )
    path = module_dir(citation.module, citation.version) / citation.path
    assert path.is_file(), f"{obligation}: {citation.path} is not in {citation.module}@{citation.version}"
    found = locate(citation, path.read_text(errors="replace"))
    assert found is not None, (
        f"{obligation}: {citation.quote!r} is not within {NEAR_LINES} lines of {citation.path}:{citation.line}; "
        f"there: {path.read_text(errors='replace').splitlines()[citation.line - 1 : citation.line + 2]}"
    )


@pytest.mark.needs_go
def test_a_quote_far_from_its_line_does_not_resolve() -> None:
    source = "\n".join(["// filler"] * 40 + ["// the Ready condition should be True."])
    near = Citation("m", "v", "p", 38, "the Ready condition should be True.")
    far = Citation("m", "v", "p", 5, "the Ready condition should be True.")
    wrapped = Citation("m", "v", "p", 2, "one two three")
    assert locate(near, source) == 41
    assert locate(far, source) is None
    assert locate(wrapped, "x\n// one two\n// three\n") == 2
