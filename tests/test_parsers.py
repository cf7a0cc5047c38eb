"""Parsers against real captured output (tests/data, from shared/corpus) and odd input."""

import json

import pytest

from conftest import DATA
from mfctl.errors import ParseError
from mfctl.hosts import iproute, nvidia_smi


def test_nvidia_smi_query_csv_real_h100_capture():
    rows = nvidia_smi.parse_query_csv((DATA / "nvidia-smi" / "h100-query-gpu-csv-load-drv590.txt").read_text())
    assert len(rows) == 1
    r = rows[0]
    # values read off the file by hand
    assert r["name"] == "NVIDIA H100 80GB HBM3" and r["driver_version"] == "590.48.01"
    assert r["temperature.gpu"] == 59 and r["power.draw"] == 631.95 and r["power.limit"] == 700.0
    assert r["memory.total"] == 81559 and r["memory.used"] == 19818 and r["utilization.gpu"] == 100
    assert r["persistence_mode"] == "Enabled" and r["ecc.errors.uncorrected.volatile.total"] == 0
    # missing data is None, never a number or the placeholder text
    assert r["fan.speed"] is None and r["display_mode"] is None and r["power.management"] is None
    g = nvidia_smi.GPUStatus.from_row(r)
    assert (g.index, g.temperature_c, g.power_w, g.persistence) == (0, 59, 631.95, True)


@pytest.mark.parametrize("text,line", [
    ("", 1),
    ('Field "bogus" is not a valid field to query.\n', 1),
    ("index, name\n0, A100, extra\n", 2),
    ("<xml>\n", 1),
])
def test_nvidia_smi_bad_output_is_a_typed_error(text, line):
    with pytest.raises(ParseError) as e:
        nvidia_smi.parse_query_csv(text)
    assert e.value.tool == "nvidia-smi" and e.value.line_no == line and "expected" in str(e.value)


def test_nvidia_smi_gpus_it_cannot_reach_are_named_not_rows():
    # the line nvidia-smi prints in place of a GPU NVML cannot reach (wording of public reports:
    # NVIDIA/open-gpu-kernel-modules#387 "Unknown Error", JosephKJ/OWOD#81 "GPU is lost")
    text = ("index, pci.bus_id, temperature.gpu\n0, 00000000:07:00.0, 34\n"
            "Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error\n"
            "Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost.  Reboot the system to recover this GPU\n"
            "3, 00000000:47:00.0, 36\n")
    assert [r["index"] for r in nvidia_smi.parse_query_csv(text)] == [0, 3]
    assert nvidia_smi.unreachable_gpus(text) == [("0000:0B:00.0", "Unknown Error"),
                                                 ("0000:02:00.0", "GPU is lost.  Reboot the system to recover this GPU")]
    assert nvidia_smi.unreachable_gpus("Unable to determine the device handle for GPU: nonsense\n") == []


def test_nvidia_smi_err_and_na_are_missing_not_numbers():
    rows = nvidia_smi.parse_query_csv("index, temperature.gpu, power.draw [W]\n0, ERR!, [N/A]\n1, 40, 61.00 W\n")
    assert rows[0]["temperature.gpu"] is None and rows[0]["power.draw"] is None
    assert rows[1]["power.draw"] == 61.0


def test_ip_link_json():
    doc = [{"ifindex": 1, "ifname": "lo", "flags": ["LOOPBACK", "UP", "LOWER_UP"], "mtu": 65536, "operstate": "UNKNOWN"},
           {"ifindex": 2, "ifname": "ens1f0np0", "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"], "mtu": 9000, "operstate": "UP"},
           {"ifindex": 3, "ifname": "ens2f0np0", "flags": ["NO-CARRIER", "BROADCAST", "UP"], "mtu": 9000, "operstate": "DOWN"}]
    links = iproute.parse_links(json.dumps(doc))
    assert links["ens1f0np0"].up and not links["ens2f0np0"].up and links["ens1f0np0"].mtu == 9000
    with pytest.raises(ParseError) as e:
        iproute.parse_links("Device \"x\" does not exist.")
    assert e.value.tool == "ip -j link"
    with pytest.raises(ParseError):
        iproute.parse_links('{"ifname": "x"}')


