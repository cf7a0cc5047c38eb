"""``mfctl provision plan|apply|check|optics|journal`` and ``mfctl firmware check``."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import typer

from mfctl.cli.common import (
    HOSTS_OPT,
    JSON_OPT,
    confirm,
    emit_json,
    handle_errors,
    host_names,
    markup,
    one_option,
    one_value,
    option,
    out_console,
    print_error,
    shipped,
)

app = typer.Typer(help="Bring hosts to the desired NIC/transceiver/RoCE/GPU/firmware state (plan → apply → verify).",
                  no_args_is_help=True)
firmware_app = typer.Typer(help="Firmware compliance against firmware/manifest.yaml.", no_args_is_help=True)

SPEC_ARG = typer.Argument(Path("playbooks/provision.yaml"), help="Provisioning recipe.")
INV_OPT = option("inventory", "--inventory", "-i", default=None, help="Use this inventory instead of the recipe's.")


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
    names = host_names(hosts, inv)
    ctx = Context.from_settings(inv)
    with ctx.pool() as pool:
        yield spec, inv, manifest, names, pool, ctx


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
        for n in r.notes:
            con.print(markup("[dim]{}[/]", n), highlight=False)
        if r.skipped:
            con.print(markup("[yellow]{}: {}[/]", r.host, r.skipped), highlight=False)
            continue
        if r.failed:
            con.print(markup("[red]{}: FAILED at {}[/]: {}", r.host, r.failed["step"], r.failed["error"]), highlight=False)
            continue
        extra = (markup(", [red]not verified[/]: {}", r.verify_error) if r.verify_error else
                 markup(", [yellow]{} left after verify[/]", len(r.left)) if r.left else
                 ", verified" if r.verified else markup(", [red]not verified[/]"))
        con.print(markup("[green]{}[/]: {} change(s) applied", r.host, len(r.applied)) + extra, highlight=False)


def _on_step(obs):
    """Each host's current step through the progress display ``obs`` (one line on stderr, above the bar on a
    terminal; the bar's count and ETA move with the steps), with --json too: stdout holds the object only."""

    def show(host: str, i: int, n: int, a) -> None:
        what = getattr(a, "progress", None) or f"{a.what} on {a.target}"  # a long step says what it is doing
        obs.step(host, i, n, f"{a.phase}: {what}")

    return show


