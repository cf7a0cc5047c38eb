"""mfctl.bench services on a fake context (no testbed): what they run, fit and expect."""

from contextlib import contextmanager

import pytest

from mfctl.bench.nccl import run_nccl
from mfctl.bench.profile import load_fits, run_profile, store
from mfctl.errors import OperationFailed, UsageError
from mfctl.fabric.planner import link_rates
from mfctl.inventory import load_inventory
from support import PROTOTYPE


def _perf(alpha_s, rate):
    """An nccl-tests table whose out-of-place time is alpha + n / rate (µs), one size N/A."""
    lines = ["#  size  count  type  redop  root  time  algbw  busbw #wrong  time  algbw  busbw #wrong"]
    n = 65536
    while n <= 1 << 30:
        t = (alpha_s + n / rate) * 1e6
        lines.append(f"  {n} {n // 4} float sum -1 {t:.2f} 1.0 1.0 0 {t:.2f} 1.0 {n / t / 1e3:.2f} 0")
        n *= 4
    lines.append("  2147483648 536870912 float sum -1 N/A N/A N/A N/A N/A N/A N/A N/A")
    return "\n".join(lines) + "\n"


class FakeCtx:
    def __init__(self, outputs, xc=None, inventory=PROTOTYPE):
        self.inventory = load_inventory(inventory)
        self.command_timeout, self.outputs, self.xc, self.ran, self.timeouts = 30.0, outputs, xc or {}, [], []
        self.opened = []  # the OCSes read, by name

    @contextmanager
    def pool(self, command_timeout=None):
        self.timeouts.append(command_timeout)
        ctx = self

        class Pool:
            def run_checked(self, host, argv):
                ctx.ran.append((host, argv[0]))
                return ctx.outputs[argv[0]]

            def run_many(self, hosts, argv_for, on_done=None):  # bench nccl's preflight: every host shows its 8 GPUs
                from types import SimpleNamespace

                out = [SimpleNamespace(host=h, error=None, rc=0, stderr="",
                                       stdout="index\n" + "".join(f"{i}\n" for i in range(8))) for h in hosts]
                for r in out:
                    if on_done:
                        on_done(r)
                return out

        yield Pool()

    @contextmanager
    def ocs(self, name=None):
        ctx = self
        ctx.opened.append(name)

        class Drv:
            def cross_connects(self):
                return ctx.xc[name] if name in ctx.xc else ctx.xc  # (several OCSes: by name)

        yield Drv()

    def link_rates(self, host=None):
        return link_rates(100.0, 100.0)


def _gemm(eff):
    return "".join(f"{m} 14336 4096 {2 * m * 14336 * 4096 / (eff * 312e12) * 1e6 + 12:.2f} 1\n" for m in (256, 1024, 4096, 16384))


def test_profile_fits_each_task_and_is_found_by_schedule():
    ctx = FakeCtx({"alltoall_perf": _perf(35e-6, 95e9), "all_reduce_perf": _perf(22e-6, 110e9), "mfctl-gemm-bench": _gemm(0.65)})
    doc = run_profile(ctx, "gpu02")
    fits = {f["task"]: f for f in doc["fits"]}
    assert [h for h, _ in ctx.ran] == ["gpu02"] * 3 and ctx.timeouts == [300.0]  # sweeps get at least 300 s
    assert fits["alltoall"]["rate_per_s"] == pytest.approx(95e9, rel=0.01)
    assert fits["alltoall"]["alpha_s"] == pytest.approx(35e-6, rel=0.05) and fits["alltoall"]["points"] == 8
    assert fits["all_reduce"]["rate_per_s"] == pytest.approx(110e9, rel=0.01)
    assert fits["gemm"]["rate_per_s"] == pytest.approx(0.65 * 312e12, rel=0.01) and fits["gemm"]["unit"] == "flop"
    path = store(doc)
    got, where = load_fits("mfabric-prototype")
    assert where == path and got["gemm"] == fits["gemm"]


