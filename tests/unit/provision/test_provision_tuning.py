"""RDMA traffic class (MLNX_OFED tc/1/traffic_class, RDMA-CM configfs default_roce_tos), IRQ affinity
to the NIC's NUMA node and the forced link mode: the parsers on the real tools' layouts, the plan
steps, and the mock answering as the kernel and the tools do."""

import json
from types import SimpleNamespace

import pytest

from mfctl.errors import ParseError
from mfctl.hosts import mellanox
from mfctl.inventory import load_inventory
from mfctl.mock.hosts import MockLane
from mfctl.mock.nics import HostConfig, NICState, links, sysfs, tuning
from mfctl.provision.actions import OUTCOME_UNSUPPORTED, HostActual, PlanContext
from mfctl.provision.models import load_spec
from mfctl.provision.steps import irq as irq_step
from mfctl.provision.steps import speed as speed_step
from mfctl.provision.steps import tos as tos_step
from support import PROTOTYPE, ROOT

SPEC = ROOT / "playbooks" / "provision.yaml"

# ethtool 5.10+ of a 100G port with its link down, as the kernel commit adding lanes shows it
# (linux 012ce4dd3102 "ethtool: Extend link modes settings uAPI with lanes"), tabs as ethtool prints
ETHTOOL_DOWN = """Settings for swp1:
\tSupported ports: [ FIBRE ]
\tSupported link modes:   1000baseKX/Full
\t                        10000baseKR/Full
\t                        40000baseCR4/Full
\t                        25000baseSR/Full
\t                        50000baseCR2/Full
\t                        100000baseSR4/Full
\t                        100000baseCR4/Full
\tSupported pause frame use: Symmetric Receive-only
\tSupports auto-negotiation: Yes
\tSupported FEC modes: Not reported
\tAdvertised link modes:  40000baseCR4/Full
\t                        100000baseSR4/Full
\t                        100000baseCR4/Full
\tAdvertised pause frame use: No
\tAdvertised auto-negotiation: Yes
\tAdvertised FEC modes: Not reported
\tSpeed: Unknown!
\tDuplex: Unknown! (255)
\tAuto-negotiation: on
\tPort: Direct Attach Copper
\tPHYAD: 0
\tTransceiver: internal
\tLink detected: no
"""


def test_ethtool_link_modes_are_parsed_from_the_real_layout():
    lm = speed_step.parse_ethtool_modes(ETHTOOL_DOWN)
    assert lm.supported[0] == "1000baseKX/Full" and lm.supported[-1] == "100000baseCR4/Full" and len(lm.supported) == 7
    assert lm.advertised == ["40000baseCR4/Full", "100000baseSR4/Full", "100000baseCR4/Full"]
    assert (lm.autoneg, lm.speed_mbps, lm.lanes, lm.link) == (True, None, None, False)
    assert [speed_step.mode_of(m) for m in ("50000baseSR2/Full", "25000baseSR/Full", "100000baseLR4_ER4/Full",
                                            "1000baseT/Full", "bogus")] == [(50000, 2), (25000, 1), (100000, 4), (1000, 1), None]
    with pytest.raises(ParseError):
        speed_step.parse_ethtool_modes("netlink error: no device matches name (x)\n")