def _drainer(inv, pool, login: str | None, no_drain: bool, run_id: str):
    """The Slurm drain through the inventory's login host (``--login-host``, else its only one), or None."""
    from mfctl import settings
    from mfctl.errors import UsageError
    from mfctl.provision.rollout import SlurmDrain
    from mfctl.runtime.slurm import login_pool

    if no_drain or not inv.login_hosts:
        if login:
            raise UsageError("--login-host with --no-drain" if no_drain else
                             f"--login-host {login}: the inventory has no login_hosts")
        return None, None
    names = [h.name for h in inv.login_hosts]
    if login is None:
        if len(names) > 1:
            raise UsageError(f"the inventory has several login hosts ({', '.join(names)}): say which with --login-host")
        login = names[0]
    if login not in names:
        raise UsageError(f"--login-host {login}: not one of the inventory's login_hosts ({', '.join(names)})")
    lp = login_pool(inv, login, pool)
    return SlurmDrain(lp, login, run_id, timeout_s=settings.get_float("drain_timeout")), lp


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
              batch: int = typer.Option(None, "--batch", min=1, help="Rolling: N hosts at a time; stop at the first "
                                        "batch with a failed or unverified host (the rest untouched)."),
              canary: bool = typer.Option(False, "--canary", help="A first batch of one host."),
              allow_mgmt_reset: bool = typer.Option(False, "--allow-mgmt-reset", help="Reset a NIC even when it "
                                                    "carries the host's management interface or SSH address."),
              no_drain: bool = typer.Option(False, "--no-drain", help="Do not drain Slurm nodes before their NIC reset."),
              login_host: str = typer.Option(None, "--login-host", help="The inventory login host to run scontrol on "
                                             "(default: its only one)."),
              check: bool = typer.Option(False, "--check", help="After a verified apply, the end-to-end checks "
                                         "(mfctl provision check)."),
              yes: bool = option("yes", "--yes", "-y", help="Do not ask for confirmation."),
              json_out: bool = JSON_OPT):
    """Apply the plan: hosts in parallel (or in batches), each in the safe order, stopping a host at its first
    failure, re-planned after its NIC reset; then verify. Exit 4 when a host could not be (re-)read."""
    import contextlib
    import signal
    import threading

    from mfctl import settings
    from mfctl.errors import ExitCode
    from mfctl.lock import testbed_lock
    from mfctl.ocs.journal import Journal
    from mfctl.provision import service
    from mfctl.provision.journal import RunJournal
    from mfctl.transport.results import Results

    with _ctx(spec, inventory, hosts) as (sp, inv, manifest, names, pool, ctx), (
            contextlib.nullcontext() if dry_run else testbed_lock(inv, "provision apply")):
        with _progress(json_out) as obs:
            plans = service.plan(pool, inv, sp, manifest, names, observer=obs)  # under the lock: never a stale plan
        if not json_out:
            _render_plan(plans)
        changes = sum(len(p.actions) for p in plans)
        if dry_run:  # the same answer as `provision plan`: an unreachable host is not "no drift"
            if json_out:
                emit_json({"schema": "mfctl.provision.plan/v1", "changes": changes, "hosts": [p.to_dict() for p in plans]})
            raise typer.Exit(Results.of(plans).exit_code())
        journal = RunJournal(Journal(settings.state_dir() / "provision" / f"{inv.name}.journal.jsonl"))
        drain, login_pool = _drainer(inv, pool, login_host, no_drain, journal.run_id)
        if drain is None and not no_drain and not json_out and any(a.phase == "firmware-reset" for p in plans
                                                                   for a in p.actions):
            print_error("the inventory names no login host: Slurm nodes are not drained before their NIC reset "
                        "(--no-drain says so)", "warning")
        if changes:
            needs = sorted({n for p in plans for a in p.actions for n in a.needs})
            how = (f" in batches of {batch}" if batch else "") + (" after a canary" if canary else "")
            confirm(f"apply {changes} change(s) on {sum(1 for p in plans if p.actions)} host(s){how}"
                    + (f" (needs: {', '.join(needs)})" if needs else "")
                    + (f"; Slurm nodes drained through {drain.login}" if drain else "") + "?", yes, what="the hosts")
        options = {"batch": batch, "canary": canary, "allow_mgmt_reset": allow_mgmt_reset,
                   "drain": drain.login if drain else None, "hosts": hosts}
        journal.start(recipe=Path(sp.source or spec), inventory=inv.name, hosts=names, plans=plans, options=options)
        stop = threading.Event()

        def on_sigint(*_a) -> None:  # said at once: a firmware burn may take minutes to reach its end
            if not stop.is_set():
                print_error("stopping: every host stops after its current action (a firmware burn or reset is "
                            "never cut short; see the step lines for what each host is doing)", "interrupted")
            stop.set()

        old = signal.signal(signal.SIGINT, on_sigint)
        try:
            with _progress(False) as obs, (login_pool or contextlib.nullcontext()):  # (stderr only, --json too)
                results = service.rollout(pool, inv, sp, manifest, plans, journal=journal, stop=stop, observer=obs,
                                          batch=batch, canary=canary, allow_mgmt_reset=allow_mgmt_reset, drain=drain,
                                          on_step=_on_step(obs))
                checked = None
                if check and not stop.is_set() and all(r.ok for r in results):
                    xc, by_ocs = _circuits(ctx, inv, names)
                    checked = service.check_paths(pool, inv, sp, xc, names, observer=obs, by_ocs=by_ocs)
        finally:
            signal.signal(signal.SIGINT, old)
        code = ExitCode.INTERRUPTED if stop.is_set() else Results.of(results).exit_code()
        if checked is not None and code == ExitCode.OK:
            code = service.checks_exit_code(checked)
        journal.end(results, code)
    out = {"schema": "mfctl.provision.apply/v1", "run": journal.run_id, "changes_planned": changes,
           "ok": all(r.ok for r in results), "verified": all(r.verified for r in results),
           "hosts": [r.to_dict() | {"left_after_verify": r.left} for r in results]}
    if checked is not None:
        out["checks"] = checked
    if json_out:
        emit_json(out)
    else:
        _render_apply(results)
        if checked is not None:
            _render_checks(checked)
    if stop.is_set():
        print_error("every host stopped after its current action (see above); re-run apply to finish", "interrupted")
    raise typer.Exit(code)  # 4 a host not (re-)read, else 1 a host failed or not in the desired state, else 0


