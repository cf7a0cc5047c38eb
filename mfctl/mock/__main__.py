"""``python -m mfctl.mock serve --inventory FILE --state-dir DIR [--time-scale X] [--sshd auto|openssh|paramiko]
[--owner-pid PID]``"""

import argparse
import sys

from mfctl.errors import MfctlError
from mfctl.mock.testbed import serve


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
    s.add_argument("--owner-pid", type=int, default=None,
                   help="stop when this process is gone (the mfctl run that started the mock, even after kill -9)")
    a = ap.parse_args(argv)
    try:
        return serve(a.inventory, a.state_dir, a.time_scale, a.factory, a.inject, a.sshd, owner_pid=a.owner_pid)
    except MfctlError as e:
        print(f"mock: {e}", file=sys.stderr)
        return int(e.exit_code)


if __name__ == "__main__":
    sys.exit(main())