def test_traffic_class_head_and_ls_layouts():
    # mlx5_ib (MLNX_OFED) prints "Global tclass=N" once set, nothing while unset; rules only: no global value
    assert [tos_step.parse_traffic_class(t) for t in ("Global tclass=106\n", "", None, "dst_ip=1.2.3.0/24,tclass=98")] == [
        106, -1, None, -1]
    with pytest.raises(ParseError):
        tos_step.parse_traffic_class("106")
    # GNU head -v: a header per file (a blank line before each but the first), an empty file's body empty,
    # a directory's header then an error on stderr, a missing file only on stderr
    text = ("==> /sys/kernel/config/rdma_cm <==\n\n==> /sys/class/infiniband/mlx5_0/tc/1/traffic_class <==\n\n"
            "==> /sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos <==\n106\n")
    assert tos_step.parse_head(text) == {"/sys/kernel/config/rdma_cm": "", "/sys/class/infiniband/mlx5_0/tc/1/traffic_class": "",
                                         "/sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos": "106"}
    assert irq_step.parse_ls_dirs("/a/msi_irqs:\n100\n64\n\n/b/msi_irqs:\n80\n") == {"/a/msi_irqs": [100, 64],
                                                                                    "/b/msi_irqs": [80]}
    assert irq_step.expand_cpulist("0-3,8,10-11") == {0, 1, 2, 3, 8, 10, 11}
    with pytest.raises(ValueError):
        irq_step.expand_cpulist("0-a")
    assert irq_step.tee_argv("16-31,48-63", [64, 65]) == [
        "sh", "-c", "echo 16-31,48-63 | tee /proc/irq/64/smp_affinity_list /proc/irq/65/smp_affinity_list > /dev/null"]
    with pytest.raises(ValueError):
        irq_step.tee_argv("0; rm -rf /", [64])


def _host(factory=True):
    """A mock host with one ConnectX-6 Dx (100G CWDM4, PCI bus 0x8a: NUMA node 1) whose lane is up."""
    lane = MockLane("ens3f0np0", None, None, "b8:ce:f6:00:00:01")
    host = SimpleNamespace(lanes=[lane], testbed=SimpleNamespace(time_scale=1.0), lane_up=lambda ln: True, factory=factory)
    cfg = HostConfig(host, factory=factory)
    cfg.add_nic(NICState("nic0", "0000:8a:00.0", "MCX623106AN-CDA_Ax", "MT_0000000359", 100.0, "ens3"), factory)
    return cfg


def _run(tool, cfg, *args):
    out, err = [], []
    rc = tool(cfg, list(args), out.append, err.append)
    return rc, "".join(out), "".join(err)


def test_mock_traffic_class_and_configfs_behave_as_the_kernel():
    cfg = _host()
    tc, cma = tos_step.tc_path("mlx5_0"), tos_step.cma_path("mlx5_0")
    assert tuning.read(cfg, tc) == "" and tuning.read(cfg, cma) is None  # unset; no configfs group yet
    assert _run(sysfs.sh, cfg, "sh", "-c", f"echo 106 > {cma}")[0] == 2  # no such file until mkdir
    assert _run(tuning.mkdir, cfg, "-p", "/sys/kernel/config/rdma_cm/mlx5_7") == (
        1, "", "mkdir: cannot create directory '/sys/kernel/config/rdma_cm/mlx5_7': No such device\n")
    assert _run(tuning.mkdir, cfg, "-p", tos_step.cma_dir("mlx5_0"))[0] == 0 and tuning.read(cfg, cma) == "0"
    for v, rc in (("106", 0), ("256", 1), ("-1", 1)):
        assert _run(sysfs.sh, cfg, "sh", "-c", f"echo {v} > {cma}")[0] == rc
    assert tuning.read(cfg, cma) == "106"
    assert _run(sysfs.sh, cfg, "sh", "-c", f"echo tclass=98 > {tc}")[0] == 0 and tuning.read(cfg, tc) == "Global tclass=98"
    assert _run(sysfs.sh, cfg, "sh", "-c", f"echo 300 > {tc}")[0] == 1
    assert _run(sysfs.sh, cfg, "sh", "-c", f"echo tclass=-1 > {tc}")[0] == 0 and tuning.read(cfg, tc) == ""
    gone = "/sys/class/infiniband/mlx5_9/tc/1/traffic_class"
    rc, out, err = _run(tuning.head, cfg, "-v", "-n", "1", tos_step.CONFIGFS, tc, cma, gone)
    assert rc == 1 and tos_step.parse_head(out) == {tos_step.CONFIGFS: "", tc: "", cma: "106"}
    assert "cannot open '/sys/class/infiniband/mlx5_9/tc/1/traffic_class' for reading: No such file or directory" in err
    cfg.netdevs["ens3f0np0"].roce = None  # a driver restart: a fresh port; the configfs group stays, the value does not
    assert tuning.read(cfg, cma) == "0" and tuning.read(cfg, tc) == ""
    tuning.reboot(cfg)
    assert tuning.read(cfg, cma) is None


