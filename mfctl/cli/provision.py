"""``mfctl provision plan|apply|optics`` and ``mfctl firmware check``."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import typer

from mfctl.cli.common import JSON_OPT, confirm, emit_json, handle_errors, markup, option, out_console, print_error, shipped

app = typer.Typer(help="Bring hosts to the desired NIC/transceiver/RoCE/GPU/firmware state (plan → apply → verify).",
                  no_args_is_help=True)
firmware_app = typer.Typer(help="Firmware compliance against firmware/manifest.yaml.", no_args_is_help=True)

SPEC_ARG = typer.Argument(Path("playbooks/provision.yaml"), help="Provisioning recipe.")
INV_OPT = option("inventory", "--inventory", "-i", default=None, help="Use this inventory instead of the recipe's.")
HOSTS_OPT = typer.Option(None, "--hosts", help="Only these hosts (comma-separated).")


@contextmanager
def _ctx(spec_path: Path, inventory: Path | None, hosts: str | None):
    """(recipe, inventory, firmware manifest or None, the hosts to work on, an SSH pool, the Context)."""
    spec_path = shipped(spec_path, Path("playbooks/provision.yaml"))
    from mfctl.context import Context
    from mfctl.inventory import load_inventory
    from mfctl.provision.models import load_manifest, load_spec

    spec = load_spec(spec_path)
    inv = load_inventory(inventory or spec.path(spec.inventory))
    manifest = load_manifest(spec.path(spec.firmware_manifest)) if spec.firmware_manifest else None
    spec.check_addresses(inv)
    names = _host_names(hosts, [h.name for h in inv.hosts])
    ctx = Context.from_settings(inv)
    with ctx.pool() as pool:
        yield spec, inv, manifest, names, pool, ctx


def _host_names(hosts: str | None, known: list[str]) -> list[str]:
    """``--hosts a,b`` as names of the inventory (all of them when not given); UsageError otherwise."""
    from mfctl.errors import UsageError

    if hosts is None:
        return known
    names = list(dict.fromkeys(h.strip() for h in hosts.split(",") if h.strip()))
    if not names:
        raise UsageError("--hosts is empty (leave it out for all hosts)")
    unknown = [h for h in names if h not in known]
    if unknown:
        raise UsageError(f"unknown host(s): {', '.join(unknown)}; the inventory has {', '.join(known)}")
    return names


def _progress(json_out: bool):
    """The progress display (stderr, a terminal only; nothing with --json)."""
    from mfctl.cli.progress import ProgressObserver

    return ProgressObserver(enabled=False) if json_out else ProgressObserver()


def _render_plan(plans) -> None:
    from rich.table import Table

    con = out_console()
    for hp in plans:
        if hp.error:
            print_error(f"{hp.host}: cannot read: {hp.error}")
            continue
        if not hp.actions:
            con.print(markup("[green]{}: in the desired state[/]", hp.host), highlight=False)
            continue
        t = Table("phase", "target", "what", "before → after", "needs", title=f"{hp.host}: {len(hp.actions)} change(s)",
                  title_justify="left")
        for a in hp.actions:
            t.add_row(a.phase, a.target, a.what, f"{a.before} → {a.after}",
                      "MANUAL: " + a.manual if a.manual else ", ".join(a.needs))
        con.print(t)


def _render_apply(results) -> None:
    con = out_console()
    for r in results:
        if r.failed:
            con.print(markup("[red]{}: FAILED at {}[/]: {}", r.host, r.failed["step"], r.failed["error"]), highlight=False)
            continue
        extra = markup(", [yellow]{} left after verify[/]", len(r.left)) if r.left else (
            markup(", [yellow]not verified[/]: {}", r.verify_error) if r.verify_error else ", verified")
        con.print(markup("[green]{}[/]: {} change(s) applied", r.host, len(r.applied)) + extra, highlight=False)


@app.command("plan")
@handle_errors
def plan_cmd(spec: Path = SPEC_ARG, inventory: Path = INV_OPT, hosts: str = HOSTS_OPT, json_out: bool = JSON_OPT):
    """Read every host and show what apply would change. Exit 6 if anything would, 0 if not."""
    from mfctl.provision import service
    from mfctl.transport.results import Results

    with _ctx(spec, inventory, hosts) as (sp, inv, manifest, names, pool, _), _progress(json_out) as obs:
        plans = service.plan(pool, inv, sp, manifest, names, observer=obs)
    changes = sum(len(p.actions) for p in plans)
    if json_out:
        emit_json({"schema": "mfctl.provision.plan/v1", "changes": changes, "hosts": [p.to_dict() for p in plans]})
    else:
        _render_plan(plans)
    raise typer.Exit(Results.of(plans).exit_code())  # 4 a host not read, else 6 drift, else 0


@app.command("apply")
@handle_errors
def apply_cmd(spec: Path = SPEC_ARG, inventory: Path = INV_OPT, hosts: str = HOSTS_OPT,
              dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan, change nothing (exit 6 if it would)."),
              yes: bool = option("yes", "--yes", "-y", help="Do not ask for confirmation."),
              json_out: bool = JSON_OPT):
    """Apply the plan: hosts in parallel, each in the safe order, stopping a host at its first failure; then verify."""
    import contextlib
    import signal
    import threading

    from mfctl import settings
    from mfctl.errors import ExitCode
    from mfctl.lock import TestbedLock
    from mfctl.ocs.journal import Journal
    from mfctl.provision import service
    from mfctl.transport.results import Results

    with _ctx(spec, inventory, hosts) as (sp, inv, manifest, names, pool, _), (
            contextlib.nullcontext() if dry_run else TestbedLock(inv.name, "provision apply")):
        with _progress(json_out) as obs:
            plans = service.plan(pool, inv, sp, manifest, names, observer=obs)  # under the lock: never a stale plan
        if not json_out:
            _render_plan(plans)
        changes = sum(len(p.actions) for p in plans)
        if dry_run:  # the same answer as `provision plan`: an unreachable host is not "no drift"
            if json_out:
                emit_json({"schema": "mfctl.provision.plan/v1", "changes": changes, "hosts": [p.to_dict() for p in plans]})
            raise typer.Exit(Results.of(plans).exit_code())
        if changes:
            needs = sorted({n for p in plans for a in p.actions for n in a.needs})
            confirm(f"apply {changes} change(s) on {sum(1 for p in plans if p.actions)} host(s)"
                    + (f" (needs: {', '.join(needs)})" if needs else "") + "?", yes, what="the hosts")
        journal = Journal(settings.state_dir() / "provision" / f"{inv.name}.journal.jsonl")
        stop = threading.Event()
        old = signal.signal(signal.SIGINT, lambda *a: stop.set())
        try:
            with _progress(json_out) as obs:
                results = service.apply(pool, plans, journal, stop=stop, observer=obs)
                service.verify(pool, inv, sp, manifest, results, names, observer=obs)
        finally:
            signal.signal(signal.SIGINT, old)
    out = {"schema": "mfctl.provision.apply/v1", "changes_planned": changes,
           "hosts": [r.to_dict() | {"left_after_verify": r.left} for r in results]}
    if json_out:
        emit_json(out)
    else:
        _render_apply(results)
    if stop.is_set():
        print_error("interrupted: every host stopped after its current action (see above); re-run apply to finish",
                    "interrupted")
        raise typer.Exit(ExitCode.INTERRUPTED)
    raise typer.Exit(Results.of(results).exit_code())  # 1 a host failed or is not in the desired state after verify


@app.command("optics")
@handle_errors
def optics_cmd(spec: Path = SPEC_ARG, inventory: Path = INV_OPT, json_out: bool = JSON_OPT):
    """Check every optical lane with a circuit end to end: link, Rx power vs. the module's thresholds,
    and the lane-to-OCS-port wiring against the OCS's per-port power. Exit 1 on any finding."""
    from rich.table import Table

    from mfctl.errors import ExitCode
    from mfctl.provision import service

    with _ctx(spec, inventory, None) as (sp, inv, manifest, names, pool, ctx):
        with ctx.ocs() as drv:
            xc = drv.cross_connects()
            power = drv.power(sorted(set(xc.values()))) if xc else {}
        with _progress(json_out) as obs:
            rows = service.check_optics(pool, inv, sp, power, xc, observer=obs)
    bad = [r for r in rows if r["status"] == "bad"]
    if json_out:
        emit_json({"schema": "mfctl.provision.optics/v1", "lanes": rows, "bad": len(bad)})
    else:
        t = Table("host", "lane", "netdev", "OCS rx port", "module Rx dBm", "OCS dBm", "status")
        for r in rows:
            t.add_row(r["host"], r["lane"], r["netdev"], str(r["ocs_rx"]), str(r.get("rx_total_dbm", "—")),
                      str(r.get("ocs_dbm", "—")), r["status"] if not r["findings"] else "; ".join(r["findings"]))
        out_console().print(t)
    raise typer.Exit(ExitCode.FAILED if bad else ExitCode.OK)


