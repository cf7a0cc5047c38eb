"""Hold SIGINT/SIGTERM while hardware state changes, so a change is never half-sent."""

from __future__ import annotations

import signal
import threading


class DeferSignals:
    """``with DeferSignals():`` — SIGINT/SIGTERM received inside are remembered and raised
    as KeyboardInterrupt when the block ends (only in the main thread; elsewhere a no-op).
    The block must be bounded in time: every OCS command has a timeout."""

    def __init__(self):
        self.pending = None
        self._old = None

    def __enter__(self) -> "DeferSignals":
        self.pending = None
        if threading.current_thread() is not threading.main_thread():
            return self
        self._old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        for s in self._old:
            signal.signal(s, lambda signum, frame: setattr(self, "pending", signum))
        return self

    def __exit__(self, *exc) -> None:
        if self._old:
            for s, h in self._old.items():
                signal.signal(s, h)
            self._old = None
        if self.pending is not None and exc[0] is None:
            raise KeyboardInterrupt
