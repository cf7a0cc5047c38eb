"""``mfctl simulate`` — what-if: iteration time, cost and performance per dollar by fabric."""

from __future__ import annotations

from pathlib import Path

import typer

from mfctl.cli.common import JSON_OPT, emit_json, handle_errors, number_option, out_console


def _checked(model: str, gpus: int, link_gbps: int, plot: Path | None, fabric: list[str] | None) -> list[str]:
    """The fabrics to compare (the fat-tree first: the reference for performance per dollar), once
    every option is known to be right; UsageError (exit 2) naming the first that is not."""
    from mfctl.errors import UsageError
    from mfctl.fabric import whatif

    if model not in whatif.PRESETS:
        raise UsageError(f"--model must be one of {', '.join(whatif.PRESETS)}")
    if link_gbps not in whatif.PRICES:
        raise UsageError(f"--link-gbps must be one of {', '.join(map(str, whatif.PRICES))}")
    pre = whatif.PRESETS[model]
    group = pre.ep * pre.tp * pre.pp
    if gpus % group:
        raise UsageError(f"--gpus must be a multiple of {group} for {model} (EP {pre.ep} x TP {pre.tp} x PP {pre.pp}: "
                         f"one pipeline of expert-parallel groups), got {gpus}")
    if plot is not None and (plot.suffix.lower() != ".png" or not plot.parent.is_dir()):
        raise UsageError(f"--plot needs a .png file in an existing directory, got {str(plot)!r}")
    fabrics = list(dict.fromkeys(fabric or whatif.FABRICS))
    bad = [f for f in fabrics if f not in whatif.FABRICS]
    if bad:
        raise UsageError(f"unknown fabric {bad[0]!r}; one of {', '.join(whatif.FABRICS)}")
    return fabrics if "fat-tree" in fabrics else ["fat-tree", *fabrics]


def _reproduce(plot: Path | None, json_out: bool) -> None:
    """``--reproduce-paper``: ours vs the paper per cell, the errors, the orderings, perf/$, the sweep."""
    from rich.markup import escape
    from rich.table import Table

    from mfctl.errors import UsageError
    from mfctl.fabric import reproduce

    if plot is not None and (plot.suffix.lower() != ".png" or not plot.parent.is_dir()):
        raise UsageError(f"--plot needs a .png file in an existing directory, got {str(plot)!r}")
    rep = reproduce.reproduce()
    if plot:
        reproduce.plot(rep, str(plot))
    if json_out:
        emit_json({"schema": "mfctl.simulate.reproduce/v1", **rep.to_dict(), "plot": str(plot) if plot else None})
        return
    con = out_console()
    t = Table("model", "Gbit/s", "fabric", "ours", "paper", "error", title="normalized iteration time (1 = the model's best)")
    for c in rep.cells:
        if c["paper"] is None and c["gbps"] not in (200, 800):
            continue
        t.add_row(c["model"], str(c["gbps"]), c["fabric"], f"{c['ours']:.3f}",
                  "-" if c["paper"] is None else f"{c['paper']:.3f}",
                  "-" if c["error"] is None else f"{100 * c['error']:.1f}%")
    con.print(t)
    for g in ("100", "400", "all"):
        s = rep.summary[g]
        con.print(f"{g}{'G' if g != 'all' else ''}: mean error {100 * s['mean_error']:.1f}%, "
                  f"worst {100 * s['worst_error']:.1f}% over {s['cells']} cells", highlight=False)
    con.print("orderings: " + ", ".join(f"{k} {'held' if v else 'NOT held'}" for k, v in rep.orderings.items()
                                        if k != "failures"), highlight=False)
    for f in rep.orderings["failures"]:
        con.print(f"  - {escape(f)}", highlight=False)
    con.print("MixNet perf/$ vs fat-tree: " + ", ".join(
        f"{p['model']} {p['gbps']}G {p['mixnet_vs_fat_tree']:.2f}x" for p in rep.perf_per_dollar if p["gbps"] in (100, 400)),
        highlight=False)
    con.print("MixNet / fat-tree by reconfiguration latency (Mixtral 8x22B, 400G): " + ", ".join(
        f"{x['latency_s']:g} s {x['relative_to_fat_tree']:.3f}x" for x in rep.latency_sweep), highlight=False)
    if plot:
        con.print(f"plot: {plot}", highlight=False)


