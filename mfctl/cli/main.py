"""The ``mfctl`` console script (and ``python -m mfctl``)."""

from __future__ import annotations

import os
import sys


def main() -> None:
    """Run the CLI. ``mfctl exec`` first starts its SSH connections (:mod:`mfctl.cli.ahead`), so
    that they overlap the import of the CLI itself; whatever they opened and no command took is
    closed on the way out, whatever happens."""
    if sys.stderr is None:  # started with `2>&-`: diagnostics go nowhere (the log file still has them)
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - for the life of the process
    if sys.stdout is None:  # started with `>&-`: results cannot be given (like coreutils' "write error")
        from mfctl.errors import ExitCode

        sys.stderr.write("mfctl: standard output is closed\n")
        sys.exit(ExitCode.FAILED)
    from mfctl.cli import plain
    from mfctl.errors import ExitCode

    plain.begin()
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
