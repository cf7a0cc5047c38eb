"""Issue 19 items 5, 6 and 8: cut device blocks, blank lines in ``topo -m``, one input normalisation
(BOM, CRLF, NUL, bytes), JSON decode errors past the last line, ``-q`` sections printed as scalars,
``GPUStatus.from_row`` without ``index``, and ``--query-gpu`` output without a header."""

from __future__ import annotations

import pytest

from mfctl.errors import ParseError
from mfctl.hosts import iproute, mellanox, nvidia_smi, rdma, registry
from mfctl.hosts.textin import clean
from support import DATA, GOLDEN

IBV = (GOLDEN / "ibv_devinfo" / "documented-format-two-hcas" / "output.txt").read_text()
TOPO = (GOLDEN / "nvidia-smi-topo-m" / "two-gpus-one-nic" / "output.txt").read_text()
IBSTAT = (DATA / "mellanox" / "ibstat-a100-mt4126-eth-plus-ib-all-active.txt").read_text()
MLXCONFIG = (DATA / "mellanox" / "mlxconfig-q-cx7-osfp-ndr-truncated.txt").read_text()
Q = (DATA / "nvidia-smi" / "h100-q-load-drv590.txt").read_text()


# --- item 5: a device block cut short is an error, not a device without its port ------------------

def test_ibv_devinfo_cut_inside_a_device_block_is_a_parse_error_naming_the_device():
    lines = IBV.split("\n")
    cut = "\n".join(lines[: lines.index("\tfw_ver:\t\t\t\t22.39.1002", 10) + 1])  # mlx5_1's header, no port
    with pytest.raises(ParseError) as e:
        rdma.parse_ibv_devinfo(cut)
    assert (e.value.tool, e.value.line_no) == ("ibv_devinfo", 10)
    assert "1 'port: N' block(s) in mlx5_1" in e.value.expected and "cut" in e.value.expected
    with pytest.raises(ParseError) as e:  # inside mlx5_1's port, before its state
        rdma.parse_ibv_devinfo("\n".join(lines[:12]))
    assert e.value.line_no == 12 and "'state:' line in mlx5_1 port 1" in e.value.expected
    with pytest.raises(ParseError) as e:  # the last port cut before its link_layer
        rdma.parse_ibv_devinfo("\n".join(lines[:13]))
    assert "'link_layer:' line in mlx5_1 port 1" in e.value.expected
    with pytest.raises(ParseError) as e:  # phys_port_cnt 2, one port block
        rdma.parse_ibv_devinfo(IBV.replace("phys_port_cnt:\t\t\t1", "phys_port_cnt:\t\t\t2"))
    assert (e.value.line_no, e.value.got) == (1, "hca_id: mlx5_0")
    assert [(p.device, p.state, p.link_layer) for p in rdma.parse_ibv_devinfo(IBV).ports] == [
        ("mlx5_0", "Active", "Ethernet"), ("mlx5_1", "Down", "Ethernet")]


def test_ibstat_cut_inside_a_ca_block_is_a_parse_error():
    lines = IBSTAT.split("\n")
    second = lines.index("CA 'mlx5_1'")
    with pytest.raises(ParseError) as e:
        rdma.parse_ibstat("\n".join(lines[: second + 4]))  # mlx5_1 header only
    assert (e.value.tool, e.value.line_no) == ("ibstat", second + 1) and "'Port N:' section(s) in CA 'mlx5_1'" in e.value.expected
    with pytest.raises(ParseError) as e:
        rdma.parse_ibstat("\n".join(lines[: second + 9]))  # mlx5_1 "Port 1:" then State only
    assert "'Link layer:' line in mlx5_1 port 1" in e.value.expected


