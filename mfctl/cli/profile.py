"""``mfctl profile`` (fit α + β·n per task) and ``mfctl schedule`` (FSMoE pipeline degrees)."""

from __future__ import annotations

from pathlib import Path

import typer

from mfctl.cli.common import JSON_OPT, emit_json, handle_errors, host_names, option, out_console, print_error


@handle_errors
def profile(inventory: Path = option("inventory", "--inventory", "-i", default=..., help="Inventory YAML."),
            hosts: str = typer.Option(None, "--hosts", help="Only these hosts: a host set (all, gpu01,gpu03, "
                                      "gpu[01-04]!gpu02, @region0); default: the inventory's first host."),
            host: str = typer.Option(None, "--host", hidden=True, help="Deprecated: --hosts."),
            hidden: int = typer.Option(4096, min=64, help="Model hidden size of the GEMM sweep (Mixtral-8x7B: 4096)."),
            ffn_hidden: int = typer.Option(14336, min=64,
                                           help="Expert FFN hidden size of the GEMM sweep (Mixtral-8x7B: 14336)."),
            json_out: bool = JSON_OPT):
    """Run nccl-tests all-to-all and all-reduce sweeps and a GEMM sweep on each host (in parallel), fit
    t = α + β·n per task, and store the fits (used by mfctl schedule; with several hosts, each task's slowest
    host's). Progress on stderr: a bar with its ETA on a terminal, plain lines otherwise."""
    from rich.table import Table

    from mfctl.bench.profile import run_profile, store
    from mfctl.cli.progress import ProgressObserver
    from mfctl.context import Context
    from mfctl.errors import UsageError
    from mfctl.inventory import load_inventory

    if host is not None:
        if hosts is not None:
            raise UsageError("--host is the old name of --hosts: give one of them")
        print_error("--host is deprecated: use --hosts (a host set, as every command takes)", "warning")
        hosts = host
    inv = load_inventory(inventory)
    names = [inv.hosts[0].name] if hosts is None else host_names(hosts, inv)  # the one host selector
    with ProgressObserver() as obs:  # stderr only, --json too: stdout holds the object alone
        doc = run_profile(Context.from_settings(inv), names, hidden=hidden, ffn_hidden=ffn_hidden, observer=obs)
    path = store(doc)
    if json_out:
        emit_json(doc | {"path": str(path)})
        return
    t = Table("task", "α", "rate", "fit error", "points", *(["host"] if len(names) > 1 else []),
              title=f"profile of {doc['host']}" + (" (each task's slowest host)" if len(names) > 1 else ""))
    for f in doc["fits"]:
        rate = f"{f['rate_per_s'] / 1e9:.1f} GB/s" if f["unit"] == "byte" else f"{f['rate_per_s'] / 1e12:.1f} TFLOP/s"
        t.add_row(f["task"], f"{f['alpha_s'] * 1e6:.1f} µs", rate, f"{100 * f['rel_rms_error']:.1f}%", str(f["points"]),
                  *([f["host"]] if len(names) > 1 else []))
    out_console().print(t)
    out_console().print(f"stored: {path}", highlight=False)


@handle_errors
def schedule(playbook: Path = typer.Argument(..., help="Run playbook YAML (its model and parallelism)."),
             inventory: Path = option("inventory", "--inventory", "-i", default=None,
                                      help="Inventory YAML (default: the playbook's)."),
             json_out: bool = JSON_OPT):
    """Choose the forward and backward pipeline degrees (r ∈ {1,2,4,8}) and the gradient partitioning for a
    playbook's model, showing the predicted step time of every choice (uses mfctl profile's fits if present)."""
    from rich.table import Table

    from mfctl.bench.profile import load_fits
    from mfctl.context import Context
    from mfctl.fabric.schedule import plan_schedule
    from mfctl.inventory import load_inventory
    from mfctl.runtime.playbook import load_playbook

    pb = load_playbook(playbook)
    inv = load_inventory(inventory or pb.inventory_path())
    fits, pp = load_fits(inv.name)
    s = plan_schedule(pb, inv, Context(inv).link_rates(inv.regions[0].hosts[0]), fits)
    cmd = s.command(playbook)
    if json_out:
        emit_json({"schema": "mfctl.schedule/v1", "profile": str(pp) if fits else None, "choices": s.choices,
                   "gradient_partitions": s.gradient_partitions, "best": s.best, "best_partitions": s.best_partitions,
                   "command": cmd})
        return
    t = Table("fwd r", "bwd r", "predicted iteration s", title=f"{pb.model.name}: best 8 of 16 FSMoE pipeline degrees "
              + ("(profiled)" if fits else "(default costs; run mfctl profile)"))
    for r in sorted(s.choices, key=lambda r: r["iteration_s"])[:8]:
        t.add_row(str(r["pipeline_degree"]), str(r["bp_pipeline_degree"]), f"{r['iteration_s']:.3f}")
    con = out_console()
    con.print(t)
    con.print(f"gradient all-reduce ({s.grad_bytes / 2**30:.2f} GiB per GPU over the EPS), exposed ms by partitions: "
              + ", ".join(f"{p['partitions']}: {p['exposed_allreduce_s'] * 1e3:.1f}" for p in s.gradient_partitions)
              + f" → best {s.best_partitions} (included above)", highlight=False)
    con.print(f"run with: {cmd}", highlight=False)
