"""The testbed of one pytest session: the inventory given (``--mfctl-inventory``) or the embedded mock
started for the session (as ``mfctl mock up`` does, through :mod:`mfctl.mockctl`), validated, and
locked until the session ends. Made on first use of a testbed fixture only: a session whose tests
ask for none starts nothing and locks nothing."""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mfctl.pytest_plugin import lease

log = logging.getLogger(__name__)

#: the inventory the embedded mock stands for (the prototype of DESIGN §2)
MOCK_INVENTORY = Path(__file__).resolve().parents[2] / "inventory" / "mfabric-prototype.yaml"
MOCK_TIME_SCALE = 100.0  #: simulated seconds per wall second of the session's mock (link-up 5.67 s → 57 ms)


@dataclass
class HILSession:
    """What the session's tests share: ``inventory`` (the validated model), ``inventory_path``,
    ``mock`` (the mock's status when the session started one), the lock held, and the seconds it
    took to start the mock (``mock_start_s``) and to get the lock (``lock_wait_s``)."""

    inventory_path: str
    inventory: Any  #: mfctl.inventory.models.Inventory
    lock: Any  #: mfctl.lock.lease.Lease (or the older TestbedLock): a context manager, held
    mock: dict | None = None
    mock_state_dir: Path | None = None
    mock_start_s: float = 0.0
    lock_wait_s: float = 0.0
    acquired_ts: float = 0.0  #: when the lock was had (epoch s)
    broken_by: str | None = None  #: the test that left the testbed changed (later tests are told)
    _tmp: object = field(default=None, repr=False)
    _pool: object = field(default=None, repr=False)

    @property
    def is_mock(self) -> bool:
        return self.mock is not None

    @property
    def time_scale(self) -> float:
        return float(self.mock.get("time_scale", MOCK_TIME_SCALE)) if self.mock else 1.0

    @classmethod
    def open(cls, inventory: str | None, *, lock_timeout: float, purpose: str) -> "HILSession":
        """Start the mock when no ``inventory`` is given, load and validate the inventory (ConfigError,
        exit 3), then take the testbed lock (waiting up to ``lock_timeout`` s; LockError, exit 5)."""
        from mfctl.inventory import load_inventory

        mock = sd = tmp = None
        t0 = time.monotonic()
        if inventory is None:
            from mfctl import mockctl

            tmp = tempfile.TemporaryDirectory(prefix="mfctl-hil-")
            sd = Path(tmp.name) / "mock"
            mock = mockctl.start(MOCK_INVENTORY, sd, time_scale=MOCK_TIME_SCALE, owner_pid=os.getpid())
            inventory = mock["inventory"]
        started = time.monotonic() - t0
        try:
            inv = load_inventory(inventory)
            lk = lease.hold(inv, purpose, lock_timeout)
            t1 = time.monotonic()
            lk.__enter__()
        except BaseException:
            if sd is not None:
                from mfctl import mockctl

                mockctl.stop(sd)
            if tmp is not None:
                tmp.cleanup()
            raise
        s = cls(str(inventory), inv, lk, mock=mock, mock_state_dir=sd, mock_start_s=started,
                lock_wait_s=time.monotonic() - t1, acquired_ts=time.time(), _tmp=tmp)
        log.info("HIL session on %s (%s), lock held after %.3f s", inv.name, "mock" if mock else "hardware", s.lock_wait_s)
        return s

    def close(self) -> None:
        """Release the lock (the next holder need not wait for the rest), close the SSH pool, then stop
        the mock this session started."""
        try:
            self.lock.__exit__(None, None, None)
        finally:
            if self._pool is not None:
                self._pool.close()  # type: ignore[attr-defined]
                self._pool = None
            if self.mock_state_dir is not None:
                from mfctl import mockctl

                mockctl.stop(self.mock_state_dir)
            if self._tmp is not None:
                self._tmp.cleanup()  # type: ignore[attr-defined]

    def pool(self):
        """The session's SSH pool to every host (one connection per host, reused by the gate and the
        ``hosts`` fixture)."""
        if self._pool is None:
            self._pool = self.context().pool()
        return self._pool

    def context(self):
        from mfctl.context import Context

        return Context.from_settings(self.inventory)

    def describe(self) -> str:
        """One line for pytest's header: which testbed, how it is locked."""
        where = "the embedded mock" if self.is_mock else self.inventory_path
        return (f"mfctl: testbed {self.inventory.name} ({where}), lock {lease.backend(self.inventory)} "  # type: ignore[attr-defined]
                f"held by {socket.gethostname()} pid {os.getpid()}")
