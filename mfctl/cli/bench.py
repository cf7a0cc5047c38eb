"""``mfctl bench nccl`` — nccl-tests on the hosts, compared with what the topology should give."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from mfctl.cli.common import JSON_OPT, emit_json, handle_errors, out_console

app = typer.Typer(help="Throughput benchmarks on the testbed.", no_args_is_help=True)


@app.command("nccl")
@handle_errors
def nccl(inventory: Path = typer.Option(..., "--inventory", "-i", envvar="MFCTL_INVENTORY"),
         test: str = typer.Option("alltoall_perf", help="alltoall_perf or all_reduce_perf."),
         max_bytes: str = typer.Option("1G", help="Largest message (nccl-tests -e)."),
         json_out: bool = JSON_OPT):
    """Run nccl-tests across the hosts, store algbw/busbw per size, and compare the measured bus bandwidth
    with what the current OCS circuits plus the EPS should give each server."""
    from rich.table import Table

    from mfctl import settings
    from mfctl.errors import UsageError
    from mfctl.fabric.mapping import circuits_from_cross_connects, region_lanes
    from mfctl.hosts.nccl_tests import parse_perf, perf_argv
    from mfctl.inventory import load_inventory
    from mfctl.ocs.driver import driver_from_inventory
    from mfctl.runtime.job import GOODPUT
    from mfctl.transport.ssh import SSHPool, targets_from_inventory

    if test not in ("alltoall_perf", "all_reduce_perf"):
        raise UsageError("--test must be alltoall_perf or all_reduce_perf")
    inv = load_inventory(inventory)
    hosts = [h.name for h in inv.hosts]
    with driver_from_inventory(inv, connect_timeout=settings.get_float("connect_timeout"),
                               command_timeout=settings.get_float("command_timeout")) as drv:
        xc = drv.cross_connects()
    circuits = circuits_from_cross_connects(region_lanes(inv, hosts), xc)
    with SSHPool(targets_from_inventory(inv), connect_timeout=settings.get_float("connect_timeout"),
                 command_timeout=max(settings.get_float("command_timeout"), 600)) as pool:
        h0 = inv.hosts[0]
        res = parse_perf(pool.run_checked(h0.name, perf_argv(test, "1M", max_bytes, 2, h0.gpus.count, nodes=len(hosts))))
    lane_rate = h0.ocs_lanes()[0][0].lane_rate_gbps * 1e9 / 8 * GOODPUT if h0.ocs_lanes() else 0.0
    eps = sum(n.speed_gbps for n in h0.eps_nics()) * 1e9 / 8 * GOODPUT
    n_circ = sum(1 for c in circuits if h0.name in (c.a.host, c.b.host))
    expected = (n_circ * lane_rate + eps) / 1e9 if test == "alltoall_perf" else None
    peak = max((x.busbw_gbs or 0) for x in res.rows)
    out = {"schema": "mfctl.bench.nccl/v1", "test": test, "host": h0.name, "circuits_on_host": n_circ,
           "rows": [x.__dict__ for x in res.rows], "peak_busbw_gbs": peak, "expected_busbw_gbs": expected,
           "ratio_to_expected": peak / expected if expected else None, "warnings": res.warnings}
    d = settings.state_dir() / "bench"
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{inv.name}-{test}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(out, indent=2))
    out["stored"] = str(path)
    if json_out:
        emit_json(out)
        return
    t = Table("size", "time µs", "algbw GB/s", "busbw GB/s", title=f"{test} from {h0.name}")
    for x in res.rows:
        t.add_row(f"{x.size_bytes:,}", f"{x.time_us:.1f}" if x.time_us else "—", str(x.algbw_gbs), str(x.busbw_gbs))
    con = out_console()
    con.print(t)
    if expected:
        con.print(f"peak bus bandwidth {peak:.1f} GB/s; the topology gives {h0.name} {n_circ} circuit(s) + EPS = "
                  f"{expected:.1f} GB/s → {100 * peak / expected:.0f}% of expected", highlight=False)
    con.print(f"stored: {path}", highlight=False)