def _render_checks(rows) -> None:
    from rich.table import Table

    t = Table("path", "from", "to", "check", "expected", "measured", "status")
    for r in rows:
        t.add_row(r["path"], r["src"], r["dst"], r["check"], str(r.get("expected", "—")), str(r.get("measured", "—")),
                  r["status"] if not r.get("why") else f"{r['status']}: {r['why']}")
    out_console().print(t)


@app.command("check")
@handle_errors
def check_cmd(spec: Path = SPEC_ARG, inventory: Path = INV_OPT, hosts: str = HOSTS_OPT, json_out: bool = JSON_OPT):
    """End to end per OCS circuit and EPS path: a RoCE v2 GID on each lane's address (show_gids),
    ib_write_bw between the lanes the OCS connects against lane rate x efficiency, PFC counters moving on
    the RoCE priority. Exit 1 on a failed check, 6 when nothing could be checked. With several OCSes
    each is read (in parallel) for its own regions' circuits (a path ``OCS NAME TX→RX``)."""
    from mfctl.provision import service

    with _ctx(spec, inventory, hosts) as (sp, inv, manifest, names, pool, ctx):
        xc, by_ocs = _circuits(ctx, inv, names)
        with _progress(json_out) as obs:
            rows = service.check_paths(pool, inv, sp, xc, names, observer=obs, by_ocs=by_ocs)
    code = service.checks_exit_code(rows)
    if json_out:
        emit_json({"schema": "mfctl.provision.check/v1", "checks": rows,
                   "bad": sum(1 for r in rows if r["status"] == "bad"),
                   "checked": sum(1 for r in rows if r["status"] != "skipped")})
    else:
        _render_checks(rows)
        if not rows:
            print_error("no circuit and no EPS path among these hosts: nothing was checked")
    raise typer.Exit(code)


@app.command("journal")
@handle_errors
def journal_cmd(spec: Path = SPEC_ARG, inventory: Path = INV_OPT,
                run: str = typer.Option(None, "--run", help="One run's records (its id or a unique prefix)."),
                json_out: bool = JSON_OPT):
    """The provisioning runs of this testbed (who, recipe, hosts, changes, outcome), or one run's records."""
    from datetime import datetime

    from rich.table import Table

    from mfctl import settings
    from mfctl.errors import UsageError
    from mfctl.inventory import load_inventory
    from mfctl.ocs.journal import Journal
    from mfctl.provision import journal as pj
    from mfctl.provision.models import load_spec

    sp = load_spec(shipped(spec, Path("playbooks/provision.yaml")))
    inv = load_inventory(inventory or sp.path(sp.inventory))
    path = settings.state_dir() / "provision" / f"{inv.name}.journal.jsonl"
    records = Journal(path).records() if path.exists() else []
    when = lambda t: datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S") if t else "—"  # noqa: E731
    if run is not None:
        rid = pj.resolve(records, run)
        if rid is None:
            raise UsageError(f"no run {run!r} (or more than one starts so) in {path}")
        recs = pj.run_records(records, rid)
        if json_out:
            emit_json({"schema": "mfctl.provision.journal.run/v1", "run": rid, "records": recs})
            return
        con = out_console()
        for r in recs:
            rest = {k: v for k, v in r.items() if k not in ("ts", "seq", "crc", "op", "run")}
            con.print(f"{when(r.get('ts'))}  {r.get('op')}  " + " ".join(f"{k}={v}" for k, v in rest.items()),
                      highlight=False, markup=False)
        return
    summary = pj.runs(records)
    if json_out:
        emit_json({"schema": "mfctl.provision.journal/v1", "journal": str(path), "runs": summary})
        return
    t = Table("run", "started", "who", "recipe", "hosts", "changes", "done", "failed", "outcome")
    for s in summary:
        t.add_row(s["run"], when(s["started"]), s["who"] or "?", Path(s["recipe"] or "?").name, str(len(s["hosts"])),
                  str(s["changes"]), str(s["done"]), str(s["failed"]), s["outcome"])
    out_console().print(t)


def _by_ocs(inv, names: list[str], only: str | None) -> dict[str, list[str]]:
    """The hosts of ``names`` by the OCS their optical lanes reach (``only``: that one alone; with one
    OCS every host, as before). Port numbers repeat from one switch to the next: each switch's
    cross-connects and power are read against its own hosts' lanes only."""
    if only is not None:
        inv.ocs_named(only)  # an unknown name: exit 2 listing them
    out: dict[str, list[str]] = {}
    for o in inv.ocses:
        if only is not None and o.name != only:
            continue
        mine = names if len(inv.ocses) == 1 else [n for n in names if (on := inv.ocs_of_host(n)) is not None
                                                  and on.name == o.name]
        if mine:
            out[o.name] = mine
    return out