def test_mock_irqs_numa_and_irqbalance():
    cfg = _host()
    cfg.host.testbed.time_scale = 1e6  # irqbalance's 10 s pass: 10 µs
    nd = "ens3f0np0"
    rc, out, _ = _run(tuning.ls, cfg, "-1", irq_step.dev_path(nd, "msi_irqs"))
    irqs = sorted(int(x) for x in out.split())
    assert rc == 0 and len(irqs) == 9 and tuning.read(cfg, irq_step.dev_path(nd, "numa_node")) == "1"
    assert tuning.read(cfg, irq_step.dev_path(nd, "local_cpulist")) == "16-31,48-63"
    rc, _, err = _run(sysfs.sh, cfg, "sh", "-c", f"echo 16-31,48-63 | tee {irq_step.affinity_path(irqs[0])} "
                                                  "/proc/irq/9999/smp_affinity_list > /dev/null")
    assert rc == 1 and err == "tee: /proc/irq/9999/smp_affinity_list: No such file or directory\n"  # the failing one named
    import time

    time.sleep(0.01)
    assert tuning.read(cfg, irq_step.affinity_path(irqs[0])) == str(irqs[0] * 7 % 64)  # irqbalance moved it back
    assert _run(tuning.systemctl, cfg, "show", "-p", "ActiveState,UnitFileState", "irqbalance")[1] == (
        "ActiveState=active\nUnitFileState=enabled\n")
    assert _run(tuning.systemctl, cfg, "disable", "--now", "irqbalance")[0] == 0
    assert _run(sysfs.sh, cfg, "sh", "-c", f"echo 16-31,48-63 | tee {irq_step.affinity_path(irqs[0])} > /dev/null")[0] == 0
    time.sleep(0.01)
    assert tuning.read(cfg, irq_step.affinity_path(irqs[0])) == "16-31,48-63"  # stays without irqbalance
    assert _run(sysfs.sh, cfg, "sh", "-c", f"echo 64 | tee {irq_step.affinity_path(irqs[0])} > /dev/null")[0] == 1  # no CPU 64


def test_mock_ethtool_forces_only_a_supported_mode_and_reads_it_back_down_or_up():
    cfg = _host()
    _, out, _ = _run(links.ethtool, cfg, "ens3f0np0")
    lm = speed_step.parse_ethtool_modes(out)
    assert lm.supported == ["100000baseLR4_ER4/Full", "40000baseLR4/Full"] and lm.autoneg is True
    assert (lm.speed_mbps, lm.lanes, lm.link) == (100000, 4, True)
    assert _run(links.ethtool, cfg, "-s", "ens3f0np0", "speed", "50000", "lanes", "2", "autoneg", "off") == (
        1, "", "netlink error: link settings update failed\nnetlink error: Invalid argument\n")
    assert _run(links.ethtool, cfg, "-s", "ens3f0np0", "speed", "100000", "lanes", "4", "autoneg", "off")[0] == 0
    lm = speed_step.parse_ethtool_modes(_run(links.ethtool, cfg, "ens3f0np0")[1])
    assert (lm.autoneg, lm.advertised, lm.speed_mbps, lm.lanes) == (False, ["100000baseLR4_ER4/Full"], 100000, 4)
    assert _run(links.ethtool, cfg, "-s", "ens3f0np0", "speed", "40000", "lanes", "4", "autoneg", "off")[0] == 0
    lm = speed_step.parse_ethtool_modes(_run(links.ethtool, cfg, "ens3f0np0")[1])
    assert (lm.link, lm.speed_mbps, lm.lanes) == (False, None, None)  # the far end runs 100G: down, no Lanes: line


