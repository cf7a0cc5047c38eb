"""``python -m mfctl.mock serve --inventory FILE --state-dir DIR [--time-scale X] [--sshd auto|openssh|paramiko]
[--owner-pid PID[:START] [--owner-until-ready]]``"""

import argparse
import sys
from pathlib import Path


def _owner(text: str) -> tuple[int, int | None]:
    pid, _, ticks = text.partition(":")
    return int(pid), (int(ticks) if ticks else None)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mfctl.mock")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the mock testbed in the foreground")
    s.add_argument("--inventory", required=True)
    s.add_argument("--state-dir", required=True)
    s.add_argument("--time-scale", type=float, default=1.0)
    s.add_argument("--factory", action="store_true", help="hosts start unprovisioned")
    s.add_argument("--inject", action="append", default=[], metavar="SPEC", help="a fault (mfctl.mock.inject)")
    s.add_argument("--sshd", choices=("auto", "openssh", "paramiko"), default="auto",
                   help="what serves the hosts (mfctl.mock.hostsshd)")
    s.add_argument("--owner-pid", type=_owner, default=(None, None), metavar="PID[:START]",
                   help="stop when this process (started at START, clock ticks since boot: /proc/PID/stat field 22) "
                        "is gone: the mfctl that started the mock, even after kill -9")
    s.add_argument("--owner-until-ready", action="store_true",
                   help="watch the owner only until the mock is up (mfctl mock up: the mock outlives it)")
    a = ap.parse_args(argv)
    pid, ticks = a.owner_pid
    if pid:  # watched from here on, before the mock's servers are even imported
        from mfctl.mock import owner

        if owner.owner_gone(pid, ticks):
            return 0  # the mfctl that started it is gone already: nobody would see it
        owner.watch_in_background(pid, ticks, Path(a.state_dir) / "status.json" if a.owner_until_ready else None)
    from mfctl.errors import MfctlError
    from mfctl.mock.testbed import serve

    try:
        return serve(a.inventory, a.state_dir, a.time_scale, a.factory, a.inject, a.sshd)
    except MfctlError as e:
        print(f"mock: {e}", file=sys.stderr)
        return int(e.exit_code)


if __name__ == "__main__":
    sys.exit(main())
