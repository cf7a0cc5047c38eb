"""``mfctl mock up|down|status`` — the simulated testbed on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import typer

from mfctl.cli.common import JSON_OPT, emit_json, handle_errors, option, shipped
from mfctl.errors import ExitCode, UsageError

app = typer.Typer(help="Start, stop and inspect the mock testbed (SSH hosts + OCS emulator on loopback).",
                  no_args_is_help=True)

STATE_OPT = option("mock_state_dir", "--state-dir", default=None,
                   help="Where the mock keeps keys, known_hosts and its inventory (default: <state_dir>/mock).")


@app.command()
@handle_errors
def up(inventory: Path = typer.Argument(Path("inventory/mfabric-prototype.yaml"),
                                       help="Testbed to mock (the default is looked up here, then in the mfctl checkout)."),
       state_dir: Path = STATE_OPT,
       time_scale: float = option("mock_time_scale", "--time-scale",
                                  help="Simulated seconds per wall second (link-up, runtime)."),
       factory: bool = typer.Option(False, "--factory", help="Hosts start unprovisioned (for mfctl provision)."),
       inject: list[str] = typer.Option([], "--inject", metavar="SPEC",
                                        help="A fault, repeatable: gpu02:gpu3=xid79, gpu02:gpu1=remap-pending, "
                                             "gpu01:gpu0=ecc:4, gpu01:gpu2=slowdown, gpu01:gpu4=sm-clock:420, "
                                             "gpu01:gpu0=nvlink-down:3, gpu04:nic1=crc:120 (or symbol:N, discards:N), "
                                             "gpu03:ssh=refuse, "
                                             "gpu02:nvidia-smi=hang (or hang:N: only its Nth call), "
                                             "ocs:port7=deny, ocs:patch2=deny (or deny:COUNT: the 2nd ENT-PATCH and on)."),
       sshd: str = option("mock_sshd", "--sshd", default=None, metavar="auto|openssh|paramiko",
                          help="What serves the mock's hosts: a real OpenSSH sshd per host (openssh), paramiko "
                               "in the mock's process, or auto: openssh where sshd is installed."),
       json_out: bool = JSON_OPT):
    """Start the mock testbed in the background and write an inventory pointing at it."""
    from mfctl import mockctl

    if sshd is not None and sshd not in mockctl.SSHD_CHOICES:  # (the option takes MFCTL_MOCK_SSHD too)
        raise UsageError(f"--sshd (MFCTL_MOCK_SSHD) must be one of {', '.join(mockctl.SSHD_CHOICES)}, got {sshd!r}")
    inventory = shipped(inventory, Path("inventory/mfabric-prototype.yaml"))
    st = mockctl.start(inventory, state_dir, time_scale=time_scale, factory=factory, inject=inject, sshd=sshd)
    if json_out:
        emit_json({"schema": "mfctl.mock.status/v1", "running": True, **st})
        return
    ocses = _ocses(st)
    typer.echo(f"mock testbed up (pid {st['pid']}): {len(st['hosts'])} SSH hosts ({st['sshd']}), "
               f"{len(ocses)} OCS{'es' if len(ocses) > 1 else ''}")
    for name, e in ocses.items():
        typer.echo(f"  OCS {name}: {e['serial']} (serial), 127.0.0.1:{e['tcp']} (TL1/TCP), "
                   f"127.0.0.1:{e['ssh']} (TL1/SSH)")
    typer.echo(f"inventory: {st['inventory']}")


@app.command()
@handle_errors
def down(names: list[str] = typer.Argument(None, metavar="[NAME]...", show_default=False,
                                          help="The mocks to stop, by the names mfctl mock status gives "
                                               "(default: the one in --state-dir, or the default mock)."),
         all_mocks: bool = typer.Option(False, "--all", help="Stop every mock this state directory started."),
         force: bool = typer.Option(False, "--force",
                                    help="Stop a mock that a run (or a provisioning) is using: it fails, its hosts gone."),
         state_dir: Path = STATE_OPT, json_out: bool = JSON_OPT):
    """Stop the mock testbed (or those named, or --all). Exit 5, stopping nothing, when a live run
    or another locking command uses one (it is named with its pid), unless --force."""
    from mfctl import mockctl

    if (names or all_mocks) and state_dir is not None:
        raise UsageError("--state-dir names one mock: give it without NAME or --all")
    if names and all_mocks:
        raise UsageError("give NAME or --all, not both")
    done = mockctl.down(names or [], state_dir, all_mocks=all_mocks, force=force)
    if json_out:
        emit_json({"schema": "mfctl.mock.down/v1", "stopped": bool(done), "mocks": done})
        return
    if not done:
        typer.echo("no mock testbed was running")
    for m in done:
        typer.echo(f"mock testbed {m['name']} stopped (pid {m['pid']})")


@app.command()
@handle_errors
def status(name: str = typer.Argument(None, metavar="[NAME]", show_default=False,
                                      help="One mock, by name (default: every mock this state directory started)."),
           state_dir: Path = STATE_OPT, json_out: bool = JSON_OPT):
    """List the mocks this state directory started — a run's own ones too — with their pid, inventory,
    ports, owner (alive or not), start time and who uses them; with NAME or --state-dir, that one.
    Exit 1 when none is up. --json: the default mock's status (else the latest one's) and "mocks"."""
    from mfctl import mockctl

    if name is not None and state_dir is not None:
        raise UsageError("give NAME or --state-dir, not both")
    if state_dir is not None:
        st = mockctl.status(state_dir)
        mocks = [{**st, "name": Path(state_dir).name, "state": "up", "owner": None}] if st else []
        for m in mocks:
            m["in_use_by"] = mockctl.users(m)
    else:
        mocks = mockctl.listing()
        if name is not None:
            mocks = [m for m in mocks if m["name"] == name]
    up_ = [m for m in mocks if m["state"] == "up"]
    first = next((m for m in up_ if m["name"] == mockctl.DEFAULT_NAME), up_[-1] if up_ else None)
    if json_out:
        emit_json({"schema": "mfctl.mock.status/v1", "running": bool(up_), **(first or {}), "mocks": mocks})
    elif not mocks:
        typer.echo("not running" if name is None else f"no mock testbed named {name} is running")
    for m in mocks if not json_out else []:
        _show(m)
    if not up_:
        raise typer.Exit(ExitCode.FAILED)


def _ocses(st: dict) -> dict:
    """The mock's OCS endpoints by inventory name (``status.json``'s ``ocses``; a mock from before
    several OCSes has only ``ocs``)."""
    return st.get("ocses") or {"ocs": st["ocs"]}


def _show(m: dict) -> None:
    """One mock, as ``mfctl mock status`` prints it."""
    import time

    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(m["started"])) if m.get("started") else "?"
    state = (f"up since {since}, hosts on {m.get('sshd', 'paramiko')}, time scale {m.get('time_scale', 1):g}"
             if m["state"] == "up" else f"starting since {since}")
    typer.echo(f"{m['name']}: {state} (pid {m['pid']})")
    o = m.get("owner")
    owner = (f"pid {o['pid']} ({o.get('what') or '?'}), {'alive' if o['alive'] else 'gone: the mock is stopping'}"
             if o else "none (it runs until mfctl mock down)")
    typer.echo(f"  {'owner':<10} {owner}")
    typer.echo(f"  {'directory':<10} {m['state_dir']}")
    if m["state"] == "up":
        typer.echo(f"  {'inventory':<10} {m['inventory']}")
        for h, e in m["hosts"].items():
            typer.echo(f"  {h:<10} ssh 127.0.0.1:{e['port']}")
        for name, e in _ocses(m).items():
            typer.echo(f"  {'OCS ' + name:<10} serial {e['serial']}, tcp {e['tcp']}, ssh {e['ssh']}")
    from mfctl import mockctl

    for u in m.get("in_use_by") or []:
        typer.echo(f"  {'in use by':<10} {mockctl.who(u)}")
