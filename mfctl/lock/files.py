"""File locks (filelock) in the machine's shared lock directory, and the device lock.

- the testbed lock's file backend (:mod:`mfctl.lock.file`) — keyed by the inventory's name, in
  :func:`lock_dir`: one run or provisioning of a testbed's hosts at a time, whatever
  ``MFCTL_STATE_DIR`` each operator has (with a lock per state dir, two operators provisioned the
  same hosts at once).
- :class:`DeviceLock` — keyed by a device's identity (what the device says of itself, and the
  endpoint it is reached at), in :func:`lock_dir`, which every state directory and user of the
  machine share: a renamed copy of the inventory, another ``MFCTL_STATE_DIR`` or a second
  transport to the same OCS is excluded too.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import stat
import tempfile
import time
from pathlib import Path

from filelock import FileLock, Timeout

from mfctl import settings
from mfctl.procs import start_ticks


def lock_path(testbed: str) -> Path:
    """The testbed lock's file: ``testbed-NAME.lock`` in the machine's shared :func:`lock_dir`."""
    return lock_dir() / f"testbed-{safe_key(testbed)}.lock"


def _usable(d: Path) -> bool:
    """``d`` is a real directory (not a link) owned by root or by us, sticky if group or others may
    write it (so nobody can remove or replace our files there), and writable by us."""
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid not in (0, os.getuid()):
        return False
    if st.st_mode & (stat.S_IWOTH | stat.S_IWGRP) and not st.st_mode & stat.S_ISVTX:
        return False
    return os.access(d, os.W_OK | os.X_OK)


def lock_dir() -> Path:
    """``MFCTL_LOCK_DIR``, else ``/run/lock/mfctl`` where it can be made (Debian's ``/run/lock`` is
    world-writable and sticky), else ``<tmp>/mfctl-locks``; created mode 1777 so that every user's
    mfctl sees the same locks. A directory that is a link, belongs to another user, or is
    world-writable without the sticky bit is refused (another user could plant files there)."""
    explicit = settings.get("lock_dir")
    candidates = [Path(explicit).expanduser()] if explicit else [Path("/run/lock/mfctl"),
                                                                  Path(tempfile.gettempdir()) / "mfctl-locks"]
    refused = []
    for d in candidates:
        try:
            if not os.path.lexists(d):
                d.mkdir(parents=True, exist_ok=True)
                os.chmod(d, 0o1777)
            if _usable(d):
                return d
            refused.append(f"{d} (a link, another user's, or writable by others without the sticky bit)")
        except OSError as e:
            refused.append(f"{d} ({e.strerror or e})")
    from mfctl.errors import ConfigError

    raise ConfigError(f"no usable lock directory: {'; '.join(refused)}; set MFCTL_LOCK_DIR")


def write_replacing(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` through a new private file renamed over it: never through a link
    or another user's file planted there (in a sticky directory the rename of another user's
    file fails, and nothing is written). False when it could not be written."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
    except OSError:
        return False
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        return True
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return False


def holder_alive(h: dict) -> bool:
    """A holder record names a live holder: a detached lease (``mfctl lock acquire``) until its
    expiry; another machine's process is assumed alive (its pid means nothing here); on this
    machine the pid must exist with the start time recorded (if any)."""
    if h.get("detached"):
        return time.time() < float(h.get("expires_ts") or 0)
    if h.get("host") != socket.gethostname():
        return True
    pid = h.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    ticks = start_ticks(pid)
    return ticks is not None and (h.get("start_ticks") in (None, ticks))


def clean_stale(directory: Path) -> list[Path]:
    """Remove the ``*.holder.json`` files in ``directory`` whose process is dead (killed with -9:
    its ``__exit__`` never ran; the flock itself died with it). Returns the files removed."""
    gone: list[Path] = []
    try:
        files = list(directory.glob("*.holder.json"))
    except OSError:
        return gone
    for f in files:
        try:
            h = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(h, dict) and not holder_alive(h):
            with contextlib.suppress(OSError):
                f.unlink()
                gone.append(f)
    return gone


def safe_key(text: str) -> str:
    """``text`` as a file name: letters, digits, ``. _ -``; anything else becomes ``_``."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)[:120] or "_"


class _Lock:
    """Shared body: acquire with a timeout, write who holds it, raise LockError naming them."""

    what = "lock"

    def __init__(self, path: Path, name: str, purpose: str, timeout: float = 0.0):
        self.name, self.purpose, self.timeout = name, purpose, timeout
        self.path = path
        self.info = path.with_suffix(".holder.json")
        self._lock = FileLock(str(path), mode=0o666)

    def holder(self) -> dict | None:
        """Who holds the lock (the record beside it), or None — also when the record names a
        dead process (it is then removed: a holder killed with -9 left it)."""
        try:
            h = json.loads(self.info.read_text())
        except (OSError, json.JSONDecodeError):
            return None
        if not isinstance(h, dict):
            return None
        if not holder_alive(h):
            with contextlib.suppress(OSError):
                self.info.unlink()
            return None
        return h

    def __enter__(self):
        clean_stale(self.path.parent)
        try:
            self._lock.acquire(timeout=self.timeout)
        except Timeout:
            from mfctl.lock.lease import Refused, describe

            h = self.holder()
            raise Refused(describe(self.what, self.name, h), h) from None
        # who holds it, for the next one's error message (only informative: the lock excludes)
        from mfctl.lock.lease import holder_record

        rec = holder_record(self.name, self.purpose, ttl=0, token=os.urandom(16).hex())
        for k in ("ttl_s", "expires_ts", "expires", "token_id"):  # held for as long as the process lives
            rec.pop(k)
        write_replacing(self.info, json.dumps(rec))
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.info.unlink(missing_ok=True)
        except OSError:
            pass
        self._lock.release()


class DeviceLock(_Lock):
    """``with DeviceLock(key, purpose):`` — one writer per device on this machine, whatever the
    inventory or state directory. ``key`` names the device (see :mod:`mfctl.ocs.identity`)."""

    what = "device"

    def __init__(self, key: str, purpose: str, timeout: float = 0.0):
        super().__init__(lock_dir() / f"{safe_key(key)}.lock", key, purpose, timeout)
        self.last_path = self.path.with_suffix(".last.json")

    def note_change(self, apply_id: str, journal: Path) -> None:
        """Record, beside the lock, the device's latest change and which journal holds it — so a
        journal in another state directory can tell that its unfinished change was superseded."""
        write_replacing(self.last_path, json.dumps({"apply_id": apply_id, "journal": str(journal), "ts": time.time()}))

    def last_change(self) -> dict | None:
        """What :meth:`note_change` last wrote (None if nothing, e.g. since a reboot emptied /run/lock)."""
        try:
            d = json.loads(self.last_path.read_text())
        except (OSError, ValueError):
            return None
        return d if isinstance(d, dict) and isinstance(d.get("apply_id"), str) else None
