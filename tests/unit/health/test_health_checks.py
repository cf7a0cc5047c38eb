"""The health checks as a table: selection by name, one runner, each command once per host,
unreachable hosts, and the checks that read what the host says (ibdev2netdev, show_gids, dcgmi)."""

import json

import pytest

from mfctl import health
from mfctl.errors import UsageError
from mfctl.health.checks import CHECKS, DEFAULT, select_checks
from mfctl.inventory import load_inventory
from mfctl.transport.ssh import CommandResult, SSHPool
from support import DATA, PROTOTYPE

BREAKOUT = PROTOTYPE.parent / "mfabric-breakout.yaml"


class Answers:
    """A stand-in pool: each command (by argv prefix) answered with a text, counted."""

    fanout = 4
    map = SSHPool.map  # the real fan-out over this stand-in's run

    def __init__(self, answers, error=None):
        self.answers, self.error, self.calls = answers, error, []

    def run(self, host, argv, **_):
        self.calls.append((host, tuple(argv)))
        if self.error:
            return CommandResult(host, list(argv), error=self.error, endpoint="127.0.0.1:2222")
        for prefix, text in self.answers.items():
            if tuple(argv[:len(prefix)]) == prefix:
                return text if isinstance(text, CommandResult) else CommandResult(host, list(argv), rc=0, stdout=text)
        return CommandResult(host, list(argv), rc=127, stderr=f"{argv[0]}: command not found")


def links(*down, names=("ens1f0np0", "ens2f0np0", "ens3f0np0", "ens4f0np0")):
    return json.dumps([{"ifname": n, "operstate": "DOWN" if n in down else "UP",
                        "flags": ["UP"] + ([] if n in down else ["LOWER_UP"])} for n in names])


def ibstat(states):
    return "".join(f"CA 'mlx5_{k}'\n\tFirmware version: 22.36.1010\n\tPort 1:\n\t\tState: {s}\n\t\tPhysical state: "
                   f"{'LinkUp' if s == 'Active' else 'Disabled'}\n\t\tRate: 100\n\t\tLink layer: Ethernet\n"
                   for k, s in enumerate(states))


# --- selection ---------------------------------------------------------------------------------
def test_checks_are_selected_by_name_added_removed_or_exactly():
    assert select_checks(None) == list(DEFAULT) and "dcgm" not in DEFAULT and "ocs" in DEFAULT
    assert select_checks("+dcgm,-optics") == ["gpu", "links", "xid", "nvlink", "rdma", "gids", "speed", "counters", "roce",
                                              "dcgm", "ocs"]
    assert select_checks("xid,nvlink") == ["xid", "nvlink"]
    assert select_checks("gpu,+roce,-gpu") == ["roce"]
    assert select_checks("optics") == ["links", "optics"]  # what optics needs comes with it
    for spec, msg in (("nope", "unknown check 'nope'; the checks are gpu, links, xid"), ("+gpu,-bogus", "'bogus'"),
                      ("optics,-links", "optics needs links (ip -j link): remove optics too (-optics) or keep links"),
                      ("gpu,-gpu", "selects no check")):
        with pytest.raises(UsageError, match=msg.replace("(", r"\(").replace(")", r"\)")):
            select_checks(spec)
    assert all(c.runs and c.judges and c.group in health.findings.GROUPS for c in CHECKS.values())


# --- the runner ----------------------------------------------------------------------------------
def test_each_command_runs_once_per_host_and_checks_share_readings():
    inv = load_inventory(PROTOTYPE)
    stats = (DATA / "ethtool" / "S-mlx5-grep-prio-roce-all-traffic-prio0.txt").read_text()
    pool = Answers({("ethtool", "-S"): stats})
    rep = health.sweep(pool, inv, ["gpu01"], checks=["counters", "roce"])
    argvs = [a for _, a in pool.calls]
    assert len(argvs) == len(set(argvs)) == len(inv.hosts[0].nics)  # one ethtool -S per NIC, for both checks
    [hh] = rep.targets
    assert {(f.source, f.code) for f in hh.findings} == {("roce", "roce.wrong_priority")}
    assert set(hh.nic_counters) == {n.name for n in inv.hosts[0].nics}  # the counters check kept its readings
    assert rep.checks == ["counters", "roce"] and rep.groups == ("nic", "roce") and rep.healthy


