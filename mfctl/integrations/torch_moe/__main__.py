"""``python -m mfctl.integrations.torch_moe``: the torch MoE job (one process, or one per rank under
torchrun: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT`` from its
environment; ``MFCTL_CONTROLLER``, ``MFCTL_HOST``, ``MFCTL_RUN_TOKEN_FILE`` from ``mfctl run``).
Its options: :mod:`mfctl.integrations.torch_moe.options`."""

from __future__ import annotations

import sys

from mfctl.integrations.torch_moe.options import Options, OptionsError, parser
from mfctl.integrations.torch_moe.options import parse as parse_options


def parse(argv: list[str] | None = None) -> Options:
    """The job's options from ``argv`` (default: this process's); a bad one exits 2 with argparse's usage line."""
    try:
        return parse_options(sys.argv[1:] if argv is None else argv, help_ok=True)
    except OptionsError as e:
        ap = parser()
        ap.print_usage(sys.stderr)
        sys.stderr.write(f"{ap.prog}: error: {e}\n")
        raise SystemExit(2) from None


if __name__ == "__main__":
    from mfctl.integrations.torch_moe.job import main

    sys.exit(main(parse()))
