"""``mfctl profile`` (fit α + β·n per task) and ``mfctl schedule`` (FSMoE pipeline degrees)."""

from __future__ import annotations

from pathlib import Path

import typer

from mfctl.cli.common import JSON_OPT, emit_json, handle_errors, host_names, option, out_console, print_error


@handle_errors
def profile(ctx: typer.Context,
            inventory: Path = option("inventory", "--inventory", "-i", default=None,
                                     help="Inventory YAML (required without --run; with it: store the fits for this "
                                          "inventory instead of the run's)."),
            run: str = typer.Option(None, "--run", help="Fit a training run's own measured all-to-all and expert GEMM "
                                    "times instead of sweeping: a run id, or latest."),
            runs_dir: Path = option("runs_dir", "--runs-dir", default=None, help="Where run directories are (--run)."),
            hosts: str = typer.Option(None, "--hosts", help="Only these hosts: a host set (all, gpu01,gpu03, "
                                      "gpu[01-04]!gpu02, @region0); default: the inventory's first host."),
            host: str = typer.Option(None, "--host", hidden=True, help="Deprecated: --hosts."),
            hidden: int = typer.Option(4096, min=64, help="Model hidden size of the GEMM sweep (Mixtral-8x7B: 4096)."),
            ffn_hidden: int = typer.Option(14336, min=64,
                                           help="Expert FFN hidden size of the GEMM sweep (Mixtral-8x7B: 14336)."),
            replace: bool = typer.Option(False, "--replace", help="--run: replace a stored profile that a sweep of the "
                                         "inventory's hosts measured (without it, that is refused: exit 2)."),
            json_out: bool = JSON_OPT):
    """Run nccl-tests all-to-all and all-reduce sweeps and a GEMM sweep on each host (in parallel), fit
    t = α + β·n per task, and store the fits (used by mfctl schedule; with several hosts, each task's slowest
    host's). Progress on stderr: a bar with its ETA on a terminal, plain lines otherwise. With --run RUN: fit
    the run's own measured timings instead (all-to-all n in bytes of a rank's send buffer, GEMM n in FLOP; each
    size bin's fastest sample), stored for the run's inventory; a run without timings exits 2, and so does one
    whose fits would replace a stored sweep's profile without --replace."""
    from mfctl.bench.profile import run_profile, store
    from mfctl.cli.progress import ProgressObserver
    from mfctl.context import Context
    from mfctl.errors import UsageError
    from mfctl.inventory import load_inventory

    if run is not None:
        given = [f"--{p.replace('_', '-')}" for p in ("hosts", "host", "hidden", "ffn_hidden")
                 if ctx.get_parameter_source(p).name not in ("DEFAULT", "DEFAULT_MAP")]
        if given:
            raise UsageError(f"{', '.join(given)}: for a sweep; --run fits the run's own timings of its own hosts")
        return _profile_run(run, runs_dir, load_inventory(inventory).name if inventory else None, json_out, replace)
    if replace:
        raise UsageError("--replace: for --run (a sweep's fits always replace the inventory's stored profile)")
    if inventory is None:
        raise UsageError("give --inventory (-i) to sweep its hosts, or --run RUN to fit a run's timings")
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
    _render(doc, f"profile of {doc['host']}", path)


def _rate(f: dict) -> str:
    """A fit's rate for people: GB/s, or GFLOP/s under 1 TFLOP/s (a CPU's) and TFLOP/s above."""
    r = f["rate_per_s"]
    if f["unit"] == "byte":
        return f"{r / 1e9:.2f} GB/s" if r < 1e10 else f"{r / 1e9:.1f} GB/s"
    return f"{r / 1e9:.1f} GFLOP/s" if r < 1e12 else f"{r / 1e12:.1f} TFLOP/s"


def _render(doc: dict, title: str, path: Path) -> None:
    from rich.table import Table

    several = len(doc["hosts"]) > 1
    samples = doc["source"].get("kind") == "run"
    t = Table("task", "α", "rate", "fit error", "points", *(["samples"] if samples else []), *(["host"] if several else []),
              title=title + (" (each task's slowest host)" if several else ""))
    for f in doc["fits"]:
        t.add_row(f["task"], f"{f['alpha_s'] * 1e6:.1f} µs", _rate(f), f"{100 * f['rel_rms_error']:.1f}%", str(f["points"]),
                  *([str(f["samples"])] if samples else []), *([f["host"]] if several else []))
    con = out_console()
    con.print(t)
    for s in doc.get("skipped", []):
        con.print(f"not fitted: {s['host']} {s['why']} ({s['samples']} samples)", highlight=False)
    for w in doc.get("warnings", []):
        print_error(w, "warning")
    con.print(f"stored: {path}", highlight=False)


def _profile_run(run_id: str, runs_dir: Path | None, inventory_name: str | None, json_out: bool,
                 replace: bool = False) -> None:
    """``mfctl profile --run``: fit, store (a stored sweep's profile only with ``replace``), show."""
    from mfctl.bench.profile import profile_of_run, store
    from mfctl.cli.metrics import _run_dir
    from mfctl.errors import UsageError

    doc = profile_of_run(_run_dir(run_id, runs_dir), inventory_name)
    before = _replaced(doc["inventory"])
    if before and before.startswith("a sweep") and not replace:
        # the hosts' own sweep is the testbed's hardware; a run's (a CPU job on a mock, say) is not: never silently
        raise UsageError(f"the stored profile of {doc['inventory']} was fitted on {before} (its hosts' nccl-tests and "
                         f"GEMM sweep): run {doc['source']['run_id']}'s fits would replace it — give --replace, or "
                         "--inventory INV to store them for another inventory")
    path = store(doc)
    if before:
        doc["replaced"] = before
    if json_out:
        emit_json(doc | {"path": str(path)})
        return
    _render(doc, f"profile of run {doc['source']['run_id']} ({doc['host']}, {doc['source']['samples']} samples)", path)
    if before:
        out_console().print(f"(it replaces the profile fitted on {before}: mfctl schedule uses this one now)",
                            highlight=False)


