"""The default ``nvidia-smi`` table (issue 19 item 7) on real pastes (tests/data/nvidia-smi/PROVENANCE.md);
every value asserted was read off the file by hand."""

from __future__ import annotations

import pytest

from mfctl.errors import ParseError
from mfctl.hosts.nvidia_smi import parse_table
from support import DATA

SMI = DATA / "nvidia-smi"


def table(name: str):
    return parse_table((SMI / name).read_text())


def test_h100x8_drv550_every_gpu_and_an_empty_process_table():
    t = table("h100x8-default-table-drv550.txt")
    assert (t.smi_version, t.driver_version, t.cuda_version) == ("550.90.07", "550.90.07", "12.4")
    assert t.timestamp == "Mon Jan 20 10:18:26 2025"
    assert [g.index for g in t.gpus] == list(range(8))
    g0, g7 = t.gpus[0], t.gpus[7]
    assert (g0.name, g0.persistence, g0.bus_id, g0.display_active, g0.ecc_uncorrected) == \
        ("NVIDIA H100 80GB HBM3", True, "00000000:19:00.0", False, 0)
    assert (g0.fan_pct, g0.temperature_c, g0.perf, g0.power_w, g0.power_cap_w) == (None, 27.0, "P0", 72.0, 700.0)
    assert (g0.memory_used_mib, g0.memory_total_mib, g0.utilization_pct, g0.compute_mode, g0.mig_mode) == \
        (1, 81559, 0.0, "Default", "Disabled")
    assert (g7.bus_id, g7.temperature_c, g7.power_w) == ("00000000:DB:00.0", 23.0, 72.0)
    assert t.processes == [] and t.processes_complete and t.truncated is None and t.messages == []


def test_err_fan_glued_to_the_border_is_missing_data_named_in_errors_drv525():
    (g,) = table("geforce-default-table-err-fan-drv525.txt").gpus
    assert (g.name, g.persistence, g.bus_id, g.ecc_uncorrected) == ("NVIDIA GeForce ...", False, "00000000:01:00.0", 0)
    assert (g.fan_pct, g.temperature_c, g.perf, g.power_w, g.power_cap_w) == (None, 38.0, "P5", 49.0, 450.0)
    assert (g.memory_used_mib, g.memory_total_mib, g.compute_mode, g.mig_mode) == (2021, 23028, "E. Process", None)
    assert g.errors == ["fan"]


def test_err_power_in_a_gpu_block_pasted_without_the_banner():
    t = table("v100-default-table-err-power-excerpt.txt")
    (g,) = t.gpus
    assert (g.index, g.name, g.bus_id, g.power_w, g.power_cap_w, g.errors) == \
        (1, "Tesla V100-PCIE...", "00008ED0:00:00.0", None, 250.0, ["power"])
    assert (g.memory_used_mib, g.memory_total_mib, g.temperature_c) == (593, 16160, 29.0)
    assert t.driver_version is None and t.truncated.startswith("after GPU 1's rows: no Processes section")


def test_unified_memory_not_supported_and_the_r580_banner_border():
    t = table("gb10-default-table-unified-memory-drv580.txt")
    (g,) = t.gpus
    assert (t.driver_version, t.cuda_version) == ("580.126.09", "13.0")
    assert (g.name, g.bus_id, g.ecc_uncorrected, g.temperature_c, g.perf) == ("NVIDIA GB10", "0000000F:01:00.0", None, 36.0, "P8")
    assert (g.power_w, g.power_cap_w, g.memory_used_mib, g.memory_total_mib, g.utilization_pct) == (3.0, None, None, None, 0.0)
    assert g.errors == [] and g.mig_mode is None


def test_r384_two_line_blocks_without_cuda_version_or_mig_row():
    t = table("gtx690x2-default-table-drv384-excerpt.txt")
    assert (t.smi_version, t.driver_version, t.cuda_version) == ("384.90", "384.90", None)
    assert [(g.index, g.bus_id, g.display_active, g.fan_pct, g.temperature_c, g.power_w, g.memory_used_mib,
             g.utilization_pct, g.mig_mode) for g in t.gpus] == [
        (0, "00000000:04:00.0", None, 32.0, 44.0, None, 690, None, None),
        (1, "00000000:05:00.0", None, 30.0, 40.0, None, 690, None, None)]


def test_r450_mig_row():
    (g,) = table("a100-default-table-drv450.txt").gpus
    assert (g.name, g.persistence, g.power_w, g.power_cap_w, g.memory_total_mib, g.utilization_pct, g.mig_mode) == \
        ("A100-SXM4-40GB", False, 62.0, 400.0, 40537, 6.0, "Disabled")


def test_an_excerpt_cut_inside_a_gpus_rows_is_flagged_not_silent():
    t = table("a4000x2-default-table-drv525-cut.txt")
    assert [(g.index, g.bus_id, g.display_active, g.power_w) for g in t.gpus] == \
        [(0, "00000000:65:00.0", True, 11.0), (1, "00000000:B3:00.0", False, 8.0)]
    assert t.gpus[0].mig_mode is None and t.gpus[1].mig_mode is None  # "N/A" and the cut row
    assert t.truncated == "after GPU 1's rows (line 13; no closing border)"
    text = (SMI / "a4000x2-default-table-drv525-cut.txt").read_text()
    cut = parse_table(text[: text.index("| 41%   30C    P8     8W")])  # GPU 1's first row only
    assert [g.index for g in cut.gpus] == [0] and cut.truncated == "inside GPU 1's rows (line 13)"