def test_an_unreachable_host_is_given_up_at_its_first_command():
    inv = load_inventory(PROTOTYPE)
    pool = Answers({}, error="connection refused (127.0.0.1:2222)")
    rep = health.sweep(pool, inv, ["gpu01", "gpu02"])
    assert len(pool.calls) == 2  # one attempt per host, not one per check
    assert [(t.host, t.reachable, [f.code for f in t.findings]) for t in rep.targets] == [
        ("gpu01", False, ["ssh.unreachable"]), ("gpu02", False, ["ssh.unreachable"])]
    assert rep.targets[0].findings[0].shared_message == "connection refused (<address>:<port>)"
    assert int(rep.exit_code()) == 4  # nothing reached
    xml = rep.junit()
    assert xml.count("<skipped") == 2 * 5 and 'name="ssh"' in xml


def test_a_hung_tool_is_a_failed_query_and_the_host_is_still_swept():
    inv = load_inventory(PROTOTYPE)
    hung = CommandResult("gpu01", ["nvidia-smi"], error="timeout: command did not finish within 0.2 s")
    pool = Answers({("nvidia-smi",): hung, ("ip", "-j", "link"): links()})
    [hh] = health.sweep(pool, inv, ["gpu01"], checks=["gpu", "links", "speed"]).targets
    assert hh.reachable and [(f.code, f.message) for f in hh.findings] == [
        ("gpu.query_failed", "timeout: command did not finish within 0.2 s")]
    assert ("gpu01", ("ethtool", "ens1f0np0")) in pool.calls  # the other checks ran


def test_rdma_devices_are_the_hosts_own_on_a_breakout_inventory():
    """issue 17 item 1: nic0 split in two netdevs shifts every device after it; the EPS NIC (nic3, the
    fourth) is mlx5_4, not the mlx5_3 its position says. ibdev2netdev says which is which."""
    inv = load_inventory(BREAKOUT)
    netdevs = ["ens1f0np0s0", "ens1f0np0s1", "ens2f0np0", "ens3f0np0", "ens4f0np0"]
    ports = ibstat(["Active", "Active", "Active", "Down", "Active"])  # mlx5_3: an OCS lane not patched yet
    mapping = "".join(f"mlx5_{k} port 1 ==> {nd} ({'Down' if k == 3 else 'Up'})\n" for k, nd in enumerate(netdevs))
    [hh] = health.sweep(Answers({("ibstat",): ports, ("ibdev2netdev",): mapping}), inv, ["gpu01"], checks=["rdma"]).targets
    assert hh.findings == []
    # the EPS device down is found by its own name
    down = ibstat(["Active", "Active", "Active", "Active", "Down"])
    [hh] = health.sweep(Answers({("ibstat",): down, ("ibdev2netdev",): mapping}), inv, ["gpu01"], checks=["rdma"]).targets
    assert [(f.code, f.component, f.source) for f in hh.findings] == [("rdma.port_down", "mlx5_4/1", "rdma")]
    # without ibdev2netdev: the inventory's rdma_device, else the position guess (wrong here: the old answer)
    [hh] = health.sweep(Answers({("ibstat",): ports}), inv, ["gpu01"], checks=["rdma"]).targets
    assert [f.component for f in hh.findings] == ["mlx5_3/1"]
    inv.hosts[0].nics[3].rdma_device = "mlx5_4"
    [hh] = health.sweep(Answers({("ibstat",): ports}), inv, ["gpu01"], checks=["rdma"]).targets
    assert hh.findings == []


def test_a_lane_address_without_a_roce_v2_gid_is_a_warning():
    inv = load_inventory(PROTOTYPE)
    addrs = json.dumps([{"ifname": "ens1f0np0", "flags": ["UP", "LOWER_UP"], "operstate": "UP", "mtu": 9000,
                         "addr_info": [{"family": "inet", "local": "198.18.1.1", "prefixlen": 24}]},
                        {"ifname": "ens2f0np0", "flags": ["UP", "LOWER_UP"], "operstate": "UP", "mtu": 9000,
                         "addr_info": [{"family": "inet", "local": "198.18.2.1", "prefixlen": 24}]}])
    gids = ("DEV     PORT    INDEX   GID                                     IPv4            VER     DEV\n"
            "mlx5_0  1       0       fe80:0000:0000:0000:bace:f6ff:fe00:0000                 v1      ens1f0np0\n"
            "mlx5_0  1       3       0000:0000:0000:0000:0000:ffff:c612:0101 198.18.1.1      v2      ens1f0np0\n"
            "mlx5_1  1       2       0000:0000:0000:0000:0000:ffff:c612:0201 198.18.2.1      v1      ens2f0np0\n")
    [hh] = health.sweep(Answers({("show_gids",): gids, ("ip", "-j", "addr"): addrs}), inv, ["gpu01"], checks=["gids"]).targets
    assert [(f.severity, f.code, f.component, f.value) for f in hh.findings] == [
        ("warning", "rdma.no_roce_v2_gid", "ens2f0np0", "198.18.2.1")]  # v1 only: NCCL_IB_GID_INDEX has no v2 to take


