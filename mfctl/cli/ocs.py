"""``mfctl ocs show|connect|disconnect|apply|power|alarms|journal|recover``"""

from __future__ import annotations

import contextlib
import time
from contextlib import contextmanager
from pathlib import Path

import typer

from mfctl.cli.common import (
    JSON_OPT,
    OCS_OPT,
    confirm,
    emit_json,
    handle_errors,
    markup,
    number_option,
    one_value,
    option,
    out_console,
    print_error,
)
from mfctl.errors import ExitCode

app = typer.Typer(help="Drive the optical circuit switch (TL1): inspect, change with a dry-run diff, journal, recover.",
                  no_args_is_help=True)

INV_OPT = option("inventory", "--inventory", "-i", default=..., help="Inventory YAML.")
DRY_OPT = typer.Option(False, "--dry-run", help="Print the diff and change nothing (exit 6 if anything would change).")
YES_OPT = option("yes", "--yes", "-y", help="Do not ask for confirmation.")


@contextmanager
def _driver(inventory: Path, *, mutating: bool, purpose: str = "ocs", precheck=None, ocs: list[str] | str | None = None):
    """Connected driver, port map and the device's journal; ``mutating`` holds the device lock
    (keyed by what the device says it is, not by the inventory) until the block ends.
    ``precheck(port_map)``: the command's own arguments checked against the inventory first (a bad
    port, lane or file is refused before the OCS is reached). ``ocs``: the OCS's inventory name
    (None: the only one; a UsageError listing them when there are several)."""
    from mfctl.context import Context
    from mfctl.inventory import load_inventory
    from mfctl.ocs.service import PortMap

    inv = load_inventory(inventory)
    name = inv.ocs_named(one_value(ocs)).name
    pm = PortMap.from_inventory(inv, name)
    if precheck is not None:
        precheck(pm)
    from mfctl.lock import testbed_lock

    # a change takes the testbed lock (a run, provisioning or a pytest session holds it), then the device's
    with testbed_lock(inv, purpose) if mutating else contextlib.nullcontext(), \
            Context.from_settings(inv).open_ocs(purpose=purpose if mutating else None, ocs=name) as drv:
        _warn_legacy_journal(inv, name)
        yield inv, drv, pm, drv.device_journal


def _warn_legacy_journal(inv, ocs: str | None = None) -> None:
    """mfctl before device identities kept the journal by inventory name: say if one is left
    with a change that did not finish (it is not read any more)."""
    from mfctl.ocs.service import legacy_journal_unfinished

    old = legacy_journal_unfinished(inv, ocs)
    if old is not None:
        print_error(f"{old} (a journal of an older mfctl, kept by inventory name) holds a change that did not finish; "
                    f"journals are now kept per device: check the switch with mfctl ocs show", "warning")


def _render_diff(pm, d: dict, json_out: bool) -> None:
    """A diff as the driver gives it (:meth:`mfctl.ocs.driver.CrossConnectDiff.to_dict`: sorted
    ``[in, out]`` pairs to delete and add, and how many are kept), lanes named."""
    if json_out:
        return
    con = out_console()
    if not d["delete"] and not d["add"]:
        con.print("no change: the OCS already holds this state")
        return
    for i, o in d["delete"]:
        con.print(markup("[red]- {:>4} → {:<4}[/]  {} → {}", i, o, pm.name(i), pm.name(o)), highlight=False)
    for i, o in d["add"]:
        con.print(markup("[green]+ {:>4} → {:<4}[/]  {} → {}", i, o, pm.name(i), pm.name(o)), highlight=False)
    con.print(f"{len(d['delete'])} to delete, {len(d['add'])} to add, {d['keep']} unchanged")