def test_topo_blank_lines_inside_the_matrix_and_a_space_separated_paste():
    want = nvidia_smi.parse_topo(TOPO)
    gapped = TOPO.replace("\nGPU1", "\n\nGPU1")
    assert nvidia_smi.parse_topo(gapped) == want
    assert set(want.links) == {"GPU0", "GPU1"}
    spaced = TOPO.replace("\t", "    ")
    assert nvidia_smi.parse_topo(spaced) == want
    with pytest.raises(ParseError) as e:  # cut after GPU0's row
        nvidia_smi.parse_topo(TOPO.split("GPU1\tNV12")[0])
    assert "a row for GPU1" in e.value.expected


def test_one_normalisation_bom_crlf_nul_bytes_for_every_way_in():
    bom = "\ufeff" + MLXCONFIG.replace("\n", "\r\n")
    assert mellanox.parse_mlxconfig(bom) == mellanox.parse_mlxconfig(MLXCONFIG)  # was "line 9: Device #N"
    assert registry.parse("mlxconfig", bom.encode()).result == mellanox.parse_mlxconfig(MLXCONFIG)
    line = "Unable to determine the device handle for GPU0000:07:00.0: Unknown Error"
    assert nvidia_smi.unreachable_gpus("\ufeff" + line + "\r\n") == [("0000:07:00.0", "Unknown Error")]
    assert rdma.parse_ibv_devinfo(b"\xef\xbb\xbf" + IBV.encode().replace(b"\n", b"\x00\r\n")) == rdma.parse_ibv_devinfo(IBV)
    assert clean(b"a\xffb\r\nc\x00\rd\x0c") == "a\ufffdb\nc\nd "
    assert clean("  \ufeffx") == "  x" and clean("x\ufeffy") == "x\ufeffy"


# --- item 6: typed errors, never IndexError / AttributeError / KeyError -----------------------------

@pytest.mark.parametrize("text", ["", " ", "\n", "\n\n  \n", "[\n", '[{"ifname": "lo",\n', '[{"ifname": "lo"}\n\n'])
def test_ip_and_devlink_json_cut_at_a_line_boundary_are_parse_errors(text):
    for parse, tool in ((iproute.parse_links, "ip -j link"), (iproute.parse_addrs, "ip -j addr"),
                        (mellanox.parse_devlink_ports, "devlink -j")):
        with pytest.raises(ParseError) as e:
            parse(text)
        assert e.value.tool in (tool, "ip -j link") and e.value.line_no is not None


def _scalar(text: str, section: str) -> str:
    """``text`` with the ``-q`` section ``section`` printed as ``Section : N/A``."""
    out, skip = [], None
    for ln in text.split("\n"):
        indent = len(ln) - len(ln.lstrip(" "))
        if skip is not None and (indent > skip or not ln.strip()):
            continue
        skip = None
        if ln.strip() == section:
            skip = indent
            out.append(" " * indent + f"{section:<51}: N/A")
            continue
        out.append(ln)
    return "\n".join(out)


def test_q_sections_printed_as_a_scalar_are_missing_data():
    (g,) = nvidia_smi.parse_query_text(Q)
    assert (g.temperature_c, g.mig_current, g.ecc_uncorrected_volatile) == (59.0, "Disabled", 0)
    text = Q
    for sec in ("Temperature", "ECC Errors", "MIG Mode", "GPU Power Readings", "Remapped Rows"):
        text = _scalar(text, sec)
    assert "    Temperature                                        : N/A" in text
    (g,) = nvidia_smi.parse_query_text(text)
    assert (g.bus_id, g.name, g.temperature_c, g.power_w, g.mig_current, g.ecc_uncorrected_volatile,
            g.remapped_rows_pending) == ("00000000:00:09.0", "NVIDIA H100 80GB HBM3", None, None, None, None, None)


def test_gpu_status_without_an_index_column_or_with_na_takes_the_rows_place():
    rows = nvidia_smi.parse_query_csv("name, temperature.gpu\nNVIDIA GB10, 35\nNVIDIA GB10, 36\n")
    assert [(g.index, g.temperature_c) for g in nvidia_smi.gpu_statuses(rows)] == [(0, 35), (1, 36)]
    assert nvidia_smi.GPUStatus.from_row({"index": None, "name": "x"}, 3).index == 3
    with pytest.raises(ParseError) as e:
        nvidia_smi.GPUStatus.from_row({"index": None})
    assert "'index' value" in e.value.expected