@handle_errors
def simulate(ctx: typer.Context,
             model: str = typer.Option("mixtral-8x7b", help="mixtral-8x22b, mixtral-8x7b, llama-moe, qwen-moe, "
                                                            "deepseek-256 (paper Table 1; docs/planning.md)."),
             gpus: int = typer.Option(1024, min=8, max=131_072,  # whatif.MAX_GPUS (not imported: the CLI loads fast)
                                      help="Cluster size (GPUs, 8 per server, at most 131,072): a multiple of the model's "
                                           "EP x TP x PP (mixtral-8x22b 512, mixtral-8x7b 128, llama-moe 64, "
                                           "qwen-moe 128, deepseek-256 1024)."),
             link_gbps: int = typer.Option(400, help="NIC speed: 100, 200, 400 or 800 Gbit/s."),
             alpha: int = typer.Option(6, min=1, max=7, help="mFabric: OCS NICs per server (of 8)."),
             reconfig_latency_ms: float = number_option(25.0, "--reconfig-latency-ms", min=0.0,
                                                        help="mFabric: blocking reconfiguration per iteration."),
             micro_batches: int = typer.Option(8, min=1, max=4096,  # whatif.MAX_MICRO_BATCHES
                                               help="Micro-batches per iteration."),
             fabric: list[str] = typer.Option(None, "--fabric", "-f", help="Fabrics to compare (repeat); default all."),
             sweep_latency: bool = typer.Option(False, "--sweep-latency",
                                                help="Also sweep the reconfiguration latency 1 µs .. 10 s."),
             plot: Path = typer.Option(None, "--plot", help="Write a PNG with the comparison (and the sweep)."),
             reproduce_paper: bool = typer.Option(False, "--reproduce-paper",
                                                  help="Compare with the MixNet paper's normalized iteration times "
                                                       "(4 models x 100/400G x 4 fabrics, 1,024 GPUs): ours, the "
                                                       "paper's and the error per cell; --plot writes a Fig. 12-like "
                                                       "PNG. It takes no other option but --plot and --json."),
             json_out: bool = JSON_OPT):
    """What-if: a model on a cluster, compared across fabrics (see docs/planning.md for the model)."""
    from rich.table import Table

    from mfctl.errors import UsageError
    from mfctl.fabric import whatif

    if reproduce_paper:
        given = [p.opts[0] for p in ctx.command.params if p.name not in ("reproduce_paper", "plot", "json_out")
                 and getattr(ctx.get_parameter_source(p.name), "name", None) in ("COMMANDLINE", "ENVIRONMENT")]
        if given:  # the paper's setup is fixed (1,024 GPUs, 100/400G, Table 1): an option would be ignored
            raise UsageError(f"--reproduce-paper uses the paper's own setup: it takes no {', '.join(given)} "
                             "(only --plot and --json)")
        _reproduce(plot, json_out)
        return
    fabrics = _checked(model, gpus, link_gbps, plot, fabric)
    sc = whatif.Scenario(whatif.PRESETS[model], gpus=gpus, link_gbps=link_gbps, alpha=alpha,
                         reconfig_latency_s=reconfig_latency_ms / 1000, micro_batches=micro_batches)
    try:
        res = whatif.simulate(sc, fabrics)
        sweep = whatif.latency_sweep(sc, [1e-6, 1e-3, 0.025, 0.1, 0.3, 1.0, 3.0, 10.0]) if sweep_latency else None
    except ValueError as e:
        raise UsageError(str(e)) from None
    title = f"{sc.preset.name}, {gpus} GPUs, {link_gbps}G, mFabric alpha={alpha}"
    if plot:
        whatif.plot(res, sweep, str(plot), title)
    if json_out:
        emit_json({"schema": "mfctl.simulate/v1", "model": model, "gpus": gpus, "link_gbps": link_gbps, "alpha": alpha,
                   "reconfig_latency_s": sc.reconfig_latency_s, "fabrics": [r.to_dict() for r in res],
                   "latency_sweep": sweep, "plot": str(plot) if plot else None})
        return
    t = Table("fabric", "iter. s", "tokens/s", "a2a share", "network $M", "perf/$ vs fat-tree", title=title)
    t.columns[0].no_wrap = True
    for r in res:
        t.add_row(r.fabric, f"{r.iteration_s:.2f}", f"{r.details['tokens_per_s']:,.0f}", f"{100 * r.a2a_share:.0f}%",
                  f"{r.cost_usd / 1e6:.2f}", f"{r.relative_perf_per_dollar:.2f}x")
    con = out_console()
    con.print(t)
    if sweep:
        con.print("mFabric vs fat-tree by reconfiguration latency: " + ", ".join(
            f"{x['latency_s']:g} s → {x['relative_to_fat_tree']:.3f}x" for x in sweep), highlight=False)
    if plot:
        con.print(f"plot: {plot}", highlight=False)
