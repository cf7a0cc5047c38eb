"""Apply a topology (or recover the journal's pending change) and die (os._exit) right after
the N-th journal record is on disk.

Used by tests/unit/ocs/test_ocs_recover.py and tests/unit/ocs/test_ocs_integrity.py to kill -9 at every step.
usage: crash_apply.py PORT JOURNAL CRASH_AFTER DESIRED_JSON|recover:complete|recover:rollback
"""

import json
import os
import sys

from mfctl.inventory.models import OCS
from mfctl.ocs.driver import OCSDriver, recover
from mfctl.ocs.journal import Journal


class CrashingJournal(Journal):
    def __init__(self, path, crash_after):
        super().__init__(path)
        self.crash_after = crash_after
        self.n = 0

    def append(self, op, **fields):
        rec = super().append(op, **fields)
        self.n += 1
        if self.n == self.crash_after:
            os._exit(9)
        return rec


def main():
    port, path, crash_after, what = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
    ocs = OCS(name="ocs1", size={"inputs": 48, "outputs": 48},
              transports=[{"kind": "tcp", "address": "127.0.0.1", "port": port}], password_env="OCS_PW")
    d = OCSDriver(ocs, journal=CrashingJournal(path, crash_after), command_timeout=5).connect()
    if what.startswith("recover:"):
        recover(d, Journal(path).records(), mode=what.split(":", 1)[1])
    else:
        d.apply({int(i): int(o) for i, o in json.loads(what).items()}, reason="crash test")
    print("completed")


if __name__ == "__main__":
    main()
