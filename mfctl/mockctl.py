"""Start, stop and inspect the mock testbed processes (client side; never imports mfctl.mock).

A mock runs as ``python -m mfctl.mock serve`` in its own session; it writes ``status.json`` and
``inventory.yaml`` into its state directory when ready. Every mock an mfctl process starts is
recorded, from the moment its process exists, in the registry of that process's state directory
(``$MFCTL_STATE_DIR/mocks/NAME.json``: name, state directory, pid and start time, owner), so that
:func:`listing` (``mfctl mock status``) shows it — starting or up, a run's own mock included —
and :func:`down` (``mfctl mock down NAME|--all``) stops it. No mock is left for nobody:

- one interrupted while it starts (Ctrl-C, SIGTERM, any error of the caller) is stopped, with its
  ports, pty and sshds, before :func:`start` lets the interrupt go on;
- the mock watches the process that started it (``--owner-pid PID:START``, by a pidfd): a run's
  own mock stops once its run is gone, even after kill -9 of it; ``mfctl mock up``'s mock only
  until it is up (it is meant to outlive the command), so a kill of ``mock up`` while it starts
  leaves nothing either.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from mfctl import settings
from mfctl.errors import ConfigError, LockError, OperationFailed, UsageError
from mfctl.inventory import load_inventory
from mfctl.procs import start_ticks

log = logging.getLogger(__name__)

REGISTRY = "mocks"  #: the registry's folder in the state directory: one ``NAME.json`` per mock started from it
DEFAULT_NAME = "default"  #: the name of the mock in the default state directory (``<state_dir>/mock``)
STOP_TIMEOUT_S = 10.0  #: how long a mock may take to stop after SIGTERM before it is killed, s
_NAME_OK = re.compile(r"[^A-Za-z0-9._-]")


def default_state_dir() -> Path:
    return settings.state_dir() / "mock"


def registry_path() -> Path:
    """The registry's folder (not created: a question creates nothing)."""
    return settings.state_path() / REGISTRY


def _alive(pid: object, ticks: object) -> bool:
    """Process ``pid`` runs, and is the one started at ``ticks`` (None: whatever its start time)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    now = start_ticks(pid)
    return now is not None and (ticks is None or now == ticks)


def status(state_dir: Path | None = None) -> dict | None:
    """The running mock's status, or None. A stale status file (dead pid) is removed."""
    sd = Path(state_dir or settings.state_path() / "mock")  # (a question: nothing is created to answer it)
    p = sd / "status.json"
    try:
        st = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(st, dict) or not _alive(st.get("pid"), st.get("start_ticks")):
        p.unlink(missing_ok=True)
        return None
    st["state_dir"] = str(sd)
    return st


SSHD_CHOICES = ("auto", "openssh", "paramiko")  # the mock.sshd setting's values


# --- the registry ----------------------------------------------------------------------------
def _entries() -> list[dict]:
    """The registry's entries of mocks still running (or still being started by a live process),
    oldest first; the others are removed, and the sshds their mock left are stopped."""
    out = []
    try:
        files = sorted(registry_path().glob("*.json"))
    except OSError:
        return out
    for f in files:
        try:
            e = json.loads(f.read_text())
        except (OSError, ValueError):
            continue  # (being written: os.replace makes it whole, or unreadable: not ours to judge)
        if not isinstance(e, dict) or not isinstance(e.get("state_dir"), str):
            continue
        e["name"] = f.stem
        live = _alive(e["pid"], e.get("start_ticks")) if "pid" in e else _alive(e.get("by_pid"), e.get("by_ticks"))
        if live:
            out.append(e)
            continue
        with contextlib.suppress(OSError):
            f.unlink()
        _reap(Path(e["state_dir"]))
    return sorted(out, key=lambda e: e.get("started", 0.0))