def _change(inventory: Path, build, *, dry_run: bool, yes: bool, json_out: bool, purpose: str, what: str,
            precheck=None, ocs: list[str] | str | None = None) -> None:
    """Shared plan → confirm → apply → read back flow of every mutating command (``precheck``: see
    :func:`_driver`)."""
    from mfctl.signals import DeferSignals

    with _driver(inventory, mutating=not dry_run, purpose=purpose, precheck=precheck, ocs=ocs) as (inv, drv, pm, journal):
        current = drv.cross_connects()
        desired = build(pm, current)
        _, d = drv.plan(desired)
        _render_diff(pm, d.to_dict(), json_out)
        result = {"schema": "mfctl.ocs.change/v1", "ocs": drv.ocs.name, "endpoint": drv.endpoint, "what": what,
                  "dry_run": dry_run, "diff": d.to_dict()}
        if dry_run or d.empty:
            if json_out:
                emit_json(result | {"changed": False, "would_change": not d.empty})
            raise typer.Exit(ExitCode.DRIFT if (dry_run and not d.empty) else ExitCode.OK)
        from mfctl.ocs.service import change_warnings

        for w in change_warnings(drv):
            print_error(w, "warning")
        confirm(f"apply {len(d.delete)} deletion(s) and {len(d.add)} addition(s) on {drv.ocs.name}?", yes)
        res, interrupted = None, False
        try:
            with DeferSignals():  # Ctrl-C waits until the change is applied and read back
                res = (drv.disconnect_all(confirm=True, reason=what) if what == "disconnect all"
                       else drv.apply(desired, reason=what))
        except KeyboardInterrupt:
            if res is None:
                raise
            interrupted = True  # held until the change was applied and read back: say what was done, then 130
        if json_out:
            emit_json(result | {"changed": True, "result": res.to_dict(), "interrupted": interrupted})
        else:
            out_console().print(f"applied {len(d.delete)} deletion(s) and {len(d.add)} addition(s) in "
                                f"{res.t_switch_ms:.1f} ms, read back and verified ({len(res.readback)} cross-connects; "
                                f"journal {journal.path})", highlight=False)
        if interrupted:
            print_error("interrupted: the change above was applied and read back first; nothing else was done",
                        "warning")
            raise typer.Exit(ExitCode.INTERRUPTED)


@app.command()
@handle_errors
def show(inventory: Path = INV_OPT, ocs: list[str] | None = OCS_OPT, json_out: bool = JSON_OPT):
    """Read every cross-connect (RTRV-PATCH) and name both ends from the inventory."""
    from rich.table import Table

    from mfctl.fabric.mapping import circuits_from_cross_connects, region_lanes

    with _driver(inventory, mutating=False, ocs=ocs) as (inv, drv, pm, _):
        xc = drv.cross_connects()
        endpoint = drv.endpoint
    circuits = circuits_from_cross_connects(region_lanes(inv, [h.name for h in inv.hosts]), xc)
    rows = [{"in": i, "out": o, "from": pm.name(i), "to": pm.name(o)} for i, o in sorted(xc.items())]
    if json_out:
        emit_json({"schema": "mfctl.ocs.show/v1", "ocs": drv.ocs.name, "endpoint": endpoint, "cross_connects": rows,
                   "circuits": [c.to_dict() for c in circuits]})
        return
    t = Table("in", "out", "from (TX lane)", "to (RX lane)", title=f"{drv.ocs.name} cross-connects via {endpoint}")
    for r in rows:
        t.add_row(str(r["in"]), str(r["out"]), r["from"], r["to"])
    con = out_console()
    con.print(t)
    con.print(f"{len(rows)} cross-connect{'s' * (len(rows) != 1)}, {len(circuits)} duplex circuit{'s' * (len(circuits) != 1)}",
              highlight=False)


