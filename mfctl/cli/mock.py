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
    typer.echo(f"mock testbed up (pid {st['pid']}): {len(st['hosts'])} SSH hosts ({st['sshd']}), "
               f"OCS on {st['ocs']['serial']} "
               f"(serial), 127.0.0.1:{st['ocs']['tcp']} (TL1/TCP), 127.0.0.1:{st['ocs']['ssh']} (TL1/SSH)")
    typer.echo(f"inventory: {st['inventory']}")


@app.command()
@handle_errors
def down(state_dir: Path = STATE_OPT, json_out: bool = JSON_OPT):
    """Stop the mock testbed."""
    from mfctl import mockctl

    was = mockctl.stop(state_dir)
    if json_out:
        emit_json({"schema": "mfctl.mock.down/v1", "stopped": was})
        return
    typer.echo("mock testbed stopped" if was else "no mock testbed was running")


@app.command()
@handle_errors
def status(state_dir: Path = STATE_OPT, json_out: bool = JSON_OPT):
    """Show whether the mock is running and where. Exit 1 when it is not."""
    from mfctl import mockctl

    st = mockctl.status(state_dir)
    if json_out:
        emit_json({"schema": "mfctl.mock.status/v1", "running": bool(st), **(st or {})})
    elif st:
        typer.echo(f"running (pid {st['pid']}, hosts on {st.get('sshd', 'paramiko')}), inventory {st['inventory']}")
        for h, e in st["hosts"].items():
            typer.echo(f"  {h:<10} ssh 127.0.0.1:{e['port']}")
        typer.echo(f"  OCS        serial {st['ocs']['serial']}, tcp {st['ocs']['tcp']}, ssh {st['ocs']['ssh']}")
    else:
        typer.echo("not running")
    if not st:
        raise typer.Exit(ExitCode.FAILED)
