"""``mfctl health`` — the operator's sweep of GPUs, NICs, transceivers and the OCS."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from mfctl.cli.common import JSON_OPT, emit_json, handle_errors, out_console, print_error


@handle_errors
def health(inventory: Path = typer.Option(..., "--inventory", "-i", envvar="MFCTL_INVENTORY"),
           hosts: str = typer.Option(None, "--hosts", help="Host set (gpu[01-02], @REGION); default all."),
           threshold: list[str] = typer.Option(None, "--threshold", help="Override a threshold: name=value (repeat)."),
           no_ocs: bool = typer.Option(False, "--no-ocs", help="Skip the OCS (alarms, dark connected ports)."),
           since_boot: bool = typer.Option(False, "--since-boot", help="Judge NIC error counters as totals since the "
                                           "driver loaded, not by what they gained over the window of earlier sweeps."),
           junit: Path = typer.Option(None, "--junit", help="Also write a JUnit XML report here (for CI; - prints only the XML on stdout)."),
           json_out: bool = JSON_OPT):
    """Sweep every host in parallel (nvidia-smi, dmesg XIDs, ip/ethtool links, ethtool -S priorities,
    ethtool -m DOM) and the OCS; identical findings are folded. NIC error counters are judged by what they
    gained over the last hour of sweeps (readings kept in the state dir; nic_error_window_s), the first time as
    totals. Exit 0 healthy, 1 when anything is critical (an unreachable host is), 4 when no host could be reached."""
    from rich.table import Table
    from rich.text import Text

    from mfctl import settings
    from mfctl.errors import MfctlError, UsageError
    from mfctl.hosts import health as H
    from mfctl.hosts.fold import fold, one_host, select_hosts
    from mfctl.inventory import load_inventory
    from mfctl.transport.ssh import SSHPool, targets_from_inventory

    if json_out and junit is not None and str(junit) == "-":
        raise UsageError("--json and --junit - both want stdout: write the JUnit report to a file (--junit FILE)")
    inv = load_inventory(inventory)
    names = None
    if hosts is not None:
        names = select_hosts(hosts, [h.name for h in inv.hosts], {r.name: r.hosts for r in inv.regions})
    overrides = H.parse_overrides(threshold)
    ocs_state = None
    if not no_ocs:
        from mfctl.ocs.driver import driver_from_inventory

        try:
            with driver_from_inventory(inv, connect_timeout=settings.get_float("connect_timeout"),
                                       command_timeout=settings.get_float("command_timeout")) as drv:
                xc = drv.cross_connects()
                al = drv.alarms()
                power = drv.power(sorted(set(xc.values()))) if xc else {}
            ocs_state = {"standing": al["standing"], "dark_outputs": [p for p, v in power.items() if v is None]}
        except MfctlError as e:
            ocs_state = {"error": str(e)}
    with SSHPool(targets_from_inventory(inv), connect_timeout=settings.get_float("connect_timeout"),
                 command_timeout=settings.get_float("command_timeout"), fanout=settings.get_int("fanout")) as pool:
        before = H.load_baseline(inv)
        results = H.full_sweep(pool, inv, names, overrides, ocs_state, before, since_boot=since_boot)
    try:
        H.save_baseline(inv, results, before)
    except OSError as e:
        print_error(f"NIC counters of this sweep not kept ({e.strerror or e}): later sweeps lack this reading", "warning")
    crit = any(f.severity == "critical" for r in results for f in r.findings)
    to_stdout = junit is not None and str(junit) == "-"
    if to_stdout:  # the XML is the output
        sys.stdout.write(H.junit(results) + "\n")
    elif junit:
        junit.write_text(H.junit(results))
    if to_stdout:
        pass
    elif json_out:
        emit_json({"schema": "mfctl.health/v1", "healthy": not crit, "thresholds": H.thresholds(overrides),
                   "targets": [r.to_dict() for r in results]})
    else:
        findings = [f for r in results for f in r.findings]
        ok = [r.host for r in results if not r.findings]
        t = Table("targets", "severity", "check", "finding", title="health")
        colour = {"critical": "red", "warning": "yellow"}
        for hs, f in fold(findings, lambda f: f.host, lambda f: (f.severity, f.check, f.shared_message)):
            # one host: its own message (an unreachable one's address in it)
            t.add_row(hs, Text(f.severity, style=colour[f.severity]), f.check, f.message if one_host(hs) else f.shared_message)
        if ok:
            from mfctl.hosts.fold import hostset
            t.add_row(hostset(ok), Text("ok", style="green"), "all", "no findings")
        out_console().print(t)
    if results and not any(r.reachable for r in results):
        raise typer.Exit(4)  # nothing could be reached
    raise typer.Exit(1 if crit else 0)
