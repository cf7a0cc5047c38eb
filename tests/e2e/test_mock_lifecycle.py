"""The mock's lifecycle through the CLI, with real processes (issue 17 items 8 and 9): nothing a
Ctrl-C or a kill -9 interrupts is left running (no mock process, no listening port, no pty, no
sshd), every mock is listed by ``mfctl mock status`` and stopped by ``mfctl mock down NAME|--all``,
and a mock a live run uses is not stopped under it unless ``--force``."""

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from support import DATA, PROTOTYPE, mfctl_cmd, wait_until

SHORT = DATA / "playbooks" / "short.yaml"
NO_SSHD = shutil.which("sshd") is None and not Path("/usr/sbin/sshd").exists()
SSHDS = ["paramiko", pytest.param("openssh", marks=pytest.mark.skipif(NO_SSHD, reason="no OpenSSH sshd "
                                                                                       "(apt-get install openssh-server)"))]


# --- what is left on this machine, from /proc ---------------------------------------------------
def _procs(needle: bytes) -> dict[int, str]:
    """pid → command line of the processes whose command line holds ``needle``."""
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                cmd = (d / "cmdline").read_bytes()
            except OSError:
                continue
            if needle in cmd:
                out[int(d.name)] = cmd.replace(b"\0", b" ").decode(errors="replace")
    return out


@pytest.fixture(autouse=True)
def _nothing_outlives_the_test(tmp_path):
    """Whatever a test of this module started under its tmp_path (mock servers, their sshds) is
    killed when it ends, passed or failed: a mock from ``mfctl mock up`` runs until ``mock down``,
    so a failed assertion before it would leave it running on the machine for good."""
    yield
    for pid in _procs(str(tmp_path).encode()):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _fds(pid: int) -> list[str]:
    try:
        return [os.readlink(f) for f in Path(f"/proc/{pid}/fd").iterdir()]
    except OSError:
        return []


def _listening() -> dict[int, int]:
    """Socket inode → port of every TCP socket listening on this machine (proc(5): /proc/net/tcp, st 0A)."""
    out = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if len(f) > 9 and f[3] == "0A":
                out[int(f[9])] = int(f[1].rsplit(":", 1)[1], 16)
    return out


def _held(pids) -> tuple[set[int], int]:
    """The ports the processes ``pids`` listen on, and how many ptys (``/dev/ptmx``) they hold."""
    listening = _listening()
    ports, ptys = set(), 0
    for pid in pids:
        for link in _fds(pid):
            if link.startswith("socket:[") and int(link[8:-1]) in listening:
                ports.add(listening[int(link[8:-1])])
            ptys += link == "/dev/ptmx"
    return ports, ptys


def _mock_of(sd: Path) -> dict[int, str]:
    """The processes of the mock in ``sd``: the mock itself, its sshds, their relays, its ssh-keygens."""
    return _procs(str(sd).encode())


def _assert_nothing_left(sd: Path, seen_ports: set[int]) -> None:
    left = _mock_of(sd)
    assert not left, f"left running: {left}"
    still = seen_ports & set(_listening().values())
    assert not still, f"still listening: {still}"


def _variant(tmp_path, **changes) -> Path:
    doc = yaml.safe_load(SHORT.read_text())
    for k, v in changes.items():
        doc.setdefault(k, {}).update(v)
    doc["inventory"] = str((SHORT.parent / doc["inventory"]).resolve())
    p = tmp_path / "pb.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _children(pid: int) -> list[int]:
    out = []
    for t in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            out += [int(x) for x in t.read_text().split()]
        except OSError:
            pass
    return out


