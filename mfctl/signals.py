"""Hold SIGINT/SIGTERM/SIGHUP while hardware state changes, so a change is never half-sent
(a dropped SSH session sends SIGHUP)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

HELD = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


class Interrupted(KeyboardInterrupt):
    """A KeyboardInterrupt that knows its signal (``signum``: SIGINT, SIGTERM or SIGHUP)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def signal_of(exc: BaseException) -> str:
    """The name of the signal behind an interrupt (``SIGINT`` for a plain KeyboardInterrupt: Ctrl-C)."""
    return signal.Signals(getattr(exc, "signum", signal.SIGINT)).name


class DeferSignals:
    """``with DeferSignals():`` — SIGINT/SIGTERM/SIGHUP received inside are remembered and raised
    as KeyboardInterrupt when the block ends (only in the main thread; elsewhere a no-op).
    The block must be bounded in time: every OCS command has a timeout."""

    def __init__(self, reraise: bool = True, on_signal=None):
        """``reraise=False``: a signal received inside is dropped (clean-up that must finish);
        ``on_signal(signum)`` is called when one arrives (e.g. to tell the operator to wait)."""
        self.pending: int | None = None
        self._old: dict | None = None
        self.reraise, self.on_signal = reraise, on_signal

    def __enter__(self) -> "DeferSignals":
        self.pending = None
        if threading.current_thread() is not threading.main_thread():
            return self
        self._old = {s: signal.getsignal(s) for s in HELD}
        def hold(signum, frame):
            self.pending = signum
            if self.on_signal:
                self.on_signal(signum)

        for s in self._old:
            signal.signal(s, hold)
        return self

    def __exit__(self, *exc) -> None:
        if self._old:
            for s, h in self._old.items():
                signal.signal(s, h)
            self._old = None
        if self.pending is not None and exc[0] is None and self.reraise:
            raise Interrupted(self.pending)


def _raise_interrupt(signum, frame):
    raise Interrupted(signum)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Inside the block SIGTERM and SIGHUP raise :class:`Interrupted` (a KeyboardInterrupt naming
    its signal), as Ctrl-C does — and so does SIGINT itself (``mfctl run``: a scheduler's or
    systemd's stop, or the operator's terminal gone, is an interrupted run with its records written,
    and the run says which signal). Only in the main thread, and only over a handler Python
    installed (SIGINT: only over Python's own, SIGHUP: only over the default); the old handlers
    are put back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {}
    for s, replaceable in ((signal.SIGTERM, None), (signal.SIGHUP, signal.SIG_DFL),
                           (signal.SIGINT, signal.default_int_handler)):
        h = signal.getsignal(s)
        if h is not None and (replaceable is None or h is replaceable):
            old[s] = h
            signal.signal(s, _raise_interrupt)
    # a mask inherited blocked (a supervisor's, a parent's thread) would hold them forever: unblock them
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, list(old)) if old else None
    try:
        yield
    finally:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for s, h in old.items():
            signal.signal(s, h)
