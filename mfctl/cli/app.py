"""The ``mfctl`` command line."""

from __future__ import annotations

import typer

from mfctl import __version__
from mfctl.cli.common import JSON_OPT, emit_json
from mfctl.settings import SECRET_SHOWN  # noqa: F401 (re-exported: a secret's value in `mfctl version --settings`)

# every top-level command: name → (module, attribute, a group of subcommands?), in the order of `mfctl --help`
COMMANDS: dict[str, tuple[str, str, bool]] = {
    "inventory": ("mfctl.cli.inventory", "app", True),
    "mock": ("mfctl.cli.mock", "app", True),
    "ocs": ("mfctl.cli.ocs", "app", True),
    "topo": ("mfctl.cli.topo", "app", True),
    "provision": ("mfctl.cli.provision", "app", True),
    "firmware": ("mfctl.cli.provision", "firmware_app", True),
    "lock": ("mfctl.cli.lock", "app", True),
    "runs": ("mfctl.cli.run", "runs_app", True),
    "metrics": ("mfctl.cli.metrics", "app", True),
    "bench": ("mfctl.cli.bench", "app", True),
    "run": ("mfctl.cli.run", "run", False),
    "health": ("mfctl.cli.health", "health", False),
    "exec": ("mfctl.cli.exec_", "exec_cmd", False),  # options anywhere before `--`; the command's own words after it
    "parse": ("mfctl.cli.parse", "parse", False),
    "simulate": ("mfctl.cli.simulate", "simulate", False),
    "profile": ("mfctl.cli.profile", "profile", False),
    "schedule": ("mfctl.cli.profile", "schedule", False),
    "version": ("mfctl.cli.app", "version", False),
}


def build(only: str | None = None) -> typer.Typer:
    """The ``mfctl`` Typer app: every command, or (``only``) just that one — what ``mfctl ONLY …``
    needs: Typer builds a click command, with a pydantic adapter per parameter, for every command
    it holds, so a one-command app starts ~15 ms sooner. Unknown ``only``: the whole app."""
    import importlib

    app = typer.Typer(
        name="mfctl",
        help="Control plane and operator CLI of an mFabric testbed (OCS + EPS) for MoE training.\n\n"
             "Exit codes: 0 ok, 1 failed on a target, 2 usage, 3 invalid inventory/config, "
             "4 unreachable/timeout, 5 lock held, 6 drift in check mode, 130 interrupted.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    only = only if only in COMMANDS else None
    for name, (module, attr, group) in COMMANDS.items():
        if only is None or name == only:
            obj = getattr(importlib.import_module(module), attr)
            if group:
                app.add_typer(obj, name=name)
            else:
                app.command(name, **getattr(obj, "typer_options", {}))(obj)
    app.callback()(_one_command if only is not None else _root)
    return app


def _one_command() -> None:
    pass  # a group callback: an app with one command keeps its name (`mfctl exec …`, not `mfctl …`)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"mfctl {__version__}")
        raise typer.Exit()


def _root(_version: bool = typer.Option(False, "--version", "-V", is_eager=True, callback=_print_version,
                                        help="Print the version and exit (mfctl version --json for machines).")) -> None:
    pass


def version(json_out: bool = JSON_OPT,
            settings_table: bool = typer.Option(False, "--settings",
                                                help="List settings and their MFCTL_* variables.")):
    """Print the version (and, with --settings, every setting with its environment variable;
    a secret's value is never shown, only whether it is set)."""
    from mfctl import settings

    data = {"schema": "mfctl.version/v1", "version": __version__}
    if settings_table:
        data["settings"] = settings.table()
    if json_out:
        emit_json(data)
        return
    typer.echo(f"mfctl {__version__}")
    rows = data.get("settings", [])
    shown = [(f"{s['value']} (set)" if s["value"] else "(not set)") if s["secret"] else str(s["value"]) for s in rows]
    w = max([24] + [len(v) + 1 for v in shown])
    limits = [settings.SETTINGS[s["name"]].limits_text() for s in rows]
    for s, v, lim in zip(rows, shown, limits):
        typer.echo(f"  {s['env']:<26} {v:<{w}} " + (f"{s['help'].rstrip('.')} ({lim})." if lim else s["help"]))


def main() -> None:
    """The console script's former target (kept for launchers written by older installs)."""
    from mfctl.cli.main import main as run

    run()
