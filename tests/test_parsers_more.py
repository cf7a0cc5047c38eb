"""nccl-tests tables and training logs: every corpus file, values read off by hand."""

import json
import subprocess

import pytest

from conftest import DATA, mfctl_cmd
from mfctl.errors import ParseError
from mfctl.hosts.nccl_tests import parse_perf
from mfctl.hosts.trainlog import parse_train_log

NCCL = DATA / "nccl-tests"


@pytest.mark.parametrize("name,rows,first,last_busbw,avg", [
    ("a100-p4de-2node-allreduce-srun-label.txt", 29, (8, 164.3), 78.33, None),
    ("allgather-bf16-2gpu-linear-step-truncated.txt", 7, (16777216, 108.8), 119.64, None),
    ("allreduce-v100-8node-old-format-error-col.txt", 2, (268435456, 122131.0), 4.32, 4.32178),
    ("alltoall-v100-8node-old-format-empty-redop.txt", 2, (268435456, 520935.0), 0.51, 0.507636),
    ("h100-p5-2node-allreduce-16GB-srun-label.txt", 32, (8, 69.12), 487.09, None),
    ("h100-p5-allreduce-mpirun-tag-output.txt", 32, (8, 12.9), 483.05, 156.742),
])
def test_nccl_tests_tables(name, rows, first, last_busbw, avg):
    r = parse_perf((NCCL / name).read_text())
    assert len(r.rows) == rows and (r.rows[0].size_bytes, r.rows[0].time_us) == first
    assert r.rows[-1].busbw_gbs == last_busbw and r.avg_busbw_gbs == avg


@pytest.mark.parametrize("name,warn", [
    ("nccl-debug-dgxa100-2rank-tree-ring-alloc.txt", None),
    ("nccl-debug-ib-completion-error4-vendor81-midtable.txt", "vendor err 81"),
    ("nccl-debug-init-a800-roce-single-nic.txt", None),
])
def test_nccl_logs_without_a_table_are_typed_errors(name, warn):
    with pytest.raises(ParseError) as e:
        parse_perf((NCCL / name).read_text())
    assert "result row" in str(e.value) and (warn is None or warn in str(e.value))


def test_training_logs():
    ds = parse_train_log((DATA / "train-logs" / "deepspeed-moe-gpt125m-64experts-ep4-4gpu.txt").read_text())
    i = ds.iterations[0]
    assert (i.iteration, i.total, i.elapsed_ms, i.lm_loss, i.global_batch, i.consumed_tokens) == (10, 1716613, 7963.4, 10.6858, 256, 5242880)
    assert i.extra["moe loss"] == pytest.approx(0.08526326) and ds.deepspeed_steps[:2] == [(10, 0), (20, 0)]
    mc = parse_train_log((DATA / "train-logs" / "megatron-core-moe-64e-top1-ep4-8gpu.txt").read_text())
    j = mc.iterations[0]
    assert (j.timestamp, j.iteration, j.elapsed_ms, j.tflops_per_gpu, j.skipped, j.nan) == ("2024-10-25 03:08:49", 20, 1639.0, 11.9, 0, 0)
    mx = parse_train_log((DATA / "train-logs" / "megatron-mixtral-8x7b-16xh100-excerpt.txt").read_text())
    assert [r.iteration for r in mx.iterations] == [43, 44, 45] and mx.iterations[0].tflops_per_gpu == 239.8
    warn = parse_train_log((DATA / "train-logs" / "megatron-core-moe-warnings-interleaved.txt").read_text())
    assert len(warn.iterations) == 11 and warn.iterations[0].elapsed_ms == 3367.6
    with pytest.raises(ParseError):
        parse_train_log("hello\n")
    with pytest.raises(ParseError) as e:
        parse_train_log(" iteration 5/ 10 | lm loss: 1.0 |\n")
    assert e.value.line_no == 1