def _replaced(inventory_name: str) -> str | None:
    """What the inventory's stored profile was fitted on (``run RUN`` or ``a sweep of HOSTS``), or None."""
    from mfctl.bench.profile import load_profile

    try:
        old, _ = load_profile(inventory_name)
    except (OSError, ValueError) as e:  # a damaged stored profile is replaced all the same: say so
        print_error(f"the stored profile of {inventory_name} could not be read ({e}): it is replaced", "warning")
        return None
    if not isinstance(old, dict):
        return None
    src = old.get("source") or {"kind": "sweep"}
    return f"run {src.get('run_id')}" if src.get("kind") == "run" else f"a sweep of {old.get('host', '?')}"


@handle_errors
def schedule(playbook: Path = typer.Argument(..., help="Run playbook YAML (its model and parallelism)."),
             inventory: Path = option("inventory", "--inventory", "-i", default=None,
                                      help="Inventory YAML (default: the playbook's)."),
             json_out: bool = JSON_OPT):
    """Choose the forward and backward pipeline degrees (r ∈ {1,2,4,8}) and the gradient partitioning for a
    playbook's model, showing the predicted step time of every choice (uses mfctl profile's fits if present)."""
    from rich.table import Table

    from mfctl.bench.profile import load_profile
    from mfctl.context import Context
    from mfctl.fabric.schedule import plan_schedule
    from mfctl.inventory import load_inventory
    from mfctl.runtime.playbook import load_playbook

    pb = load_playbook(playbook)
    inv = load_inventory(inventory or pb.inventory_path())
    doc, pp = load_profile(inv.name)
    fits = {f["task"]: f for f in doc["fits"]} if doc else {}
    source = (doc.get("source") or {"kind": "sweep"}) if doc else None  # (a profile of an older mfctl: a sweep's)
    s = plan_schedule(pb, inv, Context(inv).link_rates(inv.regions[0].hosts[0]), fits)
    cmd = s.command(playbook)
    if json_out:
        emit_json({"schema": "mfctl.schedule/v1", "profile": str(pp) if fits else None, "profile_source": source,
                   "costs": s.costs, "choices": s.choices, "gradient_partitions": s.gradient_partitions, "best": s.best,
                   "best_partitions": s.best_partitions, "command": cmd, "warnings": s.warnings})
        return
    t = Table("fwd r", "bwd r", "predicted iteration s", title=f"{pb.model.name}: best 8 of 16 FSMoE pipeline degrees "
              + ("(profiled)" if fits else "(default costs; run mfctl profile)"))
    for r in sorted(s.choices, key=lambda r: r["iteration_s"])[:8]:
        t.add_row(str(r["pipeline_degree"]), str(r["bp_pipeline_degree"]), f"{r['iteration_s']:.3f}")
    con = out_console()
    con.print(t)
    con.print(_costs_line(s.costs, source), highlight=False)
    if "gemm" in s.costs["profiled"] and s.costs["gemm_eta"] < OTHER_HARDWARE_ETA:
        from mfctl.fabric.stepmodel import StepSpec

        print_error(f"the profiled expert GEMM runs at {100 * s.costs['gemm_eta']:.3g} % of the "
                    f"{StepSpec.peak_flops / 1e12:.0f} TFLOP/s the step model takes for a GPU: a profile of other "
                    "hardware (a CPU?) — the step times above are that hardware's, not the testbed's GPUs'", "warning")
    for w in s.warnings:
        print_error(w, "warning")
    con.print(f"gradient all-reduce ({s.grad_bytes / 2**30:.2f} GiB per GPU over the EPS), exposed ms by partitions: "
              + ", ".join(f"{p['partitions']}: {p['exposed_allreduce_s'] * 1e3:.1f}" for p in s.gradient_partitions)
              + f" → best {s.best_partitions} (included above)", highlight=False)
    con.print(f"run with: {cmd}", highlight=False)


#: a profiled expert-GEMM efficiency below this (of the step model's GPU peak) is not a GPU's: an A100
#: runs large bf16 GEMMs at 60–80 % of peak, the mock's and a CPU's profile at well under 1 %
OTHER_HARDWARE_ETA = 0.01


def _costs_line(costs: dict, source: dict | None) -> str:
    """What the step times were priced with, and where each cost came from."""
    from mfctl.fabric.stepmodel import StepSpec

    where = ("no profile" if source is None else f"run {source.get('run_id')}'s profile" if source.get("kind") == "run"
             else "the sweep profile")
    said = lambda task: ("profiled" if task in costs["profiled"] else "default" if source is None  # noqa: E731
                         else f"default: {where} has no {task} fit")
    return (f"costs: all-to-all α {costs['alltoall_alpha_s'] * 1e6:.1f} µs ({said('alltoall')}); expert GEMM η "
            f"{100 * costs['gemm_eta']:.3g} % of {StepSpec.peak_flops / 1e12:.0f} TFLOP/s ({said('gemm')}); gradient "
            f"all-reduce α {costs['all_reduce_alpha_s'] * 1e6:.1f} µs ({said('all_reduce')}); all-to-all bandwidth: the "
            "link rates and circuits" + (f" — from {where}" if source else ""))
