"""The mock hosts' GPU and RDMA tools over real SSH, parsed with mfctl's own parsers: every
format agrees with the nvidia-smi query CSV and `ip -j link`, lane states follow the OCS, and
injected GPU faults reach the health sweep. One in-process mock testbed for the module."""

import json
import os
import subprocess
import time

import pytest

from mfctl import health
from mfctl.health.checks import CHECKS
from mfctl.health.runner import sweep_host
from mfctl.hosts import dcgm, dcgmi, iproute, mellanox, nvidia_smi, rdma
from mfctl.inventory import load_inventory
from mfctl.mock.gputools import GPUFaults
from mfctl.mock.testbed import MockTestbed
from mfctl.ocs.driver import driver_from_inventory
from mfctl.transport.ssh import SSHPool, targets_from_inventory
from support import PROTOTYPE, mfctl_cmd

EXPORTER = ["curl", "-s", "http://localhost:9400/metrics"]


@pytest.fixture(scope="module")
def mock(tmp_path_factory):
    """(testbed, inventory, pool, env); gpu01/nic0 <-> gpu02/nic0 patched on the OCS and up."""
    root = tmp_path_factory.mktemp("mockfmt")
    tb = MockTestbed(PROTOTYPE, root / "mock", time_scale=100)
    st = tb.start()
    inv = load_inventory(st["inventory"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MFCTL_STATE_DIR", str(root / "state"))
        with driver_from_inventory(inv) as drv:
            drv.apply({1: 388, 4: 385}, reason="test: one duplex circuit")
    pool = SSHPool(targets_from_inventory(inv))
    deadline = time.monotonic() + 10
    while not rdma.parse_ibdev2netdev(pool.run("gpu01", ["ibdev2netdev"]).stdout)["mlx5_0"][2]:
        assert time.monotonic() < deadline, "the lit lane never came up"
        time.sleep(0.02)
    env = {"MFCTL_STATE_DIR": str(root / "state"), "MFCTL_RUNS_DIR": str(root / "runs"), "MFCTL_LOG_FILE": str(root / "log")}
    yield tb, inv, pool, env
    pool.close()
    tb.stop()


def out(pool, host, argv) -> str:
    r = pool.run(host, argv)
    assert r.ok, (argv, r.rc, r.stderr, r.error)
    return r.stdout


def csv_rows(pool, host, fields=nvidia_smi.HEALTH_FIELDS + ["uuid", "pci.bus_id"]):
    return nvidia_smi.parse_query_csv(out(pool, host, nvidia_smi.query_argv(fields)))


#: The GPU query and the lane links: the checks that judge nvidia-smi's query and ``ip -j link``.
GPU_AND_LINKS = ["gpu", "links"]


def judge_given(inv_host, gpu_res, link_res):
    """One host judged by the gpu and links checks from the two results given (no SSH)."""
    class Given:
        def run(self, host, argv, **_):
            return gpu_res if argv[0] == "nvidia-smi" else link_res

    return sweep_host(Given(), inv_host, [CHECKS[n] for n in GPU_AND_LINKS], health.thresholds())



def test_nvidia_smi_table_list_and_id_selection_follow_the_real_layout(mock):
    """`nvidia-smi` without options lays out its table like the driver it claims: on an R550 host
    column for column like the 550 capture (same widths, same separators); on the default R535
    host two columns narrower in the Bus-Id/Memory column (R530-R535: 41 + 22 + 22 inside,
    89 wide). -L and -i agree with the query CSV."""
    from support import DATA

    tb, _, pool, _ = mock
    real = (DATA / "nvidia-smi" / "h100x8-default-table-drv550.txt").read_text().splitlines()
    shape = lambda lines: [(len(ln), [i for i, c in enumerate(ln) if c in "|+"]) for ln in lines[1:]]  # noqa: E731
    tb.hosts["gpu02"].driver = 550
    try:
        assert shape(out(pool, "gpu02", ["nvidia-smi"]).splitlines()) == shape(real)  # every line, every separator
    finally:
        tb.hosts["gpu02"].driver = 535
    got = out(pool, "gpu02", ["nvidia-smi"]).splitlines()
    assert "NVIDIA-SMI 535.161.08             Driver Version: 535.161.08   CUDA Version: 12.2     |" in got[2]
    narrow = [(max(n - 2, 0), [i if i <= 42 else i - 2 for i in seps]) for n, seps in shape(real)]
    assert shape(got) == narrow  # the 550 layout with its middle column 24 → 22 wide
    rows = csv_rows(pool, "gpu02")
    gpu3 = got[8 + 4 * 3: 8 + 4 * 3 + 2]
    assert gpu3[0].split("|")[1].split() == ["3", *rows[3]["name"].split(), "On"]
    assert gpu3[0].split("|")[2].split() == [rows[3]["pci.bus_id"], "Off"] and f"{rows[3]['temperature.gpu']}C" in gpu3[1]
    listed = out(pool, "gpu02", ["nvidia-smi", "-L"]).splitlines()
    assert listed[3] == f"GPU 3: {rows[3]['name']} (UUID: {rows[3]['uuid']})" and len(listed) == 8
    argv = ["nvidia-smi", "-i", "3,5", *nvidia_smi.query_argv(["index", "uuid"])[1:]]
    one = nvidia_smi.parse_query_csv(out(pool, "gpu02", argv))
    assert [(r["index"], r["uuid"]) for r in one] == [(3, rows[3]["uuid"]), (5, rows[5]["uuid"])]
    assert len(out(pool, "gpu02", ["nvidia-smi", "-i", rows[6]["pci.bus_id"]]).splitlines()) == len(got) - 4 * 7
    r = pool.run("gpu02", ["nvidia-smi", "-i", "8", "-L"])
    assert r.rc == 6 and r.stdout == "No devices were found\n"
    assert out(pool, "gpu02", ["nvidia-smi", "-L", "-i", f"{rows[4]['uuid']},4,{rows[1]['pci.bus_id']}"]).splitlines() == [
        listed[4], listed[1]]  # by UUID, index or bus id; each GPU once
    assert pool.run("gpu02", ["nvidia-smi", "-L", "-i"]).rc == 2
    import re
    assert re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", rows[0]["uuid"])

def test_gpu_formats_agree_with_the_query_csv(mock):
    _, _, pool, _ = mock
    rows = csv_rows(pool, "gpu02")
    temps = [r["temperature.gpu"] for r in rows]
    assert len(rows) == 8 and len(set(temps)) > 1 and rows[0]["remapped_rows.pending"] == "No"
    for parsed in (nvidia_smi.parse_query_text(out(pool, "gpu02", ["nvidia-smi", "-q"])),
                   nvidia_smi.parse_query_xml(out(pool, "gpu02", ["nvidia-smi", "-q", "-x"]))):
        assert [g.bus_id for g in parsed] == [r["pci.bus_id"] for r in rows]
        assert [g.temperature_c for g in parsed] == temps and [g.power_w for g in parsed] == [r["power.draw"] for r in rows]
        assert {(g.name, g.persistence, g.mig_current, g.ecc_uncorrected_volatile, g.remapped_rows_pending,
                 g.remapped_rows_failure) for g in parsed} == {("NVIDIA A100-SXM4-80GB", True, "Disabled", 0, False, False)}
    nv = nvidia_smi.parse_nvlink_status(out(pool, "gpu02", nvidia_smi.nvlink_argv()))
    assert nv.unsupported is None and sorted(nv.gpus) == list(range(8))
    assert all(links == {k: 25.0 for k in range(12)} for links in nv.gpus.values())
    assert set(nv.names.values()) == {"NVIDIA A100-SXM4-80GB"}
    topo = nvidia_smi.parse_topo(out(pool, "gpu02", ["nvidia-smi", "topo", "-m"]))
    assert topo.devices == [f"GPU{i}" for i in range(8)] + [f"NIC{j}" for j in range(4)]
    assert topo.links["GPU0"]["GPU7"] == "NV12" and topo.links["GPU3"]["GPU3"] == "X"
    assert topo.links["GPU0"]["NIC0"] == "PXB" and topo.links["GPU0"]["NIC3"] == "SYS"  # nic0 NUMA 0, nic3 NUMA 1
    assert topo.numa_affinity["GPU0"] == "0" and topo.numa_affinity["GPU7"] == "1"
    disc = dcgmi.parse_discovery(out(pool, "gpu02", ["dcgmi", "discovery", "-l"]))
    assert [(d.gpu_id, d.name, d.pci_bus_id, d.uuid) for d in disc] == \
        [(r["index"], r["name"], r["pci.bus_id"], r["uuid"]) for r in rows]
    samples = dcgm.parse_exporter(out(pool, "gpu02", EXPORTER))
    by = {(s.metric, s.gpu): s for s in samples}
    assert [by["DCGM_FI_DEV_GPU_TEMP", str(i)].value for i in range(8)] == temps
    assert by["DCGM_FI_DEV_POWER_USAGE", "1"].value == rows[1]["power.draw"]
    assert by["DCGM_FI_DEV_XID_ERRORS", "0"].value == 0 and by["DCGM_FI_DEV_GPU_TEMP", "0"].labels["Hostname"] == "gpu02"
    assert out(pool, "gpu02", ["dmesg", "--level=err,warn"]) == ""  # healthy: an empty kernel log
    assert pool.run("gpu02", ["curl", "-s", "http://localhost:9999/metrics"]).rc == 7


def test_dcgmi_diag_levels(mock):
    _, _, pool, _ = mock
    res = {lvl: dcgmi.parse_diag(out(pool, "gpu02", ["dcgmi", "diag", "-r", lvl])) for lvl in "123"}
    assert all(r.metadata["DCGM Version"] == "3.3.3" and not r.failed for r in res.values())
    assert "Persistence Mode" in res["1"].tests and "PCIe" not in res["1"].tests
    assert res["2"].tests["GPU Memory"] == "Pass - All" and "Targeted Power" not in res["2"].tests
    assert res["3"].tests["Targeted Power"] == "Pass - All"
    assert res["3"].metadata["GPU Device IDs Detected"] == ",".join(["20b2"] * 8)
    assert pool.run("gpu02", ["dcgmi", "diag", "-r", "9"]).rc != 0


def test_rdma_formats_follow_the_ocs_lanes(mock):
    _, _, pool, _ = mock
    links = iproute.parse_links(out(pool, "gpu01", iproute.link_argv()))
    want = {"mlx5_0": True, "mlx5_1": False, "mlx5_2": False, "mlx5_3": True}  # nic0 lit on the OCS, nic1/nic2 dark, nic3 EPS
    m = rdma.parse_ibdev2netdev(out(pool, "gpu01", ["ibdev2netdev"]))
    assert {d: up for d, (_, _, up) in m.items()} == want
    assert all(links[nd].up == up for _, nd, up in m.values()) and m["mlx5_0"][1] == "ens1f0np0"
    for argv, parser in ((["ibstat"], rdma.parse_ibstat), (["ibstatus"], rdma.parse_ibstatus),
                         (["ibv_devinfo"], rdma.parse_ibv_devinfo)):
        rep = parser(out(pool, "gpu01", argv))
        assert {p.device: p.active for p in rep.ports} == want, argv
        assert {p.link_layer for p in rep.ports} == {"Ethernet"}
    assert [(p.device, p.state) for p in rdma.parse_ibstatus(out(pool, "gpu01", ["ibstatus"])).ports][:2] == \
        [("mlx5_0", "Active"), ("mlx5_1", "Down")]
    one = rdma.parse_ibv_devinfo(out(pool, "gpu01", ["ibv_devinfo", "-d", "mlx5_1"]))
    assert [(p.device, p.state) for p in one.ports] == [("mlx5_1", "Down")] and one.firmware == {"mlx5_1": "22.39.1002"}
    assert pool.run("gpu01", ["ibv_devinfo", "-d", "mlx5_9"]).rc != 0
    assert "4096 (5)" in out(pool, "gpu01", ["ibv_devinfo", "-d", "mlx5_0"])  # active_mtu from the netdev's MTU 9000
    up = mellanox.parse_mlxlink(out(pool, "gpu01", ["mlxlink", "-d", "mlx5_0"]))
    dark = mellanox.parse_mlxlink(out(pool, "gpu01", ["mlxlink", "-d", "0000:12:00.0"]))  # by PCI address: nic1
    assert (up["State"], up["Physical state"], up["Speed"]) == ("Active", "LinkUp", "100GbE")
    assert dark["State"] != "Active" and dark["Speed"] == "N/A"
    # GIDs: link-local from the MAC, then RoCE v1/v2 IPv4 GIDs once an address is set
    b = [int(x, 16) for x in next(o["address"] for o in json.loads(out(pool, "gpu01", iproute.link_argv()))
                                  if o["ifname"] == "ens1f0np0").split(":")]
    assert out(pool, "gpu01", ["ip", "addr", "replace", "198.18.0.1/24", "dev", "ens1f0np0"]) == ""
    gids = rdma.parse_show_gids(out(pool, "gpu01", ["show_gids"]))
    mine = [g for g in gids if g.netdev == "ens1f0np0"]
    assert [(g.index, g.version, g.ipv4) for g in mine] == [(0, "v1", None), (1, "v2", None), (2, "v1", "198.18.0.1"),
                                                             (3, "v2", "198.18.0.1")]
    assert mine[2].gid.endswith("ffff:c612:0001") and {g.device for g in mine} == {"mlx5_0"}
    assert rdma.roce_v2_ipv4_gid_index(gids, "ens1f0np0") == 3 and rdma.roce_v2_ipv4_gid_index(gids, "ens2f0np0") is None
    assert mine[0].gid == f"fe80:0000:0000:0000:{b[0] ^ 2:02x}{b[1]:02x}:{b[2]:02x}ff:fe{b[3]:02x}:{b[4]:02x}{b[5]:02x}"


def test_injected_gpu_faults_reach_every_format_and_the_sweep(mock):
    tb, inv, pool, env = mock
    host = tb.hosts["gpu03"]
    try:
        line = host.faults.xid(2, 48)
        host.faults.remap_failure.add(5)
        host.faults.remap_pending.add(1)
        host.faults.slowdown[3] = "hw_thermal_slowdown"
        host.faults.sm_clock_mhz[4] = 420
        assert out(pool, "gpu03", ["dmesg", "--level=err,warn"]).strip().endswith(line)
        assert out(pool, "gpu03", ["dmesg", "--level=info"]) == ""
        rows = {r["index"]: r for r in csv_rows(pool, "gpu03")}
        assert (rows[5]["remapped_rows.failure"], rows[1]["remapped_rows.pending"], rows[0]["remapped_rows.pending"]) == \
            ("Yes", "Yes", "No")
        assert rows[3]["clocks_event_reasons.hw_thermal_slowdown"] == "Active"
        assert rows[3]["clocks_event_reasons.hw_slowdown"] == "Active"
        assert rows[3]["clocks.current.sm"] == 705 and rows[4]["clocks.current.sm"] == 420 and rows[4]["clocks.max.sm"] == 1410
        for parsed in (nvidia_smi.parse_query_text(out(pool, "gpu03", ["nvidia-smi", "-q"])),
                       nvidia_smi.parse_query_xml(out(pool, "gpu03", ["nvidia-smi", "-q", "-x"]))):
            assert [i for i, g in enumerate(parsed) if g.remapped_rows_failure] == [5]
            assert [i for i, g in enumerate(parsed) if g.remapped_rows_pending] == [1]
        by = {(s.metric, s.gpu): s.value for s in dcgm.parse_exporter(out(pool, "gpu03", EXPORTER))}
        assert by["DCGM_FI_DEV_XID_ERRORS", "2"] == 48 and by["DCGM_FI_DEV_ROW_REMAP_FAILURE", "5"] == 1
        assert by["DCGM_FI_DEV_SM_CLOCK", "3"] == 705
        diag = dcgmi.parse_diag(out(pool, "gpu03", ["dcgmi", "diag", "-r", "3"]))
        # per-GPU rows name their GPU ("Fail - GPU: N": the first faulty GPU of each kind, issue 19)
        assert {"Page Retirement/Row Remap", "GPU Memory (GPU 1)", "Targeted Power (GPU 3)"} <= set(diag.failed)

        [hh] = health.sweep(pool, inv, ["gpu03"]).targets
        got = {(f.severity, f.message) for f in hh.findings if f.check == "gpu"}
        assert got == {("critical", "GPU 2: XID 48 (double-bit ECC error) at PCI 0000:47:00"),
                       ("critical", "GPU 5: row remapping failed (memory repair exhausted: RMA)"),
                       ("warning", "GPU 1: row remap pending (reset the GPU to apply it)"),
                       ("warning", "GPU 3 clocks slowed by hw_slowdown, hw_thermal_slowdown (SM 705 of 1410 MHz)"),
                       ("warning", "GPU 4 SM clock far below its maximum (SM 420 of 1410 MHz)")}
        assert hh.worst == "critical"
        [hh] = health.sweep(pool, inv, ["gpu03"], limits={"sm_clock_min_share": 0.25}).targets  # the threshold is the table's
        assert not any("far below" in f.message for f in hh.findings)
        # and the CLI, end to end over its own SSH connections
        r = subprocess.run(mfctl_cmd("health", "-i", inv.source, "--hosts", "gpu03", "--json"), capture_output=True,
                           text=True, env={**os.environ, **env}, timeout=120, check=False)
        assert r.returncode == 1, r.stderr
        doc = json.loads(r.stdout)
        assert not doc["healthy"] and doc["thresholds"]["sm_clock_min_share"] == 0.5
        # findings as data for CI: a stable code, the part, the value read and the limit it was judged against
        found = [f for t in doc["targets"] for f in t["findings"]]
        assert {"severity": "critical", "check": "gpu", "message": "GPU 2: XID 48 (double-bit ECC error) at PCI 0000:47:00",
                "host": "gpu03", "code": "gpu.xid", "component": "gpu2", "value": 48, "limit": None, "unit": None,
                "source": "xid"} in found
        assert [(f["component"], f["value"], f["limit"], f["unit"]) for f in found if f["code"] == "gpu.sm_clock_low"] \
            == [("gpu4", 420.0, 705.0, "MHz")]
        assert {f["code"] for f in found} == {"gpu.xid", "gpu.remap_failed", "gpu.remap_pending", "gpu.clocks_slowed",
                                              "gpu.sm_clock_low"}
    finally:
        host.faults = GPUFaults()
    [hh] = health.sweep(pool, inv, ["gpu03"]).targets
    assert not [f for f in hh.findings if f.check == "gpu"]


def test_an_old_xid_is_history_not_a_present_fault(mock):
    """The kernel log keeps XIDs until a reboot: one older than xid_window_s (after a GPU reset,
    say) is a warning that says its age; a recent one, or any without a time stamp, stays critical."""
    tb, inv, pool, env = mock
    host = tb.hosts["gpu03"]
    try:
        host.faults.xid(1, 48, ago_s=3 * 86400)
        host.faults.xid(6, 74, ago_s=120)
        [hh] = health.sweep(pool, inv, ["gpu03"]).targets
        got = sorted((f.severity, f.message, f.limit) for f in hh.findings if f.code == "gpu.xid")
        assert got == [("critical", "GPU 6: XID 74 (NVLink error) at PCI 0000:b7:00", None),
                       ("warning", "GPU 1: XID 48 (double-bit ECC error) at PCI 0000:0f:00, 3 d ago (older than "
                                   "xid_window_s, 1 d: history)", 86400.0)]
        [hh] = health.sweep(pool, inv, ["gpu03"], limits={"xid_window_s": 7 * 86400}).targets
        assert all(f.severity == "critical" for f in hh.findings if f.code == "gpu.xid")
        [hh] = health.sweep(pool, inv, ["gpu03"], limits={"xid_window_s": 60}).targets
        assert all(f.severity == "warning" for f in hh.findings if f.code == "gpu.xid")
        [hh] = health.sweep(pool, inv, ["gpu03"], limits={"xid_window_s": 5400}).targets  # the window as it was given
        assert any(f.message.endswith("(older than xid_window_s, 90 min: history)") for f in hh.findings)
        # an uptime that is no time at all: the age is unknown, the XIDs are judged as new (no crash)
        import math

        from mfctl.mock import gputools

        real = gputools.uptime
        gputools.uptime = lambda: math.inf
        try:
            [hh] = health.sweep(pool, inv, ["gpu03"]).targets
        finally:
            gputools.uptime = real
        assert sorted(f.severity for f in hh.findings if f.code == "gpu.xid") == ["critical", "critical"]
    finally:
        host.faults = GPUFaults()
    for bad in ({"xid_window_s": 0}, {"xid_window_s": 11 * 365 * 86400}):
        with pytest.raises(ValueError, match="xid_window_s"):
            health.thresholds(bad)
    assert health.thresholds({"xid_window_s": 3650 * 86400})["xid_window_s"] == 3650 * 86400  # "every XID since boot"


def test_a_gpu_fallen_off_the_bus_is_lost_to_the_tools_and_judged_alone(mock):
    """XID 79: as on a real node, nvidia-smi cannot reach the GPU (exit 15, one line in its place);
    the sweep says it is lost and still judges the seven others."""
    tb, inv, pool, env = mock
    host = tb.hosts["gpu03"]
    try:
        host.faults.xid(2, 79)
        host.faults.slowdown[5] = "sw_thermal_slowdown"
        lost = "Unable to determine the device handle for GPU 0000:47:00.0: GPU is lost.  Reboot the system to recover this GPU"
        for argv in (["nvidia-smi"], ["nvidia-smi", "-L"], ["nvidia-smi", "-q"], ["nvidia-smi", "topo", "-m"],
                     ["nvidia-smi", "-pm", "1"]):
            r = pool.run("gpu03", argv)
            assert (r.rc, r.stdout) == (15, lost + "\n")
        r = pool.run("gpu03", nvidia_smi.query_argv())
        assert r.rc == 15 and r.stdout.splitlines()[3] == lost
        assert [row["index"] for row in nvidia_smi.parse_query_csv(r.stdout)] == [0, 1, 3, 4, 5, 6, 7]
        assert pool.run("gpu03", ["nvidia-smi", "-i", "3", "-L"]).rc == 0  # only a lost GPU's own queries fail
        [hh] = health.sweep(pool, inv, ["gpu03"]).targets
        got = {(f.code, f.severity, f.component, f.message) for f in hh.findings if f.check == "gpu"}
        assert got == {
            ("gpu.lost", "critical", "0000:47:00",
             "GPU at PCI 0000:47:00 is lost (fallen off the bus: unreachable until a reboot)"),
            ("gpu.xid", "critical", "0000:47:00", "GPU at PCI 0000:47:00: XID 79 (fallen off the bus)"),
            ("gpu.clocks_slowed", "warning", "gpu5", "GPU 5 clocks slowed by sw_thermal_slowdown (SM 705 of 1410 MHz)")}
        assert hh.gpus == 7  # no gpu.count finding: the lost one has its own
        # the same line on both streams is one GPU; nothing but that line says nothing of the other seven
        from mfctl.transport.ssh import CommandResult

        link = pool.run("gpu03", ["ip", "-j", "link"])
        only = CommandResult("gpu03", ["nvidia-smi"], rc=15, stdout=lost + "\n", stderr=lost + "\n")
        hh = judge_given(inv.host("gpu03"), only, link)
        assert sorted(f.code for f in hh.findings if f.check == "gpu") == ["gpu.lost", "gpu.query_failed"]
        assert "no data for the other 7 GPUs (exit 15)" in next(f.message for f in hh.findings if f.code == "gpu.query_failed")
    finally:
        host.faults = GPUFaults()


def test_mig_mode_reports_missing_data_not_values(mock):
    _, inv, pool, _ = mock
    assert pool.run("gpu04", ["nvidia-smi", "-mig", "1"]).ok
    assert pool.run("gpu04", ["nvidia-smi", "-r"]).ok  # on A100 the MIG mode is pending until a GPU reset
    try:
        rows = csv_rows(pool, "gpu04")
        assert {(r["remapped_rows.pending"], r["remapped_rows.failure"], r["utilization.gpu"]) for r in rows} == \
            {(None, None, None)}
        g = nvidia_smi.GPUStatus.from_row(rows[0])
        assert (g.remap_pending, g.remap_failure, g.utilization_pct, g.temperature_c) == \
            (None, None, None, rows[0]["temperature.gpu"])
        xml = nvidia_smi.parse_query_xml(out(pool, "gpu04", ["nvidia-smi", "-q", "-x"]))
        assert {(x.mig_current, x.remapped_rows_pending) for x in xml} == {("Enabled", None)}
        assert nvidia_smi.parse_query_text(out(pool, "gpu04", ["nvidia-smi", "-q"]))[0].remapped_rows_failure is None
        nv = nvidia_smi.parse_nvlink_status(out(pool, "gpu04", nvidia_smi.nvlink_argv()))
        assert nv.unsupported and all(links == {} for links in nv.gpus.values())
        by = {(s.metric, s.gpu): s.value for s in dcgm.parse_exporter(out(pool, "gpu04", EXPORTER))}
        assert by["DCGM_FI_DEV_GPU_UTIL", "0"] is None and by["DCGM_FI_DEV_GPU_TEMP", "0"] == rows[0]["temperature.gpu"]
        # MIG itself is the only GPU finding: [N/A] is never judged
        [hh] = health.sweep(pool, inv, ["gpu04"], checks=GPU_AND_LINKS).targets
        assert [(f.severity, f.message.split(" (")[0]) for f in hh.findings if f.check == "gpu"] == [
            ("warning", "MIG mode is enabled on GPU 0-7")]
    finally:
        assert pool.run("gpu04", ["nvidia-smi", "-mig", "0"]).ok and pool.run("gpu04", ["nvidia-smi", "-r"]).ok


def test_sweep_falls_back_to_an_older_drivers_field_names(mock):
    """Before R535 the clock reasons are clocks_throttle_reasons.*: nvidia-smi rejects the whole
    query for one unknown field, so the sweep asks again with the names the driver knows."""
    tb, inv, pool, _ = mock
    host = tb.hosts["gpu04"]
    host.driver = 470
    host.faults.slowdown[2] = "hw_slowdown"
    try:
        r = pool.run("gpu04", nvidia_smi.query_argv())
        assert r.rc == 2 and nvidia_smi.unknown_field(r.stdout)
        hh = health.sweep(pool, inv, ["gpu04"], checks=GPU_AND_LINKS).targets[0]
        gpu = [f for f in hh.findings if f.check == "gpu"]
        assert hh.gpus == 8 and [f.severity for f in gpu] == ["warning"] and "hw_slowdown" in gpu[0].message
    finally:
        host.driver = 535
        host.faults.slowdown.clear()
