"""``mfctl bench nccl``'s service: nccl-tests across the hosts, beside what the OCS circuits plus
the EPS should give the first host."""

from __future__ import annotations

import json
import time
from pathlib import Path

TESTS = ("alltoall_perf", "all_reduce_perf")
#: the largest message a sweep may ask for: nccl-tests allocates it (twice) on every GPU; 16 GiB
#: is half an A100-40GB's memory
MAX_BYTES_LIMIT = 16 << 30
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str, what: str = "--max-bytes") -> int:
    """A message size as nccl-tests' ``-b``/``-e`` take it (``8``, ``64K``, ``1M``, ``1G``: binary
    units) in bytes, 1 .. :data:`MAX_BYTES_LIMIT`. Raises UsageError naming ``what``."""
    import re

    from mfctl.errors import UsageError

    m = re.fullmatch(r"(\d{1,12})([KMG]?)", text.strip().upper())
    if not m:
        raise UsageError(f"{what} must be a size such as 64K, 256M or 1G (bytes, binary units), got {text!r}")
    n = int(m.group(1)) * _SIZE_UNITS[m.group(2)]
    if not 1 <= n <= MAX_BYTES_LIMIT:
        raise UsageError(f"{what} must be from 1 byte to 16G, got {text!r}")
    return n


def preflight(pool, inv, hosts: list[str] | None = None, observer=None) -> None:
    """Every host (of ``hosts``, default all) answers and shows the GPUs the inventory gives it
    (``nvidia-smi --query-gpu=index``), before a benchmark whose figures would otherwise be a broken
    testbed's; ``observer`` hears a ``preflight`` phase and each host done. Raises UnreachableError
    (a host that cannot be reached) or OperationFailed (a GPU missing or lost), naming every host."""
    from mfctl.errors import OperationFailed, ParseError, UnreachableError
    from mfctl.hosts import nvidia_smi
    from mfctl.observer import NullObserver

    names = hosts if hosts is not None else [h.name for h in inv.hosts]
    obs = observer or NullObserver()
    obs.phase("preflight", "every host answers and shows its GPUs", total=len(names))
    res = pool.run_many(names, lambda h: nvidia_smi.query_argv(["index"]), on_done=lambda r: obs.host_done(r.host, r))
    down = [f"{r.host}: {r.error}" for r in res if r.error]
    if down:
        raise UnreachableError("cannot benchmark: " + "; ".join(down))
    short = []
    for r in res:
        want = inv.host(r.host).gpus.count
        try:
            n = len(nvidia_smi.parse_query_csv(r.stdout))
        except ParseError:
            n = 0
        if r.rc != 0 or n != want:
            lost = "; ".join(f"GPU {bus}: {why}" for bus, why in nvidia_smi.unreachable_gpus(r.stdout + r.stderr))
            short.append(f"{r.host} shows {n} of {want} GPUs" + (f" ({lost[:300]})" if lost else ""))
    if short:
        raise OperationFailed("cannot benchmark: " + "; ".join(short))


def expected_busbw_gbs(test: str, circuits_on_host: int, rates) -> float | None:
    """The bus bandwidth (GB/s) an all-to-all from a host should reach: its circuits at one OCS lane's
    rate each plus its EPS rate (``rates``: :class:`mfctl.fabric.planner.LinkRates`, bytes/s at
    RoCEv2 goodput). None for other tests (an all-reduce's bus bandwidth is not bounded so)."""
    if test != "alltoall_perf":
        return None
    return (circuits_on_host * rates.circuit_Bps + rates.eps_Bps) / 1e9


def _perf(pool, host: str, argv: list[str]):
    """nccl-tests' result on ``host``; its failure (non-zero exit, no result row) names the hosts,
    GPUs and devices its NCCL lines blame (:func:`mfctl.hosts.nccl_log.failing_links`)."""
    from mfctl.errors import OperationFailed, ParseError
    from mfctl.hosts.nccl_log import failing_links
    from mfctl.hosts.nccl_tests import parse_perf

    out = None
    try:
        out = pool.run_checked(host, argv)
        return parse_perf(out)
    except (OperationFailed, ParseError) as e:
        links = failing_links(out if out is not None else str(e))
        if not links:
            raise
        blame = "; NCCL names: " + "; ".join(links)
        if isinstance(e, ParseError):
            raise ParseError(e.tool, e.line_no, e.expected + blame, e.got) from None
        raise OperationFailed(f"{e}{blame}") from None


#: NIC link-up after an OCS switch, p99 (the paper's App. C: 5.67 s mean, 6.33 s p99), s
LINKUP_P99_S = 6.33


