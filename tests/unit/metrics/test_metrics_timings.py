"""The ``timings`` table: a runtime's ``timings`` field is validated and bounded before it is
stored, and a hostile one — wrong types, huge lists, NaN, negative, numbers no float holds — is
dropped with a logged warning, never stored, and does not stop the run's controller loop (a real
Controller, a real RuntimeClient over its socket, the real Training loop and MetricsStore)."""

import logging
import math
import sqlite3
from types import SimpleNamespace

import pytest

from mfctl.metrics import store as store_mod
from mfctl.metrics.store import MetricsStore
from support import DATA, PROTOTYPE

GOOD = [{"task": "alltoall", "n": 65536, "unit": "byte", "seconds": 0.0012},
        {"task": "gemm", "n": 2.5e9, "unit": "flop", "seconds": 0.031},
        {"task": "all_reduce", "n": 0, "unit": "byte", "seconds": 2e-5}]  # n = 0: an empty send is a size too
BAD = [
    "alltoall", 17, None, ["alltoall", 1, "byte", 0.1],  # not objects
    {"task": ["alltoall"], "n": 1, "unit": "byte", "seconds": 0.1},  # unhashable task
    {"task": "allgather", "n": 1, "unit": "byte", "seconds": 0.1},  # not a profiled task
    {"task": "gemm", "n": 1, "unit": "byte", "seconds": 0.1},  # wrong unit
    {"task": "alltoall", "n": "65536", "unit": "byte", "seconds": 0.1},
    {"task": "alltoall", "n": True, "unit": "byte", "seconds": 0.1},
    {"task": "alltoall", "n": math.nan, "unit": "byte", "seconds": 0.1},
    {"task": "alltoall", "n": -1, "unit": "byte", "seconds": 0.1},
    {"task": "alltoall", "n": 10**400, "unit": "byte", "seconds": 0.1},  # float() of it raises OverflowError
    {"task": "alltoall", "n": 2e18, "unit": "byte", "seconds": 0.1},
    {"task": "alltoall", "n": 1, "unit": "byte", "seconds": 0},  # cannot be fitted on a relative scale
    {"task": "alltoall", "n": 1, "unit": "byte", "seconds": -0.5},
    {"task": "alltoall", "n": 1, "unit": "byte", "seconds": math.inf},
    {"task": "alltoall", "n": 1, "unit": "byte", "seconds": 7200.0},
    {"task": "alltoall", "n": 1, "unit": "byte"},
]


def _rows(path):
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT iteration, host, task, n, unit, seconds FROM timings ORDER BY rowid").fetchall()
    finally:
        db.close()


def test_only_valid_entries_are_stored_and_drops_are_logged(tmp_path, caplog):
    st = MetricsStore(tmp_path / "metrics.db")
    with caplog.at_level(logging.WARNING, logger="mfctl.metrics.store"):
        assert st.timings("gpu01", 3, BAD[:7] + GOOD + BAD[7:]) == 3
        for hostile in ({"task": "gemm"}, "timings", 5, None, [[[]]]):
            assert st.timings("gpu01", 4, hostile) == 0
        for it in ("4", None, True, -1, 2**70, 1.5):  # the message's own iteration is not a count
            assert st.timings("gpu02", it, GOOD) == 0
    st.close()
    assert _rows(tmp_path / "metrics.db") == [(3, "gpu01", "alltoall", 65536.0, "byte", 0.0012),
                                              (3, "gpu01", "gemm", 2.5e9, "flop", 0.031),
                                              (3, "gpu01", "all_reduce", 0.0, "byte", 2e-5)]
    said = [r.getMessage() for r in caplog.records]
    # three warnings per host, the third saying that more are not logged
    assert len(said) == 6 and sum(m.startswith("gpu01:") for m in said) == 3
    assert said[0].startswith("gpu01: iteration timings dropped: ") and "4 not an object" in said[0]
    assert "1 unknown task" not in said[0] and "2 unknown task" in said[0] and "1 wrong unit" in said[0]
    assert "6 n not a number in [0, 1e18]" in said[0] and "5 seconds not a number in (0, 3600]" in said[0]
    assert "1 not a list" in said[1] and said[2].endswith("further drops from this host are not logged")
    assert "3 the message's iteration is not a count" in said[3]


