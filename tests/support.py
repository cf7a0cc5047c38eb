"""Plain helpers shared by the tests (``from support import DATA, PROTOTYPE, mfctl_cmd``): paths,
the CLI's command line, a scan for processes left on the mock hosts, the session mock's record.
Fixtures are in conftest.py (pytest finds them there; a test module never imports conftest)."""

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
PROTOTYPE = ROOT / "inventory" / "mfabric-prototype.yaml"
GOLDEN = ROOT / "tests" / "golden"  # <tool>/<case>/{output.txt, expected.json}: tests/unit/hosts/test_hosts_golden.py


def mfctl_cmd(*args):
    return [sys.executable, "-m", "mfctl", *map(str, args)]


def live_processes(*needles: bytes) -> list[str]:
    """Command lines of processes on this machine (= on any mock host) containing a needle, among
    those of this test: processes whose environment has this test's MFCTL_STATE_DIR (the mock and
    what it starts inherit it), so that another mfctl run on the machine is not counted."""
    mine = f"MFCTL_STATE_DIR={os.environ.get('MFCTL_STATE_DIR', '')}".encode()
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes()
                if not any(n in cmd for n in needles if n):
                    continue
                env = (d / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if mine in env:
                out.append(cmd.replace(b"\0", b" ").decode(errors="replace"))
    return out


@dataclass
class SessionMock:
    """A running mock: ``inventory`` is the path of the inventory that points at it (pass it as
    ``-i``); ``status`` is ``mfctl mock up --json``'s document (pid, hosts' ports, OCS ports)."""

    state_dir: Path
    inventory: str
    time_scale: float
    factory: bool
    status: dict = field(repr=False)
    env: dict = field(repr=False)  # the environment it was started with (its own state, lock and runs dirs)

    @property
    def pid(self) -> int:
        return int(self.status["pid"])

    def alive(self) -> bool:
        """Whether the mock's process still runs (a zombie does not: a stopped mock is reparented to
        PID 1, which may reap it seconds later)."""
        from mfctl.procs import start_ticks

        return start_ticks(self.pid) is not None


def wait_until(probe, *, timeout: float = 15.0, interval: float = 0.05, what: str = "the condition"):
    """Call ``probe()`` until it returns something truthy, and return that; fail the test naming
    ``what`` after ``timeout`` s. For waits on something that will happen (a link coming up, a
    connection accepted) — instead of a sleep sized for an idle machine."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {got!r})")
        time.sleep(interval)