def run_nccl(ctx, test: str = "alltoall_perf", max_bytes: str = "1G", hosts: list[str] | None = None,
             observer=None) -> dict:
    """Read the cross-connects of the first host's OCS (its region's, with several), run nccl-tests
    ``test`` (1 MiB .. ``max_bytes``, ×2) from the
    first of ``hosts`` (inventory names, in inventory order; default: all) across all of them, and
    return the ``mfctl.bench.nccl/v1`` object: the hosts, rows (sizes in bytes, times in µs,
    bandwidths in GB/s), the peak bus bandwidth, the expected one (the circuits among ``hosts``)
    and their ratio. Every host is checked first (:func:`preflight`). ``observer``
    (:class:`mfctl.observer.Observer`) hears the phases: ``preflight`` (per host), then
    ``nccl-tests`` (one unit: the sweep is one command). Raises UsageError for an unknown test or
    a bad ``max_bytes``; the pool's and driver's errors as they are."""
    from mfctl.errors import UsageError
    from mfctl.fabric.mapping import circuits_from_cross_connects, region_lanes
    from mfctl.hosts.nccl_tests import perf_argv

    if test not in TESTS:
        raise UsageError("--test must be alltoall_perf or all_reduce_perf")
    if parse_size(max_bytes) < 1 << 20:
        raise UsageError(f"--max-bytes must be at least 1M (the sweep starts at 1M), got {max_bytes!r}")
    from mfctl.observer import NullObserver
    from mfctl.transport.results import HostResult

    obs = observer or NullObserver()
    inv = ctx.inventory
    wanted = set(hosts) if hosts is not None else None
    hosts = [h.name for h in inv.hosts if wanted is None or h.name in wanted]
    if not hosts:
        raise UsageError("no host to benchmark")
    h0 = inv.host(hosts[0])
    # the circuits of the first host (whose bus bandwidth is measured) are on its region's OCS; with several
    # OCSes port numbers repeat from one switch to the next, so only that switch's hosts' lanes are named
    on = inv.ocs_of_host(h0.name)
    circuits = []
    fresh: dict[int, float] = {}  # the OCS's ports changed lately: {port: seconds ago}
    if on is not None:
        from mfctl.provision.optics import recent_ocs_changes

        with ctx.ocs(name=on.name) as drv:
            xc = drv.cross_connects()
            fresh = recent_ocs_changes(drv)
        same = [h for h in hosts if (o := inv.ocs_of_host(h)) is not None and o.name == on.name]
        circuits = circuits_from_cross_connects(region_lanes(inv, same), xc)
    with ctx.pool(command_timeout=max(ctx.command_timeout, 600)) as pool:  # a 1 GiB sweep takes minutes
        preflight(pool, inv, hosts, observer=obs)
        sizes = parse_size(max_bytes).bit_length() - (1 << 20).bit_length() + 1
        obs.phase("nccl-tests", f"{test} 1M..{max_bytes.strip().upper()} ({sizes} sizes) from {h0.name} on "
                                f"{len(hosts)} host(s)", total=1)
        res = _perf(pool, h0.name, perf_argv(test, "1M", max_bytes, 2, h0.gpus.count, nodes=len(hosts)))
        obs.host_done(h0.name, HostResult(h0.name))
    n_circ = sum(1 for c in circuits if h0.name in (c.a.host, c.b.host))
    expected = expected_busbw_gbs(test, n_circ, ctx.link_rates())
    peak = max((x.busbw_gbs or 0) for x in res.rows)
    warnings = list(res.warnings)
    mine = [c for c in circuits if h0.name in (c.a.host, c.b.host)]
    ages = [fresh[p] for c in mine for lane in (c.a, c.b) for p in (lane.ocs_tx, lane.ocs_rx) if p in fresh]
    if ages and min(ages) < LINKUP_P99_S:  # measured while some of its circuits' links may still come up
        warnings.append(f"measured {min(ages):.1f} s after an OCS change of {h0.name}'s circuits: NIC link-up takes "
                        f"~{LINKUP_P99_S:g} s (p99, the paper's App. C), so a low bus bandwidth may be links still "
                        "coming up — run it again")
    return {"schema": "mfctl.bench.nccl/v1", "test": test, "host": h0.name, "hosts": hosts,
            "ocs": on.name if on is not None else None, "circuits_on_host": n_circ,
            "rows": [x.__dict__ for x in res.rows], "peak_busbw_gbs": peak, "expected_busbw_gbs": expected,
            "ratio_to_expected": peak / expected if expected else None, "warnings": warnings}


def store(result: dict, inventory_name: str) -> Path:
    """Write ``result`` to ``<state_dir>/bench/<inventory>-<test>-<time>.json``; return the path."""
    from mfctl import settings

    d = settings.state_dir() / "bench"
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{inventory_name}-{result['test']}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2))
    return path
