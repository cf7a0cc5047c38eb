"""Kill an apply at every step, then recover: complete (default) or roll back."""

import json
import os
import subprocess
import sys

import pytest

from mfctl.inventory.models import OCS
from mfctl.mock.ocs_emulator import OCSEmulator, TCPServer
from mfctl.ocs.driver import OCSDriver, pending_apply, recover
from mfctl.ocs.journal import Journal
from support import ROOT

HELPER = ROOT / "tests" / "helpers" / "crash_apply.py"
BEFORE = {1: 49, 2: 50, 3: 51}
DESIRED = {1: 49, 2: 52, 4: 50}  # keep 1, move 2, drop 3, add 4


@pytest.fixture
def emu(monkeypatch):
    monkeypatch.setenv("OCS_PW", "pw")
    e = OCSEmulator(48, 48, sid="OCS1", password="pw", base_ms=2, per_xc_ms=0.1, delete_ms=1)
    e.patches.update(BEFORE)
    srv = TCPServer(e)
    yield e, srv.port
    srv.close()


def _ocs(port):
    return OCS(name="ocs1", size={"inputs": 48, "outputs": 48},
               transports=[{"kind": "tcp", "address": "127.0.0.1", "port": port}], password_env="OCS_PW")


def _crash(port, journal, n, env):
    r = subprocess.run([sys.executable, str(HELPER), str(port), str(journal), str(n), json.dumps(DESIRED)],
                       capture_output=True, text=True, env=env, timeout=60)
    return r


# intent, DLT sent, DLT COMPLD, ENT sent, ENT COMPLD, verify, outcome
@pytest.mark.parametrize("crash_after", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("mode", ["complete", "rollback"])
def test_kill_at_every_step_then_recover(emu, tmp_path, crash_after, mode):
    e, port = emu
    journal = tmp_path / "ocs.journal.jsonl"
    r = _crash(port, journal, crash_after, dict(os.environ))
    assert r.returncode == 9, r.stderr
    recs = Journal(journal).records()
    assert len(recs) == crash_after and recs[0]["op"] == "ocs.intent"  # nothing lost, nothing after the kill
    assert pending_apply(recs)["apply_id"] == recs[0]["apply_id"]
    with OCSDriver(_ocs(port), journal=Journal(journal)) as d:
        out = recover(d, Journal(journal).records(), mode=mode)
        want = DESIRED if mode == "complete" else BEFORE
        assert e.patches == want == d.cross_connects()
    recs = Journal(journal).records()
    assert recs[-1]["op"] == "ocs.recovered" and recs[-1]["mode"] == mode
    assert pending_apply(recs) is None
    assert out["pending"]["apply_id"] == recs[0]["apply_id"]


def test_completed_apply_needs_no_recovery(emu, tmp_path):
    e, port = emu
    journal = tmp_path / "j.jsonl"
    r = _crash(port, journal, 999, dict(os.environ))
    assert r.returncode == 0 and "completed" in r.stdout
    assert e.patches == DESIRED
    with OCSDriver(_ocs(port)) as d:
        assert recover(d, Journal(journal).records())["action"] == "none"


def test_dry_run_recovery_changes_nothing(emu, tmp_path):
    e, port = emu
    journal = tmp_path / "j.jsonl"
    _crash(port, journal, 3, dict(os.environ))  # after the deletions
    state = dict(e.patches)
    with OCSDriver(_ocs(port)) as d:
        out = recover(d, Journal(journal).records(), dry_run=True)
    assert out["action"] == "dry-run" and e.patches == state and out["diff"]["add"]


def test_an_older_unfinished_change_is_superseded_not_resurrected(emu, tmp_path):
    e, port = emu
    journal = tmp_path / "j.jsonl"
    _crash(port, journal, 2, dict(os.environ))  # change 1 killed
    with OCSDriver(_ocs(port), journal=Journal(journal)) as d:
        d.apply({5: 60}, reason="a later change that finished")
        assert recover(d, Journal(journal).records())["action"] == "none"
    assert e.patches == {5: 60}


def test_nothing_pending_says_whether_the_switch_differs_from_what_the_journal_verified(emu, tmp_path):
    """The driver's recover, not the CLI, tells 'nothing to recover' from 'nothing to recover, but the
    switch was changed behind the journal's back' (how many cross-connects differ)."""
    e, port = emu
    journal = tmp_path / "j.jsonl"
    assert _crash(port, journal, 999, dict(os.environ)).returncode == 0  # an apply that finished
    with OCSDriver(_ocs(port)) as d:
        assert recover(d, Journal(journal).records()) == {"pending": None, "action": "none",
                                                           "differs_from_last_verified": False, "differing": 0}
    e.patches[7] = 60  # someone else, unjournalled: one cross-connect more
    del e.patches[4]  # and one fewer
    with OCSDriver(_ocs(port)) as d:
        out = recover(d, Journal(journal).records())
    assert out["action"] == "none" and out["differs_from_last_verified"] is True and out["differing"] == 2
    assert e.patches == {1: 49, 2: 52, 7: 60}  # nothing was done about it
