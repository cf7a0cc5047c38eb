"""``mfctl run PLAYBOOK`` and ``mfctl runs list|show|import-log|report|delete|prune``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from mfctl.cli.common import JSON_OPT, confirm, emit_json, handle_errors, markup, number_option, option, out_console, print_error

if TYPE_CHECKING:
    from mfctl.runtime.summary import RunSummary

runs_app = typer.Typer(help="Past runs (runs/<run-id>/): list, show, report, import a training log, delete, prune.",
                       no_args_is_help=True)
RUNS_DIR_OPT = option("runs_dir", "--runs-dir", default=None, help="Where run directories go.")


def _observer(json_out: bool, planned: int, show_logs: bool = False):
    """The run's progress on stderr (:class:`mfctl.cli.progress.ProgressObserver`): each phase's
    line, then the training's bar with its ETA on a terminal, else a count line at most every
    MFCTL_PROGRESS_INTERVAL seconds (and the last iteration's); reconfigurations, warnings and
    (``--logs``) the hosts' lines as they come. With --json too: stdout holds only the summary."""
    from mfctl.cli.progress import ProgressObserver
    from mfctl.runtime.job import Observer

    class RunObserver(ProgressObserver, Observer):
        def phase(self, name, detail="", total=None):
            self.say(markup("[cyan]{:>8}[/] {}", name, detail))
            if name == "train":
                self._training(total or planned)

        def _training(self, n):  # (the first iterations may come before the train phase: the runtimes' hello)
            if self._name != "training":
                self.begin("training", n, announce=False)

        def iteration(self, done, total_, m):
            self._training(total_)
            self.advance(done, total_, info=f"{m['seconds']:.2f} s/it (testbed time)  epoch {m['epoch']}"
                                            + ("  (reconfiguring)" if m.get("paused") else ""))

        def reconfiguration(self, r):  # a mfctl.runtime.reconfig.Reconfiguration
            head = f"epoch {r.epoch} done" if r.outcome == "applied" else f"epoch {r.epoch} {r.outcome.upper()}"
            msg = (f"{head}: +{r.xc_added}/-{r.xc_removed} cross-connects, switch {r.t_switch_ms:.1f} ms, link-up "
                   f"{r.t_linkup_ms / 1000:.2f} s, runtime {r.t_runtime_ms:.0f} ms"
                   + (f" — {r.error}" if r.error else ""))
            self.say(markup("[magenta]{:>8}[/] {}", "reconfig", msg))

        def log_line(self, host, line):
            if show_logs:
                self.say(markup("[dim]\\[{}][/] {}", host, line))

        def warning(self, message):
            self.say(markup("[yellow]warning:[/] {}", message))

    return RunObserver()


def render_summary(s: "RunSummary", show_error: bool = True) -> None:
    """A run's summary as tables on stdout (:class:`mfctl.runtime.summary.RunSummary`)."""
    from rich.text import Text

    con = out_console()  # (its strings are plain text: names, paths and messages print as they are)
    colour = {"ok": "green", "failed": "red", "interrupted": "yellow"}.get(s.status, "red")
    con.print(markup("\n[bold]run {}[/] — {} on {}: ", s.run_id, s.playbook, s.inventory) + Text(s.status, style=colour))
    con.print(_facts_table(s, show_error))
    if s.reconfigurations:
        con.print(_reconfig_table(s.reconfigurations))
    elif not s.is_training_log and s.iterations:
        con.print("no reconfigurations (the policy found none worth its cost)")
    if s.ocs:
        for region, cs in s.ocs["circuits"].items():
            con.print(f"circuits in {region}: " + ", ".join(f"{c['a']}↔{c['b']}" for c in cs), highlight=False)
    con.print(f"run directory: {s.run_dir}")


def _facts_table(s: "RunSummary", show_error: bool):
    """The summary table: the training's figures, then how the run ran (:func:`_run_rows`)."""
    from rich.table import Table
    from rich.text import Text

    t = Table(show_header=False, title="summary", title_justify="left")
    it = s.iteration_time_s or {}
    if s.error and show_error:  # (mfctl run says it on stderr instead, once)
        t.add_row("error", Text(str(s.error), style="red"))
    t.add_row("iterations", f"{s.iterations} / {s.iterations_planned}")
    if it:
        t.add_row("iteration time", f"mean {it['mean']:.3f} s, p50 {it['p50']:.3f} s, min {it['min']:.3f} s, "
                                    f"max {it['max']:.3f} s")
        t.add_row("throughput", f"{s.tokens_per_s:,.0f} tokens/s")
        if len(s.iteration_time_by_epoch_s) > 1:
            t.add_row("per topology epoch", ", ".join(f"epoch {e}: {v:.3f} s" for e, v in s.iteration_time_by_epoch_s.items()))
    if s.ep_share_on_circuits is not None:
        t.add_row("EP bytes on circuits", f"{100 * s.ep_share_on_circuits:.1f}% of "
                                          f"{s.ep_inter_server_bytes / 1e12:.2f} TB inter-server")
    if s.prediction_rel_error:  # (each predictor's mean relative L1 error: docs/metrics.md, "The run summary")
        t.add_row("traffic prediction", "mean error of each predictor of the EP traffic: "
                  + ", ".join(f"{k} {100 * v:.1f}%" for k, v in s.prediction_rel_error.items()) + " (docs/metrics.md)")
    if s.health["hosts"]:
        t.add_row("health", f"{s.health['ok']}/{s.health['hosts']} hosts ok (sweep {s.health['sweep_s']:.2f} s)")
    _run_rows(t, s)
    return t


def _run_rows(t, s: "RunSummary") -> None:
    """The summary table's rows on how the run ran: FSMoE, launch, time, notes, warnings, OCS."""
    from rich.text import Text

    if s.fsmoe:
        f = s.fsmoe
        deg = lambda r: str(r) if r else "best per layer"  # noqa: E731  (degree 0: each layer's best)
        t.add_row("FSMoE schedule", f"pipeline degree r (each MoE layer's all-to-all and expert compute overlapped in r "
                                    f"chunks): forward {deg(f['pipeline_degree'])}, backward {deg(f['bp_pipeline_degree'])}"
                                    f"; gradient all-reduce in {f['grad_partitions']} partitions (docs/metrics.md)")
    if s.slurm_job:
        t.add_row("launch", f"Slurm job {s.slurm_job}")
    wall = "an unknown time" if s.wall_train_s is None else f"{s.wall_train_s:.1f} s"
    t.add_row("time", f"{s.simulated_train_s or 0:.1f} s testbed time in {wall} wall (x{s.time_scale:g})")
    if s.note:
        t.add_row("note", s.note)
    for w in s.warnings:
        t.add_row(Text("warning", style="yellow"), w)
    if s.tflops_per_gpu_mean:
        t.add_row("TFLOP/s per GPU", f"{s.tflops_per_gpu_mean:.1f} (mean of the logged iterations)")
    for name, o in ((s.ocs.get("by_ocs") or {"": s.ocs}).items() if s.ocs else ()):  # several OCSes: a row each
        t.add_row(f"OCS {name} read-back" if name else "OCS read-back",
                  (Text("matches the last plan", style="green") if o["matches_last_plan"]
                   else Text("DIFFERS from the last plan", style="red"))
                  + f" — {len(o['cross_connects'])} cross-connects (a circuit is two: one per direction) "
                    f"via {o['endpoint']}")


def _reconfig_table(recs: list[dict]):
    from rich.table import Table

    regions = len({x.get("region") for x in recs}) > 1  # several regions (and OCSes): say whose each is
    ocses = len({x.get("ocs") for x in recs}) > 1
    r = Table("epoch", *(["region"] if regions else []), *(["OCS"] if ocses else []), "iter", "outcome", "xc +/-",
              "switch", "link-up", "runtime", "a2a est. before→after",
              title="reconfigurations (link-up, runtime: testbed time)", title_justify="left")
    for x in recs:
        r.add_row(str(x["epoch"]), *([str(x.get("region"))] if regions else []), *([str(x.get("ocs"))] if ocses else []),
                  str(x["iteration"]), x.get("outcome", "applied") + (", never resumed" if x.get("never_resumed") else ""),
                  f"+{x['xc_added']}/-{x['xc_removed']}",
                  f"{x['t_switch_ms']:.1f} ms", f"{x['t_linkup_ms'] / 1000:.2f} s", f"{x['t_runtime_ms']:.0f} ms",
                  f"{_ms(x['objective_before_s'])} → {_ms(x['objective_after_s'])}")
    return r


def _ms(seconds: float) -> str:
    """A modelled all-to-all time: whole ms, or 3 significant digits under 10 ms (a change from
    2.4 to 1.6 ms must not read "2 → 2 ms")."""
    ms = seconds * 1000
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.3g} ms"


