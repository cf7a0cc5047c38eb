"""Shared CLI plumbing: consoles, JSON output, error → exit code mapping, logging."""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
from pathlib import Path

import typer

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


def _sgr(stream, style: str, color: str = "") -> str:
    """The ANSI SGR prefix for ``style`` (and ``color`` unless NO_COLOR is set: no-color.org asks
    for no colour, not no bold — as rich does), or "" when ``stream`` is not a terminal."""
    if not stream.isatty():
        return ""
    return f"\033[{style}{'' if os.environ.get('NO_COLOR') or not color else ';' + color}m"


def print_error(message: str, prefix: str = "error") -> None:
    """One line on stderr, never wrapped or markup-interpreted (grep-able in CI logs)."""
    sgr = _sgr(sys.stderr, "1", "31")
    head = f"{sgr}{prefix}:\033[0m" if sgr else f"{prefix}:"
    sys.stderr.write(f"{head} {message}\n")
    sys.stderr.flush()


def print_heading(text: str) -> None:
    """One line on stdout, bold at a terminal; written as is (no rich: ``mfctl exec`` prints
    only headings and the hosts' own output, and rich's import is ~25 ms of its start)."""
    sgr = _sgr(sys.stdout, "1")
    sys.stdout.write(f"{sgr}{text}\033[0m\n" if sgr else f"{text}\n")


def emit_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")
    sys.stdout.flush()


def setup_logging() -> None:
    """Log to the log file (never to the terminal: progress and results go there). A log file
    that cannot be written (a directory, a read-only or broken state dir) is a warning: the
    command runs without it (and fails on its own if it needs the state dir)."""
    from mfctl import settings
    from mfctl.errors import MfctlError

    root = logging.getLogger("mfctl")
    logging.getLogger("paramiko").setLevel(logging.WARNING)
    if any(isinstance(h, logging.FileHandler) for h in root.handlers):
        return
    path = settings.get("log_file")
    try:
        path = path or str(settings.state_dir() / "mfctl.log")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        h = logging.FileHandler(path)
    except MfctlError as e:
        print_error(f"no log file: {e}; running without one", "warning")
        root.addHandler(logging.NullHandler())
        return
    except OSError as e:
        why = "a parent is not a directory" if isinstance(e, (FileExistsError, NotADirectoryError)) else e.strerror or e
        print_error(f"no log file: {path}: {why}; running without one", "warning")
        root.addHandler(logging.NullHandler())
        return
    h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(h)
    root.setLevel(logging.INFO)


def handle_errors(fn):
    """Map MfctlError to its exit code and a one-line message (JSON on stdout with --json)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from mfctl.errors import ExitCode, MfctlError

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
            err_console().print("[yellow]interrupted[/]")
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