def test_import_a_training_log_as_a_run(tmp_path, cli_env):
    log = DATA / "train-logs" / "megatron-core-moe-64e-top1-ep4-8gpu.txt"
    r = subprocess.run(mfctl_cmd("runs", "import-log", log, "--json"), capture_output=True, text=True, env=cli_env)
    s = json.loads(r.stdout)
    # 15 logged lines, one every 20 iterations: 300 iterations; no 'consumed tokens' → 64 x 4096 per iteration
    assert r.returncode == 0 and s["iterations"] == 300 and s["logged_lines"] == 15
    assert s["iteration_time_s"]["max"] == pytest.approx(1.639) and s["tokens"] == 300 * 64 * 4096
    assert "--seq-len" in s["note"]
    ds = json.loads(subprocess.run(mfctl_cmd("runs", "import-log", DATA / "train-logs" / "deepspeed-moe-gpt125m-64experts-ep4-4gpu.txt",
                                             "--json"), capture_output=True, text=True, env=cli_env).stdout)
    assert ds["iterations"] == 180 and ds["tokens"] == 180 * 524288  # consumed tokens: 524,288 per iteration
    bad = tmp_path / "bad.log"
    bad.write_text("nothing here\n")
    assert subprocess.run(mfctl_cmd("runs", "import-log", bad), capture_output=True, env=cli_env).returncode == 3
    r = subprocess.run(mfctl_cmd("metrics", "export", s["run_id"], "--format", "json"), capture_output=True, text=True, env=cli_env)
    assert len(json.loads(r.stdout)["iterations"]) == 15


def test_rdma_tools_on_real_captures():
    from mfctl.hosts import rdma

    M = DATA / "mellanox"
    panic = rdma.parse_ibstat((M / "ibstat-a100-azure-8x-mt4124-ibpanic.txt").read_text())
    assert len(panic.ports) == 8 and all(p.active and p.rate_gbps == 200 for p in panic.ports)
    assert panic.errors and "mlx5_8" in panic.errors[0]
    mixed = rdma.parse_ibstat((M / "ibstat-a100-mt4126-eth-plus-ib-all-active.txt").read_text())
    assert (mixed.ports[0].link_layer, mixed.ports[1].link_layer) == ("Ethernet", "InfiniBand")
    assert mixed.firmware["mlx5_0"] == "22.35.2302"
    down = rdma.parse_ibstat((M / "ibstat-h100-cx7-ib-cx6dx-eth-some-down.txt").read_text())
    assert len(down.ports) == 12 and sum(not p.active for p in down.ports) == 3
    st = rdma.parse_ibstatus((M / "ibstatus-a100-azure-8port-hdr.txt").read_text())
    assert st.ports[0].state == "Active" and st.ports[0].rate_gbps == 200 and st.ports[0].physical_state == "LinkUp"
    m = rdma.parse_ibdev2netdev((M / "ibdev2netdev-cx6-ib-sriov-vfs-truncated.txt").read_text())
    assert m["mlx5_2"] == (1, "ibp75s0", True) and m["mlx5_19"] == (1, "ibp75s0v7", False) and m["mlx5_4"][1] == "enp97s0f0"
    g = rdma.parse_show_gids((M / "show_gids-cx6-roce-v1-v2-ipv4.txt").read_text())
    assert len(g) == 6 and g[4].ipv4 == "10.10.10.60" and g[0].ipv4 is None
    assert rdma.roce_v2_ipv4_gid_index(g, "ens1f0") == 5  # what NCCL_IB_GID_INDEX should be
    for fn, bad in ((rdma.parse_ibstat, "Port 1:\n"), (rdma.parse_ibdev2netdev, "mlx5_0 -> eth0\n"),
                    (rdma.parse_show_gids, "mlx5_0 1 x fe80:: v3 eth0\n"), (rdma.parse_ibstatus, "state: 4\n")):
        with pytest.raises(ParseError):
            fn(bad)


