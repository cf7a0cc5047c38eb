"""``mfctl exec HOSTS -- COMMAND`` — one command on many hosts over pooled SSH."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from mfctl.cli.common import JSON_OPT, emit_json, handle_errors, print_error, print_heading


@handle_errors
def exec_cmd(hosts: str = typer.Argument(..., help="Host set: all, gpu01,gpu02, gpu[01-04], gpu[01-04]!gpu02 or @REGION."),
             command: list[str] = typer.Argument(..., help="The command and its arguments, after -- (mfctl's own "
                                                 "options may stand anywhere before it)."),
             inventory: Path = typer.Option(..., "--inventory", "-i", envvar="MFCTL_INVENTORY"),
             fanout: int = typer.Option(None, "--fanout", min=1, envvar="MFCTL_FANOUT", help="Hosts contacted at once."),
             connect_timeout: float = typer.Option(None, "--connect-timeout", min=0.1, max=86400, envvar="MFCTL_CONNECT_TIMEOUT"),
             timeout: float = typer.Option(None, "--timeout", min=0.1, max=86400, envvar="MFCTL_COMMAND_TIMEOUT", help="Per-command timeout, s."),
             json_out: bool = JSON_OPT):
    """Run COMMAND on HOSTS in parallel (each word quoted for the remote shell); identical results are folded.
    Exit code: 0 all ok, 1 a command failed somewhere, 4 a host was unreachable or timed out."""
    from mfctl import settings
    from mfctl.errors import UsageError
    from mfctl.hosts.fold import fold, select_hosts
    from mfctl.inventory import load_inventory
    from mfctl.transport.ssh import SSHPool, targets_from_inventory

    if not command:
        raise UsageError("no command given (mfctl exec -i INV HOSTS -- COMMAND ...)")
    inv = load_inventory(inventory)
    known = [h.name for h in inv.hosts]
    names = select_hosts(hosts, known, {r.name: r.hosts for r in inv.regions})
    with SSHPool(targets_from_inventory(inv), connect_timeout=connect_timeout or settings.get_float("connect_timeout"),
                 command_timeout=timeout or settings.get_float("command_timeout"),
                 fanout=fanout or settings.get_int("fanout")) as pool:
        results = pool.run_many(names, lambda h: command, close=True)
    worst = 4 if any(r.error for r in results) else (1 if any(r.rc != 0 for r in results) else 0)
    groups = fold(results, lambda r: r.host, lambda r: (r.rc, r.stdout, r.stderr, r.error))
    if json_out:
        emit_json({"schema": "mfctl.exec/v1", "command": command, "exit_code": worst,
                   "results": [r.to_dict() for r in results],
                   "folded": [{"hosts": hs, "rc": r.rc, "stdout": r.stdout, "stderr": r.stderr, "error": r.error}
                              for hs, r in groups]})
    else:
        for hs, r in groups:  # the hosts' output as they wrote it (like ssh, pdsh, clush)
            print_heading(f"---- {hs} ({f'error: {r.error}' if r.error else f'rc={r.rc}'}) ----")
            if r.stdout:
                sys.stdout.write(r.stdout if r.stdout.endswith("\n") else r.stdout + "\n")
            if r.stderr:
                sys.stdout.flush()
                print_error(r.stderr.rstrip("\n"), f"stderr {hs}")
        sys.stdout.flush()
    raise typer.Exit(worst)