@app.command()
@handle_errors
def connect(a: str = typer.Argument(..., help="Lane HOST/NIC[.LANE] or OCS input port."),
            b: str = typer.Argument(..., help="Lane HOST/NIC[.LANE] or OCS output port."),
            inventory: Path = INV_OPT, ocs: list[str] | None = OCS_OPT,
            replace: bool = typer.Option(False, "--replace", help="Take ports already in use."),
            dry_run: bool = DRY_OPT, yes: bool = YES_OPT, json_out: bool = JSON_OPT):
    """Connect two lanes with a duplex circuit (two cross-connects), or one input to one output."""
    from mfctl.ocs.service import cross_connects_for, with_connection

    _change(inventory, lambda pm, cur: with_connection(cur, cross_connects_for(pm, a, b), replace=replace),
            dry_run=dry_run, yes=yes, json_out=json_out, purpose="ocs connect", what=f"connect {a} {b}",
            precheck=lambda pm: cross_connects_for(pm, a, b), ocs=ocs)


@app.command()
@handle_errors
def disconnect(endpoints: list[str] = typer.Argument(None, help="Lanes or ports whose cross-connects to remove."),
               inventory: Path = INV_OPT, ocs: list[str] | None = OCS_OPT,
               all_: bool = typer.Option(False, "--all",
                                         help="Remove every cross-connect a confirmed read shows "
                                              "(DLT-PATCH of those ports, never ::ALL)."),
               dry_run: bool = DRY_OPT, yes: bool = YES_OPT, json_out: bool = JSON_OPT):
    """Remove the circuits of lanes (both cross-connects) or the cross-connects on ports."""
    from mfctl.errors import UsageError
    from mfctl.ocs.service import without

    if all_ and endpoints:
        raise UsageError("give lanes/ports to disconnect, or --all — not both")
    if not all_ and not endpoints:
        raise UsageError("what to disconnect? give lanes (HOST/NIC[.LANE]) or ports, or --all")
    build = (lambda pm, cur: {}) if all_ else (lambda pm, cur: without(pm, cur, endpoints))
    _change(inventory, build, dry_run=dry_run, yes=yes, json_out=json_out, purpose="ocs disconnect",
            what="disconnect all" if all_ else f"disconnect {' '.join(endpoints)}",
            precheck=None if all_ else lambda pm: without(pm, {}, endpoints), ocs=ocs)


@app.command("apply")
@handle_errors
def apply_cmd(file: Path = typer.Argument(..., help="YAML/JSON: cross_connects: [[in, out]...] "
                                                    "and/or circuits: [[LANE, LANE]...]."),
              inventory: Path = INV_OPT, ocs: list[str] | None = OCS_OPT, dry_run: bool = DRY_OPT, yes: bool = YES_OPT,
              json_out: bool = JSON_OPT):
    """Make the OCS hold exactly the topology in FILE (only what differs changes); a region's plan (mfctl topo
    plan --json) on that region's ports only: another region's circuits on the same OCS are kept."""
    from mfctl.ocs.service import desired_state

    _change(inventory, lambda pm, cur: desired_state(pm, file, cur), dry_run=dry_run, yes=yes, json_out=json_out,
            purpose="ocs apply", what=f"apply {file}", precheck=lambda pm: desired_state(pm, file, {}), ocs=ocs)


@app.command()
@handle_errors
def power(inventory: Path = INV_OPT, ocs: list[str] | None = OCS_OPT, json_out: bool = JSON_OPT):
    """Optical power per port with its lane; flags ports below the optics' sensitivity + margin. Exit 1 if any is flagged."""
    from rich.table import Table

    from mfctl.ocs.service import power_report

    with _driver(inventory, mutating=False, ocs=ocs) as (inv, drv, pm, _):
        xc = drv.cross_connects()
        ports = sorted(set(pm.by_tx) | set(pm.by_rx) | set(xc) | set(xc.values()))
        rows = power_report(pm, drv.power(ports) if ports else {}, xc, drv.ocs.power_margin_db, drv.ocs.size.inputs)
    bad = [r for r in rows if r["status"] in ("low", "dark")]
    if bad and not json_out:
        print_error(f"{len(bad)} port(s) flagged: " + ", ".join(f"{r['port']} {r['status']}" for r in bad[:8]), "warning")
    if json_out:
        emit_json({"schema": "mfctl.ocs.power/v1", "ocs": drv.ocs.name, "margin_db": drv.ocs.power_margin_db,
                   "ports": rows, "flagged": len(bad)})
    else:
        t = Table("port", "lane", "dBm", "status", title=f"{drv.ocs.name} optical power (margin {drv.ocs.power_margin_db:g} dB)")
        from rich.text import Text

        colour = {"ok": "green", "low": "yellow", "dark": "red", "idle": "dim"}
        for r in rows:
            t.add_row(str(r["port"]), r["lane"], "—" if r["dbm"] is None else f"{r['dbm']:.2f}",
                      Text(r["status"], style=colour[r["status"]]))
        out_console().print(t)
    if bad:
        raise typer.Exit(ExitCode.FAILED)


