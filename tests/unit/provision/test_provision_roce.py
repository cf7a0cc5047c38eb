"""RoCE QoS per port: the recipe's DSCP ↔ priority ↔ NCCL_IB_TC chain, the parsers on the real
tools' layouts, and the per-netdev plan (a split card's second sub-port is a port of its own)."""

import json

import pytest
from pydantic import ValidationError

from mfctl.errors import ConfigError
from mfctl.hosts import mellanox, roce
from mfctl.inventory import load_inventory
from mfctl.mock.nics.qos import PortState, render
from mfctl.provision.actions import OUTCOME_UNSUPPORTED, HostActual, PlanContext
from mfctl.provision.models import RoCE, load_spec
from mfctl.provision.steps import qos as qos_step
from mfctl.provision.steps import roce as roce_step
from support import ROOT

SPEC = ROOT / "playbooks" / "provision.yaml"
BREAKOUT = ROOT / "inventory" / "mfabric-breakout.yaml"

# mlnx_qos -i as MLNX_OFED prints it under DSCP trust (the layout of NVIDIA community DOC-2792)
DOC2792 = """DCBX mode: OS controlled
Priority trust state: dscp
dscp2prio mapping:
\tprio:0 dscp:07,06,05,04,03,02,01,00,
\tprio:1 dscp:15,14,13,12,11,10,09,08,
\tprio:2 dscp:23,22,21,20,19,18,17,16,
\tprio:3 dscp:31,30,29,28,27,26,25,24,
\tprio:4 dscp:39,38,37,36,35,34,33,32,
\tprio:5 dscp:47,46,45,44,43,42,41,40,
\tprio:6 dscp:55,54,53,52,51,50,49,48,
\tprio:7 dscp:63,62,61,60,59,58,57,56,
Cable len: 10
PFC configuration:
\tpriority    0   1   2   3   4   5   6   7
\tenabled     1   0   1   0   0   0   1   1
tc: 0 ratelimit: unlimited, tsa: ets, bw: 10%
\t priority:  1
tc: 1 ratelimit: unlimited, tsa: ets, bw: 10%
\t priority:  0
tc: 6 ratelimit: unlimited, tsa: strict
\t priority:  6
tc: 7 ratelimit: unlimited, tsa: ets, bw: 40%
\t priority:  7
"""


