"""Shared CLI plumbing: consoles, JSON output, error → exit code mapping, logging."""

from __future__ import annotations

import functools
import logging
import sys
from pathlib import Path

import typer

from mfctl.cli.plain import emit_json, print_error, print_heading, setup_logging  # noqa: F401 (the CLI's helpers)

JSON_OPT = typer.Option(False, "--json", help="Print one JSON object on stdout (for CI).", envvar="MFCTL_JSON")


def out_console():
    """Results on stdout; when it is not a terminal (a file, a pipe, CI), lines are not
    wrapped at 80 columns so that grep and log parsers see whole lines."""
    from rich.console import Console

    tty = sys.stdout.isatty()
    return Console() if tty else Console(width=240, soft_wrap=True)


def shipped(path: Path, default: Path) -> Path:
    """``path`` itself, unless it is the relative ``default`` and missing here: then the copy
    in the mfctl checkout (so ``mfctl mock up`` or ``provision plan`` work from any folder)."""
    if path == default and not path.exists():
        candidate = Path(__file__).resolve().parents[2] / default
        if candidate.exists():
            return candidate
    return path


def err_console():
    """Progress and warnings on stderr; unwrapped when stderr is not a terminal (CI logs)."""
    from rich.console import Console

    return Console(stderr=True) if sys.stderr.isatty() else Console(stderr=True, width=240, soft_wrap=True)


def handle_errors(fn):
    """Map MfctlError to its exit code and a one-line message (JSON on stdout with --json)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from mfctl.cli import plain
        from mfctl.errors import ExitCode, MfctlError

        plain.COMMAND_STARTED = True
        setup_logging()
        def fail(e: MfctlError):
            logging.getLogger("mfctl").error("%s", e)
            try:
                if kwargs.get("json_out"):
                    emit_json({"schema": "mfctl.error/v1", "error": e.to_dict()})
                    return typer.Exit(int(e.exit_code))
            except OSError:  # stdout itself is what failed
                pass
            print_error(str(e))
            return typer.Exit(int(e.exit_code))

        try:
            return fn(*args, **kwargs)
        except MfctlError as e:
            raise fail(e) from None
        except KeyboardInterrupt:
            from mfctl.cli.plain import report_interrupt

            report_interrupt(bool(kwargs.get("json_out")))
            raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
        except BrokenPipeError:  # `mfctl ... | head`: the reader left, which is not a failure
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
            raise typer.Exit(0) from None
        except OSError as e:
            from mfctl.errors import OperationFailed, UsageError

            if e.filename is not None:  # a path the operator gave (--junit, --out, --runs-dir, ...)
                raise fail(UsageError(f"{e.filename}: {e.strerror or e}")) from None
            # e.g. a full disk under stdout or a report: one line here, the traceback in the log file
            logging.getLogger("mfctl").exception("I/O error")
            import os

            done = fail(OperationFailed(f"I/O error: {e.strerror or e}"))
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # what stdout still buffers goes nowhere
            raise done from None

    return wrapper