def test_profile_refuses_an_unknown_host_and_reports_a_broken_gemm_tool():
    with pytest.raises(UsageError, match="unknown host 'gpu99'"):
        run_profile(FakeCtx({}), "gpu99")
    ctx = FakeCtx({"alltoall_perf": _perf(35e-6, 95e9), "all_reduce_perf": _perf(22e-6, 110e9),
                   "mfctl-gemm-bench": "CUDA error: no device\n"})
    with pytest.raises(OperationFailed, match=r"^gpu01: mfctl-gemm-bench: output line 1: expected 'M N K time_us TFLOP/s'"):
        run_profile(ctx)


def test_nccl_bench_expects_the_hosts_circuits_plus_the_eps():
    inv = load_inventory(PROTOTYPE)
    g1, g2 = inv.host("gpu01").ocs_lanes(), inv.host("gpu02").ocs_lanes()
    (_, a), (_, b) = g1[0], g2[0]
    xc = {a.ocs_tx: b.ocs_rx, b.ocs_tx: a.ocs_rx}  # one duplex circuit gpu01 <-> gpu02
    ctx = FakeCtx({"alltoall_perf": _perf(35e-6, 95e9)}, xc)
    out = run_nccl(ctx, "alltoall_perf", "1G")
    assert out["host"] == "gpu01" and out["circuits_on_host"] == 1 and ctx.timeouts == [600.0]
    assert out["expected_busbw_gbs"] == pytest.approx(2 * 12.5 * 0.92)
    assert out["peak_busbw_gbs"] == max(r["busbw_gbs"] or 0 for r in out["rows"])
    assert out["ratio_to_expected"] == pytest.approx(out["peak_busbw_gbs"] / out["expected_busbw_gbs"])
    with pytest.raises(UsageError):
        run_nccl(ctx, "sendrecv_perf")


def test_nccl_bench_with_several_ocses_reads_the_first_hosts_own_ocs():
    """Issue 22: with two OCSes each region's ports are numbered on its own switch (both on 1..12), so the
    first host's circuits are its region's OCS's — ocs-b for gpu05 — never the other switch's same
    port numbers (here ocs-a joins the same ports as two circuits, which must not count)."""
    from support import ROOT

    two = ROOT / "inventory" / "mfabric-2ocs.yaml"
    inv = load_inventory(two)
    (_, a), (_, b) = inv.host("gpu05").ocs_lanes()[0], inv.host("gpu06").ocs_lanes()[0]
    one = {a.ocs_tx: b.ocs_rx, b.ocs_tx: a.ocs_rx}  # gpu05 <-> gpu06 on ocs-b: one circuit
    (_, c), (_, d) = inv.host("gpu05").ocs_lanes()[1], inv.host("gpu07").ocs_lanes()[1]
    other = {**one, c.ocs_tx: d.ocs_rx, d.ocs_tx: c.ocs_rx}  # ocs-a: the same numbers, and one more pair
    ctx = FakeCtx({"alltoall_perf": _perf(35e-6, 95e9)}, {"ocs-a": other, "ocs-b": one}, inventory=two)
    out = run_nccl(ctx, "alltoall_perf", "1G", hosts=["gpu05", "gpu06", "gpu07", "gpu08"])
    assert ctx.opened == ["ocs-b"] and out["ocs"] == "ocs-b" and out["host"] == "gpu05"
    assert out["circuits_on_host"] == 1 and out["expected_busbw_gbs"] == pytest.approx(2 * 12.5 * 0.92)
    # hosts of both regions: the first host's OCS (ocs-a), its ports read as its region's lanes: the same
    # numbers are gpu01 <-> gpu02 and gpu01 <-> gpu03 there
    ctx = FakeCtx({"alltoall_perf": _perf(35e-6, 95e9)}, {"ocs-a": other, "ocs-b": one}, inventory=two)
    out = run_nccl(ctx, "alltoall_perf", "1G")
    assert ctx.opened == ["ocs-a"] and out["host"] == "gpu01" and out["circuits_on_host"] == 2
    assert out["expected_busbw_gbs"] == pytest.approx(3 * 12.5 * 0.92)