@pytest.mark.parametrize("kw,msg", [
    ({"pfc_priority": 4}, "DSCP 26 maps to priority 3 (dscp2prio), but PFC is on priority 4"),
    ({"ib_tc": 96}, "ib_tc 96 is DSCP 24"),
    ({"tc_bw": [100, 0, 0, 0, 0, 0, 0, 0]}, "tc_bw gives 0 % to TC 3"),
    ({"tc_bw": [0, 50, 0, 50, 0, 0, 0, 0]}, "tc_bw gives 0 % to TC 6, where the CNPs"),
    ({"tc_bw": [50, 50, 0, 50, 0, 0, 0, 0]}, "sum to 100"),
    ({"cnp_priority": 3}, "cnp_priority 3 is the PFC priority"),
    ({"dscp2prio": {64: 3}}, "DSCP must be 0..63"),
])
def test_inconsistent_roce_recipes_are_refused(kw, msg):
    with pytest.raises(ValidationError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        RoCE(**kw)


def test_a_remapped_dscp_with_pfc_there_is_consistent():
    r = RoCE(pfc_priority=4, dscp2prio={26: 4}, ib_tc=106)
    assert r.priority_of(26) == 4 and r.priority_of(24) == 3 and RoCE(ib_tc=107).ib_tc == 107  # ECN bits free


def test_the_recipe_is_checked_against_the_training_playbooks_nccl_ib_tc(tmp_path):
    spec = load_spec(SPEC)
    assert spec.roce.playbook and spec.roce.ib_tc == 106  # the shipped pair agrees
    pb = (ROOT / "playbooks" / "mixtral-torchrun.yaml").read_text()
    assert "ib_tc: 106" in pb
    (tmp_path / "train.yaml").write_text(pb.replace("ib_tc: 106", "ib_tc: 96").replace("../", str(ROOT) + "/"))
    (tmp_path / "p.yaml").write_text(SPEC.read_text().replace("../playbooks/mixtral-torchrun.yaml", "train.yaml")
                                     .replace("../", str(ROOT) + "/"))
    with pytest.raises(ConfigError) as e:
        load_spec(tmp_path / "p.yaml")
    assert e.value.exit_code == 3 and str(e.value).startswith(str(tmp_path / "p.yaml"))
    assert "sets NCCL_IB_TC 96 (DSCP 24, priority 3 here), but this recipe's RoCE DSCP is 26" in str(e.value)


def test_mlnx_qos_parser_reads_the_real_layout_and_the_mocks():
    q = roce.parse_mlnx_qos(DOC2792)
    assert q.trust == "dscp" and q.pfc == [1, 0, 1, 0, 0, 0, 1, 1]
    assert q.dscp2prio[26] == 3 and q.dscp2prio[48] == 6 and len(q.dscp2prio) == 64
    assert q.tc_bw[:2] == [10, 10] and q.tc_bw[6] is None and q.tc_bw[7] == 40 and q.prio_tc[0] == 1
    st = PortState.provisioned()
    st.dscp2prio[26] = 4
    m = roce.parse_mlnx_qos(render(st))
    assert m.dscp2prio[26] == 4 and m.dscp2prio[27] == 3 and m.tc_bw == [0, 45, 0, 50, 0, 0, 5, 0]
    assert mellanox.parse_mlnx_qos(render(st)).pfc_enabled == [0, 0, 0, 1, 0, 0, 0, 0]  # the old parser still reads it
    fresh = roce.parse_mlnx_qos(render(PortState()))
    assert fresh.trust == "pcp" and fresh.dscp2prio == {} and fresh.tc_bw == [None] * 8  # no map printed under PCP


def test_fec_parser_reads_both_ethtool_layouts():
    assert roce.parse_fec("FEC parameters for ens1f0np0:\nSupported/Configured FEC encodings: Auto\n"
                          "Active FEC encoding: RS\n") == ("Auto", "RS")
    assert roce.parse_fec("FEC parameters for swp1:\nConfigured FEC encodings: RS BaseR\nActive FEC encoding: RS\n") \
        == ("RS BaseR", "RS")
    with pytest.raises(Exception, match="Active FEC encoding"):
        roce.parse_fec("FEC parameters for swp1:\nFEC encodings:  RS\n")


def _ctx(spec, qos, files=None, fec=None):
    """gpu01 of the breakout inventory after its split: nic0's two sub-ports are PCI functions .0/.1."""
    inv = load_inventory(BREAKOUT)
    ports = {"port": {"pci/0000:0c:00.0/65535": {"netdev": "ens1f0np0", "flavour": "physical"},
                      "pci/0000:0c:00.1/131071": {"netdev": "ens1f1np1", "flavour": "physical"},
                      "pci/0000:12:00.0/65535": {"netdev": "ens2f0np0", "flavour": "physical"}}}
    act = HostActual({}, {}, mellanox.parse_devlink_ports(json.dumps(ports)), {}, {}, [],
                     more={"roce": {"qos": qos, "files": files or {}, "fec": fec or {}}})
    host = inv.hosts[0]
    host.nics = host.nics[:2]
    host.nics[1].lanes = host.nics[1].lanes[:1]
    return PlanContext(inv, 0, host, spec, None, act)


def test_qos_is_planned_per_sub_port_not_once_per_card():
    spec = load_spec(SPEC)
    good = roce.parse_mlnx_qos(render(PortState.provisioned()))
    ctx = _ctx(spec, {"ens1f0np0": good, "ens1f1np1": roce.parse_mlnx_qos(render(PortState())), "ens2f0np0": good})
    [a] = qos_step.plan_qos(ctx)
    assert a.target == "ens1f1np1" and a.before == "trust pcp, PFC off, ETS vendor"
    assert a.argvs == [["mlnx_qos", "-i", "ens1f1np1", "--trust", "dscp", "--pfc", "0,0,0,1,0,0,0,0",
                        "--tc_bw", "0,45,0,50,0,0,5,0"]]


def test_a_dscp_mapped_elsewhere_is_set_back_with_dscp2prio():
    spec = load_spec(SPEC)
    moved = PortState.provisioned()
    moved.dscp2prio[26] = 0
    good = roce.parse_mlnx_qos(render(PortState.provisioned()))
    ctx = _ctx(spec, {"ens1f0np0": roce.parse_mlnx_qos(render(moved)), "ens1f1np1": good, "ens2f0np0": good})
    [a] = qos_step.plan_qos(ctx)
    argv = a.argvs[0]
    assert a.target == "ens1f0np0" and argv[argv.index("--dscp2prio") + 1] == "set,26,3" and "DSCP 26→prio 3" in a.after


def test_ecn_cnp_and_fec_per_port_and_a_driver_without_ecn_sysfs():
    spec = load_spec(SPEC)
    good = roce.parse_mlnx_qos(render(PortState.provisioned()))
    files = {}
    for nd in ("ens1f0np0", "ens1f1np1"):  # ens2f0np0 has no ecn/ directory (an upstream mlx5 driver)
        files.update({p: "1" for p in roce.ecn_paths(nd) if "/enable/" in p})
        files[f"/sys/class/net/{nd}/ecn/roce_np/cnp_dscp"] = "48"
        files[f"/sys/class/net/{nd}/ecn/roce_np/cnp_802p_prio"] = "6"
    files["/sys/class/net/ens1f1np1/ecn/roce_rp/enable/3"] = "0"
    files["/sys/class/net/ens1f1np1/ecn/roce_np/cnp_dscp"] = "46"
    fec = {"ens1f0np0": ("RS", "RS"), "ens1f1np1": ("Auto", "RS"), "ens2f0np0": ("RS", "RS")}
    ctx = _ctx(spec, {"ens1f0np0": good, "ens1f1np1": good, "ens2f0np0": good}, files, fec)
    acts = {(a.target, a.what): a for a in roce_step.plan_roce(ctx)}
    assert set(acts) == {("ens1f1np1", "ECN/CNP"), ("ens1f1np1", "FEC"), ("ens2f0np0", "ECN/CNP")}
    ecn = acts[("ens1f1np1", "ECN/CNP")]
    assert ecn.before == "roce_rp/enable/3=0, roce_np/cnp_dscp=46" and ecn.argvs == [
        ["sh", "-c", "echo 1 > /sys/class/net/ens1f1np1/ecn/roce_rp/enable/3"],
        ["sh", "-c", "echo 48 > /sys/class/net/ens1f1np1/ecn/roce_np/cnp_dscp"]]
    assert acts[("ens1f1np1", "FEC")].argvs == [["ethtool", "--set-fec", "ens1f1np1", "encoding", "rs"]]
    missing = acts[("ens2f0np0", "ECN/CNP")]
    assert missing.outcome == OUTCOME_UNSUPPORTED and missing.argvs == [] and not missing.is_drift


def test_sysfs_writes_take_only_sysfs_paths():
    for bad in ("/etc/passwd; reboot", "/sys/class/net/../../../etc/shadow", "/proc/sys/net/ipv4/conf/../../x"):
        with pytest.raises(ValueError):
            roce.write_argv(bad, 1)
    assert roce.write_argv("/sys/class/net/ens1f0np0/ecn/roce_np/enable/3", 1) == [
        "sh", "-c", "echo 1 > /sys/class/net/ens1f0np0/ecn/roce_np/enable/3"]
