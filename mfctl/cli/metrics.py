"""``mfctl metrics export|serve``"""

from __future__ import annotations

from pathlib import Path

import typer

from mfctl.cli.common import emit_json, handle_errors, option

app = typer.Typer(help="Export a run's metrics (Prometheus, CSV, JSON) or serve them to Prometheus.", no_args_is_help=True)
RUNS_DIR_OPT = option("runs_dir", "--runs-dir", default=None, help="Where run directories are.")


def latest_run(base: Path) -> Path:
    """The newest run under ``base`` that has ended, however it ended — with its summary, or
    crashed without one (:mod:`mfctl.runtime.rundir`); a run still going is not ``latest`` (name
    it by id). What ``latest`` means for ``runs show``, ``runs report``, ``metrics export|serve``.
    Raises UsageError when there is none."""
    from mfctl.errors import UsageError
    from mfctl.runtime.rundir import run_dirs, writer_alive

    dirs = [d for d in run_dirs(base) if (d / "summary.json").is_file() or not writer_alive(d)]
    if not dirs:
        raise UsageError(f"no runs in {base}" + (" that have ended" if run_dirs(base) else ""))
    return dirs[-1]


def _run_dir(run_id: str, runs_dir: Path | None) -> Path:
    from mfctl import settings
    from mfctl.errors import UsageError

    base = Path(runs_dir or settings.get("runs_dir"))
    if run_id == "latest":
        return latest_run(base)
    if "/" in run_id or run_id.startswith(".") or not (base / run_id).is_dir():
        raise UsageError(f"no run {run_id!r} in {base} (see mfctl runs list)")
    return base / run_id


@app.command("export")
@handle_errors
def export(run_id: str = typer.Argument("latest", help="Run id, or latest."),
           fmt: str = typer.Option("prometheus", "--format", help="prometheus, csv or json."),
           table: str = typer.Option("iterations", help="CSV: iterations, reconfigurations, predictions, health or timings."),
           runs_dir: Path = RUNS_DIR_OPT):
    """Write a run's metrics to stdout."""
    import sys

    from mfctl.errors import UsageError
    from mfctl.metrics import export as ex

    d = _run_dir(run_id, runs_dir)
    if fmt == "prometheus":
        sys.stdout.write(ex.prometheus_text(d))
    elif fmt == "csv":
        sys.stdout.write(ex.to_csv(d, table))
    elif fmt == "json":
        emit_json(ex.to_json(d))
    else:
        raise UsageError("--format must be prometheus, csv or json")


@app.command("serve")
@handle_errors
def serve(run_id: str = typer.Argument("latest", help="Run id, or latest."),
          port: int = typer.Option(9464, min=1, max=65535, help="TCP port to listen on (9464: Prometheus exporters')."),
          address: str = typer.Option("127.0.0.1", help="Listen address (loopback by default)."),
          runs_dir: Path = RUNS_DIR_OPT):
    """Serve a run's metrics over HTTP for Prometheus, until Ctrl-C or SIGTERM: either is its normal
    end (it says "stopped" and exits 0, a clean stop for systemd as for a terminal)."""
    import time

    from mfctl.cli.plain import print_error
    from mfctl.metrics import export as ex
    from mfctl.signals import signal_of, sigterm_as_interrupt

    d = _run_dir(run_id, runs_dir)
    server = _listen(address, port, ex.registry(d))
    try:
        with sigterm_as_interrupt():  # (before it says it serves: a stop from then on is a clean one)
            typer.echo(f"serving {d.name} on http://{_url_host(address)}:{port}/metrics (Ctrl-C or SIGTERM stops it)")
            while True:
                time.sleep(3600)
    except KeyboardInterrupt as e:  # the way it ends: a clean stop, not an interrupted job (exit 0)
        server.shutdown()
        server.server_close()
        print_error(f"stopped serving {d.name} on {_url_host(address)}:{port} ({signal_of(e)})", "mfctl")


def _url_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def _listen(address: str, port: int, registry):
    """The HTTP server of ``registry`` on ``address``:``port`` (started, in a thread). Raises
    OperationFailed naming ``address:port`` when it cannot listen there (in use, not allowed),
    UsageError when ``address`` is not one of this machine's."""
    import errno
    import socket

    from prometheus_client import start_http_server

    from mfctl.errors import OperationFailed, UsageError

    where = f"{_url_host(address)}:{port}"
    try:
        server, _thread = start_http_server(port, addr=address, registry=registry)
    except socket.gaierror as e:
        raise UsageError(f"--address {address!r}: not an address ({e.strerror or e})") from None
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise OperationFailed(f"cannot listen on {where}: address already in use "
                                  "(another mfctl metrics serve or exporter? choose another --port)") from None
        if e.errno == errno.EADDRNOTAVAIL:
            raise UsageError(f"--address {address}: not an address of this machine ({e.strerror})") from None
        raise OperationFailed(f"cannot listen on {where}: {e.strerror or e}") from None
    return server