@app.command()
@handle_errors
def alarms(inventory: Path = INV_OPT, ocs: list[str] | None = OCS_OPT,
           wait: float = number_option(0.0, "--wait", min=0.0, max=3600.0,
                                       help="Also listen this many seconds for autonomous messages."),
           json_out: bool = JSON_OPT):
    """Standing alarms (RTRV-ALM-ALL) and autonomous REPT ALM/EVT messages. Exit 1 if any alarm stands."""
    from mfctl.ocs.service import named_alarms

    with _driver(inventory, mutating=False, ocs=ocs) as (inv, drv, pm, _):
        al = drv.alarms(wait_s=wait)
    al["standing"] = named_alarms(pm, al["standing"])
    if json_out:
        emit_json({"schema": "mfctl.ocs.alarms/v1", "ocs": drv.ocs.name, **al})
    else:
        con = out_console()
        con.print(f"{len(al['standing'])} standing alarm(s) on {drv.ocs.name}", highlight=False)
        for a in al["standing"]:
            con.print(f"  port {a['aid']} ({a['lane']}): {a['severity']} {a['condition']} {a['service']} since {a['date']} "
                      f"{a['time']} — {a['description']}", highlight=False, markup=False)
        for a in al["autonomous"]:
            con.print(f"  ATAG {a['atag']} {a['almcde']} {a['verb']}: {'; '.join(a['lines'])}", highlight=False, markup=False)
        if al["atag_gaps"]:
            con.print(f"  autonomous messages were lost (ATAG gaps {al['atag_gaps']})", highlight=False)
    if al["standing"]:
        raise typer.Exit(ExitCode.FAILED)


@app.command()
@handle_errors
def journal(inventory: Path = INV_OPT, ocs: list[str] | None = OCS_OPT,
            last: int = typer.Option(30, min=1, help="Show the last N records."),
            json_out: bool = JSON_OPT):
    """The OCS's change journal (intent, commands, read-back, outcome, recoveries)."""
    from rich.table import Table

    from mfctl.inventory import load_inventory
    from mfctl.ocs.identity import journal_path, known_identity
    from mfctl.ocs.journal import Journal
    from mfctl.ocs.service import journal_report

    inv = load_inventory(inventory)
    name = inv.ocs_named(one_value(ocs)).name
    ident = known_identity(inv, name)
    if ident is None:  # the journal is keyed by what the device says it is: ask it (read-only)
        with _driver(inventory, mutating=False, ocs=name) as (_, drv, _, _):
            ident = drv.identity
    j = Journal(journal_path(ident))
    rep = journal_report(j.records(), last)
    rows, pend, damaged, unknowable = rep.rows, rep.pending, rep.damaged, rep.unknowable
    if json_out:
        emit_json({"schema": "mfctl.ocs.journal/v1", "ocs": name, "path": str(j.path), "device": ident.key, "records": rows,
                   "pending": pend and pend.get("apply_id"), "damaged": damaged,
                   "unknown_after_last_change": len(unknowable)})
        return
    if damaged:
        print_error(f"{len(damaged)} damaged record(s) in {j.path}"
                    + (f", {len(unknowable)} of them (or orphans) after the last readable change: it cannot tell "
                       f"whether a change is unfinished — check the switch with mfctl ocs show" if unknowable else ""),
                    "warning")
    con = out_console()
    if not rows:
        con.print(f"journal {j.path} is empty", highlight=False)
        return
    t = Table("seq", "time", "apply", "op", "what", caption=str(j.path))
    for r in rows:
        t.add_row(str(r["seq"] or ""), time.strftime("%m-%d %H:%M:%S", time.localtime(r["ts"])) if r["ts"] else "",
                  (r["apply_id"] or "")[:8], r["op"].removeprefix("ocs."), r["summary"])
    con.print(t)
    if pend:
        more = f", {pend['recoveries']} recovery attempt(s) interrupted" if pend["recoveries"] else ""
        from mfctl.ocs.driver import recover_command

        con.print(markup("[yellow]apply {} ({}) did not finish{}: run {}[/]", pend["apply_id"],
                         pend.get("reason"), more, recover_command(inv, name)), highlight=False)


