"""Issue 16 item 15: the end-to-end checks — perftest's report parsed as operators' captures show
it, the paths (one per duplex OCS circuit, one per EPS pair), the RoCE traffic class, and on a
provisioned mock of its own: every check ok, then a receiver that trusts PCP (the RoCE traffic
lands on priority 0) and a lane at MTU 1500 (RoCE MTU 1024: below 90 % of the lane) are findings."""

import json
import subprocess

import pytest

from mfctl import mockctl
from mfctl.errors import ExitCode, ParseError
from mfctl.inventory import load_inventory
from mfctl.provision import checks
from mfctl.provision.models import load_spec
from support import PROTOTYPE, ROOT, mfctl_cmd, wait_until

pytestmark = pytest.mark.usefixtures("paramiko_mock_hosts")  # conftest.py: ~2x faster, same provisioning

SPEC = ROOT / "playbooks" / "provision.yaml"

#: ib_write_bw --report_gbits as printed by perftest (layout of public captures: ConnectX RoCE, GID
#: index 3, Ethernet link type; a CPU-frequency warning may stand between the header and the row)
CLIENT = """---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF\t\tDevice         : mlx5_0
 Number of qps   : 1\t\tTransport type : IB
 Connection type : RC\t\tUsing SRQ      : OFF
 Mtu             : 4096[B]
 Link type       : Ethernet
 GID index       : 3
---------------------------------------------------------------------------------------
 local address: LID 0000 QPN 0x008b PSN 0x5a6c7d RKey 0x20212a VAddr 0x0074c6b5a00000
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:168:06:116
 remote address: LID 0000 QPN 0x008a PSN 0xaa095c RKey 0x202129 VAddr 0x0074c6b5900000
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:168:06:106
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
Conflicting CPU frequency values detected: 1500.000000 != 3300.016000. CPU Frequency is not max.
 65536      560845           0.00               98.02                0.186950
---------------------------------------------------------------------------------------
"""


def test_perftest_report_and_traffic_class():
    assert checks.parse_perftest(CLIENT) == 98.02
    with pytest.raises(ParseError, match="BW average"):
        checks.parse_perftest(" Couldn't connect to 198.18.0.9:18515\n")
    assert checks.roce_tclass(3) == 104 and checks.roce_tclass(3) >> 2 == 26  # DSCP 26 (AF31) → priority 3
    assert checks.perftest_argv("mlx5_0", 3, 18515, "198.18.0.9", 104) == [
        "ib_write_bw", "-d", "mlx5_0", "-x", "3", "-F", "--report_gbits", "-D", "2", "-p", "18515", "--tclass=104",
        "198.18.0.9"]
    assert checks.exit_code([]) == ExitCode.DRIFT
    assert checks.exit_code([{"status": "skipped"}]) == ExitCode.DRIFT
    assert checks.exit_code([{"status": "ok"}, {"status": "bad"}]) == ExitCode.FAILED


def test_paths_one_per_duplex_circuit_and_per_eps_pair():
    inv, spec = load_inventory(PROTOTYPE), load_spec(SPEC)
    # gpu01/nic0 (tx 1, rx 385) ↔ gpu02/nic0 (tx 4, rx 388), both directions patched
    ps = checks.paths(inv, spec, {1: 388, 4: 385}, ["gpu01", "gpu02", "gpu03"])
    assert [(p["path"], p["src"][0], p["src"][2].netdev, p["src"][3], p["dst"][0], p["dst"][3]) for p in ps] == [
        ("OCS 1→388", "gpu01", "ens1f0np0", "198.18.0.1", "gpu02", "198.18.0.9"),
        ("EPS", "gpu01", "ens4f0np0", "198.18.3.1", "gpu02", "198.18.3.9"),
        ("EPS", "gpu02", "ens4f0np0", "198.18.3.9", "gpu03", "198.18.3.17")]
    assert [p["path"] for p in checks.paths(inv, spec, {1: 388, 4: 385}, ["gpu01", "gpu03"])] == ["EPS"]  # far end not selected