@firmware_app.command("check")
@handle_errors
def firmware_check(spec: Path = SPEC_ARG, inventory: Path = INV_OPT, hosts: str = HOSTS_OPT, json_out: bool = JSON_OPT):
    """Every NIC's running and burnt firmware against the manifest. Exit 6 on drift."""
    from rich.table import Table

    from mfctl.errors import ConfigError
    from mfctl.provision import service
    from mfctl.transport.results import Results

    with _ctx(spec, inventory, hosts) as (sp, inv, manifest, names, pool, _):
        if manifest is None:
            raise ConfigError("the recipe names no firmware_manifest", path=sp.source)
        with _progress(json_out) as obs:
            checked = service.firmware_check(pool, manifest, names, observer=obs)
    rows = [r for h in checked for r in h.rows()]
    drift = [r for r in rows if r["status"] in ("drift", "reset needed")]
    if json_out:
        emit_json({"schema": "mfctl.firmware.check/v1", "nics": rows, "drift": len(drift)})
    else:
        for h in checked:
            if h.error:
                print_error(h.error)
        t = Table("host", "PCI", "part", "running", "burnt", "pinned", "status")
        for c in t.columns:
            c.no_wrap = True
        for r in rows:
            t.add_row(r["host"], r["pci"] or "", r["part_number"] or "", r["running"] or "", r["burnt"] or "",
                      r["pinned"] or "—", r["status"])
        out_console().print(t)
    raise typer.Exit(Results.of(checked).exit_code())  # 4 a host not read, else 6 drift, else 0