@handle_errors
def run(playbook: Path = typer.Argument(..., help="Run playbook YAML (see playbooks/)."),
        inventory: Path = option("inventory", "--inventory", "-i", default=None,
                                       help="Use this inventory (e.g. a running mock's) instead of the playbook's."),
        runs_dir: Path = RUNS_DIR_OPT,
        skip_health: bool = option("skip_health", "--skip-health", help="Run even if the health sweep finds critical problems."),
        threshold: list[str] = typer.Option(None, "--threshold", help="A health threshold for the pre-flight sweep and "
                                            "the samples, as for mfctl health: name=value (repeat)."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Validate and print the exact launch (commands, environment "
                                                               "per host, or the sbatch script); start nothing."),
        logs: bool = typer.Option(False, "--logs", help="Stream every host's runtime output, prefixed with the host."),
        pipeline_degree: int = typer.Option(None, "--pipeline-degree", help="Override the forward pipeline degree (1, 2, 4, 8)."),
        bp_pipeline_degree: int = typer.Option(None, "--bp-pipeline-degree", help="Override the backward pipeline degree."),
        grad_partitions: int = typer.Option(None, "--grad-partitions",
                                            help="Override the gradient all-reduce partitions (1, 2, 4, 8, 16)."),
        junit: Path = typer.Option(None, "--junit", help="Also write a JUnit XML report here: the run's phases, "
                                   "reconfigurations and pre-flight health checks as test cases (for CI)."),
        json_out: bool = JSON_OPT):
    """Run a reconfigurable MoE training job (starts and stops the mock testbed if the playbook says so)."""
    from mfctl.cli.common import output_path
    from mfctl.runtime.health_gate import parse_overrides
    from mfctl.runtime.job import Job
    from mfctl.runtime.playbook import load_playbook, override_fsmoe
    from mfctl.runtime.summary import RunSummary

    output_path(junit, "--junit")  # a report that cannot be written: said before the run, not after it
    limits = parse_overrides(threshold)
    pb = override_fsmoe(load_playbook(playbook), pipeline_degree=pipeline_degree, bp_pipeline_degree=bp_pipeline_degree,
                        grad_partitions=grad_partitions)
    obs = _observer(json_out, pb.training.iterations, logs)
    job = Job(pb, inventory_override=str(inventory) if inventory else None, runs_dir=str(runs_dir) if runs_dir else None,
              skip_health=skip_health, health_limits=limits, observer=obs)
    job.prepare()  # a bad inventory/playbook combination fails here, before anything starts (exit 3)
    if dry_run:
        _print_launch(pb, job, json_out)
        return
    import time

    started = time.time()
    try:
        summary = job.run()
    finally:
        obs.close()
    s = RunSummary.from_dict(summary)
    if junit is not None:
        from mfctl import junit as J

        J.write(junit, [J.run_suite(summary, job.preflight.results, started=started, wall_s=time.time() - started)])
    if json_out:
        emit_json(summary)
    else:
        render_summary(s, show_error=False)
    if s.error:
        print_error(s.error, "error" if s.status == "failed" else s.status)
    raise typer.Exit(s.exit_code)


def _print_launch(pb, job, json_out: bool) -> None:
    from mfctl.inventory import load_inventory
    from mfctl.runtime.render import render_hosts, render_slurm

    inv = load_inventory(job.inv_path)
    controller = "<controller-address>:<port>"
    if pb.runtime.launcher == "slurm":
        script = render_slurm(pb, inv, controller, "<redacted>", "<run-id>")
        if json_out:
            emit_json({"schema": "mfctl.run.dry-run/v1", "launcher": "slurm", "sbatch": script})
        else:
            sys.stdout.write(script)
        return
    hosts = render_hosts(pb, inv, controller, "<redacted>")
    if json_out:
        emit_json({"schema": "mfctl.run.dry-run/v1", "launcher": pb.runtime.launcher,
                   "hosts": [{"host": h.host, "env": h.env, "argv": h.argv, "command": h.command_line()} for h in hosts]})
        return
    for h in hosts:
        out_console().print(markup("[bold]{}[/]: {}", h.host, h.command_line()), highlight=False, soft_wrap=True)


def _runs_dir(runs_dir: Path | None) -> Path:
    from mfctl import settings

    return Path(runs_dir or settings.get("runs_dir"))


@runs_app.command("list")
@handle_errors
def list_runs(ctx: typer.Context, runs_dir: Path = RUNS_DIR_OPT, json_out: bool = JSON_OPT):
    """List runs with their status, iterations and throughput."""
    from rich.table import Table

    from mfctl.errors import UsageError
    from mfctl.runtime.rundir import load_summary, run_dirs

    rows = []
    d = _runs_dir(runs_dir)
    if d.exists() and not d.is_dir():
        raise UsageError(f"runs directory {d} is not a directory")
    if not d.is_dir() and ctx.get_parameter_source("runs_dir").name == "COMMANDLINE":  # named on purpose: a typo
        raise UsageError(f"no runs directory {d}")
    for rd in run_dirs(d):
        try:
            s = load_summary(rd)
        except (OSError, ValueError, TypeError) as e:
            print_error(f"skipping {rd / 'summary.json'}: unreadable summary ({e})", "warning")
            continue
        rows.append({"run_id": s.run_id, "playbook": s.playbook, "status": s.status, "iterations": s.iterations,
                     "tokens_per_s": s.tokens_per_s, "reconfigurations": len(s.reconfigurations)})
    if json_out:
        emit_json({"schema": "mfctl.runs.list/v1", "runs": rows})
        return
    if not rows:
        print_error(f"no runs in {d.resolve()} (start one with mfctl run PLAYBOOK)", "note")
        return
    t = Table("run", "playbook", "status", "iters", "tokens/s", "reconf")
    t.columns[0].no_wrap = True
    for r in rows:
        t.add_row(r["run_id"], r["playbook"], r["status"], str(r["iterations"]),
                  f"{r['tokens_per_s']:,.0f}" if r["tokens_per_s"] else "—", str(r["reconfigurations"]))
    out_console().print(t)


@runs_app.command("show")
@handle_errors
def show_run(run_id: str = typer.Argument(..., help="Run id (a directory under the runs dir), or latest."),
             runs_dir: Path = RUNS_DIR_OPT, json_out: bool = JSON_OPT):
    """Show a run's summary."""
    from mfctl.errors import DataError, UsageError
    from mfctl.runtime.rundir import recover, run_dirs
    from mfctl.runtime.summary import RunSummary

    if not run_id or "/" in run_id or run_id.startswith("."):
        raise UsageError(f"{run_id!r} is not a run id (see mfctl runs list)")
    if run_id == "latest":  # as runs report and metrics export take it
        from mfctl.cli.metrics import latest_run

        run_id = latest_run(_runs_dir(runs_dir)).name
    rd = _runs_dir(runs_dir) / run_id
    p = rd / "summary.json"
    if rd not in run_dirs(_runs_dir(runs_dir)):
        raise UsageError(f"no run {run_id!r} in {_runs_dir(runs_dir)} (see mfctl runs list)")
    try:
        d = json.loads(p.read_text()) if p.is_file() else None
        s = RunSummary.from_dict(d) if d is not None else recover(rd)
    except (OSError, ValueError, TypeError) as e:  # a damaged data file: exit 3, as runs report says (rundir.read_summary)
        raise DataError(f"not a readable run summary ({e})", path=str(p)) from None
    s.run_dir = str(rd.resolve())  # where the run is now (a copied runs dir), not where it was written
    if d is not None:
        d["run_dir"] = s.run_dir
    if json_out:
        emit_json(d if d is not None else s.to_dict())  # as it is on disk (a newer mfctl's keys too)
    else:
        render_summary(s)




@runs_app.command("import-log")
@handle_errors
def import_log(log: Path = typer.Argument(..., help="A Megatron / Megatron-DeepSpeed training log."),
               seq_len: int = typer.Option(4096, min=1, help="Tokens per sample (when the log has no 'consumed tokens')."),
               force: bool = typer.Option(False, "--force", help="Import it as a new run even if this content was "
                                          "imported before."),
               runs_dir: Path = RUNS_DIR_OPT, json_out: bool = JSON_OPT):
    """Turn a real training log into a run directory (same metrics as a simulated run): runs show,
    metrics export and reports then work on it. The same log (same content) imported again is the
    run it became the first time: nothing is written (--json: already_imported true), unless --force.
    A line whose elapsed time is nan or inf is not counted, with a warning naming it; a line with
    iteration numbers or counts out of range (negative, over 2**63-1) is an error naming it (exit 3)."""
    from mfctl.metrics.imported import import_log as import_training_log

    summary = import_training_log(log, _runs_dir(runs_dir), seq_len=seq_len, force=force)
    again = bool(summary.extra.pop("already_imported", False))
    if json_out:
        emit_json(summary.to_dict() | {"already_imported": again})
    else:
        render_summary(summary)
    if again:
        print_error(f"{log} was imported before (same content) as run {summary.run_id}: nothing written "
                    "(--force imports it again as a new run)", "note")
    elif summary.extra.get("lines_not_counted"):
        nos = summary.extra["lines_not_counted"]
        print_error(f"{log}: {'line' if len(nos) == 1 else 'lines'} {', '.join(map(str, nos))} not counted: elapsed "
                    "time per iteration not a finite number (nan, inf or out of range)", "warning")


def _runs_table(runs) -> None:
    from rich.table import Table

    t = Table("run", "status", "started")
    t.columns[0].no_wrap = True
    for e in runs:
        t.add_row(e.run_id, e.status, e.to_dict()["started"])
    out_console().print(t)


def _delete(base: Path, chosen, running, *, yes: bool, dry_run: bool, json_out: bool, schema: str) -> None:
    """Show ``chosen`` (text), ask (unless --yes/--dry-run), delete each (:func:`mfctl.runtime.prune.delete`),
    say what went; exit 1 when a run could not be deleted (it came alive, it is not a directory)."""
    from mfctl.errors import ExitCode, MfctlError
    from mfctl.runtime.prune import delete

    doc = {"schema": schema, "runs_dir": str(base.resolve()), "dry_run": dry_run,
           "kept_running": [e.run_id for e in running]}
    if running and not json_out:
        print_error(f"kept {len(running)} running run(s) (a running run is never deleted): "
                    + ", ".join(e.run_id for e in running), "note")
    if not chosen or dry_run:
        doc.update(deleted=[], would_delete=[e.to_dict() for e in chosen])
        if json_out:
            emit_json(doc)
        elif not chosen:
            print_error(f"no run to delete in {base.resolve()}", "note")
        else:
            _runs_table(chosen)
            print_error(f"--dry-run: {len(chosen)} run(s) would be deleted; nothing was deleted", "note")
        return
    if not json_out:
        _runs_table(chosen)
    confirm(f"delete {len(chosen)} run(s) from {base.resolve()} (their metrics, journals and logs)?", yes,
            what=f"the runs in {base.resolve()}")
    deleted, failed = [], []
    for e in chosen:
        try:
            delete(base, e)
            deleted.append(e.run_id)
        except (MfctlError, OSError) as err:
            failed.append({"run_id": e.run_id, "error": str(err)})
    doc.update(deleted=deleted, failed=failed)
    if json_out:
        emit_json(doc)
    else:
        out_console().print(f"deleted {len(deleted)} run(s) from {base.resolve()}", highlight=False)
        for f in failed:
            print_error(f"{f['run_id']}: {f['error']}")
    if failed:
        raise typer.Exit(int(ExitCode.FAILED))


YES_OPT = option("yes", "--yes", "-y", help="Do not ask for confirmation (scripts; without a terminal it is required).")


@runs_app.command("delete")
@handle_errors
def delete_runs(run_ids: list[str] = typer.Argument(..., help="Run ids (see mfctl runs list), or latest (the newest "
                                                    "run that has ended).", show_default=False,
                                                    metavar="RUN..."),
                yes: bool = YES_OPT, runs_dir: Path = RUNS_DIR_OPT, json_out: bool = JSON_OPT):
    """Delete runs by id after a confirmation: nothing when one is still running, or is no run, or
    the answer is no (exit 1) or Ctrl-C."""
    from mfctl.errors import OperationFailed
    from mfctl.runtime.prune import named

    base = _runs_dir(runs_dir)
    if "latest" in run_ids:  # what latest means for runs show/report: the newest run that has ended
        from mfctl.cli.metrics import latest_run

        newest = latest_run(base).name
        run_ids = [newest if r == "latest" else r for r in run_ids]
    chosen = named(base, run_ids)
    running = [e.run_id for e in chosen if e.running]
    if running:
        raise OperationFailed(f"run(s) {', '.join(running)} still running (their mfctl run is alive): "
                              "nothing was deleted")
    _delete(base, chosen, [], yes=yes, dry_run=False, json_out=json_out, schema="mfctl.runs.delete/v1")


@runs_app.command("prune")
@handle_errors
def prune_runs(keep: int = typer.Option(None, "--keep", min=0, metavar="N",
                                                help="Keep the N newest runs (running ones count)."),
               older_than: float = number_option(None, "--older-than", min=0, metavar="DAYS",
                                                 help="Only runs started more than DAYS days ago (fractions too)."),
               status: list[str] = typer.Option(None, "--status", metavar="STATUS", show_default=False,
                                                help="Only runs with this status (repeat): ok, failed, interrupted, "
                                                     "crashed, unknown."),
               dry_run: bool = typer.Option(False, "--dry-run", help="List what would be deleted; delete nothing."),
               yes: bool = YES_OPT, runs_dir: Path = RUNS_DIR_OPT, json_out: bool = JSON_OPT):
    """Delete the runs matching every criterion given (at least one), after a confirmation; a
    running run is never deleted (it is kept and said so)."""
    from mfctl.runtime.prune import select

    base = _runs_dir(runs_dir)
    chosen, running = select(base, keep=keep, older_than_days=older_than, statuses=status)
    _delete(base, chosen, running, yes=yes, dry_run=dry_run, json_out=json_out, schema="mfctl.runs.prune/v1")


@runs_app.command("report")
@handle_errors
def report(run_id: str = typer.Argument("latest", help="Run id, or latest."),
           out: Path = typer.Option(None, "--out", help="HTML file (default: runs/<id>/report.html)."),
           runs_dir: Path = RUNS_DIR_OPT):
    """Write a self-contained HTML report with PNG plots for a run."""
    from mfctl.cli.metrics import _run_dir
    from mfctl.metrics.report import write

    d = _run_dir(run_id, runs_dir)
    path = write(d, out)
    typer.echo(str(path))
