"""nccl-tests output run without MPI, and NCCL debug logs as typed events (issue 19 items 9, 10);
values read off the real samples by hand."""

from __future__ import annotations

import pytest

from mfctl.errors import ParseError
from mfctl.hosts.nccl_log import WC_STATUS, failing_links, parse_debug
from mfctl.hosts.nccl_tests import parse_perf
from support import DATA

DEBUG = DATA / "nccl-debug"
TESTS = DATA / "nccl-tests"


def test_a_repeated_header_says_the_processes_ran_alone():
    text = (TESTS / "allreduce-v100-2host-no-mpi-repeated-header.txt").read_text()  # NVIDIA/nccl-tests#109
    with pytest.raises(ParseError) as e:
        parse_perf(text)
    assert e.value.line_no == 4 and "each process ran alone" in str(e.value) and "MPI=1" in str(e.value)
    assert "result row" not in str(e.value)


def test_one_header_with_rows_still_parses():
    r = parse_perf((TESTS / "h100-p5-allreduce-mpirun-tag-output.txt").read_text())
    assert len(r.rows) == 32


def test_retry_exceeded_completion_errors_name_host_gpu_peer_and_gids():
    log = parse_debug((DEBUG / "ib-retry-exceeded-status12-vendor129-recv.txt").read_text())  # NVIDIA/nccl#1405
    errs = log.of("completion_error")
    assert [(e.line_no, e.status, e.vendor_err, e.opcode, e.direction) for e in errs] == [
        (1, 12, 129, 0, "Recv"), (6, 12, 129, 32616, "Recv"), (11, 12, 129, 32616, "Recv")]
    e = errs[0]
    assert (e.origin.host, e.origin.pid, e.origin.tid, e.origin.device) == ("kp-ddp-worker-0", 3468, 3905, 4)
    assert (e.peer, e.local_gid, e.remote_gid, e.source) == (
        "10.216.210.236", "fd00:1148:9000:5000:4:200:3:ff22", "fd00:1148:9000:5000:4:200:3:ff1f", "ib_plugin.c:1615")
    assert e.meaning == WC_STATUS[12] == "transport retry counter exceeded"
    assert log.failures == ["kp-ddp-worker-0 GPU 4: NET/IB completion error status 12 (transport retry counter "
                            "exceeded), vendor err 129, peer 10.216.210.236"]  # three lines, one place


def test_async_port_errors_and_a_completion_error_cut_before_its_vendor_error():
    log = parse_debug((DEBUG / "async-port-error-then-completion-error12.txt").read_text())  # lit-llama#380
    ev = log.of("async_event")
    assert len(ev) == 8 and {e.message for e in ev} == {"port error"} and ev[0].line_no == 4
    assert sorted(e.origin.pid for e in ev) == [34050, 34051, 34052, 34053, 34054, 34055, 34056, 34057]
    [c] = log.of("completion_error")
    assert (c.origin.host, c.origin.device, c.status, c.opcode, c.peer, c.vendor_err) == ("...-51", 4, 12, 2, "node48", None)
    assert log.failures == ["...-48 GPU 0: NET/IB async event: port error",
                            "...-51 GPU 4: NET/IB completion error status 12 (transport retry counter exceeded), "
                            "peer node48"]


def test_init_lines_give_version_plugin_network_ib_devices_and_gid_index():
    log = parse_debug((TESTS / "nccl-debug-init-a800-roce-single-nic.txt").read_text())  # NVIDIA/nccl-tests#133
    assert log.version == "2.10.3+cuda11.0"
    a = next(p for p in log.processes if p.host == "nodea" and p.pid == 26799)
    assert (a.network, a.bootstrap, a.gid_index) == ("IB", "xgbe4:nodea_ip<0>", 3)
    assert a.plugin == "No plugin found (libnccl-net.so), using internal implementation"
    assert [(d.index, d.name, d.port, d.link_layer) for d in a.ib_devices] == [(0, "mlx5_6", 1, "RoCE")]
    assert log.events == []


def test_init_complete_lines_give_each_gpu_its_rank():
    log = parse_debug((DEBUG / "init-complete-rank-nranks-cudadev.txt").read_text())  # NVIDIA/nccl#1814
    ranks = {(p.pid, dev): r for p in log.processes for dev, r in p.ranks.items()}
    assert ranks == {(984, 4): 36, (982, 2): 34, (980, 0): 32, (983, 3): 35}
    assert {p.nranks for p in log.processes if p.ranks} == {64}


def test_a_warn_line_gets_the_rank_of_its_process():
    text = (DEBUG / "init-complete-rank-nranks-cudadev.txt").read_text() + (
        "hostname-test:982:1300 [2] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
        "10.0.0.9<4242> with status=12 opcode=1 len=0 vendor err 129 (Send) localGid ::ffff:10.0.0.2 remoteGids::ffff:10.0.0.9\n")
    [e] = parse_debug(text).of("completion_error")
    assert e.origin.rank == 34 and e.direction == "Send" and e.remote_gid == "::ffff:10.0.0.9"


def test_old_completion_error_wording_and_the_mlx5_dump():
    log = parse_debug((TESTS / "nccl-debug-ib-completion-error4-vendor81-midtable.txt").read_text())  # nccl-tests#24
    [e] = log.of("completion_error")
    assert (e.origin.host, e.status, e.opcode, e.vendor_err, e.meaning) == ("host02", 4, 1, 81, "local protection error")


def test_pytorch_watchdog_timeouts():
    log = parse_debug((DEBUG / "pytorch-watchdog-timeout-allreduce.txt").read_text())  # LlamaFactory#7396
    t = log.of("timeout")
    assert [(e.rank, e.operation, e.timeout_ms, e.ran_ms) for e in t] == [
        (0, "ALLREDUCE", 600000, 600060), (4, "ALLREDUCE", 600000, 600067)]
    assert log.failures[0] == "rank 0: timeout: ALLREDUCE (SeqNum 1580) ran for 600060 ms, timeout 600000 ms"


def test_text_without_nccl_lines_is_a_parse_error_and_no_links():
    with pytest.raises(ParseError) as e:
        parse_debug("hello\nworld\n")
    assert e.value.tool == "nccl debug log"
    assert failing_links("hello") == []
