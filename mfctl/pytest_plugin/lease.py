"""The session's hold on the testbed lock: :func:`mfctl.lock.testbed_lock` (a lease, whose backend the
inventory's ``lock:`` section chooses — this machine's lock directory, or a Redis server that several
CI runners share), or, with an mfctl older than leases, :class:`mfctl.lock.TestbedLock`."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


def hold(inv, purpose: str, timeout: float = 0.0):
    """The testbed lock of ``inv``, not yet taken (a context manager). ``timeout``: seconds to wait
    for another holder (0: try once). Entering raises LockError (exit 5) naming the holder."""
    try:
        from mfctl.lock import testbed_lock
    except ImportError:  # (an mfctl without leases)
        from mfctl.lock import TestbedLock

        return TestbedLock(inv.name, purpose, timeout)
    return testbed_lock(inv, purpose, timeout)


def backend(inv) -> str:
    """The lock's backend as the inventory names it (``file`` unless its ``lock:`` section says)."""
    cfg = getattr(inv, "lock", None)
    return str(getattr(cfg, "backend", "file") or "file")


@contextlib.contextmanager
def lent(lock) -> Iterator[None]:
    """While in this block, mfctl code in this process and its children holds the session's lock
    too (``MFCTL_LOCK_TOKEN``: a run started by the ``runner`` fixture borrows the lease instead of
    being refused by it). A lock without a token (the old file lock) lends nothing."""
    token = getattr(lock, "token", None)
    if not token:
        yield
        return
    old = os.environ.get("MFCTL_LOCK_TOKEN")
    os.environ["MFCTL_LOCK_TOKEN"] = token
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("MFCTL_LOCK_TOKEN", None)
        else:
            os.environ["MFCTL_LOCK_TOKEN"] = old
