"""A run's standard output whose reader went away drops what it cannot deliver instead of ending the run."""

from __future__ import annotations

import os
import types

from dra_conformance.reader_may_leave import ReaderMayLeave, stdout_reader_may_leave


def test_a_write_after_the_reader_left_is_dropped_and_the_descriptor_goes_to_devnull() -> None:
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "w", buffering=1) as stream:
        wrapped = ReaderMayLeave(stream)
        assert wrapped.write("seen\n") == 5
        assert os.read(read_end, 100) == b"seen\n"
        os.close(read_end)
        assert wrapped.write("nobody reads this\n") == len("nobody reads this\n")
        wrapped.write("nor this\n")
        wrapped.flush()
        assert wrapped.reader_left, "the broken pipe went unnoticed"
        assert os.path.samestat(os.fstat(stream.fileno()), os.stat(os.devnull)), "the descriptor is not /dev/null"


def test_the_wrapper_is_put_back_after_the_block() -> None:
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "w") as stream:
        module = types.SimpleNamespace(stdout=stream)
        with stdout_reader_may_leave(module) as wrapped:
            inside = module.stdout
            print("inside", file=module.stdout)
        assert inside is wrapped and module.stdout is stream, (inside, module.stdout)
    with os.fdopen(read_end) as reader:
        assert reader.read() == "inside\n"
