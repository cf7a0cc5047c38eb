"""The ``mfctl`` console script (and ``python -m mfctl``)."""

from __future__ import annotations

import os
import sys


class _Stdout:
    """``sys.stdout`` as the CLI writes it, noting a write or flush that met EPIPE: the reader of
    stdout left (``mfctl ... | head``). Whatever then ends the command — rich's Console (its
    ``on_broken_pipe`` exits 1), click (exit 1 on EPIPE), :func:`mfctl.cli.common.handle_errors`
    or the flush at the interpreter's exit — :func:`main` exits 0, as the exit-code table says."""

    def __init__(self, stream):
        self._stream = stream
        self.reader_left = False

    def write(self, text):
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self.reader_left = True
            raise

    def flush(self):
        try:
            return self._stream.flush()
        except BrokenPipeError:
            self.reader_left = True
            raise

    def __getattr__(self, name):  # isatty, fileno, encoding, buffer, ...: the stream's own
        return getattr(self._stream, name)


def _reader_left(out: _Stdout) -> bool:
    """Whether stdout's reader left: a write or this last flush met EPIPE. If so, stdout becomes
    /dev/null, so that nothing still buffered fails again at the interpreter's exit."""
    try:
        out.flush()
    except BrokenPipeError:
        pass
    except (OSError, ValueError):  # another I/O error, or a stream closed: not the reader leaving
        return out.reader_left
    if out.reader_left:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, out.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass
    return out.reader_left


def main() -> None:
    """Run the CLI. ``mfctl exec`` first starts its SSH connections (:mod:`mfctl.cli.ahead`), so
    that they overlap the import of the CLI itself; whatever they opened and no command took is
    closed on the way out, whatever happens. A reader of stdout leaving early exits 0 (:class:`_Stdout`)."""
    if sys.stderr is None:  # started with `2>&-`: diagnostics go nowhere (the log file still has them)
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - for the life of the process
    if sys.stdout is None:  # started with `>&-`: results cannot be given (like coreutils' "write error")
        from mfctl.errors import ExitCode

        sys.stderr.write("mfctl: standard output is closed\n")
        sys.exit(ExitCode.FAILED)
    from mfctl.cli import plain
    from mfctl.errors import ExitCode

    plain.begin()
    out = sys.stdout = _Stdout(sys.stdout)
    try:
        _main()
    except BrokenPipeError:  # raised by a write outside any command's error handling
        if not _reader_left(out):
            raise
        sys.exit(ExitCode.OK)
    except SystemExit as e:
        # a reader leaving early is exit 0 (errors.EXIT_CODES), whatever exit the EPIPE led to: rich's and
        # click's are 1; an interrupt or another error that came first keeps its own code
        if _reader_left(out) and e.code in (None, 0, ExitCode.FAILED):
            sys.exit(ExitCode.OK)
        raise
    else:
        _reader_left(out)  # (a flush that fails here is still the reader leaving: exit 0, not Python's 120)


def _main() -> None:
    from mfctl.cli import plain
    from mfctl.errors import ExitCode

    ahead = None
    try:
        if sys.argv[1:2] == ["exec"]:
            from mfctl.cli import ahead

            ahead.start(sys.argv[2:])
        from mfctl.cli.app import build

        build(sys.argv[1] if len(sys.argv) > 1 else None)()
    except (KeyboardInterrupt, SystemExit) as e:  # Ctrl-C before a command ran: Typer exits 130 saying nothing
        if isinstance(e, SystemExit) and (e.code != ExitCode.INTERRUPTED or plain.current().command_started):
            raise
        words = sys.argv[1:sys.argv.index("--")] if "--" in sys.argv else sys.argv[1:]
        plain.report_interrupt("--json" in words or os.environ.get("MFCTL_JSON", "").strip().lower() in plain.TRUE_WORDS)
        sys.exit(ExitCode.INTERRUPTED)
    finally:
        if ahead is not None:
            ahead.cancel()
