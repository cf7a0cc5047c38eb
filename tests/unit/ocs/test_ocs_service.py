"""mfctl.ocs.service: what the OCS commands show and warn of, without a switch."""

from types import SimpleNamespace

import pytest

from mfctl.inventory import load_inventory
from mfctl.ocs.journal import Journal
from mfctl.ocs.service import PortMap, change_warnings, journal_report, legacy_journal_unfinished, named_alarms
from support import PROTOTYPE


@pytest.fixture(scope="module")
def inv():
    return load_inventory(PROTOTYPE)


def test_standing_alarms_are_named_by_lane(inv):
    pm = PortMap.from_inventory(inv)
    a, s = named_alarms(pm, ['1:MJ,LOS,SA,11-29,10-00-00:"loss of signal"', "SYSTEM:MN,FAN,NSA,11-29,10-00-00"])
    assert (a["aid"], a["severity"], a["condition"], a["lane"], a["description"]) == ("1", "MJ", "LOS", "gpu01/nic0.0 tx",
                                                                                     "loss of signal")
    assert (s["aid"], s["condition"], s["lane"]) == ("SYSTEM", "FAN", None)
    assert named_alarms(pm, ["385:CR,LOS,SA,11-29,10-00-00"])[0]["lane"] == "gpu01/nic0.0 rx"


def _intent(j, apply_id, reason):
    j.append("ocs.intent", apply_id=apply_id, ocs="ocs1", reason=reason, before=[], desired=[[1, 388]], diff={})


def test_journal_report_of_a_finished_an_unfinished_and_a_damaged_journal(tmp_path):
    path = tmp_path / "j.jsonl"
    j = Journal(path)
    _intent(j, "a1", "first")
    j.append("ocs.outcome", apply_id="a1", ocs="ocs1", ok=True, t_switch_ms=1.0)
    rep = journal_report(j.records(), 10)
    assert rep.pending is None and rep.damaged == [] and rep.unknowable == [] and [r["op"] for r in rep.rows] == [
        "ocs.intent", "ocs.outcome"]
    assert len(journal_report(j.records(), 1).rows) == 1  # the last N only
    _intent(j, "b2", "killed")
    rep = journal_report(Journal(path).records(), 10)
    assert rep.pending["apply_id"] == "b2" and rep.pending["reason"] == "killed" and rep.unknowable == []
    with path.open("a") as f:
        f.write('{"seq": 9, "op": "ocs.outco\n')  # a torn / damaged line after it
    rep = journal_report(Journal(path).records(), 10)
    assert len(rep.damaged) == 1 and rep.pending["apply_id"] == "b2"


def test_damage_after_the_last_change_is_unknowable_when_nothing_is_pending(tmp_path):
    path = tmp_path / "j.jsonl"
    j = Journal(path)
    _intent(j, "a1", "first")
    j.append("ocs.outcome", apply_id="a1", ocs="ocs1", ok=True, t_switch_ms=1.0)
    with path.open("a") as f:
        f.write("not json at all\n")
    rep = journal_report(Journal(path).records(), 10)
    assert rep.pending is None and len(rep.damaged) == 1 and rep.unknowable == rep.damaged


def test_change_warnings_say_what_a_new_change_continues_or_cannot_know():
    pending = SimpleNamespace(pending={"apply_id": "b2", "reason": "killed"}, device_records=[])
    (w,) = change_warnings(pending)
    assert "earlier change (b2: killed) did not finish" in w and "state before b2" in w
    damaged = SimpleNamespace(pending=None, device_records=[{"op": "corrupt", "seq": 3}])
    (w,) = change_warnings(damaged)
    assert w.startswith("the OCS journal has 1 damaged or orphaned record(s)")
    assert change_warnings(SimpleNamespace(pending=None, device_records=[])) == []


def test_a_legacy_journal_is_named_only_while_it_holds_an_unfinished_change(inv, tmp_path, monkeypatch):
    monkeypatch.setenv("MFCTL_STATE_DIR", str(tmp_path))
    assert legacy_journal_unfinished(inv) is None
    old = tmp_path / "ocs" / f"{inv.name}-{inv.ocs.name}.journal.jsonl"
    old.parent.mkdir()
    j = Journal(old)
    _intent(j, "c3", "old mfctl")
    assert legacy_journal_unfinished(inv) == old
    j.append("ocs.outcome", apply_id="c3", ocs="ocs1", ok=True, t_switch_ms=1.0)
    assert legacy_journal_unfinished(inv) is None


def test_a_circuit_from_a_server_to_itself_is_refused(inv, tmp_path):
    """[gpu01/nic0, gpu01/nic1] was applied: two cross-connects looping gpu01 back to itself."""
    from mfctl.errors import ConfigError, UsageError
    from mfctl.ocs.service import cross_connects_for, load_topology_file

    pm = PortMap.from_inventory(inv)
    with pytest.raises(UsageError, match="a circuit joins two different servers: gpu01/nic0.0 and gpu01/nic1.0 are "
                                         "both on gpu01"):
        cross_connects_for(pm, "gpu01/nic0", "gpu01/nic1")
    a, b = pm.lane("gpu01/nic0"), pm.lane("gpu02/nic0")
    assert cross_connects_for(pm, "gpu01/nic0", "gpu02/nic0") == {a.ocs_tx: b.ocs_rx, b.ocs_tx: a.ocs_rx}
    plan = tmp_path / "plan.yaml"
    plan.write_text("circuits:\n  - [gpu01/nic0, gpu02/nic0]\n  - [gpu03/nic0, gpu03/nic1]\n")
    with pytest.raises(ConfigError) as e:
        load_topology_file(pm, plan)
    assert (e.value.path, e.value.line, e.value.exit_code) == (str(plan), 3, 3)
    assert "a circuit joins two different servers: gpu03/nic0.0 and gpu03/nic1.0 are both on gpu03" in str(e.value)