def _wait_for_stage(sd_of, stage: str, p: subprocess.Popen, timeout: float = 180.0):
    """Poll /proc until the mock whose state dir ``sd_of()`` gives reaches ``stage`` of its start —
    ``process`` (its Python exists, loading), ``ports`` (something of it listens: a paramiko host
    or an sshd, and it has not said it is up), ``pty`` (that, and the OCS's pty is open) — and
    return (state dir, ports seen). None when the command ended first."""
    deadline = time.monotonic() + timeout
    serve = None
    while time.monotonic() < deadline:
        if p.poll() is not None:
            return None
        sd = sd_of()
        if sd is not None and serve is None:
            serve = next((pid for pid, cmd in _mock_of(sd).items() if "mfctl.mock serve" in cmd), None)
        if serve is not None:
            if stage == "process":
                return sd, set()
            ports, ptys = _held([serve, *_children(serve)])  # (its sshds are its children)
            if ports and (ptys or stage == "ports") and not (sd / "status.json").exists():
                return sd, ports | _held(_mock_of(sd))[0]  # (every process of it: an sshd may not be a child)
            time.sleep(0.002)
        else:
            time.sleep(0.01)
    raise AssertionError(f"the mock did not reach {stage!r} within {timeout:g} s")


def _interrupt_at(argv, env, sd_of, stage: str, tries: int = 3):
    """Start ``argv``, Ctrl-C it (SIGINT) once its mock reaches ``stage``; retried when the command
    ended before (the mock was up sooner than the poll saw the stage). Returns (process, its
    stderr, state dir, ports seen)."""
    for _ in range(tries):
        p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        got = _wait_for_stage(sd_of, stage, p)
        if got is None:  # up before the stage was seen: stop it and try again
            p.communicate(timeout=60)
            subprocess.run(mfctl_cmd("mock", "down", "--all", "--force"), env=env, capture_output=True, timeout=60)
            continue
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        return p, err, *got
    pytest.fail(f"never caught the mock at {stage!r} in {tries} tries")


