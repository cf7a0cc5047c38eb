"""The run's metrics writer commits what is queued in one batch (MetricsStore.batch): rows written by
another thread meanwhile are kept, nothing queued before close() is lost, and a store closed under it
is a logged failure, not a dead thread (the trial's 1,024-GPU run: 'Cannot operate on a closed
database' after the writer fell minutes behind at one commit per row)."""

import logging
import sqlite3
import threading

from mfctl.metrics.store import MetricsStore
from mfctl.runtime.training import _StoreWriter


def test_queued_rows_are_written_in_batches_and_all_kept(tmp_path):
    st = MetricsStore(tmp_path / "metrics.db")
    commits = []
    real_commit = st.db.commit
    st.db = _Counting(st.db, commits)
    w = _StoreWriter(st)
    for it in range(1, 2001):
        w.put(st.iteration, "gpu01", {"iteration": it, "seconds": 1.0})
    t = threading.Thread(target=lambda: [st.event("x", str(i)) for i in range(50)])  # another thread, at once
    t.start()
    t.join()
    w.close()
    assert not w.thread.is_alive() and w.errors == 0
    db = sqlite3.connect(tmp_path / "metrics.db")  # (a second connection sees only what is committed)
    assert db.execute("SELECT COUNT(*) FROM iterations").fetchone()[0] == 2000
    assert db.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 50
    assert len(commits) < 500, len(commits)  # batched (one commit per row would be 2,050; here ~10)
    real_commit()


def test_a_store_closed_under_the_writer_is_a_logged_failure(tmp_path, caplog):
    st = MetricsStore(tmp_path / "metrics.db")
    st.close()
    w = _StoreWriter(st)
    with caplog.at_level(logging.WARNING, logger="mfctl.runtime.training"):
        w.put(st.iteration, "gpu01", {"iteration": 1, "seconds": 1.0})
        w.close()
    assert not w.thread.is_alive() and w.errors >= 1
    assert "metrics store write failed (later failures not logged)" in caplog.text


class _Counting:
    """An sqlite3 connection that counts its commits."""

    def __init__(self, db, commits):
        self._db, self._commits = db, commits

    def commit(self):
        self._commits.append(1)
        return self._db.commit()

    def __getattr__(self, name):
        return getattr(self._db, name)
