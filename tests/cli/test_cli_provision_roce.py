"""RoCE, rails, GPUDirect and persistence end to end on a mock of the breakout testbed (provisioned
firmware and split, so no burn is waited for): a reboot drops exactly the runtime-only settings
(a plan after it lists them; firmware, the split and enabled units survive), apply then configures
each sub-port as a port of its own, and a MIG change is pending until a GPU reset — planned once,
never re-issued."""

import subprocess

import pytest

from mfctl import mockctl
from mfctl.hosts import rails, roce
from mfctl.inventory import load_inventory
from mfctl.provision import service
from mfctl.provision.models import load_manifest, load_spec
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


def _plan(pool, spec_path, inv, host=None):
    """In-process plan (the CLI's plan is the same service; this saves a process start per call)."""
    spec = load_spec(spec_path)
    plans = service.plan(pool, load_inventory(inv), spec, load_manifest(spec.path(spec.firmware_manifest)),
                         [host] if host else None)
    assert not any(p.error for p in plans), [p.error for p in plans]
    return {p.host: [a.to_dict() for a in p.actions] for p in plans}


def test_reboot_shows_what_was_lost_then_apply_sets_each_sub_port_then_mig_pending(breakout, tmp_path):
    inv, run, pool = breakout
    acts = _plan(pool, SPEC, inv, "gpu01")["gpu01"]  # provisioned but for the addresses (and the rails that need them)
    assert {a["phase"] for a in acts} == {"addresses", "rails"}
    r = run("provision", "apply", SPEC, "-i", inv, "--json", "--yes")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert all(a == [] for a in _plan(pool, SPEC, inv).values())

    # a reboot: runtime settings are lost; firmware (burnt, split) and the enabled daemon are not
    assert pool.run("gpu01", ["systemctl", "reboot"]).ok
    after = _plan(pool, SPEC, inv)
    acts = after["gpu01"]
    assert sorted({(a["phase"], a["what"]) for a in acts}) == [
        ("addresses", "address"), ("gpudirect", "MaxReadReq"), ("gpudirect", "PCIe ACS"), ("gpudirect", "kernel module"),
        ("irq", "IRQ affinity"), ("links", "MTU"), ("links", "link mode"), ("qos", "RoCE QoS"), ("rails", "ARP/rp_filter"),
        ("rails", "route in table 101"), ("rails", "route in table 102"), ("rails", "source rule"),
        ("roce", "FEC"), ("roce", "RDMA-CM default ToS"), ("roce", "verbs traffic class")]
    # the configfs directory went with the reboot: made again before the write (cma_roce_tos's two steps)
    cma = next(a for a in acts if a["what"] == "RDMA-CM default ToS" and a["target"] == "ens1f1np1 (mlx5_1)")
    assert cma["commands"] == ["mkdir -p /sys/kernel/config/rdma_cm/mlx5_1",
                               "sh -c echo 106 > /sys/kernel/config/rdma_cm/mlx5_1/ports/1/default_roce_tos"]
    assert [a["before"] for a in acts if a["what"] == "verbs traffic class"] == ["unset"] * 5
    lm = next(a for a in acts if a["what"] == "link mode" and a["target"] == "ens1f1np1")
    assert lm["commands"] == ["ethtool -s ens1f1np1 speed 50000 lanes 2 autoneg off"]
    assert sum(a["what"] == "RoCE QoS" for a in acts) == 5 and {a["target"] for a in acts if a["what"] == "MTU"} == {
        "ens1f0np0", "ens1f1np1", "ens2f0np0", "ens3f0np0", "ens4f0np0"}
    assert after["gpu02"] == after["gpu03"] == after["gpu04"] == []  # the other hosts did not reboot
    r = run("provision", "apply", SPEC, "-i", inv, "--json", "--yes", "--hosts", "gpu01")
    assert r.returncode == 0 and _plan(pool, SPEC, inv, "gpu01") == {"gpu01": []}
    # the second sub-port is a port of its own to mlnx_qos: configured from fresh, not only the first
    for nd in ("ens1f0np0", "ens1f1np1"):
        q = roce.parse_mlnx_qos(pool.run_checked("gpu01", roce.mlnx_qos_argv(nd)))
        assert (q.trust, q.pfc, q.dscp2prio[26], q.tc_bw) == ("dscp", [0, 0, 0, 1, 0, 0, 0, 0], 3, [0, 45, 0, 50, 0, 0, 5, 0])
        assert roce.parse_fec(pool.run_checked("gpu01", roce.fec_show_argv(nd))) == ("RS", "RS")
    # both sub-ports share 198.18.0.0/24: one table per rail, a source rule each
    assert [x for x in rails.parse_rules(pool.run_checked("gpu01", rails.rules_argv())) if x[0] in (100, 101)] == [
        (100, "198.18.0.1", "101"), (101, "198.18.0.2", "102")]
    rt = {(x["table"], x["dev"], x.get("prefsrc")) for x in rails.parse_routes(pool.run_checked("gpu01", rails.routes_argv()))}
    assert {("101", "ens1f0np0", "198.18.0.1"), ("102", "ens1f1np1", "198.18.0.2")} <= rt

    # MIG on: nvidia-smi -mig 1 once; then pending until a GPU reset, planned as such, never re-issued
    mig = tmp_path / "mig.yaml"
    mig.write_text(SPEC.read_text().replace("  mig: false", "  mig: true").replace("../", str(ROOT) + "/"))
    assert [a["commands"] for a in _plan(pool, mig, inv, "gpu01")["gpu01"]] == [["nvidia-smi -mig 1"]]
    r = run("provision", "apply", mig, "-i", inv, "--json", "--yes", "--hosts", "gpu01")
    assert r.returncode != 0  # not verified: MIG is not active yet
    [a] = _plan(pool, mig, inv, "gpu01")["gpu01"]
    assert (a["what"], a["commands"], a["outcome"], a["before"]) == ("MIG mode", [], "reboot required",
                                                                      "Disabled (Enabled pending)")
    assert pool.run("gpu01", ["systemctl", "reboot"]).ok
    assert not [a for a in _plan(pool, mig, inv, "gpu01")["gpu01"] if a["what"] == "MIG mode"]  # the reboot reset the GPUs


