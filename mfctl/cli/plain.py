"""Output and logging helpers that need neither typer nor rich (``mfctl exec`` starts with them
before its command line is parsed: :mod:`mfctl.cli.ahead`)."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from mfctl.settings import FALSE_WORDS, TRUE_WORDS  # noqa: F401 (re-exported: how the CLI reads a flag's variable)


def _sgr(stream, style: str, color: str = "") -> str:
    """The ANSI SGR prefix for ``style`` (and ``color`` unless NO_COLOR is set: no-color.org asks
    for no colour, not no bold — as rich does), or "" when ``stream`` is not a terminal."""
    if not stream.isatty():
        return ""
    return f"\033[{style}{'' if os.environ.get('NO_COLOR') or not color else ';' + color}m"


# C0 (but newline and tab), DEL, C1, and the bidirectional overrides/isolates that reorder what a terminal shows
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """``text`` with control characters (ESC and the rest of C0/C1, but newline and tab) shown as
    ``\\xNN``: a name or log line cannot move the cursor, recolour or retitle the operator's terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256 else f"\\u{ord(m.group()):04x}", text)


def print_error(message: str, prefix: str = "error") -> None:
    """One line on stderr, never wrapped or markup-interpreted (grep-able in CI logs); control
    characters in it are shown, not sent to the terminal (:func:`visible`)."""
    sgr = _sgr(sys.stderr, "1", "31")
    head = f"{sgr}{prefix}:\033[0m" if sgr else f"{prefix}:"
    sys.stderr.write(f"{head} {visible(message)}\n")
    sys.stderr.flush()


def print_heading(text: str) -> None:
    """One line on stdout, bold at a terminal; written as is (no rich: ``mfctl exec`` prints
    only headings and the hosts' own output, and rich's import is ~25 ms of its start)."""
    sgr = _sgr(sys.stdout, "1")
    sys.stdout.write(f"{sgr}{text}\033[0m\n" if sgr else f"{text}\n")


def _finite(x):
    """``x`` with NaN / infinite floats as None: JSON has no NaN (a tool's "nan" is missing data)."""
    if isinstance(x, float) and (x != x or x in (float("inf"), float("-inf"))):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def emit_json(obj) -> None:
    """``obj`` as one indented JSON object on stdout (what ``--json`` prints; NaN and infinities
    as null), noted in this invocation (:class:`Invocation`: an interrupt after it adds no second object)."""
    current().json_emitted = True
    sys.stdout.write(json.dumps(_finite(obj), indent=2, default=str, allow_nan=False) + "\n")
    sys.stdout.flush()


def setup_logging() -> None:
    """Log to the log file (never to the terminal: progress and results go there). A log file
    that cannot be written (a directory, a read-only or broken state dir) is a warning: the
    command runs without it (and fails on its own if it needs the state dir)."""
    from mfctl import settings
    from mfctl.errors import MfctlError

    root = logging.getLogger("mfctl")
    logging.getLogger("paramiko").setLevel(logging.WARNING)
    if any(isinstance(h, (logging.FileHandler, logging.NullHandler)) for h in root.handlers):
        return  # done already (or failed already, and said so once)
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


@dataclass
class Invocation:
    """What one call of the CLI has done so far (a new one per ``mfctl`` process, per command, and
    per ``CliRunner.invoke`` in tests — never a process-global flag reset by hand).

    ``command_started``: a command began (:func:`mfctl.cli.common.handle_errors`); from then on it
    reports its own interruption (``mfctl run`` with its summary), and :func:`mfctl.cli.main.main`
    only one before it (while the CLI loads). ``interrupt_reported``: said once, never twice.
    ``json_emitted``: the command's JSON result is out; an interrupt after it adds no second object.

    Held in a module attribute, not a ``contextvars.ContextVar``: a thread starts with an empty
    context, so a result emitted from a worker thread would be noted in no invocation."""

    command_started: bool = False
    interrupt_reported: bool = False
    json_emitted: bool = False


_current = Invocation()


def current() -> Invocation:
    """The invocation under way."""
    return _current


def begin(*, command: bool = False) -> Invocation:
    """Start a new invocation (``command``: of a command, already started) and return it."""
    global _current
    _current = Invocation(command_started=command)
    return _current


def report_interrupt(json_out: bool, message: str = "interrupted") -> None:
    """Say on stderr (``mfctl: <message>``; and with ``json_out``, as one JSON error object on
    stdout) that the command was interrupted; once per invocation."""
    inv = current()
    if inv.interrupt_reported:
        return
    inv.interrupt_reported = True
    if logging.getLogger("mfctl").handlers:  # (not yet set up while the CLI loads: no stray line on stderr)
        logging.getLogger("mfctl").warning("interrupted")
    if json_out and not inv.json_emitted:  # CI reads one JSON object whatever happened (and never two)
        try:
            from mfctl.errors import Interrupted

            emit_json({"schema": "mfctl.error/v1", "error": Interrupted(
                "interrupted (Ctrl-C)" if message == "interrupted" else message).to_dict()})
        except OSError:
            pass
    print_error(message, "mfctl")
