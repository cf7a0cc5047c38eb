"""Start, stop and inspect the mock testbed process (client side; never imports mfctl.mock).

The mock runs as ``python -m mfctl.mock serve`` in its own session; it writes
``status.json`` and ``inventory.yaml`` into its state directory when ready.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mfctl import settings
from mfctl.errors import ConfigError, LockError, OperationFailed
from mfctl.inventory import load_inventory

log = logging.getLogger(__name__)


def default_state_dir() -> Path:
    return settings.state_dir() / "mock"


def status(state_dir: Path | None = None) -> dict | None:
    """The running mock's status, or None. A stale status file (dead pid) is removed."""
    sd = Path(state_dir or settings.state_path() / "mock")  # (a question: nothing is created to answer it)
    p = sd / "status.json"
    if not p.exists():
        return None
    st = json.loads(p.read_text())
    try:
        os.kill(st["pid"], 0)
    except ProcessLookupError:
        p.unlink(missing_ok=True)
        return None
    st["state_dir"] = str(sd)
    return st


SSHD_CHOICES = ("auto", "openssh", "paramiko")  # the mock.sshd setting's values


def start(inventory: str | Path, state_dir: Path | None = None, *, time_scale: float = 1.0,
          timeout: float = 30.0, factory: bool = False, inject: list[str] = (), sshd: str | None = None,
          owner_pid: int | None = None) -> dict:
    """Start the mock for ``inventory`` with the fault specs ``inject`` (:mod:`mfctl.mock.inject`);
    return its status. ``sshd``: what serves its hosts (:data:`SSHD_CHOICES`; None: the
    ``mock_sshd`` setting, ``MFCTL_MOCK_SSHD``). ``owner_pid``: the mock stops by itself once that
    process is gone (a run's own mock outlives no kill -9 of the run). Raises ConfigError (bad inventory, fault spec or
    sshd choice; ``openssh`` where sshd is not installed) or OperationFailed."""
    sshd = sshd or settings.get("mock_sshd")
    if sshd not in SSHD_CHOICES:
        raise ConfigError(f"mock sshd must be one of {', '.join(SSHD_CHOICES)} (--sshd, MFCTL_MOCK_SSHD), got {sshd!r}")
    sd = Path(state_dir or default_state_dir()).resolve()
    if status(sd):
        raise LockError(f"a mock testbed is already running from {sd} (mfctl mock down first)")
    load_inventory(inventory)  # a bad inventory is a ConfigError here, not a crash in the background
    if not (time_scale > 0 and math.isfinite(time_scale)):
        raise ConfigError(f"time scale must be a positive finite number, got {time_scale}")
    sd.mkdir(parents=True, exist_ok=True)
    log = open(sd / "mock.stderr", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "mfctl.mock", "serve", "--inventory", str(Path(inventory).resolve()),
                             "--state-dir", str(sd), "--time-scale", str(time_scale), "--sshd", sshd]
                            + (["--factory"] if factory else [])
                            + (["--owner-pid", str(owner_pid)] if owner_pid else [])
                            + [x for spec in inject for x in ("--inject", spec)],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = status(sd)
        if st and st["pid"] == proc.pid:
            return st
        if proc.poll() is not None:
            err = (sd / "mock.stderr").read_text()[-2000:]
            if proc.returncode == 3:  # the mock refused its configuration (e.g. a fault spec)
                raise ConfigError(err.strip().removeprefix("mock: "))
            raise OperationFailed(f"mock testbed exited with {proc.returncode}: {err}")
        time.sleep(0.05)
    proc.terminate()
    raise OperationFailed(f"mock testbed did not come up within {timeout:g} s")


def stop(state_dir: Path | None = None, *, timeout: float = 10.0) -> bool:
    """Stop the mock; True if one was running."""
    sd = Path(state_dir or default_state_dir())
    st = status(sd)
    if not st:
        _reap(sd)
        return False
    pid = st["pid"]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        try:  # reap it if it is our child
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                break
        except ChildProcessError:
            pass
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
    (sd / "status.json").unlink(missing_ok=True)
    _reap(sd)
    return True


def _reap(sd: Path) -> None:
    if reap_stale_sshds(sd):  # the hosts' sshds of a mock killed with -9 (nothing else stops them)
        log.warning("stopped the sshds a killed mock left in %s", sd)


def reap_stale_sshds(root: str | Path) -> list[int]:
    """Stop the sshds that a mock under ``root`` left running (it was killed with -9 and could not
    close them): each ``sshd.pid`` below ``root`` (written by the mock beside its sshd_config)
    whose process is still that sshd — its command line names that directory's config (sshd
    rewrites its title, so the test is on the whole line). Returns their pids."""
    reaped = []
    for pidfile in Path(root).glob("**/sshd.pid"):
        try:
            pid = int(pidfile.read_text().split()[0])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, ValueError, IndexError):
            pidfile.unlink(missing_ok=True)
            continue
        if b"sshd" in cmdline and str(pidfile.with_name("sshd_config")).encode() in cmdline:
            try:
                os.kill(pid, signal.SIGTERM)
                reaped.append(pid)
            except OSError:
                pass
        pidfile.unlink(missing_ok=True)
    return reaped


class MockTestbed:
    """The mock testbed as a run sees it (:class:`mfctl.runtime.testbed.Testbed`): a mock of the
    run's own in ``<run_dir>/mock`` for the playbook's inventory, or the hand-started one whose
    inventory ``inventory_override`` names (its ``status.json`` beside it: its time scale must be
    the playbook's ``mock.time_scale``). The controller listens on 127.0.0.1 (the mock's hosts
    are there); ``mock.crash_host`` gets ``crash_at_iteration`` in its welcome (the simulated
    runtime dies there)."""

    def __init__(self, pb, inventory_override: str | None = None):
        self.pb = pb
        self.time_scale = float(pb.mock.time_scale)
        self.inventory_override = inventory_override
        self.state_dir: Path | None = None  # of the mock this run started

    def start(self, run_dir: Path, observer) -> str:
        if self.inventory_override:
            return self.inventory_override
        src = self.pb.inventory_path()
        observer.phase("mock", f"starting the mock testbed for {Path(src).name}")
        st = start(src, run_dir / "mock", time_scale=self.time_scale, owner_pid=os.getpid())
        self.state_dir = run_dir / "mock"
        return st["inventory"]

    def check(self, inv) -> None:
        p = Path(inv.source).parent / "status.json" if inv.source else None
        if p is None or not p.exists():
            return
        ts = json.loads(p.read_text()).get("time_scale")
        if ts is not None and abs(float(ts) - self.time_scale) > 1e-9:
            raise ConfigError(f"the mock testbed runs at time scale {ts:g} but the playbook says {self.time_scale:g} "
                              f"(mfctl mock up --time-scale {self.time_scale:g})", path=self.pb.source)

    def stop(self) -> None:
        if self.state_dir is not None:
            stop(self.state_dir)
            self.state_dir = None

    def controller_listen(self, inv) -> str:
        return "127.0.0.1"

    def welcome_fields(self, host: str) -> dict:
        m = self.pb.mock
        return {"crash_at_iteration": m.crash_at_iteration if m.crash_host == host else None}