# --- item 8: --query-gpu without a header ------------------------------------------------------------

def test_query_fields_derived_from_the_command_mfctl_sent():
    argv = nvidia_smi.query_argv(["index", "clocks.sm", "memory.used"], header=False, units=False)
    assert argv == ["nvidia-smi", "--query-gpu=index,clocks.sm,memory.used", "--format=csv,noheader,nounits"]
    assert nvidia_smi.query_fields(argv) == (["index", "clocks.current.sm", "memory.used"], False)
    assert nvidia_smi.query_fields(nvidia_smi.query_argv()) == (
        [nvidia_smi.FIELD_ALIASES.get(f, f) for f in nvidia_smi.HEALTH_FIELDS], True)
    assert nvidia_smi.query_fields("nvidia-smi --query-gpu fan.speed --format csv,noheader") == (["fan.speed"], False)
    with pytest.raises(ValueError):
        nvidia_smi.query_fields(["nvidia-smi", "-q"])


def test_noheader_output_parses_with_its_field_list():
    # llama-swap#782 (GB10, noheader): "[N/A], [N/A], 0" for memory.used,memory.total,utilization.memory
    fields, _ = nvidia_smi.query_fields("nvidia-smi --query-gpu=memory.used,memory.total,utilization.memory "
                                        "--format=csv,noheader,nounits")
    assert nvidia_smi.parse_query_csv("[N/A], [N/A], 0\n", fields) == [
        {"memory.used": None, "memory.total": None, "utilization.memory": 0}]
    # pmav99/nvsmi#2: `--query-gpu=fan.speed --format=csv,noheader,nounits` printed "39" on a 1050 Ti
    assert nvidia_smi.parse_query_csv("39\n", ["fan.speed"]) == [{"fan.speed": 39}]
    # with units (noheader only) and a header given anyway: the same values
    rows = nvidia_smi.parse_query_csv("0, 45 C, 71.23 W\n1, 44 C, 70.00 W\n", ["index", "temperature.gpu", "power.draw"])
    assert rows[1] == {"index": 1, "temperature.gpu": 44, "power.draw": 70.0}
    head = "index, temperature.gpu, power.draw [W]\n0, 45, 71.23\n"
    assert nvidia_smi.parse_query_csv(head, ["index", "temperature.gpu", "power.draw"]) == [
        {"index": 0, "temperature.gpu": 45, "power.draw": 71.23}]
    with pytest.raises(ParseError) as e:  # a row cut inside its last value
        nvidia_smi.parse_query_csv("0, 45, 71.23\n1, 4", ["index", "temperature.gpu", "power.draw"])
    assert (e.value.line_no, e.value.expected) == (2, "3 comma-separated values")
    assert nvidia_smi.parse_query_csv("", ["index"]) == []


# --- the same findings on real pastes (tests/data/nvidia-smi, tests/data/rdma PROVENANCE.md) ---------

def test_real_ibv_devinfo_pastes_cut_inside_the_second_device_are_parse_errors():
    for name, dev in (("ibv_devinfo-cx7-roce-cut-inside-second-device.txt", "mlx5_13"),
                      ("ibv_devinfo-azure-hbv2-cut-at-board-id.txt", "ibP57247p0s2")):
        text = (DATA / "rdma" / name).read_text()
        with pytest.raises(ParseError) as e:
            rdma.parse_ibv_devinfo(text)
        assert (e.value.line_no, e.value.got) == (20, f"hca_id: {dev}") and "cut" in e.value.expected
        first = rdma.parse_ibv_devinfo(text.split("\n\nhca_id")[0])  # the complete first device
        assert [(p.device, p.port, p.link_layer) for p in first.ports] == [(text.split()[1], 1, "Ethernet")]
    first = rdma.parse_ibv_devinfo((DATA / "rdma" / "ibv_devinfo-cx7-roce-cut-inside-second-device.txt").read_text()
                                   .split("\n\nhca_id")[0])
    assert (first.ports[0].state, first.firmware) == ("Down", {"mlx5_12": "22.38.1900"})


