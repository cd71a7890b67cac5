"""Standard output whose reader may go away: a run piped into `head`, or a CI log collector that died.

A write to a pipe nobody reads raises BrokenPipeError; inside pytest's terminal summary that ends the session before
the summary's files are written. The run's files matter more than its terminal: once the reader is gone, output goes
to /dev/null and the run goes on to write its reports.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO


class ReaderMayLeave:
    """A text stream that sends what it cannot deliver to /dev/null instead of raising BrokenPipeError."""

    def __init__(self, stream: TextIO) -> None:
        """Wrap `stream` (sys.stdout)."""
        self._stream = stream
        self.reader_left = False

    def write(self, text: str) -> int:
        """Write `text`, or drop it once the reader has left."""
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._to_devnull()
            return len(text)

    def flush(self) -> None:
        """Flush, or drop what was buffered once the reader has left."""
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_devnull()

    def _to_devnull(self) -> None:
        # The descriptor itself: pytest's capture and the run's child processes write to it too. pytest may put the
        # broken pipe back when it resumes its capture; the next failed write comes here again.
        self.reader_left = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextmanager
def stdout_reader_may_leave(module: Any) -> Iterator[ReaderMayLeave]:
    """`module.stdout` (the sys module) wrapped in ReaderMayLeave for the block, put back afterwards."""
    original = module.stdout
    wrapped = ReaderMayLeave(original)
    module.stdout = wrapped
    try:
        yield wrapped
    finally:
        module.stdout = original
        wrapped.flush()