def test_dcgm_diagnostic_is_opt_in_and_each_failed_test_is_critical():
    inv = load_inventory(PROTOTYPE)
    text = (DATA / "dcgm" / "a100-p4de-dcgmi-diag-r2-dcgm333.txt").read_text()
    pool = Answers({("dcgmi", "diag"): text})
    assert "dcgm" not in select_checks(None)
    [hh] = health.sweep(pool, inv, ["gpu01"], checks=["dcgm"]).targets
    from mfctl.hosts.dcgmi import parse_diag

    assert [f.component for f in hh.findings] == parse_diag(text).failed
    assert all((f.severity, f.code, f.check) == ("critical", "gpu.dcgm_diag_failed", "gpu") for f in hh.findings)
    assert pool.calls == [("gpu01", ("dcgmi", "diag", "-r", "1"))]


def test_the_report_is_the_v1_document_with_the_checks_it_ran():
    inv = load_inventory(PROTOTYPE)
    rep = health.sweep(Answers({("ip", "-j", "link"): json.dumps([])}), inv, ["gpu01"], checks=["links", "ocs"],
                       ocs_state={"standing": [], "dark_outputs": [7]})
    doc = rep.to_dict()
    assert (doc["schema"], doc["checks"], doc["healthy"]) == ("mfctl.health/v1", ["links", "ocs"], False)
    assert [t["host"] for t in doc["targets"]] == ["gpu01", inv.ocs.name]
    assert doc["targets"][1]["findings"][0]["code"] == "ocs.dark_port" and int(rep.exit_code()) == 1
    assert 'name="ocs"' in rep.junit() and 'name="gpu"' not in rep.junit()  # JUnit cases follow the checks that ran


def test_without_ibstat_the_ports_come_from_ibv_devinfo():
    from support import GOLDEN

    inv = load_inventory(PROTOTYPE)
    inv.hosts[0].nics[3].rdma_device = "mlx5_1"  # the capture's down port is the EPS NIC's
    text = (GOLDEN / "ibv_devinfo" / "documented-format-two-hcas" / "output.txt").read_text()
    pool = Answers({("ibv_devinfo",): text})
    [hh] = health.sweep(pool, inv, ["gpu01"], checks=["rdma"]).targets
    assert [(f.code, f.component, f.value) for f in hh.findings] == [("rdma.port_down", "mlx5_1/1", "Down")]
    assert [a for _, a in pool.calls] == [("ibdev2netdev",), ("ibstat",), ("ibv_devinfo",)]


@pytest.mark.parametrize("spec", ["+-gpu", "--gpu", "++dcgm", "+ dcgm", "+", "-", "gpu,+", "GPU", "gpu;id", "[red]x[/red]"])
def test_an_item_is_one_sign_directly_before_a_name_or_a_usage_error(spec):
    # (before: "+-gpu" kept gpu, "--gpu" removed it, "++dcgm" and "+ dcgm" added dcgm, "+" was "unknown check ''")
    with pytest.raises(UsageError, match=r"is not NAME, \+NAME or -NAME|unknown check"):
        select_checks(spec)


def test_a_separate_option_removes_checks_without_being_quoted_as_the_users_text():
    assert select_checks(None, without=("ocs",)) == [n for n in DEFAULT if n != "ocs"]
    assert select_checks("+dcgm", without=("ocs",))[-1] == "dcgm"
    with pytest.raises(UsageError, match=r"^--checks 'ocs' without ocs selects no check"):
        select_checks("ocs", without=("ocs",))
    with pytest.raises(UsageError, match=r"^--checks 'bogus': unknown check 'bogus'"):
        select_checks("bogus", without=("ocs",))
