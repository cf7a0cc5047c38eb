"""The RDMA traffic class, IRQ affinity and forced link mode end to end on a mock of the breakout
testbed: a host whose settings drifted (irqbalance started, the traffic class cleared, auto-
negotiation back on) is planned, applied and read back through the CLI; with ``irq.irqbalance:
report`` the pinning is applied, irqbalance undoes it, and the verify says so (exit 1), never
"verified"."""

import json
import subprocess
import time

import pytest

from mfctl import mockctl
from mfctl.inventory import load_inventory
from mfctl.provision.steps import irq as irq_step
from mfctl.provision.steps import speed as speed_step
from mfctl.provision.steps import tos as tos_step
from mfctl.transport.ssh import SSHPool, targets_from_inventory
from support import ROOT, mfctl_cmd

pytestmark = pytest.mark.usefixtures("paramiko_mock_hosts")  # conftest.py: ~2x faster, same provisioning

SPEC = ROOT / "playbooks" / "provision.yaml"


@pytest.fixture
def breakout(tmp_path, cli_env, monkeypatch):
    monkeypatch.setenv("MFCTL_STATE_DIR", cli_env["MFCTL_STATE_DIR"])
    st = mockctl.start(ROOT / "inventory" / "mfabric-breakout.yaml", tmp_path / "mock", time_scale=100)
    pool = SSHPool(targets_from_inventory(load_inventory(st["inventory"])))
    run = lambda *a: subprocess.run(mfctl_cmd(*a), capture_output=True, text=True, env=cli_env, timeout=300)  # noqa: E731
    yield st["inventory"], run, pool
    pool.close()
    mockctl.stop(tmp_path / "mock")


def _irqs(pool, nd):
    irqs = sorted(int(x) for x in pool.run_checked("gpu01", ["ls", "-1", irq_step.dev_path(nd, "msi_irqs")]).split())
    files = tos_step.parse_head(pool.run_checked("gpu01", tos_step.head_argv(
        [irq_step.dev_path(nd, "local_cpulist")] + [irq_step.affinity_path(i) for i in irqs])))
    return files.pop(irq_step.dev_path(nd, "local_cpulist")), set(files.values())


def test_drifted_traffic_class_irqs_and_link_mode_are_planned_applied_and_read_back(breakout, tmp_path):
    inv, run, pool = breakout
    for argv in (["systemctl", "enable", "--now", "irqbalance"],
                 ["sh", "-c", f"echo tclass=-1 > {tos_step.tc_path('mlx5_1')}"],
                 ["ethtool", "-s", "ens1f1np1", "autoneg", "on"]):
        assert pool.run("gpu01", argv).ok, argv
    time.sleep(0.15)  # irqbalance's first pass (10 testbed s): every IRQ on a CPU of its choosing
    r = run("provision", "plan", SPEC, "-i", inv, "--hosts", "gpu01", "--json")
    assert r.returncode == 6, r.stderr[-2000:]
    acts = json.loads(r.stdout)["hosts"][0]["actions"]
    mine = [(a["phase"], a["target"], a["what"]) for a in acts if a["phase"] in ("irq", "links", "roce")]
    assert mine[:1] == [("links", "ens1f1np1", "link mode")]
    assert ("roce", "ens1f1np1 (mlx5_1)", "verbs traffic class") in mine
    irq = [x for x in mine if x[0] == "irq"]
    assert irq == [("irq", "irqbalance", "irqbalance")] + [("irq", nd, "IRQ affinity") for nd in (
        "ens1f0np0", "ens1f1np1", "ens2f0np0", "ens3f0np0", "ens4f0np0")]  # irqbalance stopped before the pinning
    lm = next(a for a in acts if a["what"] == "link mode")
    assert lm["before"].startswith("autoneg on, advertised 50000baseSR2/Full") and lm["commands"] == [
        "ethtool -s ens1f1np1 speed 50000 lanes 2 autoneg off"]

    r = run("provision", "apply", SPEC, "-i", inv, "--hosts", "gpu01", "--json", "--yes")
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["verified"] is True, r.stdout[-3000:]
    # read back with the real tools' outputs
    assert tos_step.parse_head(pool.run_checked("gpu01", tos_step.head_argv([tos_step.tc_path("mlx5_1")]))) == {
        tos_step.tc_path("mlx5_1"): "Global tclass=106"}
    m = speed_step.parse_ethtool_modes(pool.run_checked("gpu01", ["ethtool", "ens1f1np1"]))
    assert (m.autoneg, m.advertised) == (False, ["50000baseSR2/Full"])
    time.sleep(0.15)  # irqbalance is stopped: a pass later the pinning holds
    for nd, node in (("ens1f1np1", "0-15,32-47"), ("ens3f0np0", "16-31,48-63")):
        assert _irqs(pool, nd) == (node, {node})
    assert pool.run_checked("gpu01", ["systemctl", "show", "-p", "ActiveState,UnitFileState", "irqbalance"]) == (
        "ActiveState=inactive\nUnitFileState=disabled\n")

    # irqbalance left running (report): the pinning is applied, undone within 10 s, and the verify says so
    assert pool.run("gpu01", ["systemctl", "enable", "--now", "irqbalance"]).ok
    rep = tmp_path / "report.yaml"
    # irqbalance's pass is 10 testbed s: 0.1 s at time scale 100; the verify waits one pass before it reads back
    rep.write_text(SPEC.read_text().replace("irqbalance: stop", "irqbalance: report\n  irqbalance_interval_s: 0.1")
                   .replace("../", str(ROOT) + "/"))
    r = run("provision", "apply", rep, "-i", inv, "--hosts", "gpu01", "--json", "--yes")
    [h] = json.loads(r.stdout)["hosts"]
    assert r.returncode == 1 and h["verified"] is False, r.stdout[-3000:]
    assert "waiting 0.1 s, one irqbalance pass, before reading the pinned IRQs back" in r.stderr
    assert any(n.startswith("irqbalance: it rewrites IRQ affinities every 10 s") for n in h["notes"])
    assert {a["what"] for a in h["left_after_verify"]} == {"IRQ affinity"}
    assert {a["what"] for a in h["applied"]} == {"IRQ affinity"}