def _claim(sd: Path, name: str | None) -> str | None:
    """A registry entry for a mock about to be started in ``sd``: ``name`` (default: ``default``
    for the default state directory, else that directory's name) or, if a running mock has it,
    ``name-2``, ``name-3``… Refuses (LockError) a state directory a mock runs from or is being
    started in. None when the registry cannot be written (the mock is then only unlisted)."""
    live = _entries()
    for e in live:
        if Path(e["state_dir"]) == sd:
            raise LockError(f"a mock testbed is already {'running' if 'pid' in e else 'starting'} from {sd} "
                            f"(pid {e.get('pid', e.get('by_pid'))}: mfctl mock down {e['name']} first)")
    base = _NAME_OK.sub("_", name or (DEFAULT_NAME if sd == default_state_dir().resolve() else sd.name))[:64] or "mock"
    try:
        reg = settings.state_dir() / REGISTRY
        reg.mkdir(exist_ok=True)
    except (OSError, ConfigError) as e:
        log.warning("mock registry not written (%s): the mock in %s is not listed by mfctl mock status", e, sd)
        return None
    for k in range(1, 1000):
        cand = base if k == 1 else f"{base}-{k}"
        try:
            with open(reg / f"{cand}.json", "x") as f:  # (exclusive: two mfctl starting mocks at once get two names)
                json.dump({"state_dir": str(sd), "by_pid": os.getpid(), "by_ticks": start_ticks(os.getpid()),
                           "started": time.time()}, f)
            return cand
        except FileExistsError:
            continue
        except OSError as e:
            log.warning("mock registry not written (%s): the mock in %s is not listed by mfctl mock status", e, sd)
            return None
    return None


def _register(name: str | None, entry: dict) -> None:
    if name is None:
        return
    p = registry_path() / f"{name}.json"
    tmp = p.with_name(f".{name}.json.tmp")
    try:
        tmp.write_text(json.dumps(entry, indent=2))
        os.replace(tmp, p)
    except OSError as e:
        log.warning("mock registry entry %s not written: %s", p, e)


def _unregister(sd: Path) -> None:
    """Remove every registry entry of the mock in ``sd``."""
    try:
        files = list(registry_path().glob("*.json"))
    except OSError:
        return
    for f in files:
        try:
            if Path(json.loads(f.read_text()).get("state_dir", "")) == sd:
                f.unlink()
        except (OSError, ValueError, AttributeError):
            continue


# --- start and stop --------------------------------------------------------------------------
def start(inventory: str | Path, state_dir: Path | None = None, *, time_scale: float = 1.0,
          timeout: float = 30.0, factory: bool = False, inject: list[str] = (), sshd: str | None = None,
          owner_pid: int | None = None, name: str | None = None, purpose: str | None = None,
          torchrun: str | None = None) -> dict:
    """Start the mock for ``inventory`` with the fault specs ``inject`` (:mod:`mfctl.mock.inject`);
    return its status once it is up (``name``: its name in the registry, see :func:`_claim`).
    ``sshd``: what serves its hosts (:data:`SSHD_CHOICES`; None: the ``mock_sshd`` setting,
    ``MFCTL_MOCK_SSHD``). ``owner_pid``: the mock stops by itself once that process is gone (a
    run's own mock outlives no kill -9 of the run; ``purpose`` says what the owner is, for
    ``mfctl mock status`` and a refused ``mock down``); without one it is this process until the
    mock is up. ``torchrun``: what its hosts' ``torchrun`` is (``mock``/``real``: the
    ``mock_torchrun`` setting of the mock's process; None: this process's setting). Anything that
    ends the wait (Ctrl-C, SIGTERM, the timeout) stops the mock first.
    Raises UsageError (a bad fault spec), ConfigError (bad inventory or sshd choice; ``openssh`` where sshd is not
    installed), LockError (a mock runs from ``state_dir``) or OperationFailed."""
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
    owner = owner_pid or os.getpid()
    owner_ticks = start_ticks(owner)
    argv = [sys.executable, "-m", "mfctl.mock", "serve", "--inventory", str(Path(inventory).resolve()),
            "--state-dir", str(sd), "--time-scale", str(time_scale), "--sshd", sshd,
            "--owner-pid", f"{owner}:{owner_ticks}" if owner_ticks is not None else str(owner)]
    argv += (["--owner-until-ready"] if not owner_pid else []) + (["--factory"] if factory else [])
    argv += [x for spec in inject for x in ("--inject", spec)]
    from mfctl.signals import DeferSignals

    proc: subprocess.Popen | None = None
    reg_name: str | None = None
    try:
        with DeferSignals():  # (Ctrl-C here is raised once the process exists and is in the registry)
            reg_name = _claim(sd, name)
            with open(sd / "mock.stderr", "wb") as err:
                env = {**os.environ, "MFCTL_MOCK_TORCHRUN": torchrun} if torchrun else None
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err, stderr=subprocess.STDOUT,
                                        start_new_session=True, env=env)
            _register(reg_name, {"state_dir": str(sd), "pid": proc.pid, "start_ticks": start_ticks(proc.pid),
                                 "started": time.time(), "owner": {"pid": owner, "start_ticks": owner_ticks,
                                                                   "what": purpose or f"pid {owner}"}
                                 if owner_pid else None})
        return _wait_up(proc, sd, timeout)
    except BaseException:
        _abandon(proc, sd, reg_name)
        raise


