"""Issue 16 item 14, the pieces: batches and the canary, the management-NIC guard, Slurm's node
state words (real 22.05 lines), and the drain/resume against the mock's Slurm (a running job keeps
a node DRAINING; a node someone else drained is never resumed)."""

import json
import time

import pytest

from mfctl import mockctl
from mfctl.errors import OperationFailed
from mfctl.inventory import load_inventory
from mfctl.provision import rollout
from mfctl.provision.actions import Action, HostPlan
from mfctl.transport.ssh import CommandResult, SSHPool, targets_from_inventory
from support import PROTOTYPE, wait_until

pytestmark = pytest.mark.usefixtures("paramiko_mock_hosts")  # conftest.py: ~2x faster, same provisioning

#: `scontrol -o show node gpu01` of a real Slurm 22.05.8 (tests/peers_slurm.py) while a job ran on it, drained (cut)
REAL_DRAINING = ("NodeName=gpu01 Arch=x86_64 CoresPerSocket=2  CPUAlloc=1 CPUEfctv=2 CPUTot=2 CPULoad=9.60 "
                 "Gres=gpu:8 NodeAddr=127.0.0.1 NodeHostName=localhost Port=57001 Version=22.05.8 "
                 "OS=Linux 6.18.44-fc-v1045 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=1000 AllocMem=0 Sockets=1 Boards=1 "
                 "State=MIXED+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  "
                 "AllocTRES=cpu=1 CapWatts=n/a ExtSensorsTemp=n/s "
                 "Reason=mfctl provision X: NIC firmware reset [root@2026-12-01T17:18:14]\n")


def test_batches_rolling_and_canary():
    hs = ["gpu01", "gpu02", "gpu03", "gpu04", "gpu05"]
    assert rollout.batches(hs) == [hs]
    assert rollout.batches(hs, 2) == [["gpu01", "gpu02"], ["gpu03", "gpu04"], ["gpu05"]]
    assert rollout.batches(hs, 2, canary=True) == [["gpu01"], ["gpu02", "gpu03"], ["gpu04", "gpu05"]]
    assert rollout.batches(hs, canary=True) == [["gpu01"], ["gpu02", "gpu03", "gpu04", "gpu05"]]
    with pytest.raises(ValueError):
        rollout.batches(hs, 0)


def test_slurm_node_states_as_real_slurm_prints_them():
    f = rollout.parse_scontrol_node(REAL_DRAINING)
    assert f["State"] == "MIXED+DRAIN" and f["Reason"] == "mfctl provision X: NIC firmware reset [root@2026-12-01T17:18:14]"
    assert f["OS"] == "Linux 6.18.44-fc-v1045 #1 SMP PREEMPT_DYNAMIC @0"
    assert [rollout.drain_state(s) for s in ("IDLE+DRAIN", "MIXED+DRAIN", "ALLOCATED+DRAIN", "IDLE", "DOWN+DRAIN",
                                             "IDLE+DRAIN+COMPLETING")] == [
        "drained", "draining", "draining", "up", "drained", "draining"]


class GuardPool:
    fanout = 2

    def __init__(self, ports, addrs):
        self.ports, self.addrs = ports, addrs

    def run_checked(self, host, argv, timeout=None):
        return json.dumps(self.ports) if argv[0] == "devlink" else json.dumps(self.addrs)


def _reset(nic, pci):
    return Action("firmware-reset", f"{nic} ({pci})", "firmware reset", "pending", "active",
                  [["mlxfwreset", "-y", "-d", pci, "reset"]])


def test_the_nic_carrying_the_management_path_is_not_reset():
    inv = load_inventory(PROTOTYPE)
    h = inv.host("gpu01")
    ports = {"port": {"pci/0000:90:00.0/65535": {"type": "eth", "netdev": "ens4f0np0", "flavour": "physical", "port": 1,
                                                  "splittable": False, "lanes": 4}}}
    addrs = [{"ifindex": 5, "ifname": "ens4f0np0", "flags": ["UP"], "mtu": 1500, "operstate": "UP",
              "addr_info": [{"family": "inet", "local": "192.0.2.11", "prefixlen": 24}]}]
    plan = HostPlan("gpu01", [_reset("nic3", "0000:90:00.0")])
    why = rollout.mgmt_guard(GuardPool(ports, addrs), h, plan)
    assert why == ("gpu01: nic3 (0000:90:00.0) carries the SSH address 192.0.2.11 on ens4f0np0: its reset would cut "
                   "the host off (--allow-mgmt-reset to reset it anyway)")
    mg = h.model_copy(update={"mgmt_netdev": "ens4f0np0"})
    assert "carries the management interface ens4f0np0" in rollout.mgmt_guard(GuardPool(ports, []), mg, plan)
    assert rollout.mgmt_guard(GuardPool(ports, []), h, plan) is None  # eno1 on the board, the SSH address elsewhere
    assert rollout.mgmt_guard(GuardPool(ports, addrs), h, HostPlan("gpu01", [_reset("nic0", "0000:0c:00.0")])) is None


@pytest.fixture
def slurm_mock(tmp_path, cli_env, monkeypatch):
    monkeypatch.setenv("MFCTL_STATE_DIR", cli_env["MFCTL_STATE_DIR"])
    st = mockctl.start(PROTOTYPE, tmp_path / "mock", time_scale=20)
    inv = load_inventory(st["inventory"])
    with SSHPool(targets_from_inventory(inv)) as pool:
        yield pool
    mockctl.stop(tmp_path / "mock")


