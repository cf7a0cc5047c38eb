"""``python -m mfctl.mock serve --inventory FILE --state-dir DIR [--time-scale X]``"""

import argparse
import sys

from mfctl.mock.testbed import serve


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mfctl.mock")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the mock testbed in the foreground")
    s.add_argument("--inventory", required=True)
    s.add_argument("--state-dir", required=True)
    s.add_argument("--time-scale", type=float, default=1.0)
    a = ap.parse_args(argv)
    return serve(a.inventory, a.state_dir, a.time_scale)


if __name__ == "__main__":
    sys.exit(main())
