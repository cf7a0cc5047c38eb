"""bench nccl's failure names the failing host, GPU and device from NCCL's own lines (issue 19 item 9)."""

from contextlib import contextmanager

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


def test_a_sweep_that_exits_non_zero_names_the_link_from_its_message():
    from mfctl.errors import OperationFailed

    wc = (DATA / "nccl-debug" / "ib-retry-exceeded-status12-vendor129-recv.txt").read_text().splitlines()[0]

    class Failing(FakeCtx):
        @contextmanager
        def pool(self, command_timeout=None):
            with FakeCtx.pool(self, command_timeout) as base:
                class Pool:
                    run_many = staticmethod(base.run_many)

                    def run_checked(self, host, argv):
                        raise OperationFailed(f"{host}: {argv[0]}: exit 1: {wc}")

                yield Pool()

    with pytest.raises(OperationFailed) as e:
        run_nccl(Failing({}))
    assert str(e.value).endswith("NCCL names: kp-ddp-worker-0 GPU 4: NET/IB completion error status 12 (transport "
                                 "retry counter exceeded), vendor err 129, peer 10.216.210.236")