def test_drain_waits_for_the_running_job_then_resumes_only_its_own(slurm_mock, tmp_path):
    pool = slurm_mock
    d = rollout.SlurmDrain(pool, "gpu04", "r1", timeout_s=30, poll_s=0.05)  # gpu04 stands for the login node here
    r = pool.run("gpu04", ["sbatch", "--parsable", "-w", "gpu01", "-N1", "-o", str(tmp_path / "o-%j"), "--wrap", "sleep 60"])
    assert r.ok, r.stderr
    wait_until(lambda: d.status("gpu01").state == "ALLOCATED", what="the job running on gpu01")
    seen = []
    t0 = time.monotonic()
    with pytest.raises(OperationFailed, match=r"gpu01: still ALLOCATED\+DRAIN after 0.5 s"):
        rollout.SlurmDrain(pool, "gpu04", "r1", timeout_s=0.5, poll_s=0.05).drain(
            "gpu01", on_wait=lambda n, s: seen.append(s.state))
    assert seen and set(seen) == {"ALLOCATED+DRAIN"} and time.monotonic() - t0 < 5
    assert d.status("gpu01").reason == d.reason  # ours, with Slurm's [user@time] taken off
    job = r.stdout.strip()
    ended = []

    def cancel_soon():
        time.sleep(0.3)
        ended.append(pool.run("gpu04", ["scancel", job]).ok)

    import threading

    threading.Thread(target=cancel_soon).start()
    ours, notes = d.drain("gpu01")
    assert ours and ended == [True] and d.status("gpu01").state == "IDLE+DRAIN"
    assert any("ALLOCATED+DRAIN → IDLE+DRAIN" in n for n in notes)
    assert d.resume("gpu01") == "gpu01 resumed in Slurm" and d.status("gpu01").state == "IDLE"
    # someone else's drain: waited for, never resumed
    assert pool.run("gpu04", ["scontrol", "update", "nodename=gpu02", "state=drain", "reason=bad DIMM"]).ok
    ours, notes = d.drain("gpu02")
    assert not ours and notes == ["gpu02 was already drained by someone else (bad DIMM): it stays drained"]
    assert d.resume("gpu02") == "gpu02: not resumed: drained since for another reason (bad DIMM)"
    assert d.status("gpu02").state == "IDLE+DRAIN"
    # Slurm's own refusals, as 22.05 words them
    nr = pool.run("gpu04", ["scontrol", "update", "nodename=gpu03", "state=drain"])
    assert (nr.rc, nr.stderr) == (1, "You must specify a reason when DOWNING or DRAINING a node. Request denied\n")
    nr = pool.run("gpu04", ["scontrol", "update", "nodename=gpu03", "state=resume"])
    assert (nr.rc, nr.stderr) == (1, "slurm_update error: Invalid node state specified\n")
    nr = pool.run("gpu04", ["scontrol", "update", "nodename=gpu09", "state=drain", "reason=x"])
    assert (nr.rc, nr.stderr) == (1, "slurm_update error: Invalid node name specified\n")


def test_a_drained_node_takes_no_new_job(slurm_mock, tmp_path):
    pool = slurm_mock
    assert pool.run("gpu04", ["scontrol", "update", "nodename=gpu01", "state=drain", "reason=mfctl provision r: x"]).ok
    r = pool.run("gpu04", ["sbatch", "--parsable", "-w", "gpu01", "-N1", "-o", str(tmp_path / "o-%j"), "--wrap", "true"])
    job = r.stdout.strip()
    show = lambda: pool.run("gpu04", ["scontrol", "-o", "show", "job", job]).stdout  # noqa: E731
    wait_until(lambda: "Reason=Resources" in show(), what="the job waiting for its drained node")
    assert "JobState=PENDING" in show()
    assert pool.run("gpu04", ["scontrol", "update", "nodename=gpu01", "state=resume"]).ok
    wait_until(lambda: "JobState=COMPLETED" in show(), what="the job run once the node is resumed")


def test_rollout_runs_batch_by_batch_and_stops_at_the_first_failed_one():
    from mfctl.provision.apply import ApplyResult

    calls = []

    class P:
        fanout = 4

        def map(self, hosts, fn, **kw):
            return SSHPool.map(self, hosts, fn, **kw)

        def run(self, host, argv, timeout=None):
            calls.append(host)
            return CommandResult(host, list(argv), rc=1 if host == "h2" else 0, stderr="boom" if host == "h2" else "")

    def mtu(h):
        return HostPlan(h, [Action("links", "x", "MTU", "1500", "9000", [["ip", "link", "set", "dev", "x", "mtu", "9000"]])])

    import mfctl.provision.apply as ap

    orig = ap.verify

    def fake_verify(pool, inv, spec, manifest, results, hosts=None, **kw):
        for r in results:
            r.verified = r.failed is None
        return results

    ap.verify = fake_verify
    try:
        res = rollout.roll(P(), None, None, None, [mtu(h) for h in ("h1", "h2", "h3", "h4", "h5")], batch=2, canary=True)
    finally:
        ap.verify = orig
    assert [type(r) for r in res] == [ApplyResult] * 5
    assert calls == ["h1", "h2", "h3"] or sorted(calls) == ["h1", "h2", "h3"]
    assert [r.ok for r in res] == [True, False, True, False, False]
    assert res[3].skipped == res[4].skipped == "not started: batch 2 of 3 failed (h2)"
