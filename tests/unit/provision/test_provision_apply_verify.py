"""Issue 16 items 2, 9 and 16: a host that cannot be re-read after apply is *not verified* (exit 4,
--json ok/verified false with the reason), a host is re-read and re-planned after its last firmware
reset (the post-reset actions are the fresh ones), the recipe is strict, Ctrl-C says "interrupted"
once, a lock holder killed with -9 leaves no holder file behind, and every apply is one run in the journal."""

import json
import os
import signal
import subprocess
import sys
import threading

import pytest
from typer.testing import CliRunner

from mfctl import mockctl
from mfctl.errors import ConfigError, ExitCode
from mfctl.provision import apply as apply_mod
from mfctl.provision import service
from mfctl.provision.models import load_spec
from mfctl.transport.results import Results
from mfctl.transport.ssh import CommandResult, SSHPool
from support import PROTOTYPE, ROOT, mfctl_cmd, wait_until

pytestmark = pytest.mark.usefixtures("paramiko_mock_hosts")  # conftest.py: ~2x faster, same provisioning

SPEC = ROOT / "playbooks" / "provision.yaml"


class Pool:
    """Runs every command successfully and records it per host."""

    fanout = 4

    def __init__(self):
        self.ran: list[tuple[str, list[str]]] = []

    def map(self, hosts, fn, **kw):
        return SSHPool.map(self, hosts, fn, **kw)

    def run(self, host, argv, timeout=None):
        self.ran.append((host, list(argv)))
        return CommandResult(host, list(argv), rc=0)


class ListJournal:
    def __init__(self):
        self.recs = []

    def append(self, op, **f):
        self.recs.append({"op": op, **f})


def act(phase, what, target, argv):
    return service.Action(phase, target, what, "a", "b", [argv])


def test_after_the_last_reset_the_host_is_replanned_and_the_fresh_actions_run():
    reset = act("firmware-reset", "firmware reset", "nic0 (0000:0c:00.0)", ["mlxfwreset", "-y", "-d", "0000:0c:00.0", "reset"])
    stale = act("links", "MTU", "ens1f0np0", ["ip", "link", "set", "dev", "ens1f0np0", "mtu", "9000"])
    fresh = [act("links", "MTU", "ens1f0np0s0", ["ip", "link", "set", "dev", "ens1f0np0s0", "mtu", "9000"]),
             act("qos", "RoCE QoS", "ens1f0np0s1", ["mlnx_qos", "-i", "ens1f0np0s1", "--trust", "dscp"])]
    asked = []

    def replan(host):
        asked.append(host)
        return service.HostPlan(host, fresh)

    pool, j = Pool(), ListJournal()
    [r] = service.apply(pool, [service.HostPlan("h1", [reset, stale])], j, replan=replan)
    assert asked == ["h1"] and r.failed is None and r.replans == 1
    assert [argv for _, argv in pool.ran] == [reset.argvs[0], fresh[0].argvs[0], fresh[1].argvs[0]]  # never the stale name
    rp = next(x for x in j.recs if x["op"] == "provision.replan")
    assert rp["planned_before"] == ["links: MTU on ens1f0np0"]
    assert rp["planned_now"] == ["links: MTU on ens1f0np0s0", "qos: RoCE QoS on ens1f0np0s1"]


def test_a_host_that_cannot_be_reread_after_its_reset_or_still_needs_firmware_stops_there():
    reset = act("firmware-reset", "firmware reset", "nic0 (0000:0c:00.0)", ["mlxfwreset", "-y", "-d", "0000:0c:00.0", "reset"])
    mtu = act("links", "MTU", "x", ["ip", "link", "set", "dev", "x", "mtu", "9000"])
    [r] = service.apply(Pool(), [service.HostPlan("h1", [reset, mtu])],
                        replan=lambda h: service.HostPlan(h, error="h1: mlxfwmanager --query: timed out after 30 s"))
    assert r.failed["step"] == "re-read after the firmware reset" and "timed out after 30 s" in r.failed["error"]
    assert [a["what"] for a in r.applied] == ["firmware reset"]
    pending = act("firmware-settings", "mlxconfig", "nic0 (0000:0c:00.0)", ["mlxconfig", "set"])
    [r] = service.apply(Pool(), [service.HostPlan("h1", [reset, mtu])], replan=lambda h: service.HostPlan(h, [pending, mtu]))
    assert r.failed["step"] == "re-plan after the firmware reset"
    assert "still needs firmware-settings: mlxconfig on nic0 (0000:0c:00.0)" in r.failed["error"]


