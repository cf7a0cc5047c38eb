"""``mfctl provision plan|apply|optics`` and ``mfctl firmware check``."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import typer

from mfctl.cli.common import JSON_OPT, emit_json, handle_errors, markup, out_console, print_error, shipped

app = typer.Typer(help="Bring hosts to the desired NIC/transceiver/RoCE/GPU/firmware state (plan → apply → verify).",
                  no_args_is_help=True)
firmware_app = typer.Typer(help="Firmware compliance against firmware/manifest.yaml.", no_args_is_help=True)

SPEC_ARG = typer.Argument(Path("playbooks/provision.yaml"), help="Provisioning recipe.")
INV_OPT = typer.Option(None, "--inventory", "-i", envvar="MFCTL_INVENTORY", help="Use this inventory instead of the recipe's.")
HOSTS_OPT = typer.Option(None, "--hosts", help="Only these hosts (comma-separated).")


@contextmanager
def _ctx(spec_path: Path, inventory: Path | None, hosts: str | None):
    spec_path = shipped(spec_path, Path("playbooks/provision.yaml"))
    from mfctl import settings
    from mfctl.errors import UsageError
    from mfctl.inventory import load_inventory
    from mfctl.provision.models import load_manifest, load_spec
    from mfctl.transport.ssh import SSHPool, targets_from_inventory

    spec = load_spec(spec_path)
    inv = load_inventory(inventory or spec.path(spec.inventory))
    manifest = load_manifest(spec.path(spec.firmware_manifest)) if spec.firmware_manifest else None
    spec.check_addresses(inv)
    names = None
    if hosts is not None:
        names = list(dict.fromkeys(h.strip() for h in hosts.split(",") if h.strip()))
        if not names:
            raise UsageError("--hosts is empty (leave it out for all hosts)")
    unknown = [h for h in names or [] if h not in {x.name for x in inv.hosts}]
    if unknown:
        raise UsageError(f"unknown host(s): {', '.join(unknown)}; the inventory has {', '.join(h.name for h in inv.hosts)}")
    with SSHPool(targets_from_inventory(inv), connect_timeout=settings.get_float("connect_timeout"),
                 command_timeout=settings.get_float("command_timeout"), fanout=settings.get_int("fanout")) as pool:
        yield spec, inv, manifest, names, pool


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


@app.command("plan")
@handle_errors
def plan_cmd(spec: Path = SPEC_ARG, inventory: Path = INV_OPT, hosts: str = HOSTS_OPT, json_out: bool = JSON_OPT):
    """Read every host and show what apply would change. Exit 6 if anything would, 0 if not."""
    from mfctl.provision import service

    with _ctx(spec, inventory, hosts) as (sp, inv, manifest, names, pool):
        plans = service.plan(pool, inv, sp, manifest, names)
    changes = sum(len(p.actions) for p in plans)
    if json_out:
        emit_json({"schema": "mfctl.provision.plan/v1", "changes": changes, "hosts": [p.to_dict() for p in plans]})
    else:
        _render_plan(plans)
    if any(p.error for p in plans):
        raise typer.Exit(4)
    raise typer.Exit(6 if changes else 0)


@app.command("apply")
@handle_errors
def apply_cmd(spec: Path = SPEC_ARG, inventory: Path = INV_OPT, hosts: str = HOSTS_OPT,
              dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan, change nothing (exit 6 if it would)."),
              yes: bool = typer.Option(False, "--yes", "-y", envvar="MFCTL_YES", help="Do not ask for confirmation."),
              json_out: bool = JSON_OPT):
    """Apply the plan: hosts in parallel, each in the safe order, stopping a host at its first failure; then verify."""
    from mfctl import settings
    from mfctl.lock import TestbedLock
    from mfctl.ocs.journal import Journal
    from mfctl.provision import service

    import contextlib
    import signal
    import threading

    with _ctx(spec, inventory, hosts) as (sp, inv, manifest, names, pool), (
            contextlib.nullcontext() if dry_run else TestbedLock(inv.name, "provision apply")):
        plans = service.plan(pool, inv, sp, manifest, names)  # under the lock: never a stale plan
        if not json_out:
            _render_plan(plans)
        changes = sum(len(p.actions) for p in plans)
        if dry_run:  # the same answer as `provision plan`: an unreachable host is not "no drift"
            if json_out:
                emit_json({"schema": "mfctl.provision.plan/v1", "changes": changes, "hosts": [p.to_dict() for p in plans]})
            raise typer.Exit(4 if any(p.error for p in plans) else 6 if changes else 0)
        if changes:
            from mfctl.cli.ocs import _confirm

            needs = sorted({n for p in plans for a in p.actions for n in a.needs})
            _confirm(f"apply {changes} change(s) on {sum(1 for p in plans if p.actions)} host(s)"
                     + (f" (needs: {', '.join(needs)})" if needs else "") + "?", yes)
        journal = Journal(settings.state_dir() / "provision" / f"{inv.name}.journal.jsonl")
        stop = threading.Event()
        old = signal.signal(signal.SIGINT, lambda *a: stop.set())
        try:
            results = service.apply(pool, plans, journal, stop=stop)
        finally:
            signal.signal(signal.SIGINT, old)
        verify = service.plan(pool, inv, sp, manifest, names)
    left = {v.host: [a.to_dict() for a in v.actions] for v in verify if v.actions or v.error}
    out = {"schema": "mfctl.provision.apply/v1", "changes_planned": changes,
           "hosts": [r.to_dict() | {"left_after_verify": left.get(r.host, [])} for r in results]}
    failed = [r for r in results if r.failed]
    if json_out:
        emit_json(out)
    else:
        con = out_console()
        for r in results:
            if r.failed:
                con.print(markup("[red]{}: FAILED at {}[/]: {}", r.host, r.failed["step"], r.failed["error"]), highlight=False)
            else:
                extra = markup(", [yellow]{} left after verify[/]", len(left[r.host])) if left.get(r.host) else ", verified"
                con.print(markup("[green]{}[/]: {} change(s) applied", r.host, len(r.applied)) + extra, highlight=False)
    if stop.is_set():
        print_error("interrupted: every host stopped after its current action (see above); re-run apply to finish",
                    "interrupted")
        raise typer.Exit(130)
    if failed or left:
        raise typer.Exit(1)


@app.command("optics")
@handle_errors
def optics_cmd(spec: Path = SPEC_ARG, inventory: Path = INV_OPT, json_out: bool = JSON_OPT):
    """Check every optical lane with a circuit end to end: link, Rx power vs. the module's thresholds,
    and the lane-to-OCS-port wiring against the OCS's per-port power. Exit 1 on any finding."""
    from rich.table import Table

    from mfctl import settings
    from mfctl.ocs.driver import driver_from_inventory
    from mfctl.provision import service

    with _ctx(spec, inventory, None) as (sp, inv, manifest, names, pool):
        with driver_from_inventory(inv, connect_timeout=settings.get_float("connect_timeout"),
                                   command_timeout=settings.get_float("command_timeout")) as drv:
            xc = drv.cross_connects()
            power = drv.power(sorted(set(xc.values()))) if xc else {}
        rows = service.check_optics(pool, inv, sp, power, xc)
    bad = [r for r in rows if r["status"] == "bad"]
    if json_out:
        emit_json({"schema": "mfctl.provision.optics/v1", "lanes": rows, "bad": len(bad)})
    else:
        t = Table("host", "lane", "netdev", "OCS rx port", "module Rx dBm", "OCS dBm", "status")
        for r in rows:
            t.add_row(r["host"], r["lane"], r["netdev"], str(r["ocs_rx"]), str(r.get("rx_total_dbm", "—")),
                      str(r.get("ocs_dbm", "—")), r["status"] if not r["findings"] else "; ".join(r["findings"]))
        out_console().print(t)
    if bad:
        raise typer.Exit(1)