def test_huge_lists_are_bounded_per_message_and_per_run(tmp_path, caplog, monkeypatch):
    st = MetricsStore(tmp_path / "metrics.db")
    huge = GOOD[:1] * 1_000_000  # ~16 MB of JSON, a line the protocol still takes
    with caplog.at_level(logging.WARNING, logger="mfctl.metrics.store"):
        assert st.timings("gpu01", 1, huge) == store_mod.MAX_TIMINGS_PER_MESSAGE == 4096
    assert f"{1_000_000 - 4096} over 4096 in one message" in caplog.records[0].getMessage()
    monkeypatch.setattr(store_mod, "MAX_TIMINGS_ROWS", 5000)
    st2 = MetricsStore(tmp_path / "metrics.db")  # a store opened again counts the rows already there
    assert st2.timings("gpu02", 2, GOOD * 400) == 5000 - 4096
    assert st2.timings("gpu02", 3, GOOD) == 0
    assert "the run holds 5000 already" in caplog.records[-1].getMessage()
    st.close()
    st2.close()
    assert len(_rows(tmp_path / "metrics.db")) == 5000


def test_a_hostile_timings_field_does_not_stop_the_controller_loop(tmp_path):
    from mfctl.inventory import load_inventory
    from mfctl.ocs.journal import Journal
    from mfctl.runtime.client import RuntimeClient
    from mfctl.runtime.controller import Controller
    from mfctl.runtime.job import Observer
    from mfctl.runtime.plan import plan_run
    from mfctl.runtime.playbook import load_playbook
    from mfctl.runtime.summary import RunRecord
    from mfctl.runtime.training import Training

    inv = load_inventory(PROTOTYPE)
    plan = plan_run(load_playbook(DATA / "playbooks" / "short.yaml"), inv)
    st = MetricsStore(tmp_path / "metrics.db")
    ctrl = Controller(token="tok", welcome=lambda h: {"run_id": "t", "iterations": 3}, expected_hosts={"gpu01"})
    warnings: list[str] = []
    tr = Training(plan, RunRecord(), ctrl=ctrl, launcher=SimpleNamespace(workers={}), driver=None, links=None, store=st,
                  journal=Journal(tmp_path / "journal.jsonl"), observer=Observer(), warn=warnings.append, scale=1.0,
                  log_dir=tmp_path)
    rt = RuntimeClient(ctrl.address_str, host="gpu01", token="tok")
    try:
        rt.connect()
        tr.wait_hellos(["gpu01"])
        rt.iteration(1, seconds=0.5, timings=BAD + [{"task": "gemm", "n": 1e300, "unit": "flop", "seconds": 1e-3}])
        rt.iteration(2, seconds=0.5, timings={"task": "gemm"})
        rt.iteration(3, seconds=0.5, timings=GOOD[:1] * 5000 + ["x"] * 10)  # 4096 kept, the rest dropped
        rt.iteration(4, seconds=0.5, timings=GOOD)
        rt.bye(iterations=4)
        tr.loop({"gpu01"})  # returns at the bye: the loop lived through every message
    finally:
        rt.close()
        ctrl.close()
    assert tr.failed is None and sorted(tr.record.iterations) == [1, 2, 3, 4]
    rows = st.query("SELECT iteration, count(*) FROM timings GROUP BY iteration ORDER BY iteration")
    st.close()
    assert rows == [(3, 4096), (4, 3)]  # 1e300 FLOP is over the bound too; iteration 3: the first 4096 only


@pytest.mark.parametrize("n", [1, 2**64, 2**64 + 1])
def test_ints_at_the_float_edge(n, tmp_path):
    from mfctl.fabric.profile import clean_timings

    rows, dropped = clean_timings([{"task": "gemm", "n": n, "unit": "flop", "seconds": 1.0}], 10)
    assert (rows == [("gemm", float(n), "flop", 1.0)]) == (n <= 1e18) and (not rows) == bool(dropped)