def test_a_recipe_whose_dscp_disagrees_with_the_playbook_is_exit_3(tmp_path, cli_env):
    p = tmp_path / "p.yaml"
    p.write_text(SPEC.read_text().replace("dscp: 26 ", "dscp: 24 ").replace("ib_tc: 106", "ib_tc: 98")
                 .replace("traffic_class: 106", "traffic_class: 98").replace("cma_tos: 106", "cma_tos: 98")
                 .replace("../", str(ROOT) + "/"))
    r = subprocess.run(mfctl_cmd("provision", "plan", p, "-i", ROOT / "inventory" / "mfabric-prototype.yaml"),
                       capture_output=True, text=True, env=cli_env, timeout=60)
    assert r.returncode == 3 and "sets NCCL_IB_TC 106 (DSCP 26" in r.stderr and "roce.dscp to 26" in r.stderr


@pytest.mark.parametrize("old,new,msg", [
    ("traffic_class: 106", "traffic_class: 96", "roce.traffic_class: traffic_class 96 is DSCP 24 (ToS = DSCP x 4 + ECN bits), "
                                                "not the recipe's DSCP 26: use 106"),
    ("cma_tos: 106", "cma_tos: 107", "roce.cma_tos: cma_tos 107 sets ECN bits 11 (CE, congestion experienced)"),
    ("cma_tos: 106", "cma_tos: 256", "roce.cma_tos"),
])
def test_a_traffic_class_off_the_recipes_dscp_is_refused_at_its_line(tmp_path, cli_env, old, new, msg):
    p = tmp_path / "p.yaml"
    text = SPEC.read_text().replace(old, new).replace("../", str(ROOT) + "/")
    p.write_text(text)
    line = next(k for k, ln in enumerate(text.splitlines(), 1) if ln.lstrip().startswith(new))
    r = subprocess.run(mfctl_cmd("provision", "plan", p, "-i", ROOT / "inventory" / "mfabric-prototype.yaml"),
                       capture_output=True, text=True, env=cli_env, timeout=60)
    assert r.returncode == 3 and f"{p}:{line}: {msg}" in r.stderr, r.stderr