@firmware_app.command("check")
@handle_errors
def firmware_check(spec: Path = SPEC_ARG, inventory: Path = INV_OPT, hosts: str = HOSTS_OPT, json_out: bool = JSON_OPT):
    """Every NIC's running and burnt firmware against the manifest. Exit 6 on drift."""
    from rich.table import Table

    from mfctl.errors import ConfigError
    from mfctl.hosts import mellanox

    with _ctx(spec, inventory, hosts) as (sp, inv, manifest, names, pool):
        if manifest is None:
            raise ConfigError("the recipe names no firmware_manifest", path=sp.source)
        from mfctl.errors import MfctlError

        rows = []
        for h in names or [x.name for x in inv.hosts]:
            try:
                devs = mellanox.parse_mlxfwmanager(pool.run_checked(h, mellanox.mlxfwmanager_query_argv()))
            except MfctlError as e:
                rows.append({"host": h, "pci": None, "part_number": None, "psid": None, "running": None, "burnt": None,
                             "pinned": None, "status": "unreachable", "error": str(e)})
                continue
            for d in devs:
                im = manifest.for_nic(d.part_number or "", d.psid)
                want = im.version if im else None
                status = "no pinned version" if not im else ("ok" if d.running == want and d.fw_current == want else
                                                            "reset needed" if d.fw_current == want else "drift")
                rows.append({"host": h, "pci": d.pci, "part_number": d.part_number, "psid": d.psid,
                             "running": d.running, "burnt": d.fw_current, "pinned": want, "status": status})
    drift = [r for r in rows if r["status"] in ("drift", "reset needed")]
    for r in rows:
        if r["status"] == "unreachable" and not json_out:
            print_error(r["error"])
    if json_out:
        emit_json({"schema": "mfctl.firmware.check/v1", "nics": rows, "drift": len(drift)})
    else:
        t = Table("host", "PCI", "part", "running", "burnt", "pinned", "status")
        for c in t.columns:
            c.no_wrap = True
        for r in rows:
            t.add_row(r["host"], r["pci"] or "", r["part_number"] or "", r["running"] or "", r["burnt"] or "",
                      r["pinned"] or "—", r["status"])
        out_console().print(t)
    if any(r["status"] == "unreachable" for r in rows):
        raise typer.Exit(4)
    if drift:
        raise typer.Exit(6)