PORTS = {"port": {"pci/0000:0c:00.0/65535": {"netdev": "ens1f0np0", "flavour": "physical"},
                  "pci/0000:12:00.0/65535": {"netdev": "ens2f0np0", "flavour": "physical"},
                  "pci/0000:8a:00.0/65535": {"netdev": "ens3f0np0", "flavour": "physical"},
                  "pci/0000:90:00.0/65535": {"netdev": "ens4f0np0", "flavour": "physical"}}}


def _ctx(more, spec=None):
    inv = load_inventory(PROTOTYPE)
    act = HostActual({}, {}, mellanox.parse_devlink_ports(json.dumps(PORTS)), {}, {}, [], more=more)
    return PlanContext(inv, 0, inv.hosts[0], spec or load_spec(SPEC), None, act)


def test_tos_plan_writes_what_differs_and_says_what_the_driver_lacks():
    nds = ["ens1f0np0", "ens2f0np0", "ens3f0np0", "ens4f0np0"]
    ib = {nd: (f"mlx5_{k}", 1) for k, nd in enumerate(nds[:3])}  # ens4f0np0: no RDMA device
    files = {tos_step.CONFIGFS: "", tos_step.tc_path("mlx5_0"): "Global tclass=106", tos_step.cma_path("mlx5_0"): "106",
             tos_step.tc_path("mlx5_1"): "", tos_step.cma_path("mlx5_2"): "0"}  # mlx5_2: no tc/ (upstream driver)
    acts = tos_step.plan_tos(_ctx({"tos": {"ibdev": ib, "files": files}}))
    got = [(a.target, a.what, a.before, a.outcome, [" ".join(x) for x in a.argvs]) for a in acts]
    assert got == [
        ("ens2f0np0 (mlx5_1)", "verbs traffic class", "unset", None,
         ["sh -c echo 106 > /sys/class/infiniband/mlx5_1/tc/1/traffic_class"]),
        ("ens2f0np0 (mlx5_1)", "RDMA-CM default ToS", "no configfs entry", None,
         ["mkdir -p /sys/kernel/config/rdma_cm/mlx5_1",
          "sh -c echo 106 > /sys/kernel/config/rdma_cm/mlx5_1/ports/1/default_roce_tos"]),
        ("ens3f0np0 (mlx5_2)", "verbs traffic class", "no /sys/class/infiniband/mlx5_2/tc/1/traffic_class (the driver is not "
         "MLNX_OFED's/DOCA-OFED's)", OUTCOME_UNSUPPORTED, []),
        ("ens3f0np0 (mlx5_2)", "RDMA-CM default ToS", "0", None,
         ["sh -c echo 106 > /sys/kernel/config/rdma_cm/mlx5_2/ports/1/default_roce_tos"]),
        ("ens4f0np0", "RDMA traffic class", "no RDMA device (ibdev2netdev maps no RDMA device to it)", OUTCOME_UNSUPPORTED, [])]
    files.pop(tos_step.CONFIGFS)  # configfs not mounted / rdma_cm not loaded: a person's job
    acts = tos_step.plan_tos(_ctx({"tos": {"ibdev": ib, "files": files}}))
    assert all(a.manual for a in acts if a.what == "RDMA-CM default ToS")


def _irq_more(aff, active="active", enabled="enabled"):
    nds = {"ens1f0np0": 0, "ens2f0np0": 0, "ens3f0np0": 1, "ens4f0np0": 1}
    irqs = {nd: [64 + 16 * k + i for i in range(3)] for k, nd in enumerate(nds)}
    files = {}
    for nd, node in nds.items():
        files[irq_step.dev_path(nd, "numa_node")] = str(node)
        files[irq_step.dev_path(nd, "local_cpulist")] = tuning.NODE_CPUS[node]
        files.update({irq_step.affinity_path(i): aff(node, i) for i in irqs[nd]})
    return {"irq": {"irqbalance": (active, enabled), "irqs": irqs, "files": files}}


