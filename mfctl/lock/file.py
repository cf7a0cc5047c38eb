"""The embedded backend: a lease on one machine, in :func:`mfctl.lock.files.lock_dir`.

``testbed-NAME.lock`` is an flock (filelock) and ``testbed-NAME.holder.json`` the holder record
with its lease expiry. An in-process holder keeps the flock for as long as it holds the lease, so
nobody else takes it while that process lives, however late its renewer is; when it dies (even
by ``kill -9``) the kernel drops the flock and its record names a dead pid: the lock is free at
once. A detached lease (``mfctl lock acquire``) holds no flock after the command: its record
excludes others until its lease expires. Every change of the record is made under the flock.
"""

from __future__ import annotations

import contextlib
import json
import os
import time

from filelock import FileLock, Timeout

from mfctl.errors import LockError
from mfctl.lock.files import lock_path, write_replacing
from mfctl.lock.lease import Lease, describe, iso, same_host_pid_alive, token_id

GUARD_TIMEOUT_S = 5.0  #: waiting for another's short change of the record (never a holder's whole lease)


def _flock_held(path) -> bool | None:
    """Whether some process holds an flock on ``path`` now, from ``/proc/locks`` (proc(5)): no
    lock is taken to find out. None when it cannot tell (no ``/proc/locks``)."""
    try:
        st = os.stat(path)
        text = open("/proc/locks").read()
    except OSError:
        return None
    ino = f":{st.st_ino}"
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 6 and f[1] == "FLOCK" and f[5].endswith(ino):
            dev = f[5].rsplit(":", 1)[0].split(":")
            try:
                if os.makedev(int(dev[0], 16), int(dev[1], 16)) == st.st_dev:
                    return True
            except (ValueError, IndexError):
                return True
    return False


class FileLease(Lease):
    """A lease kept in the machine's lock directory (see the module's docstring)."""

    backend = "file"

    def __init__(self, name: str, purpose: str, **kw):
        super().__init__(name, purpose, **kw)
        self.path = lock_path(name)
        self.info = self.path.with_suffix(".holder.json")
        self._flock = FileLock(str(self.path), mode=0o666, thread_local=False)

    def where(self) -> str:
        return str(self.path)

    @contextlib.contextmanager
    def _guard(self, timeout: float = GUARD_TIMEOUT_S):
        """The flock for a change of the record (re-entrant: an in-process holder has it)."""
        try:
            self._flock.acquire(timeout=timeout)
        except Timeout:
            h = self._read()
            raise LockError(describe(self.what, self.name, h) + f": its lock file {self.path} is held by that process "
                            "(a lease taken inside a running command ends with the command)") from None
        try:
            yield
        finally:
            self._flock.release()

    def _read(self) -> dict | None:
        try:
            h = json.loads(self.info.read_text())
        except (OSError, ValueError):
            return None
        return h if isinstance(h, dict) else None

    def _write(self, record: dict) -> None:
        if not write_replacing(self.info, json.dumps(record)):
            raise LockError(f"{self.what} {self.name!r}: cannot write its holder record {self.info}")

    def _locked_in_process(self) -> bool:
        if self._flock.is_locked:
            return True
        return bool(_flock_held(self.path))

    def _inspect(self) -> dict:
        rec = self._read()
        left = None
        if rec is not None and isinstance(rec.get("expires_ts"), (int, float)):
            left = rec["expires_ts"] - time.time()
        return {"record": rec, "present": rec is not None, "expires_in_s": left, "last": None}

    @staticmethod
    def _detached_live(rec: dict | None) -> bool:
        """Under the flock no in-process holder lives: only a detached lease not expired counts."""
        return rec is not None and bool(rec.get("detached")) and time.time() < float(rec.get("expires_ts") or 0)

    def _try_acquire(self, record: dict, token: str) -> bool:
        try:
            self._flock.acquire(timeout=0)
        except Timeout:
            return False  # a live in-process holder (or another's short change of the record)
        ok = False
        try:
            if self._detached_live(self._read()):
                return False
            self._write(record)
            ok = True
            return True
        finally:
            if not ok or self.detached:
                self._flock.release()

    def _extend(self, token: str, ttl: float, keep_longer: bool = False) -> dict | None:
        if not self._flock.is_locked:
            rec = self._read()
            if rec is None or rec.get("token_id") != token_id(token):
                return None
            if not rec.get("detached"):  # a borrower: its owner (a live process holding the flock) renews it
                return rec if same_host_pid_alive(rec) is not False and self._locked_in_process() else None
        with self._guard():
            rec = self._read()
            if rec is None or rec.get("token_id") != token_id(token):
                return None
            now = time.time()
            old = float(rec.get("expires_ts") or 0)
            if rec.get("detached") and now >= old:
                return None  # expired: another may have seen it free
            if not (keep_longer and old >= now + ttl):
                rec.update(ttl_s=ttl, expires_ts=now + ttl, expires=iso(now + ttl))
                self._write(rec)
            return rec

    def _release(self, token: str) -> bool:
        with self._guard():
            rec = self._read()
            if rec is None or rec.get("token_id") != token_id(token):
                return False
            with contextlib.suppress(OSError):
                self.info.unlink()
            return True

    def _after_release(self) -> None:
        while self._flock.is_locked:
            self._flock.release()

    def _force_release(self) -> None:
        with self._guard(timeout=0.5):
            with contextlib.suppress(OSError):
                self.info.unlink()

    def holder(self) -> dict | None:
        """Who holds it, or None — a stale record (a holder killed with -9, an expired detached
        lease) is then removed."""
        st = self._inspect()
        if self._live(st):
            return st["record"]
        if st["present"]:
            with contextlib.suppress(LockError, OSError), self._guard(timeout=0):
                if not self._detached_live(self._read()):
                    self.info.unlink()
        return None


class TestbedLock(FileLease):
    """``with TestbedLock(name, purpose):`` — the file lease on testbed ``name`` (raises LockError,
    exit 5, naming the holder when it is held). New code: :func:`mfctl.lock.testbed_lock`."""

    __test__ = False  # (pytest: not a test class)

    def __init__(self, testbed: str, purpose: str, timeout: float = 0.0, **kw):
        super().__init__(testbed, purpose, timeout=timeout, **kw)
        self.testbed = testbed
