"""bench nccl's failure names the failing host, GPU and device from NCCL's own lines (issue 19 item 9)."""

import pytest
from unit.bench.test_bench_services import FakeCtx

from mfctl.bench.nccl import run_nccl
from mfctl.errors import ParseError
from support import DATA


def test_a_failed_sweep_names_the_failing_link():
    out = (DATA / "nccl-tests" / "nccl-debug-ib-completion-error4-vendor81-midtable.txt").read_text()
    with pytest.raises(ParseError) as e:
        run_nccl(FakeCtx({"alltoall_perf": out}))
    msg = str(e.value)
    assert "NCCL names: host02 GPU 0: NET/IB completion error status 4 (local protection error), vendor err 81" in msg
