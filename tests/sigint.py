"""Tests of Ctrl-C install the handler they test instead of inheriting the caller's: a suite started with SIGINT
ignored (`trap "" INT`, a background launch from a script) hands SIG_IGN to the test process and, across exec, to
every child, and Python installs its KeyboardInterrupt handler at start-up only where SIGINT is not ignored."""
from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager


def restore_default_sigint() -> None:
    """`preexec_fn` for a child that must see Ctrl-C as a terminal user's process does: SIGINT at its default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextmanager
def python_sigint() -> Iterator[None]:
    """Python's own SIGINT handler (KeyboardInterrupt) for the block, whatever the caller installed; restored after."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