def _nothing_to_recover(plan: dict, json_out: bool) -> None:
    if plan["differs_from_last_verified"]:
        print_error(f"the switch differs from the state the journal last verified ({plan['differing']} "
                    f"cross-connect(s)): changed by something else since; check it with mfctl ocs show", "warning")
    if json_out:
        emit_json({"schema": "mfctl.ocs.recover/v1", **plan})
    else:
        out_console().print("nothing to recover: every journalled change finished")


@app.command()
@handle_errors
def recover(inventory: Path = INV_OPT, ocs: list[str] | None = OCS_OPT,
            rollback: bool = typer.Option(False, "--rollback",
                                          help="Return to the state before the interrupted apply "
                                               "(default: complete it)."),
            dry_run: bool = DRY_OPT, yes: bool = YES_OPT, json_out: bool = JSON_OPT):
    """Finish (default) or roll back the last interrupted OCS change found in the journal."""
    from mfctl.ocs.driver import recover as do_recover
    from mfctl.ocs.service import one_way

    mode = "rollback" if rollback else "complete"
    # the device lock even for --dry-run: a change in progress is not "unfinished", it is running
    with _driver(inventory, mutating=True, purpose=f"ocs recover{' --dry-run' if dry_run else ''}",
                 ocs=ocs) as (inv, drv, pm, j):
        recs = drv.device_records
        plan = do_recover(drv, recs, mode=mode, dry_run=True)  # what it would do, from a confirmed read
        if plan["pending"] is None:
            _nothing_to_recover(plan, json_out)
            return
        p = plan["pending"]
        if not json_out:
            more = f", {p['recoveries']} recovery attempt(s) of it interrupted" if p["recoveries"] else ""
            out_console().print(f"apply {p['apply_id']} ({p.get('reason')}) did not finish{more}; {mode} it "
                                f"(to its {'desired state' if mode == 'complete' else 'state before'}):",
                                highlight=False, markup=False)
        _render_diff(pm, plan["diff"], json_out)
        changes = bool(plan["diff"]["delete"] or plan["diff"]["add"])
        if dry_run:
            if json_out:
                emit_json({"schema": "mfctl.ocs.recover/v1", **plan})
            raise typer.Exit(ExitCode.DRIFT if changes else ExitCode.OK)
        if changes:
            confirm(f"{mode} apply {p['apply_id']}?", yes)
        out = do_recover(drv, recs, mode=mode)
    rb = {i: o for i, o in out["readback"]}
    out["one_way"] = [{"in": i, "out": o, "from": pm.name(i), "to": pm.name(o)} for i, o in sorted(one_way(pm, rb).items())]
    if json_out:
        emit_json({"schema": "mfctl.ocs.recover/v1", **out})
    else:
        con = out_console()
        con.print(f"recovered ({mode}): the OCS holds the {'desired state' if mode == 'complete' else 'state before'} "
                  f"of apply {p['apply_id']} (confirmed read-back, {len(rb)} cross-connects)", highlight=False)
    for x in out["one_way"]:
        print_error(f"one-way cross-connect {x['in']} -> {x['out']} ({x['from']} -> {x['to']}): its reverse is not "
                    f"connected", "warning")