def test_unverified_is_never_verified():
    r = service.ApplyResult("h1", applied=[{"what": "MTU"}])
    assert not r.verified and not r.ok and r.exit_code == ExitCode.FAILED  # applied, not re-read: not verified
    r.verify_error = "h1: cannot connect to 127.0.0.1:2201: Connection refused"
    assert r.exit_code == ExitCode.UNREACHABLE and r.to_dict()["ok"] is False and r.to_dict()["verified"] is False
    assert Results.of([service.ApplyResult("h0", verified=True), r]).exit_code() == ExitCode.UNREACHABLE


@pytest.fixture
def own_mock(tmp_path, cli_env, monkeypatch):
    for k, v in cli_env.items():
        if k.startswith("MFCTL_"):
            monkeypatch.setenv(k, v)
    st = mockctl.start(PROTOTYPE, tmp_path / "mock", time_scale=100, factory=True)
    yield st["inventory"], tmp_path / "mock", cli_env
    mockctl.stop(tmp_path / "mock")


def test_a_host_that_dies_between_apply_and_verify_is_not_verified_exit_4(own_mock, monkeypatch):
    inv, mock_dir, _ = own_mock
    real_apply = apply_mod.apply

    def apply_then_die(*a, **k):
        res = real_apply(*a, **k)
        mockctl.stop(mock_dir)  # every host's sshd is gone before the re-read
        return res

    monkeypatch.setattr(apply_mod, "apply", apply_then_die)
    monkeypatch.setenv("MFCTL_CONNECT_TIMEOUT", "2")
    r = CliRunner().invoke(__import__("mfctl.cli.app", fromlist=["build"]).build(),
                           ["provision", "apply", str(SPEC), "-i", inv, "--hosts", "gpu01", "--yes", "--json"])
    doc = json.loads(r.stdout)
    assert r.exit_code == 4, r.stdout + r.stderr
    [h] = doc["hosts"]
    assert doc["ok"] is False and doc["verified"] is False
    assert h["ok"] is False and h["verified"] is False and h["failed"] is None and len(h["applied"]) > 20
    assert h["verify_error"].startswith("gpu01: ") and h["left_after_verify"] == []
    r = CliRunner().invoke(__import__("mfctl.cli.app", fromlist=["build"]).build(),
                           ["provision", "journal", str(SPEC), "-i", inv, "--json"])
    [run] = json.loads(r.stdout)["runs"]
    assert run["outcome"] == "failed" and run["exit_code"] == 4 and run["host_outcomes"] == {"gpu01": "not verified"}
    assert run["hosts"] == ["gpu01"] and run["changes"] == len(h["applied"]) and run["who"].count("@") == 1


def test_apply_is_one_journalled_run_with_a_replan_and_the_journal_command_reads_it(own_mock):
    inv, _, env = own_mock
    run = lambda *a: subprocess.run(mfctl_cmd(*a), capture_output=True, text=True, env=env, timeout=120)  # noqa: E731
    r = run("provision", "apply", SPEC, "-i", inv, "--hosts", "gpu[01-02]", "--yes")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "gpu01: " in r.stdout and ", verified" in r.stdout
    assert "gpu01 [1/" in r.stderr and "firmware-reset" in r.stderr  # each host's step as it runs
    doc = json.loads(run("provision", "journal", SPEC, "-i", inv, "--json").stdout)
    [s] = doc["runs"]
    assert s["outcome"] == "ok" and s["hosts"] == ["gpu01", "gpu02"] and s["done"] == s["changes"] and s["failed"] == 0
    assert s["recipe"] == str(SPEC) and len(s["recipe_sha256"]) == 64
    recs = json.loads(run("provision", "journal", SPEC, "-i", inv, "--run", s["run"][:17], "--json").stdout)["records"]
    assert [x["state"] for x in recs if x["op"] == "provision.run"] == ["start", "end"]
    assert sorted(x["host"] for x in recs if x["op"] == "provision.replan") == ["gpu01", "gpu02"]
    assert all(x["run"] == s["run"] for x in recs)
    assert run("provision", "journal", SPEC, "-i", inv, "--run", "nope").returncode == 2