# --- Ctrl-C while a mock starts ----------------------------------------------------------------
@pytest.mark.timeout(300)  # a mock's start is ~2 s alone, 10-20 s beside a loaded suite; up to 3 tries
@pytest.mark.parametrize("sshd", SSHDS)
@pytest.mark.parametrize("stage", ["process", "pty"])
def test_ctrl_c_during_mock_up_leaves_no_mock_port_or_pty(stage, sshd, tmp_path, cli_env):
    """Ctrl-C while the mock's Python loads, and while its hosts and OCS (ports, pty) are up but the
    mock has not said so (held there by ``--inject mock:start=slow:120``)."""
    sd = tmp_path / "state" / "mock"
    slow = ["--inject", "mock:start=slow:120"] if stage == "pty" else []
    p, err, sd, ports = _interrupt_at(mfctl_cmd("mock", "up", PROTOTYPE, "--sshd", sshd, *slow), cli_env, lambda: sd,
                                      stage)
    assert p.returncode == 130 and "interrupted" in err, err
    assert "Traceback" not in err
    if stage == "pty":
        assert len(ports) >= 4  # its 4 hosts (and the OCS's TCP and SSH endpoints, made after the pty)
    _assert_nothing_left(sd, ports)
    assert not (sd / "status.json").exists()
    r = subprocess.run(mfctl_cmd("mock", "status", "--json"), env=cli_env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and json.loads(r.stdout)["mocks"] == []
    assert not list((tmp_path / "state" / "mocks").glob("*.json"))  # its registry entry went with it


def test_a_slow_start_is_a_fault_spec_of_the_mock():
    from mfctl.mock import inject

    with pytest.raises(ValueError, match="the mock takes start=slow:SECONDS"):
        inject.apply(None, "mock:start=fast")
    with pytest.raises(ValueError, match="the seconds must be an integer from 1 to 600"):
        inject.apply(None, "mock:start=slow:0")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("stage", ["process"])  # (the later stages: mfctl mock up's test, the same mockctl.start)
def test_ctrl_c_while_a_run_starts_its_mock_leaves_nothing(stage, tmp_path, cli_env):
    runs = Path(cli_env["MFCTL_RUNS_DIR"])
    pb = _variant(tmp_path, mock={"time_scale": 50})
    p, err, sd, ports = _interrupt_at(mfctl_cmd("run", pb), cli_env, lambda: next(runs.glob("*/mock"), None), stage)
    assert p.returncode == 130 and "interrupted" in err, err
    assert "Traceback" not in err
    _assert_nothing_left(sd, ports)
    r = subprocess.run(mfctl_cmd("mock", "status"), env=cli_env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stdout == "not running\n"


# --- kill -9 of a run: its mock is gone within a bounded time -------------------------------------
KILL_BOUND_S = 5.0  # measured 0.1-0.2 s while the mock starts, ~0.5 s mid-training (2 loaded cores)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("stage", ["process", "ports"])
def test_a_run_killed_with_9_while_its_mock_starts_leaves_nothing(stage, tmp_path, cli_env, capsys):
    runs = Path(cli_env["MFCTL_RUNS_DIR"])
    pb = _variant(tmp_path, mock={"time_scale": 50})
    for _ in range(3):
        p = subprocess.Popen(mfctl_cmd("run", pb), env=cli_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        got = _wait_for_stage(lambda: next(runs.glob("*/mock"), None), stage, p)
        if got is not None:
            break
        p.wait(timeout=120)
    else:
        pytest.fail(f"never caught the run's mock at {stage!r}")
    sd, ports = got
    p.kill()
    t0 = time.monotonic()
    p.wait(timeout=10)
    wait_until(lambda: not _mock_of(sd), timeout=KILL_BOUND_S, interval=0.01, what="the killed run's mock to stop")
    took = time.monotonic() - t0
    _assert_nothing_left(sd, ports)
    with capsys.disabled():
        print(f"\n  kill -9 of mfctl run ({stage}): its mock gone in {took:.3f} s")


# --- status lists them all; down by name, --all; refused while a run uses one ---------------------
@pytest.mark.timeout(400)  # three mocks and a run: ~40 s alone
def test_status_lists_every_mock_and_down_stops_by_name_or_all_but_not_one_a_run_uses(tmp_path, cli_env):
    def mfctl(*args, timeout=90):
        return subprocess.run(mfctl_cmd(*args), env=cli_env, capture_output=True, text=True, timeout=timeout)

    assert mfctl("mock", "up", PROTOTYPE, "--sshd", "paramiko").returncode == 0
    other = tmp_path / "elsewhere"
    assert mfctl("mock", "up", PROTOTYPE, "--sshd", "paramiko", "--state-dir", other).returncode == 0
    # (no reconfiguration: its drain and resume timeouts are not what is tested, and a loaded machine misses them)
    pb = _variant(tmp_path, mock={"time_scale": 50}, training={"iterations": 2000}, policy={"enabled": False})
    run = subprocess.Popen(mfctl_cmd("run", pb), env=cli_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        runs = Path(cli_env["MFCTL_RUNS_DIR"])
        wait_until(lambda: any((d / "status.json").exists() for d in runs.glob("*/mock")), timeout=180,
                   what="the run's own mock")
        run_id = next(runs.glob("*/mock")).parent.name

        def going() -> bool:
            assert run.poll() is None, f"the run ended ({run.returncode}): {run.communicate()[1][-3000:]}"
            return True

        r = mfctl("mock", "status", "--json")
        doc = json.loads(r.stdout)
        names = [m["name"] for m in doc["mocks"]]
        assert r.returncode == 0 and sorted(names) == sorted(["default", "elsewhere", run_id])
        assert doc["running"] and doc["inventory"] == str(tmp_path / "state" / "mock" / "inventory.yaml")  # the default's
        mine = next(m for m in doc["mocks"] if m["name"] == run_id)
        assert mine["owner"] == {"pid": run.pid, "what": f"mfctl run short-e2e ({run_id})", "alive": True}
        assert mine["state"] == "up" and set(mine["hosts"]) == {"gpu01", "gpu02", "gpu03", "gpu04"}
        assert mine["in_use_by"][0]["pid"] == run.pid and mine["pid"] > 0 and mine["started"] > 0
        assert next(m for m in doc["mocks"] if m["name"] == "default")["owner"] is None
        text = mfctl("mock", "status").stdout
        assert going()
        assert f"{run_id}: up since " in text and f"owner      pid {run.pid} (mfctl run short-e2e ({run_id})), alive" in text
        assert "default: up since " in text and "owner      none (it runs until mfctl mock down)" in text

        # the run's own mock: refused by name and by --all (nothing stopped), exit 5 naming the run and its pid
        for args in ((run_id,), ("--all",)):
            r = mfctl("mock", "down", *args)
            assert going() and r.returncode == 5, r.stderr
            assert f"mock {run_id!r} is in use by mfctl run short-e2e ({run_id}) (pid {run.pid})" in r.stderr
            assert "--force" in r.stderr
        assert len(json.loads(mfctl("mock", "status", "--json").stdout)["mocks"]) == 3
        r = mfctl("mock", "down", "nosuch")
        assert r.returncode == 2 and "no mock testbed named 'nosuch' is running" in r.stderr and run_id in r.stderr
        # one by name, not the others
        r = mfctl("mock", "down", "elsewhere", "--json")
        assert r.returncode == 0 and [m["name"] for m in json.loads(r.stdout)["mocks"]] == ["elsewhere"]
        assert not _mock_of(other)
        assert run.poll() is None  # the run goes on
    finally:
        run.send_signal(signal.SIGINT)
        run.communicate(timeout=120)
    # the run ended: its mock with it; --all stops what is left
    r = mfctl("mock", "down", "--all")
    assert r.returncode == 0 and r.stdout.splitlines()[0].startswith("mock testbed default stopped (pid ")
    r = mfctl("mock", "status")
    assert r.returncode == 1 and r.stdout == "not running\n"


@pytest.mark.timeout(400)
@pytest.mark.parametrize("sshd", SSHDS)
def test_mock_down_under_a_run_is_refused_and_forced_the_run_says_so_without_tracebacks(sshd, tmp_path, cli_env):
    """``mfctl mock down`` of the hand-started mock a run uses (``-i``) is refused, exit 5, naming the
    run and its pid (its testbed lock); with --force the mock stops and the run ends with one error
    line of its own, no paramiko traceback on the terminal."""
    def mfctl(*args, timeout=90):
        return subprocess.run(mfctl_cmd(*args), env=cli_env, capture_output=True, text=True, timeout=timeout)

    r = mfctl("mock", "up", PROTOTYPE, "--sshd", sshd, "--time-scale", "50", "--json")
    assert r.returncode == 0, r.stderr
    inv = json.loads(r.stdout)["inventory"]
    pb = _variant(tmp_path, mock={"time_scale": 50}, training={"iterations": 2000}, policy={"enabled": False})
    run = subprocess.Popen(mfctl_cmd("run", pb, "-i", inv), env=cli_env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    try:
        runs = Path(cli_env["MFCTL_RUNS_DIR"])
        wait_until(lambda: any(lg.read_text().count("iteration ") >= 2 for lg in runs.glob("*/logs/gpu01.log")),
                   timeout=240, what="training under way")
        run_id = next(runs.glob("*/logs")).parent.name
        r = mfctl("mock", "down")
        assert r.returncode == 5, r.stderr
        assert f"mock 'default' is in use by mfctl run short-e2e ({run_id}) (pid {run.pid}, since " in r.stderr
        assert run.poll() is None
        r = mfctl("mock", "down", "--force")
        assert r.returncode == 0 and r.stdout.startswith("mock testbed default stopped"), r.stderr
        _, err = run.communicate(timeout=240)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode != 0
    errors = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "gpu0" in errors[0], err[-3000:]
    for noise in ("Traceback", "Socket exception", "Error reading SSH protocol banner", "paramiko"):
        assert noise not in err, err[-3000:]
