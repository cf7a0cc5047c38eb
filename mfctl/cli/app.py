"""The ``mfctl`` command line."""

from __future__ import annotations

import typer

from mfctl import __version__
from mfctl.cli import bench as bench_cli
from mfctl.cli import exec_ as exec_cli
from mfctl.cli import health as health_cli
from mfctl.cli import inventory as inventory_cli
from mfctl.cli import metrics as metrics_cli
from mfctl.cli import mock as mock_cli
from mfctl.cli import ocs as ocs_cli
from mfctl.cli import profile as profile_cli
from mfctl.cli import provision as provision_cli
from mfctl.cli import run as run_cli
from mfctl.cli import simulate as simulate_cli
from mfctl.cli import topo as topo_cli
from mfctl.cli.common import JSON_OPT, emit_json

app = typer.Typer(
    name="mfctl",
    help="Control plane and operator CLI of an mFabric testbed (OCS + EPS) for MoE training.\n\n"
         "Exit codes: 0 ok, 1 failed on a target, 2 usage, 3 invalid inventory/config, "
         "4 unreachable/timeout, 5 lock held, 6 drift in check mode, 130 interrupted.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(inventory_cli.app, name="inventory")
app.add_typer(mock_cli.app, name="mock")
app.add_typer(ocs_cli.app, name="ocs")
app.add_typer(topo_cli.app, name="topo")
app.add_typer(provision_cli.app, name="provision")
app.add_typer(provision_cli.firmware_app, name="firmware")
app.add_typer(run_cli.runs_app, name="runs")
app.add_typer(metrics_cli.app, name="metrics")
app.add_typer(bench_cli.app, name="bench")
app.command("run")(run_cli.run)
app.command("health")(health_cli.health)
app.command("exec")(exec_cli.exec_cmd)  # options anywhere before `--`; the command's own words after it
app.command("simulate")(simulate_cli.simulate)
app.command("profile")(profile_cli.profile)
app.command("schedule")(profile_cli.schedule)


@app.command()
def version(json_out: bool = JSON_OPT, settings_table: bool = typer.Option(False, "--settings", help="List settings and their MFCTL_* variables.")):
    """Print the version (and, with --settings, every setting with its environment variable)."""
    from mfctl import settings

    data = {"schema": "mfctl.version/v1", "version": __version__}
    if settings_table:
        data["settings"] = [{"name": s.name, "env": s.env, "default": s.default, "value": settings.get(s.name), "help": s.help}
                            for s in settings.SETTINGS.values()]
    if json_out:
        emit_json(data)
        return
    typer.echo(f"mfctl {__version__}")
    rows = data.get("settings", [])
    w = max([24] + [len(str(s["value"])) + 1 for s in rows])
    for s in rows:
        typer.echo(f"  {s['env']:<26} {s['value']!s:<{w}} {s['help']}")


def main() -> None:
    app()
