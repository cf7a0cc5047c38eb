"""The ``mfctl`` console script (and ``python -m mfctl``)."""

from __future__ import annotations

import sys


def main() -> None:
    """Run the CLI. ``mfctl exec`` first starts its SSH connections (:mod:`mfctl.cli.ahead`), so
    that they overlap the import of the CLI itself; whatever they opened and no command took is
    closed on the way out, whatever happens."""
    ahead = None
    try:
        if sys.argv[1:2] == ["exec"]:
            from mfctl.cli import ahead

            ahead.start(sys.argv[2:])
        from mfctl.cli.app import build

        build(sys.argv[1] if len(sys.argv) > 1 else None)()
    finally:
        if ahead is not None:
            ahead.cancel()