def _wait_up(proc: subprocess.Popen, sd: Path, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = status(sd)
        if st and st["pid"] == proc.pid:
            return st
        if proc.poll() is not None:
            err = (sd / "mock.stderr").read_text()[-2000:]
            if proc.returncode == 2:  # the mock refused a command-line value (a fault spec)
                raise UsageError(err.strip().removeprefix("mock: "))
            if proc.returncode == 3:  # the mock refused its configuration (the inventory)
                raise ConfigError(err.strip().removeprefix("mock: "))
            raise OperationFailed(f"mock testbed exited with {proc.returncode}: {err}")
        time.sleep(0.05)
    raise OperationFailed(f"mock testbed did not come up within {timeout:g} s")


def _abandon(proc: subprocess.Popen | None, sd: Path, reg_name: str | None) -> None:
    """A start that did not end with the mock up: the mock (if it was started) is stopped and
    waited for — SIGTERM, which abandons a start under way; SIGKILL after :data:`STOP_TIMEOUT_S`
    — its sshds too; no second Ctrl-C cuts this short."""
    from mfctl.signals import DeferSignals

    with DeferSignals(reraise=False):
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if proc is not None:
            (sd / "status.json").unlink(missing_ok=True)
            _reap(sd)
        if reg_name is not None:
            with contextlib.suppress(OSError):
                (registry_path() / f"{reg_name}.json").unlink()


def stop(state_dir: Path | None = None, *, timeout: float = STOP_TIMEOUT_S) -> bool:
    """Stop the mock in ``state_dir`` (default: the default mock's) — up, or still starting (its
    registry entry names its pid) — and wait for it (SIGKILL after ``timeout`` s); True if one was
    running. Whoever uses it is not asked: :func:`down` is the operator's."""
    sd = Path(state_dir or default_state_dir())
    st = status(sd)
    pid, ticks = (st["pid"], st.get("start_ticks")) if st else (None, None)
    if pid is None:
        e = next((e for e in _entries() if Path(e["state_dir"]).resolve() == sd.resolve() and "pid" in e), None)
        pid, ticks = (e["pid"], e.get("start_ticks")) if e else (None, None)
    if pid is None:
        _reap(sd)
        _unregister(sd.resolve())
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid, ticks):
            break
        try:  # reap it if it is our child
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                break
        except ChildProcessError:
            pass
        time.sleep(0.05)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    (sd / "status.json").unlink(missing_ok=True)
    _reap(sd)
    _unregister(sd.resolve())
    return True


def _reap(sd: Path) -> None:
    if reap_stale_sshds(sd):  # the hosts' sshds of a mock killed with -9 (nothing else stops them)
        log.warning("stopped the sshds a killed mock left in %s", sd)


# --- what the operator sees and stops ---------------------------------------------------------
def listing() -> list[dict]:
    """Every mock this state directory started that is still running, oldest first: ``name``,
    ``state`` (``up``, or ``starting``), ``pid``, ``state_dir``, ``started`` (Unix time), ``owner``
    (``{"pid", "what", "alive"}``, or None: the mock runs until ``mfctl mock down``), ``in_use_by``
    (:func:`users`) and, once up, its ``status.json`` (inventory, hosts' and OCS ports, sshd, time
    scale). The default mock is listed as ``default`` also without an entry (an older mfctl's)."""
    out = []
    for e in _entries():
        sd = Path(e["state_dir"])
        st = status(sd)
        owner = e.get("owner")
        item = {**(st or {}), "name": e["name"], "state": "up" if st else "starting", "state_dir": str(sd),
                "pid": e.get("pid", e.get("by_pid")), "started": (st or e).get("started"),
                "owner": {"pid": owner["pid"], "what": owner.get("what"),
                          "alive": _alive(owner["pid"], owner.get("start_ticks"))} if owner else None}
        out.append(item)
    dflt = settings.state_path() / "mock"
    if not any(Path(m["state_dir"]).resolve() == dflt.resolve() for m in out) and (st := status(dflt)):
        out.insert(0, {**st, "name": DEFAULT_NAME, "state": "up", "state_dir": str(dflt), "owner": None})
    for m in out:
        m["in_use_by"] = users(m)
    return out


