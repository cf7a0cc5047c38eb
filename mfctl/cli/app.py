"""The ``mfctl`` command line."""

from __future__ import annotations

import typer

from mfctl import __version__
from mfctl.cli.common import JSON_OPT, Group, emit_json
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

    from mfctl.errors import exit_codes_line

    app = typer.Typer(
        name="mfctl",
        cls=Group,  # every command's --help written the same way (mfctl.cli.common.polish)
        help="Control plane and operator CLI of an mFabric testbed (OCS + EPS) for MoE training.",
        epilog=f"Exit codes: {exit_codes_line()} (mfctl version --exit-codes says what each means).",
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


def _planner_search() -> str:
    """The planner's local search as the setting ``planner_kernel`` and the install make it: ``compiled``,
    ``numpy``, or ``invalid: …`` (the setting's error)."""
    from mfctl.errors import ConfigError
    from mfctl.fabric import searchkind

    try:
        return searchkind.chosen(searchkind.built())
    except ConfigError as e:
        return f"invalid: {e}"


def version(json_out: bool = JSON_OPT,
            settings_table: bool = typer.Option(False, "--settings",
                                                help="List settings and their MFCTL_* variables."),
            exit_codes: bool = typer.Option(False, "--exit-codes",
                                            help="List the exit codes, what each means and the errors that give it.")):
    """Print the version (and, with --settings, every setting with its environment variable;
    a secret's value is never shown, only whether it is set; with --exit-codes, the exit codes)."""
    from mfctl import settings
    from mfctl.errors import EXIT_CODES

    data: dict = {"schema": "mfctl.version/v1", "version": __version__, "planner_search": _planner_search()}
    if settings_table:
        data["settings"] = settings.table()
    if exit_codes:
        data["exit_codes"] = [{"code": int(r.code), "name": r.code.name, "label": r.label, "meaning": r.meaning,
                               "raised_by": list(r.raised_by)} for r in EXIT_CODES]
    if json_out:
        emit_json(data)
        return
    typer.echo(f"mfctl {__version__} (circuit planner's search: {data['planner_search']})")
    for r in EXIT_CODES if exit_codes else ():
        typer.echo(f"  {int(r.code):>3}  {r.code.name:<12} {r.meaning}"
                   + (f" ({', '.join(r.raised_by)})" if r.raised_by else ""))
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
