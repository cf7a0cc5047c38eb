"""``mfctl bench nccl`` — nccl-tests on the hosts, compared with what the topology should give."""

from __future__ import annotations

from pathlib import Path

import typer

from mfctl.cli.common import HOSTS_OPT, JSON_OPT, emit_json, handle_errors, host_names, option, out_console

app = typer.Typer(help="Throughput benchmarks on the testbed.", no_args_is_help=True)


@app.command("nccl")
@handle_errors
def nccl(inventory: Path = option("inventory", "--inventory", "-i", default=..., help="Inventory YAML."),
         test: str = typer.Option("alltoall_perf", help="alltoall_perf or all_reduce_perf."),
         max_bytes: str = typer.Option("1G", help="Largest message (nccl-tests -e): 1M to 16G, binary units."),
         hosts: str = HOSTS_OPT, json_out: bool = JSON_OPT):
    """Run nccl-tests across the hosts (from the first of them), store algbw/busbw per size, and compare the
    measured bus bandwidth with what the current OCS circuits plus the EPS should give that server. Progress
    on stderr: a bar with its ETA on a terminal, plain lines otherwise."""
    from rich.table import Table

    from mfctl.bench.nccl import TESTS, parse_size, run_nccl, store
    from mfctl.cli.progress import ProgressObserver
    from mfctl.context import Context
    from mfctl.errors import UsageError
    from mfctl.inventory import load_inventory
    from mfctl.inventory.hostsets import hostset

    if test not in TESTS:  # before the inventory is read, as ever
        raise UsageError("--test must be alltoall_perf or all_reduce_perf")
    parse_size(max_bytes)
    inv = load_inventory(inventory)
    names = host_names(hosts, inv)  # the one host selector (provision, firmware, health, exec)
    if len(names) < 2:  # within one server the GPUs talk over NVLink: nothing of the fabric is measured
        raise UsageError(f"--hosts {hosts!r} names one host ({names[0]}): nccl-tests across the fabric needs at "
                         "least 2 hosts (within one server the GPUs talk over NVLink, not the OCS or EPS)")
    with ProgressObserver() as obs:  # stderr only, --json too: stdout holds the object alone
        out = run_nccl(Context.from_settings(inv), test, max_bytes, names, observer=obs)
    out["stored"] = str(store(out, inv.name))
    if json_out:
        emit_json(out)
        return
    t = Table("size", "time µs", "algbw GB/s", "busbw GB/s", title=f"{test} from {out['host']} on {hostset(out['hosts'])}")
    for x in out["rows"]:
        t.add_row(f"{x['size_bytes']:,}", f"{x['time_us']:.1f}" if x["time_us"] else "—", str(x["algbw_gbs"]),
                  str(x["busbw_gbs"]))
    con = out_console()
    con.print(t)
    peak, expected = out["peak_busbw_gbs"], out["expected_busbw_gbs"]
    if expected:
        con.print(f"peak bus bandwidth {peak:.1f} GB/s; the topology gives {out['host']} {out['circuits_on_host']} "
                  f"circuit(s) + EPS = {expected:.1f} GB/s → {100 * peak / expected:.0f}% of expected", highlight=False)
    con.print(f"stored: {out['stored']}", highlight=False)
