"""metrics.db of a run killed with -9 in the middle of a write (seen in CI: a crashed run read as
status "unknown", its rows unreadable through a read-only connection)."""

import os
import signal
import sqlite3
import subprocess
import sys

from mfctl.metrics.store import MetricsStore, read_only
from mfctl.runtime.rundir import recover


def _killed_mid_write(d):
    """A store with a run row and 3 committed iterations, then a writer killed with -9 inside an
    open transaction: metrics.db-journal is left hot."""
    s = MetricsStore(d / "metrics.db")
    s.start_run("r1", "pb.yaml", "inv.yaml", 1.0)
    for i in range(3):
        s.iteration("gpu01", {"iteration": i, "seconds": 1.0, "tokens": 10, "epoch": 0, "inter_bytes": 0, "ocs_bytes": 0})
    s.close()
    code = (f"import sqlite3, sys, time\ndb = sqlite3.connect({str(d / 'metrics.db')!r}, isolation_level=None)\n"
            "db.execute('BEGIN'); db.execute('DELETE FROM iterations')\n"
            "db.execute('UPDATE run SET status=\"gone\"')\n"
            "db.execute('PRAGMA cache_size=1'); db.execute('INSERT INTO events VALUES (1, \"x\", ?)', ('y' * 200000,))\n"
            "print('mid-write', flush=True); time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "mid-write"
    os.kill(p.pid, signal.SIGKILL)
    p.wait(10)


def test_a_hot_journal_is_rolled_back_aside_and_the_files_stay_as_the_run_left_them(tmp_path):
    _killed_mid_write(tmp_path)
    journal = tmp_path / "metrics.db-journal"
    assert journal.exists() and journal.stat().st_size > 0
    before = ((tmp_path / "metrics.db").read_bytes(), journal.read_bytes())
    ro = sqlite3.connect(f"file:{tmp_path / 'metrics.db'}?mode=ro", uri=True)
    try:
        ro.execute("SELECT COUNT(*) FROM iterations").fetchone()
        plain_ro_reads = True
    except sqlite3.OperationalError:
        plain_ro_reads = False
    ro.close()
    db = read_only(tmp_path / "metrics.db")
    assert db.execute("SELECT COUNT(*) FROM iterations").fetchone() == (3,)  # the committed rows, rolled back to
    assert db.execute("SELECT status FROM run").fetchone() == ("running",)
    assert before == ((tmp_path / "metrics.db").read_bytes(), journal.read_bytes())  # nothing changed on disk
    s = recover(tmp_path)
    assert (s.status, s.iterations, s.run_id) == ("crashed", 3, "r1")
    assert not plain_ro_reads  # what recover() and metrics export used to do: "attempt to write a readonly database"
