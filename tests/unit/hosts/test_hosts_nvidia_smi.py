"""nvidia-smi beyond "this output parses to these values" (those are golden cases in
tests/golden/nvidia-smi-*): the GPUs nvidia-smi cannot reach, and GPUStatus from a CSV row."""

from mfctl.hosts import nvidia_smi
from support import DATA

HDR = ("index, name, temperature.gpu, remapped_rows.pending, remapped_rows.failure, clocks.current.sm [MHz], "
       "clocks.max.sm [MHz], clocks_event_reasons.gpu_idle, clocks_event_reasons.hw_slowdown")


def test_gpus_it_cannot_reach_are_named_not_rows():
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


def test_gpu_status_of_the_real_h100_capture():
    [h] = [nvidia_smi.GPUStatus.from_row(r) for r in nvidia_smi.parse_query_csv(
        (DATA / "nvidia-smi" / "h100-query-gpu-csv-load-drv590.txt").read_text())]
    assert (h.index, h.temperature_c, h.power_w, h.persistence) == (0, 59, 631.95, True)
    assert (h.remap_pending, h.remap_failure, h.sm_clock_mhz, h.sm_clock_max_mhz, h.idle, h.clock_events) == \
        (False, False, 1980, 1980, False, [])


def test_gpu_status_treats_na_as_missing():
    [g] = [nvidia_smi.GPUStatus.from_row(r) for r in nvidia_smi.parse_query_csv(
        HDR + "\n0, NVIDIA A10G, 30, [N/A], [N/A], [N/A], [N/A], [Not Supported], [N/A]\n")]
    assert (g.remap_pending, g.remap_failure, g.sm_clock_mhz, g.sm_clock_max_mhz, g.idle, g.clock_events) == (None,) * 6
    [g] = [nvidia_smi.GPUStatus.from_row(r) for r in nvidia_smi.parse_query_csv(
        HDR + "\n0, NVIDIA A100-SXM4-80GB, 30, No, No, 210 MHz, 1410 MHz, Active, Not Active\n")]
    assert (g.remap_pending, g.sm_clock_mhz, g.idle, g.clock_events) == (False, 210, True, [])  # idle: low clocks are fine
