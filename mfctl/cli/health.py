"""``mfctl health`` — the operator's sweep of GPUs, NICs, transceivers and the OCS (mfctl/health/)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from mfctl.cli.common import (
    HOSTS_OPT,
    JSON_OPT,
    emit_json,
    handle_errors,
    host_names,
    option,
    out_console,
    output_path,
    print_error,
)


def _list_checks(json_out: bool) -> None:
    from rich.table import Table

    from mfctl.health.checks import table

    rows = table()
    if json_out:
        emit_json({"schema": "mfctl.health.checks/v1", "checks": rows})
        return
    t = Table("check", "group", "runs", "judges", "default", title="health checks (--checks +NAME,-NAME or NAMES)")
    for r in rows:
        t.add_row(r["name"], r["group"], r["runs"], r["judges"] + (f" (needs {', '.join(r['needs'])})" if r["needs"] else ""),
                  "yes" if r["default"] else "opt-in")
    out_console().print(t)


def _render(report) -> None:
    """The findings table: hosts with the same finding share a line."""
    from rich.table import Table
    from rich.text import Text

    from mfctl.cli.fold import fold, one_host
    from mfctl.inventory.hostsets import hostset

    t = Table("targets", "severity", "check", "finding", title="health")
    colour = {"critical": "red", "warning": "yellow"}
    for hs, f in fold(report.findings, lambda f: f.host, lambda f: (f.severity, f.source or f.check, f.shared_message)):
        # one host: its own message (an unreachable one's address in it)
        t.add_row(hs, Text(f.severity, style=colour[f.severity]), f.source or f.check,
                  f.message if one_host(hs) else f.shared_message)
    ok = [r.host for r in report.targets if not r.findings]
    if ok:
        t.add_row(hostset(ok), Text("ok", style="green"), "all", "no findings")
    out_console().print(t)


def _report(report, junit: Path | None, json_out: bool) -> None:
    """The JUnit XML (a file, or stdout alone with `-`), then the JSON or the table."""
    to_stdout = junit is not None and str(junit) == "-"
    if to_stdout:  # the XML is the output
        sys.stdout.write(report.junit() + "\n")
        return
    if junit:
        junit.write_text(report.junit())
    if json_out:
        emit_json(report.to_dict())
    else:
        _render(report)


@handle_errors
def health(inventory: Path = option("inventory", "--inventory", "-i", default=None,
                                          help="Inventory YAML (required but for --list-checks)."),
           hosts: str = HOSTS_OPT,
           checks: str = typer.Option(None, "--checks", help="Checks to run: +NAME adds to the default set, -NAME removes, "
                                      "bare NAMES are exactly these (comma-separated; --list-checks shows them)."),
           list_checks: bool = typer.Option(False, "--list-checks", help="Show the checks (what each runs and judges) and exit."),
           threshold: list[str] = typer.Option(None, "--threshold", help="Override a threshold: name=value (repeat)."),
           no_ocs: bool = typer.Option(False, "--no-ocs", help="Skip the OCS (alarms, dark connected ports): --checks -ocs."),
           since_boot: bool = typer.Option(False, "--since-boot", help="Judge NIC error counters as totals since the "
                                           "driver loaded, not by what they gained over the window of earlier sweeps."),
           junit: Path = typer.Option(None, "--junit", help="Also write a JUnit XML report here (for CI; - prints only "
                                      "the XML on stdout)."),
           json_out: bool = JSON_OPT):
    """Sweep every host in parallel with the default checks (nvidia-smi, dmesg XIDs, NVLink, ip/ethtool links,
    ibstat, RoCE GIDs, ethtool -S errors and priorities, ethtool -m DOM) and the OCS; identical findings are folded.
    NIC error counters are judged by what they gained over the last hour of sweeps (readings kept in the state dir;
    nic_error_window_s), the first time as totals. Exit 0 healthy, 1 when anything is critical (an unreachable host
    is), 2 usage (an unknown check), 4 when no host could be reached."""
    from mfctl.errors import UsageError

    if list_checks:
        if checks:
            from mfctl.health import select_checks

            select_checks(checks)  # a --checks beside it is still checked (exit 2 for a name that is no check)
        _list_checks(json_out)
        return
    if inventory is None:
        raise UsageError("missing option --inventory / -i (or MFCTL_INVENTORY)")
    to_stdout = junit is not None and str(junit) == "-"
    if json_out and to_stdout:
        raise UsageError("--json and --junit - both want stdout: write the JUnit report to a file (--junit FILE)")
    output_path(junit, "--junit")  # a report that cannot be written: said before the sweep, not after it
    report = _sweep(inventory, hosts, checks, no_ocs, threshold, since_boot, progress=not (json_out or to_stdout))
    _report(report, junit, json_out)
    raise typer.Exit(int(report.exit_code()))


def _sweep(inventory: Path, hosts: str | None, checks: str | None, no_ocs: bool, threshold: list[str] | None,
           since_boot: bool, *, progress: bool):
    """Select, sweep (the OCS read first when it is among the checks), keep the NIC readings."""
    from mfctl import health as H
    from mfctl.cli.progress import ProgressObserver
    from mfctl.context import Context
    from mfctl.health.checks import ocs
    from mfctl.inventory import load_inventory

    names = H.select_checks(checks or None, without=("ocs",) if no_ocs else ())
    overrides = H.parse_overrides(threshold)
    inv = load_inventory(inventory)
    selected = None if hosts is None else host_names(hosts, inv)
    ctx = Context.from_settings(inv)
    ocs_state = ocs.read_states(ctx) if ocs.NAME in names else None
    before = H.load_baseline(inv)
    with ctx.pool() as pool, ProgressObserver(enabled=None if progress else False, warnings=False) as obs:
        report = H.sweep(pool, inv, selected, checks=names, limits=overrides, baseline=before, since_boot=since_boot,
                         ocs_state=ocs_state, observer=obs)
    try:
        H.save_baseline(inv, report.targets, before)
    except OSError as e:
        print_error(f"NIC counters of this sweep not kept ({e.strerror or e}): later sweeps lack this reading", "warning")
    return report