def users(mock: dict) -> list[dict]:
    """Who uses ``mock`` (an item of :func:`listing`), as ``{"pid", "what", "since"}``: its owner
    while alive (a run's own mock) and the holder of the testbed lock of the inventory the mock
    wrote (:func:`mfctl.lock.testbed_lock`: a run on it with ``-i``, a provisioning, ``mfctl lock
    acquire``). This process is nobody."""
    out = []
    owner = mock.get("owner")
    if owner and owner.get("alive") and owner["pid"] != os.getpid():
        out.append({"pid": owner["pid"], "what": owner.get("what") or "the mfctl that started it", "since": None})
    if mock.get("state") == "up" and mock.get("inventory"):
        from mfctl.errors import MfctlError
        from mfctl.lock import testbed_lock

        try:
            h = testbed_lock(load_inventory(mock["inventory"]), "").holder()
        except (MfctlError, OSError) as e:  # its inventory gone or edited: nothing can hold its lock through it
            log.info("mock %s: its testbed lock not read: %s", mock.get("name"), e)
            h = None
        if h and h.get("detached"):  # mfctl lock acquire: its process is gone, its lease holds the lock
            left = max(0, int(float(h.get("expires_ts") or 0) - time.time()))
            why = f" ({h['reason']})" if h.get("reason") else ""
            out.append({"pid": None, "since": h.get("since"),
                        "what": f"a lease from mfctl lock acquire{why}, {left} s left (mfctl lock release: "
                                "its token, or --force)"})
        elif h and h.get("pid") != os.getpid() and not any(u["pid"] == h.get("pid") for u in out):
            out.append({"pid": h.get("pid"), "what": h.get("purpose") or "?", "since": h.get("since")})
    return out


def who(u: dict) -> str:
    """A user of a mock (:func:`users`) in words: ``mfctl run short (20261201-…) (pid 4242, since …)``."""
    if u.get("pid") is None:
        return u["what"] + (f", since {u['since']}" if u.get("since") else "")
    return f"{u['what']} (pid {u['pid']}" + (f", since {u['since']})" if u.get("since") else ")")


def down(names: list[str] = (), state_dir: Path | None = None, *, all_mocks: bool = False,
         force: bool = False) -> list[dict]:
    """Stop mocks — those ``names`` (:func:`listing`'s), every one (``all_mocks``), or else the
    one in ``state_dir`` (default: the default mock) — and return what was stopped (``name``,
    ``pid``, ``state_dir``). A mock something uses (:func:`users`) is refused unless ``force``:
    LockError (exit 5) naming each user and its pid, and nothing is stopped. An unknown name is a
    UsageError naming the mocks there are."""
    if all_mocks or names:
        mocks = listing()
        by_name = {m["name"]: m for m in mocks}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            there = ", ".join(by_name) or "none"
            raise UsageError(f"no mock testbed named {', '.join(map(repr, unknown))} is running "
                             f"(running: {there}; mfctl mock status lists them)")
        targets = mocks if all_mocks else [by_name[n] for n in dict.fromkeys(names)]
    else:
        sd = Path(state_dir or settings.state_path() / "mock")
        m = next((m for m in listing() if Path(m["state_dir"]).resolve() == sd.resolve()), None)
        if m is None and (st := status(sd)):  # a mock another state directory started, named by its folder
            m = {**st, "name": sd.name, "state": "up", "owner": None}
            m["in_use_by"] = users(m)
        if m is None:
            if state_dir or settings.state_path().exists():
                stop(sd)  # (the sshds a mock killed with -9 left there)
            return []
        targets = [m]
    if not force:
        busy = [(m, u) for m in targets for u in m["in_use_by"]]
        if busy:
            said = "; ".join(f"mock {m['name']!r} is in use by {who(u)}" for m, u in busy)
            raise LockError(f"{said}: stop that first, or mfctl mock down --force (it then loses its hosts)")
    done = []
    for m in targets:
        if stop(Path(m["state_dir"])):
            done.append({"name": m["name"], "pid": m["pid"], "state_dir": m["state_dir"]})
    return done


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
            except ProcessLookupError:  # gone meanwhile
                pass
            except OSError as e:
                log.warning("mock sshd pid %d (%s) not stopped: %s", pid, pidfile, e)
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
        self.state_dir = run_dir / "mock"  # (before it starts: stop() stops it however the start ends)
        st = start(src, self.state_dir, time_scale=self.time_scale, owner_pid=os.getpid(), name=run_dir.name,
                   purpose=f"mfctl run {self.pb.name} ({run_dir.name})", torchrun=self.pb.mock.torchrun,
                   sshd=self.pb.mock.sshd)
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
