"""The testbed lock: one run (or OCS change) at a time per testbed (filelock)."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from filelock import FileLock, Timeout

from mfctl import settings
from mfctl.errors import LockError


def lock_path(testbed: str) -> Path:
    d = settings.state_dir() / "locks"
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{testbed}.lock"


class TestbedLock:
    """``with TestbedLock(name, purpose):`` — raises LockError (exit 5) if held elsewhere."""

    def __init__(self, testbed: str, purpose: str, timeout: float = 0.0):
        self.testbed, self.purpose, self.timeout = testbed, purpose, timeout
        self.path = lock_path(testbed)
        self.info = self.path.with_suffix(".holder.json")
        self._lock = FileLock(str(self.path))

    def holder(self) -> dict | None:
        try:
            return json.loads(self.info.read_text())
        except (OSError, json.JSONDecodeError):
            return None

    def __enter__(self) -> "TestbedLock":
        try:
            self._lock.acquire(timeout=self.timeout)
        except Timeout:
            h = self.holder() or {}
            raise LockError(f"testbed {self.testbed!r} is locked by pid {h.get('pid', '?')} on {h.get('host', '?')} "
                            f"for {h.get('purpose', '?')!r} since {h.get('since', '?')}") from None
        self.info.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "purpose": self.purpose,
                                         "since": time.strftime("%Y-%m-%dT%H:%M:%S")}))
        return self

    def __exit__(self, *exc) -> None:
        self.info.unlink(missing_ok=True)
        self._lock.release()