def test_mig_devices_and_processes():
    t = table("a100-mig-devices-excerpt-no-processes.txt")
    assert [(m.gpu, m.gpu_instance, m.compute_instance, m.device, m.memory_used_mib, m.memory_total_mib,
             m.bar1_used_mib, m.bar1_total_mib, m.sm, m.ecc_uncorrected) for m in t.mig_devices] == [
        (7, 12, 0, 5, 1, 4864, 0, 8191, 14, 0), (7, 13, 0, 6, 1, 4864, 0, 8191, 14, 0)]
    assert t.processes == [] and t.processes_complete and t.gpus == []
    cut = table("a100-mig-devices-cut-mid-row.txt")
    assert [(m.gpu, m.gpu_instance, m.device, m.memory_used_mib, m.bar1_used_mib) for m in cut.mig_devices] == [
        (1, 3, 0, 14366, 4), (1, 5, 1, 9826, 2), (1, 6, 2, 13, 2)]
    assert cut.truncated == "inside the MIG devices table (line 17)"


def test_process_rows_with_gi_ci_columns():
    t = table("processes-gi-ci-drv535-excerpt.txt")
    assert [(p.gpu, p.gpu_instance, p.compute_instance, p.pid, p.type, p.name, p.memory_mib) for p in t.processes] == [
        (0, None, None, 10734, "C", "...-x86_64-Release/abcdefgh/foo_bar", 160),
        (0, None, None, 58661, "G", ".../abcdefgh/123456/bin/abcde/bazbaz", 3),
        (1, None, None, 10734, "C", "...-x86_64-Release/abcdefgh/foo_bar", 160),
        (2, None, None, 18243, "G", "/usr/bin/X", 64),
        (2, None, None, 22720, "G", "/usr/bin/gnome-shell", 34)]
    assert t.processes_complete


def test_gsp_timeouts_interleaved_unreachable_gpu_and_a_cut_process_table():
    t = table("a4000x2-default-table-unreachable-gsp-interleaved-constructed.txt")
    (g,) = t.gpus
    assert (g.index, g.temperature_c, g.power_w, g.memory_used_mib) == (0, 30.0, 11.0, 93)
    assert t.unreachable == [("0000:B3:00.0", "Unknown Error")]
    assert len(t.messages) == 2 and all("Timeout waiting for RPC from GSP!" in m for m in t.messages)
    assert [(p.pid, p.name, p.memory_mib) for p in t.processes] == [(2412, "/usr/libexec/Xorg", 82)]
    assert not t.processes_complete and t.truncated == "inside the process table (line 23)"


def test_only_an_unreachable_line_and_other_failures_are_results_not_errors():
    t = table("unreachable-only-tesla-p4.txt")
    assert t.gpus == [] and t.unreachable == [("0000:07:00.0", "Unknown Error")]
    t = parse_table("No devices were found\n")
    assert t.gpus == [] and t.failure == "No devices were found"
    t = parse_table("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 535.183\n")
    assert t.failure == "Failed to initialize NVML: Driver/library version mismatch"


@pytest.mark.parametrize("text, line, expected", [
    ("hello\n", 1, "the nvidia-smi table"),
    ("|   0  NVIDIA H100 80GB HBM3          On  |   00000000:19:00.0 Off |                    0 |\n"
     "| what is this |   1MiB /  81559MiB |      0%      Default |\n|\n", 2, "'FAN TEMP PERF POWER / CAP'"),
    ("| Processes: |\n| 0 x y |\n+---+\n", 2, "a process row"),
    ("|   0  NVIDIA H100 80GB HBM3          On  |   00000000:19:00.0 Off\n+---+\n", 1, "a table row ending in '|'"),
])
def test_parse_errors_name_tool_line_and_expectation(text, line, expected):
    with pytest.raises(ParseError) as e:
        parse_table(text)
    assert (e.value.tool, e.value.line_no) == ("nvidia-smi", line) and expected in e.value.expected


@pytest.mark.parametrize("cut", [12, 16])
def test_a_table_cut_at_a_gpu_boundary_is_not_a_smaller_healthy_system(cut):
    """head -n of a real 8-GPU table right after a GPU's closing border (before the next GPU and the
    Processes box): the GPUs read so far, and truncated says the output stops there (trial finding)."""
    lines = (SMI / "h100x8-default-table-drv550.txt").read_text().splitlines(keepends=True)
    t = parse_table("".join(lines[:cut]))
    n = (cut - 8) // 4
    assert [g.index for g in t.gpus] == list(range(n))
    assert t.truncated == (f"after GPU {n - 1}'s rows: no Processes section (nvidia-smi always prints one, "
                           "'No running processes found' too)")