def test_real_topo_pastes_blank_line_inside_and_spaces_for_tabs():
    real = (DATA / "nvidia-smi" / "rtx5090x2-topo-m-tabs-legend.txt").read_text()
    t = nvidia_smi.parse_topo(real)
    assert t.links == {"GPU0": {"GPU0": "X", "GPU1": "PHB"}, "GPU1": {"GPU0": "PHB", "GPU1": "X"}}
    assert t.cpu_affinity == {"GPU0": "0-63", "GPU1": "0-63"} and t.numa_affinity == {"GPU0": "0", "GPU1": "0"}
    assert nvidia_smi.parse_topo(real.replace("\nGPU1", "\n\nGPU1")) == t  # a blank line no longer ends it
    assert nvidia_smi.parse_topo(real.replace("\t", "    ")) == t
    spaced = (DATA / "nvidia-smi" / "h100x8-topo-m-spaces-9nics-cut-in-gpu7.txt").read_text()
    with pytest.raises(ParseError) as e:
        nvidia_smi.parse_topo(spaced)
    assert (e.value.line_no, e.value.expected) == (9, "17 link columns")
    with pytest.raises(ParseError) as e:
        nvidia_smi.parse_topo(spaced.rsplit("\nGPU7", 1)[0])
    assert "a row for GPU7" in e.value.expected
    rows = spaced.split("\n")
    t8 = nvidia_smi.parse_topo("\n".join(rows[:8] + [rows[7].replace("GPU6", "GPU7", 1)]))
    assert (t8.links["GPU0"]["NIC2"], t8.links["GPU4"]["NIC1"], t8.cpu_affinity["GPU4"], t8.numa_affinity["GPU4"]) == \
        ("PIX", "PIX", "48-95,144-191", "1")
    assert t8.devices[-1] == "NIC8" and len(t8.devices) == 17


def test_ibv_devinfo_v_flag_lists_are_continuations_and_the_missing_port_still_an_error():
    text = (DATA / "rdma" / "ibv_devinfo-v-cx5-cap-flags-excerpt.txt").read_text()
    with pytest.raises(ParseError) as e:
        rdma.parse_ibv_devinfo(text)
    assert (e.value.line_no, e.value.got) == (1, "hca_id: mlx5_1") and "'port: N' block" in e.value.expected
    port = ("\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tmax_mtu:\t\t4096 (5)\n"
            "\t\t\tlink_layer:\t\tEthernet\n\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:ee0d:9aff:fe7d:7d1b\n")
    rep = rdma.parse_ibv_devinfo(text + port)  # the documented -v port block after it
    assert [(p.device, p.port, p.state, p.link_layer) for p in rep.ports] == [("mlx5_1", 1, "Active", "Ethernet")]
    assert rep.firmware == {"mlx5_1": "16.23.1020"}


def test_read_query_reads_the_output_of_the_command_it_was_given():
    argv = nvidia_smi.query_argv(["index", "name", "memory.total"], header=False)
    assert nvidia_smi.read_query("0, NVIDIA GB10, [N/A]\n", argv) == [
        {"index": 0, "name": "NVIDIA GB10", "memory.total": None}]
    # unsloth#10703: the same query with a header (GB10 prints no memory total)
    out = "index, name, memory.total [MiB], memory.free [MiB]\n0, NVIDIA GB10, [N/A], [N/A]\n"
    assert nvidia_smi.read_query(out, "nvidia-smi --query-gpu=index,name,memory.total,memory.free --format=csv") == [
        {"index": 0, "name": "NVIDIA GB10", "memory.total": None, "memory.free": None}]
