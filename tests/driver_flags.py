"""A driver's command line read as its options: what the tests check of the reference driver's manifests."""

from __future__ import annotations

from collections.abc import Iterable


def option_values(argv: Iterable[str]) -> dict[str, str]:
    """The `--name=value` options of `argv` by name (a bare `--flag` maps to ""); other words are left out."""
    return {
        name: value
        for name, _, value in (word.removeprefix("--").partition("=") for word in argv if word.startswith("--"))
    }
