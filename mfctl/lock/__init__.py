"""Locks: one run (or change) at a time per testbed, and per device (docs/locks.md).

- :func:`testbed_lock` — the testbed lock of an inventory, a lease (:class:`~mfctl.lock.lease.Lease`)
  kept where the inventory's ``lock:`` section says: this machine's lock directory (the default,
  :mod:`mfctl.lock.file`), or a Redis server (:mod:`mfctl.lock.redis_backend`) or an etcd cluster
  (:mod:`mfctl.lock.etcd_backend`) shared by several machines. Every mutating command (``run``,
  ``ocs`` changes, ``provision apply``) and a pytest session take it; ``mfctl lock`` shows and
  manages it.
- :class:`DeviceLock` — one writer per OCS on this machine, keyed by the device's identity
  (:mod:`mfctl.lock.files`).
"""

from __future__ import annotations

from collections.abc import Callable

from mfctl.lock.file import FileLease, TestbedLock
from mfctl.lock.files import DeviceLock, clean_stale, holder_alive, lock_dir, lock_path, safe_key, write_replacing
from mfctl.lock.lease import Lease, LockLost, Refused, describe, public_holder, redact_url, redacted_command, token_id

__all__ = ["DeviceLock", "FileLease", "Lease", "LockLost", "Refused", "TestbedLock", "clean_stale", "describe",
           "holder_alive", "lock_dir", "lock_path", "public_holder", "redact_url", "redacted_command", "safe_key",
           "testbed_lock", "token_id", "write_replacing"]


def testbed_lock(inv, purpose: str, timeout: float = 0.0, *, ttl: float | None = None, reason: str | None = None,
                 detached: bool = False, token: str | None = None,
                 on_lost: Callable[[str], None] | None = None) -> Lease:
    """The testbed lock of inventory ``inv`` (an :class:`mfctl.inventory.models.Inventory`), not yet
    taken: ``with testbed_lock(inv, "mfctl run short"):`` (or ``.acquire()`` / ``.release()``).

    The backend is ``inv.lock.backend`` (``file`` by default). ``timeout``: seconds to wait for a
    holder to let go (0: try once). ``ttl``: lease seconds (default ``inv.lock.ttl_s``, 60),
    renewed every ttl/3 by a thread while held. ``token`` (default ``MFCTL_LOCK_TOKEN``): a token
    that holds the lock already (``mfctl lock acquire``, a parent process): the lease is borrowed,
    not taken. Entering raises :class:`~mfctl.lock.lease.Refused` (a LockError, exit 5) naming the
    holder, UnreachableError (exit 4) when the lock service cannot be reached. ``on_lost``: see
    :class:`~mfctl.lock.lease.Lease` (default: KeyboardInterrupt in the main thread)."""
    from mfctl import settings

    cfg = getattr(inv, "lock", None)
    kw = dict(timeout=timeout, ttl=float(ttl or (cfg.ttl_s if cfg is not None else 60.0)), reason=reason,
              detached=detached, token=token if token is not None else (settings.get("lock_token") or None),
              on_lost=on_lost)
    if cfg is not None and cfg.backend == "redis":
        from mfctl.lock.redis_backend import RedisLease

        return RedisLease(inv.name, purpose, config=cfg, base_dir=getattr(inv, "base_dir", None), **kw)
    if cfg is not None and cfg.backend == "etcd":
        from mfctl.lock.etcd_backend import EtcdLease

        return EtcdLease(inv.name, purpose, config=cfg, base_dir=getattr(inv, "base_dir", None), **kw)
    return FileLease(inv.name, purpose, **kw)


testbed_lock.__test__ = False  # type: ignore[attr-defined]  # (pytest: not a test, though imported into tests)