def test_irq_plan_pins_each_ports_irqs_to_its_node_and_stops_or_reports_irqbalance():
    acts = irq_step.plan_irq(_ctx(_irq_more(lambda node, i: str(i % 64))))
    assert [(a.target, a.what) for a in acts] == [("irqbalance", "irqbalance")] + [
        (nd, "IRQ affinity") for nd in ("ens1f0np0", "ens2f0np0", "ens3f0np0", "ens4f0np0")]
    assert acts[0].argvs == [["systemctl", "disable", "--now", "irqbalance"]]
    a = acts[3]
    assert a.before == "3 of 3 IRQs elsewhere (96: 32, 97: 33, 98: 34)" and a.after == "3 IRQs on node 1: CPUs 16-31,48-63"
    assert a.argvs == [irq_step.tee_argv("16-31,48-63", [96, 97, 98])]
    # pinned (in any spelling of the same CPU set) and irqbalance off: nothing to do
    spelled = lambda node, i: ",".join(str(c) for c in sorted(irq_step.expand_cpulist(tuning.NODE_CPUS[node])))  # noqa: E731
    assert irq_step.plan_irq(_ctx(_irq_more(spelled, "inactive", "disabled"))) == []
    # irqbalance: report — a finding that it undoes the pinning, not a command
    spec = load_spec(SPEC)
    spec.irq.irqbalance = "report"
    [a] = irq_step.plan_irq(_ctx(_irq_more(spelled), spec))
    assert (a.outcome, a.argvs, a.is_drift) == (irq_step.OUTCOME_IRQBALANCE, [], False) and "undo the pinning" in a.after
    spec.irq.affinity = "off"
    assert irq_step.plan_irq(_ctx(_irq_more(lambda n, i: "0"), spec)) == []


def test_speed_plan_forces_the_breakouts_mode_and_refuses_one_the_port_lacks():
    def lm(supported, advertised, autoneg):
        return speed_step.LinkModes(supported, advertised, autoneg, None, None, False)

    ok = lm(["100000baseLR4_ER4/Full"], ["100000baseLR4_ER4/Full"], False)
    more = {"speed": {"ens1f0np0": ok, "ens2f0np0": lm(["100000baseLR4_ER4/Full"], ["100000baseLR4_ER4/Full"], True),
                      "ens3f0np0": lm(["25000baseSR/Full"], [], True), "ens4f0np0": "netlink error: no device"}}
    acts = speed_step.plan_speed(_ctx(more))
    assert [(a.target, bool(a.manual), [" ".join(x) for x in a.argvs]) for a in acts] == [
        ("ens2f0np0", False, ["ethtool -s ens2f0np0 speed 100000 lanes 4 autoneg off"]),
        ("ens3f0np0", True, []), ("ens4f0np0", True, [])]
    assert "breakout 1x100G needs 100000 Mb/s on 4 lane(s) per sub-port, which ens3f0np0 does not support" in acts[1].manual
    spec = load_spec(SPEC)
    spec.link.force = False
    assert speed_step.plan_speed(_ctx(more, spec)) == []
    # a card the breakout table does not know: said, not silently left alone; an OEM variant is its card
    ctx = _ctx({"speed": {nd: ok for nd in ("ens1f0np0", "ens2f0np0", "ens3f0np0", "ens4f0np0")}})
    ctx.host.nics[0].model, ctx.host.nics[1].model = "ConnectX-4 Lx", "ConnectX-6 Dx (Dell OEM)"
    [a] = speed_step.plan_speed(ctx)
    assert (a.target, a.outcome, a.argvs) == ("ens1f0np0", OUTCOME_UNSUPPORTED, [])
    assert a.before == "model 'ConnectX-4 Lx': lanes per sub-port unknown"