def test_ctrl_c_says_interrupted_once(own_mock):
    inv, _, env = own_mock
    p = subprocess.Popen(mfctl_cmd("provision", "apply", str(SPEC), "-i", inv, "--yes"), env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err: list[str] = []
    t = threading.Thread(target=lambda: err.extend(p.stderr), daemon=True)
    t.start()
    wait_until(lambda: any("[1/" in ln for ln in err), timeout=60, what="the first step")
    p.send_signal(signal.SIGINT)
    p.wait(timeout=60)
    t.join(10)  # (the thread alone reads stderr: communicate() would race it for the last lines)
    out = p.stdout.read()
    text = "".join(err)
    assert p.returncode == 130, out + text
    assert text.count("interrupted: every host stopped after its current action") == 1
    assert "interrupted: interrupted" not in text
    # said at once, not when the current step ends (a burn may take minutes): before the end's line
    assert 0 <= text.index("stopping: every host stops after its current action") < text.index("every host stopped")
    r = subprocess.run(mfctl_cmd("provision", "journal", str(SPEC), "-i", inv, "--json"), env=env, capture_output=True,
                       text=True, timeout=60)
    run = json.loads(r.stdout)["runs"][-1]
    assert run["outcome"] == "interrupted" and run["exit_code"] == 130 and "interrupted" in run["host_outcomes"].values()


@pytest.mark.parametrize("old,new,where", [
    ("mtu: 9000", "mtu: '9000'", "mtu: Input should be a valid integer"),
    ("persistence: true", "persistence: 'yes'", "gpu.persistence: Input should be a valid boolean"),
    ("  LINK_TYPE_P1: 2      # Ethernet", "  LINK_TYPE_P1: '2'", "Input should be a valid integer"),
])
def test_recipe_strings_are_not_coerced(tmp_path, old, new, where):
    text = SPEC.read_text()
    assert old in text
    p = tmp_path / "p.yaml"
    p.write_text(text.replace(old, new).replace("../", str(ROOT) + "/"))
    with pytest.raises(ConfigError) as e:
        load_spec(p)
    assert where in str(e.value) and str(e.value).startswith(f"{p}:")


def test_a_lock_holder_killed_with_9_leaves_no_holder_file(tmp_path, monkeypatch):
    from mfctl.lock import TestbedLock, lock_path

    monkeypatch.setenv("MFCTL_STATE_DIR", str(tmp_path / "state"))
    code = ("import sys, time; from mfctl.lock import TestbedLock\n"
            "with TestbedLock('tb', 'provision apply'):\n    print('held', flush=True); time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "MFCTL_STATE_DIR": str(tmp_path / "state")},
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    info = lock_path("tb").with_suffix(".holder.json")
    assert json.loads(info.read_text())["pid"] == p.pid
    with pytest.raises(Exception, match=f"locked by pid {p.pid} on .* for 'provision apply'"):
        TestbedLock("tb", "second").__enter__()
    p.kill()
    p.wait(10)
    assert info.exists()  # the -9'd holder's file: its __exit__ never ran
    lk = TestbedLock("tb", "after")
    assert lk.holder() is None and not info.exists()  # recognised as dead and removed
    with lk:
        assert json.loads(info.read_text())["pid"] == os.getpid()
    assert not info.exists()


def test_the_testbed_lock_is_one_for_every_state_dir_on_the_machine(tmp_path, monkeypatch):
    """From the new-user trial: with the testbed lock in each state dir, an operator with another
    MFCTL_STATE_DIR provisioned gpu01 while the first one was burning its firmware. The lock is in
    the machine's shared lock dir now, as the OCS's is."""
    from mfctl.errors import LockError
    from mfctl.lock import TestbedLock

    code = ("import time; from mfctl.lock import TestbedLock\n"
            "with TestbedLock('tb', 'provision apply by A'):\n    print('held', flush=True); time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "MFCTL_STATE_DIR": str(tmp_path / "state-A")},
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        monkeypatch.setenv("MFCTL_STATE_DIR", str(tmp_path / "state-B"))
        with pytest.raises(LockError, match=f"locked by pid {p.pid} .*provision apply by A"):
            TestbedLock("tb", "provision apply by B").__enter__()
    finally:
        p.kill()
        p.wait(10)