@pytest.mark.parametrize("name,gpus,links,total_gbs,unsupported", [
    ("a100x8-nvlink-s-drv-fm.txt", 8, 12, 300.0, None),
    ("a10-nvlink-s-empty.txt", 0, 0, 0.0, None),
    ("h100-mig-nvlink-s-unsupported-drv590.txt", 1, 0, 0.0, "Nvlink queries are not supported for Devices in MIG mode"),
    ("h100-nvlink-s-18links-drv590.txt", 1, 18, 18 * 26.562, None),
])
def test_nvlink_status(name, gpus, links, total_gbs, unsupported):
    r = nvidia_smi.parse_nvlink_status((DATA / "nvidia-smi" / name).read_text())
    assert len(r.gpus) == gpus and r.unsupported == unsupported
    if gpus:
        assert len(r.gpus[0]) == links and sum(v or 0 for v in r.gpus[0].values()) == pytest.approx(total_gbs)
    with pytest.raises(ParseError):
        nvidia_smi.parse_nvlink_status("GPU 0: X (UUID: Y)\n  Link zero: fast\n")


@pytest.mark.parametrize("name,n,first", [
    ("h100-q-load-drv590.txt", 1, ("00000000:00:09.0", "NVIDIA H100 80GB HBM3", 59.0, 629.45, True, "Disabled", 0, False)),
    ("a10-q-row-remap-pending-drv535.txt", 1, ("00000000:07:00.0", "NVIDIA A10", 33.0, 43.89, True, "N/A", 0, True)),
    ("h100x8-q-drv535-161.txt", 8, ("00000000:19:00.0", "NVIDIA H100 80GB HBM3", 29.0, 67.74, True, "Disabled", 0, False)),
])
def test_nvidia_smi_q_text(name, n, first):
    g = nvidia_smi.parse_query_text((DATA / "nvidia-smi" / name).read_text())
    d = g[0]
    assert len(g) == n and (d.bus_id, d.name, d.temperature_c, d.power_w, d.persistence, d.mig_current,
                            d.ecc_uncorrected_volatile, d.remapped_rows_pending) == first


def test_nvidia_smi_q_xml_both_layouts():
    mig = nvidia_smi.parse_query_xml((DATA / "nvidia-smi" / "a100-sxm4-80gb-mig-q-x-drv535.xml.txt").read_text())[0]
    assert (mig.name, mig.temperature_c, mig.power_w, mig.mig_current, mig.persistence) == ("NVIDIA A100-SXM4-80GB", 27.0, 67.03, "Enabled", False)
    assert mig.remapped_rows_pending is None  # <remapped_rows>N/A</remapped_rows> in MIG mode: missing, not "no"
    old = nvidia_smi.parse_query_xml((DATA / "nvidia-smi" / "a10g-q-x-drv515.xml.txt").read_text())[0]
    assert (old.bus_id, old.name, old.temperature_c, old.power_w) == ("00000000:00:1E.0", "NVIDIA A10G", 17.0, 25.58)
    with pytest.raises(ParseError):
        nvidia_smi.parse_query_xml("<nvidia_smi_log><gpu>")
    with pytest.raises(ParseError):
        nvidia_smi.parse_query_text("Timestamp : now\n")


def test_nvidia_smi_topo_with_ansi_escapes():
    t = nvidia_smi.parse_topo((DATA / "nvidia-smi" / "h100-topo-m-ansi-single-gpu-drv590.txt").read_text())
    assert t.devices == ["GPU0"] and t.links["GPU0"]["GPU0"] == "X"
    assert t.cpu_affinity["GPU0"] == "0-19" and t.numa_affinity["GPU0"] == "0"
    synthetic = "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV12\tPXB\t0-31\t0\nGPU1\tNV12\t X \tSYS\t32-63\t1\n"
    t2 = nvidia_smi.parse_topo(synthetic)
    assert t2.links["GPU1"]["GPU0"] == "NV12" and t2.links["GPU0"]["NIC0"] == "PXB" and t2.numa_affinity["GPU1"] == "1"
    with pytest.raises(ParseError):
        nvidia_smi.parse_topo("Legend:\n")