def test_dcgm_exporter_sentinels_are_missing_data():
    from mfctl.hosts.dcgm import parse_exporter

    s = parse_exporter((DATA / "dcgm" / "exporter-k8s-labels-blank-sentinel-elided.txt").read_text())
    vals = {x.metric: x.value for x in s}
    assert vals == {"DCGM_FI_DEV_SM_CLOCK": 139, "DCGM_FI_DEV_MEM_CLOCK": 405, "DCGM_FI_DEV_MEMORY_TEMP": None}
    assert s[0].labels["UUID"].startswith("GPU-") and s[0].gpu == "0"
    tx = parse_exporter((DATA / "dcgm" / "exporter-dgx-a100-nvlink-tx-zero.txt").read_text())
    assert len(tx) == 4 and all(x.value == 0 for x in tx) and tx[0].labels["modelName"] == "NVIDIA A100-SXM4-40GB"
    with pytest.raises(ParseError):
        parse_exporter('DCGM_FI_DEV_SM_CLOCK{gpu="0" 139\n')


def test_dcgmi_and_mlxlink():
    from mfctl.hosts.dcgmi import parse_diag, parse_discovery, parse_mlxlink

    old = parse_diag((DATA / "dcgm" / "a100-p4de-dcgmi-diag-r2-dcgm333.txt").read_text())
    assert old.metadata["DCGM Version"] == "3.3.3" and old.tests["PCIe"] == "Pass - All" and old.failed == []
    new = parse_diag((DATA / "dcgm" / "diag-dcgm423-new-layout-per-gpu-truncated.txt").read_text())
    assert new.metadata["Driver Version Detected"] == "570.148.08"
    assert new.per_gpu["software"] == {0: "Pass", 1: "Pass", 2: "Pass", 3: "Pass"} and new.tests["memory"] == "Pass"
    gpus = parse_discovery((DATA / "dcgm" / "discovery-l-h100-name-null-truncated.txt").read_text())
    assert gpus[0].name is None and gpus[0].pci_bus_id == "00000000:4C:00.0"  # <<<NULL>>> is missing data
    link = parse_mlxlink((DATA / "mellanox" / "mlxlink-spectrum-25g-operational-truncated.txt").read_text())
    assert (link["State"], link["Speed"], link["FEC"]) == ("Active", "25GbE", "Firecode FEC")
    bad = "| x | Fail - GPU 2 ECC |\n"
    assert parse_diag("+---+\n| Diagnostic | Result |\n|-----  Hardware  ----+---|\n" + bad).failed == ["x"]
    for fn in (parse_diag, parse_discovery, parse_mlxlink):
        with pytest.raises(ParseError):
            fn("nothing useful\n")


def test_ibv_devinfo_documented_format():
    # no capture in the corpus: the layout of rdma-core's ibv_devinfo(1) output
    from mfctl.hosts.rdma import parse_ibv_devinfo

    text = ("hca_id:\tmlx5_0\n\ttransport:\t\t\tInfiniBand (0)\n\tfw_ver:\t\t\t\t22.39.1002\n\tphys_port_cnt:\t\t\t1\n"
            "\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tmax_mtu:\t\t4096 (5)\n\t\t\tlink_layer:\t\tEthernet\n\n"
            "hca_id:\tmlx5_1\n\tfw_ver:\t\t\t\t22.39.1002\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_DOWN (1)\n\t\t\tlink_layer:\t\tEthernet\n")
    r = parse_ibv_devinfo(text)
    assert [(p.device, p.state, p.link_layer) for p in r.ports] == [("mlx5_0", "Active", "Ethernet"), ("mlx5_1", "Down", "Ethernet")]
    assert r.firmware["mlx5_0"] == "22.39.1002" and r.ports[0].active and not r.ports[1].active
    with pytest.raises(ParseError):
        parse_ibv_devinfo("port: 1\n")
