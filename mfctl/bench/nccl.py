"""``mfctl bench nccl``'s service: nccl-tests across the hosts, beside what the OCS circuits plus
the EPS should give the first host."""

from __future__ import annotations

import json
import time
from pathlib import Path

TESTS = ("alltoall_perf", "all_reduce_perf")


def expected_busbw_gbs(test: str, circuits_on_host: int, rates) -> float | None:
    """The bus bandwidth (GB/s) an all-to-all from a host should reach: its circuits at one OCS lane's
    rate each plus its EPS rate (``rates``: :class:`mfctl.fabric.planner.LinkRates`, bytes/s at
    RoCEv2 goodput). None for other tests (an all-reduce's bus bandwidth is not bounded so)."""
    if test != "alltoall_perf":
        return None
    return (circuits_on_host * rates.circuit_Bps + rates.eps_Bps) / 1e9


def run_nccl(ctx, test: str = "alltoall_perf", max_bytes: str = "1G") -> dict:
    """Read the OCS's cross-connects, run nccl-tests ``test`` (1 MiB .. ``max_bytes``, ×2) from the
    inventory's first host across all of them, and return the ``mfctl.bench.nccl/v1`` object: rows
    (sizes in bytes, times in µs, bandwidths in GB/s), the peak bus bandwidth, the expected one and
    their ratio. Raises UsageError for an unknown test; the pool's and driver's errors as they are."""
    from mfctl.errors import UsageError
    from mfctl.fabric.mapping import circuits_from_cross_connects, region_lanes
    from mfctl.hosts.nccl_tests import parse_perf, perf_argv

    if test not in TESTS:
        raise UsageError("--test must be alltoall_perf or all_reduce_perf")
    inv = ctx.inventory
    hosts = [h.name for h in inv.hosts]
    with ctx.ocs() as drv:
        xc = drv.cross_connects()
    circuits = circuits_from_cross_connects(region_lanes(inv, hosts), xc)
    h0 = inv.hosts[0]
    with ctx.pool(command_timeout=max(ctx.command_timeout, 600)) as pool:  # a 1 GiB sweep takes minutes
        res = parse_perf(pool.run_checked(h0.name, perf_argv(test, "1M", max_bytes, 2, h0.gpus.count, nodes=len(hosts))))
    n_circ = sum(1 for c in circuits if h0.name in (c.a.host, c.b.host))
    expected = expected_busbw_gbs(test, n_circ, ctx.link_rates())
    peak = max((x.busbw_gbs or 0) for x in res.rows)
    return {"schema": "mfctl.bench.nccl/v1", "test": test, "host": h0.name, "circuits_on_host": n_circ,
            "rows": [x.__dict__ for x in res.rows], "peak_busbw_gbs": peak, "expected_busbw_gbs": expected,
            "ratio_to_expected": peak / expected if expected else None, "warnings": res.warnings}


def store(result: dict, inventory_name: str) -> Path:
    """Write ``result`` to ``<state_dir>/bench/<inventory>-<test>-<time>.json``; return the path."""
    from mfctl import settings

    d = settings.state_dir() / "bench"
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{inventory_name}-{result['test']}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2))
    return path