def test_paths_with_several_ocses_join_lanes_of_one_switch_only():
    """Issue 22: inventory/mfabric-2ocs.yaml's two regions use the same port numbers on their own
    switches (gpu01/nic0 and gpu05/nic0 are both on input 1). Read as one OCS, ocs-b's circuit 1→196
    made a path gpu01→gpu06 across the switches; each switch's circuits are looked for among its own
    hosts' lanes."""
    inv, spec = load_inventory(ROOT / "inventory" / "mfabric-2ocs.yaml"), load_spec(SPEC)
    names = ["gpu01", "gpu02", "gpu05", "gpu06"]
    xc = {1: 196, 4: 193}  # gpu01/nic0 <-> gpu02/nic0 on ocs-a; gpu05/nic0 <-> gpu06/nic0 on ocs-b
    ps = checks.paths(inv, spec, {}, names, by_ocs={"ocs-a": (["gpu01", "gpu02"], xc), "ocs-b": (["gpu05", "gpu06"], xc)})
    assert [(p["path"], p.get("ocs"), p["src"][0], p["src"][3], p["dst"][0], p["dst"][3]) for p in ps] == [
        ("OCS ocs-a 1→196", "ocs-a", "gpu01", "198.18.0.1", "gpu02", "198.18.0.9"),
        ("OCS ocs-b 1→196", "ocs-b", "gpu05", "198.18.0.33", "gpu06", "198.18.0.41"),
        ("EPS", None, "gpu01", "198.18.3.1", "gpu02", "198.18.3.9"),
        ("EPS", None, "gpu02", "198.18.3.9", "gpu05", "198.18.3.33"),
        ("EPS", None, "gpu05", "198.18.3.33", "gpu06", "198.18.3.41")]
    # (what one map over every host made of it: a circuit from ocs-a's gpu01 to ocs-b's gpu06)
    assert ("gpu01", "gpu06") in [(p["src"][0], p["dst"][0]) for p in checks.paths(inv, spec, xc, names)]
    # an OCS with no circuit among its hosts: no path of it
    ps = checks.paths(inv, spec, {}, names, by_ocs={"ocs-a": (["gpu01", "gpu02"], {}), "ocs-b": (["gpu05", "gpu06"], xc)})
    assert [p["path"] for p in ps if p["path"] != "EPS"] == ["OCS ocs-b 1→196"]


@pytest.fixture
def provisioned(tmp_path, cli_env, monkeypatch):
    monkeypatch.setenv("MFCTL_STATE_DIR", cli_env["MFCTL_STATE_DIR"])
    st = mockctl.start(PROTOTYPE, tmp_path / "mock", time_scale=100)
    run = lambda *a: subprocess.run(mfctl_cmd(*a), capture_output=True, text=True, env=cli_env, timeout=120)  # noqa: E731
    topo = tmp_path / "c.yaml"
    topo.write_text("circuits:\n  - [gpu01/nic0, gpu02/nic0]\n")
    assert run("ocs", "apply", topo, "-i", st["inventory"], "--yes").returncode == 0
    # the recipe's addresses on the lanes checked (a provisioned mock has MTU 9000 and RoCE QoS, no address)
    for host, nd, addr in (("gpu01", "ens1f0np0", "198.18.0.1/24"), ("gpu02", "ens1f0np0", "198.18.0.9/24"),
                           ("gpu01", "ens4f0np0", "198.18.3.1/24"), ("gpu02", "ens4f0np0", "198.18.3.9/24")):
        assert run("exec", "-i", st["inventory"], host, "--", "ip", "addr", "replace", addr, "dev", nd).returncode == 0
    yield st["inventory"], run
    mockctl.stop(tmp_path / "mock")


def _rows(run, inv):
    r = run("provision", "check", SPEC, "-i", inv, "--hosts", "gpu[01-02]", "--json")
    return r.returncode, {(x["path"], x["check"]): x for x in json.loads(r.stdout)["checks"]}


def test_checks_on_a_provisioned_mock_then_qos_and_mtu_findings(provisioned):
    inv, run = provisioned
    code, rows = wait_until(lambda: (x := _rows(run, inv))[0] == 0 and x, what="the circuit up, every check ok")
    bw = rows[("OCS 1→388", "ib_write_bw")]
    assert bw["measured"] == 94.21 and bw["expected"] == ">= 90.0 Gb/s" and bw["status"] == "ok"
    assert rows[("OCS 1→388", "rx_prio3_bytes")]["measured"].endswith(" B, 0 pause frames")
    # the receiver trusts PCP: untagged RoCE arrives on priority 0, not the lossless 3
    assert run("exec", "-i", inv, "gpu02", "--", "mlnx_qos", "-i", "ens1f0np0", "--trust", "pcp").returncode == 0
    code, rows = _rows(run, inv)
    pr = rows[("OCS 1→388", "rx_prio3_bytes")]
    assert code == 1 and pr["status"] == "bad" and pr["measured"].startswith("0 B")
    assert "did not arrive on priority 3" in pr["why"] and rows[("EPS", "rx_prio3_bytes")]["status"] == "ok"
    # the sender's lane at MTU 1500: RoCE MTU 1024, 89.21 Gb/s < 90 % of 100 G
    assert run("exec", "-i", inv, "gpu01", "--", "ip", "link", "set", "dev", "ens1f0np0", "mtu", "1500").returncode == 0
    code, rows = _rows(run, inv)
    bw = rows[("OCS 1→388", "ib_write_bw")]
    assert code == 1 and bw["measured"] == 89.21 and bw["why"] == "89.21 Gb/s is below 90% of the 100 Gb/s lane"