def _circuits(ctx, inv, names: list[str]) -> tuple[dict[int, int], dict[str, tuple[list[str], dict[int, int]]] | None]:
    """The cross-connects the checks of hosts ``names`` go by: the only OCS's (``(xc, None)``), or
    with several each OCS's that a host of ``names`` reaches, read in parallel (``({}, {name: (its
    hosts, its cross-connects)})``): the same port numbers on two switches are different lanes."""
    from concurrent.futures import ThreadPoolExecutor

    if len(inv.ocses) == 1:
        with ctx.ocs() as drv:
            return drv.cross_connects(), None
    groups = _by_ocs(inv, names, None)

    def read(name: str) -> dict[int, int]:
        with ctx.ocs(name=name) as drv:
            return drv.cross_connects()

    if not groups:
        return {}, {}
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(groups))), thread_name_prefix="ocs-check") as ex:
        return {}, {name: (mine, xc) for (name, mine), xc in zip(groups.items(), ex.map(read, groups))}


@app.command("optics")
@handle_errors
def optics_cmd(spec: Path = SPEC_ARG, inventory: Path = INV_OPT, hosts: str = HOSTS_OPT,
               ocs: list[str] | None = one_option("--ocs", metavar="NAME", help="Only the lanes of this OCS (its "
                                                  "inventory name; default: every OCS, each read on its own)."),
               json_out: bool = JSON_OPT):
    """Check every optical lane with a circuit end to end: link, Rx power vs. the module's thresholds,
    and the lane-to-OCS-port wiring against the OCS's per-port power. Exit 1 on any finding, 6 when no
    lane has a circuit (nothing was checked). With several OCSes each is read (in parallel) for its
    own regions' lanes."""
    from concurrent.futures import ThreadPoolExecutor

    from rich.table import Table

    from mfctl.errors import ExitCode
    from mfctl.provision import service

    with _ctx(spec, inventory, hosts) as (sp, inv, manifest, names, pool, ctx):
        groups = _by_ocs(inv, names, one_value(ocs))

        def read(name: str):
            with ctx.ocs(name=name) as drv:
                xc = drv.cross_connects()
                power = drv.power(sorted(set(xc.values()))) if xc else {}
                return xc, power, service.recent_ocs_changes(drv)  # a lane down right after an OCS change: "retry"

        with ThreadPoolExecutor(max_workers=max(1, min(8, len(groups))), thread_name_prefix="ocs-optics") as ex:
            states = dict(zip(groups, ex.map(read, groups)))
        rows: list[dict] = []
        with _progress(json_out) as obs:
            for name, mine in groups.items():
                xc, power, changed = states[name]
                some = inv.model_copy(update={"hosts": [h for h in inv.hosts if h.name in mine]})
                rows += [r | {"ocs": name} for r in service.check_optics(pool, some, sp, power, xc, observer=obs,
                                                                          changed=changed)]
    bad = [r for r in rows if r["status"] == "bad"]
    checked = [r for r in rows if r["status"] != "no circuit"]
    several = len(inv.ocses) > 1
    if json_out:
        emit_json({"schema": "mfctl.provision.optics/v1", "lanes": rows, "bad": len(bad), "checked": len(checked),
                   "ocses": list(groups)})
    else:
        t = Table("host", "lane", "netdev", *(["OCS"] if several else []), "OCS rx port", "module Rx dBm", "OCS dBm",
                  "status")
        for r in rows:
            t.add_row(r["host"], r["lane"], r["netdev"], *([r["ocs"]] if several else []), str(r["ocs_rx"]),
                      str(r.get("rx_total_dbm", "—")), str(r.get("ocs_dbm", "—")),
                      r["status"] if not r["findings"] else "; ".join(r["findings"]))
        out_console().print(t)
    if not checked:
        print_error("no lane has a circuit: nothing was checked")
        raise typer.Exit(ExitCode.DRIFT)
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
    from mfctl.provision.firmware import DRIFT_STATUSES

    drift = [r for r in rows if r["status"] in DRIFT_STATUSES]
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
                      r["pinned"] or "—", r["status"] + (f" ({r['note']})" if r.get("note") else ""))
        out_console().print(t)
    raise typer.Exit(Results.of(checked).exit_code())  # 4 a host not read, else 6 drift, else 0
