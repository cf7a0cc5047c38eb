"""A run over several OCSes without a testbed: each region's OCS in the plan, the initial topology
of each switch planned from its own state, and each switch's read-back judged on its own
(mfctl.runtime.plan, mfctl.runtime.topology.RunOCS with fake drivers)."""

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from mfctl.errors import OperationFailed
from mfctl.inventory import load_inventory
from mfctl.observer import RecordingObserver
from mfctl.runtime.plan import initial_cross_connects, plan_run
from mfctl.runtime.playbook import load_playbook
from mfctl.runtime.reconfig import LinkWait
from mfctl.runtime.summary import RunRecord, RunSummary
from mfctl.runtime.topology import RunOCS
from support import DATA

TWO = DATA.parent.parent / "inventory" / "mfabric-2ocs.yaml"


class FakeDriver:
    def __init__(self, name, state):
        self.endpoint, self.state, self.closed, self.applied = f"tcp:{name}", dict(state), False, []

    def cross_connects(self):
        return dict(self.state)

    def apply(self, desired, *, reason=""):
        self.applied.append(reason)
        self.state = dict(desired)
        return SimpleNamespace(readback=dict(desired), to_dict=lambda: {"reason": reason, "n": len(desired)})

    def close(self):
        self.closed = True


class Journal(list):
    def append(self, op, **fields):
        super().append((op, fields))


class Links:
    def wait(self, circuits):
        return LinkWait(down=[], up_at=0.0)


def _plan(tmp_path: Path):
    doc = yaml.safe_load((DATA / "playbooks" / "short.yaml").read_text())
    doc["inventory"], doc["parallelism"] = str(TWO), {"ep": 8, "tp": 4}
    p = tmp_path / "pb.yaml"
    p.write_text(yaml.safe_dump(doc))
    return plan_run(load_playbook(p), load_inventory(TWO))


def test_each_region_knows_its_ocs(tmp_path):
    plan = _plan(tmp_path)
    assert {n: r.ocs for n, r in plan.regions.items()} == {"region0": "ocs-a", "region1": "ocs-b"}
    assert plan.ocs_names == ["ocs-a", "ocs-b"] and [r.name for r in plan.regions_on("ocs-b")] == ["region1"]
    plan.drivers = {"ocs-a": "A", "ocs-b": "B"}
    assert plan.driver_for("region1") == "B" and plan.driver_for(plan.regions["region0"]) == "A"
    # both regions use ports 1..12 / 193..204, each on its own switch
    assert plan.regions["region0"].ocs_ports == plan.regions["region1"].ocs_ports == set(range(1, 13)) | set(range(193, 205))


def test_the_initial_topology_of_one_ocs_plans_only_its_regions(tmp_path):
    plan = _plan(tmp_path)
    before = {r: list(plan.regions[r].circuits) for r in plan.regions}
    desired = initial_cross_connects(plan, {150: 350}, "ocs-b")  # a foreign cross-connect on ocs-b: kept
    assert desired[150] == 350 and len(desired) == 1 + 2 * len(plan.regions["region1"].circuits) > 1
    assert plan.regions["region0"].circuits == before["region0"] == []  # ocs-a's region untouched
    hosts = {c.a.host for c in plan.regions["region1"].circuits} | {c.b.host for c in plan.regions["region1"].circuits}
    assert hosts <= {"gpu05", "gpu06", "gpu07", "gpu08"}


def test_run_ocs_sets_and_checks_each_switch_on_its_own(tmp_path):
    plan = _plan(tmp_path)
    drivers = {"ocs-a": FakeDriver("a", {}), "ocs-b": FakeDriver("b", {150: 350})}
    rec, journal, warnings = RunRecord(), Journal(), []
    ocs = RunOCS(drivers, plan, rec, journal=journal, warn=warnings.append, scale=20.0)
    ocs.set_initial(Links(), RecordingObserver())
    assert rec.last_plans == {"ocs-a": drivers["ocs-a"].state, "ocs-b": drivers["ocs-b"].state}
    assert rec.last_plans["ocs-b"][150] == 350 and 150 not in rec.last_plans["ocs-a"]
    assert [f["ocs"] for op, f in journal if op == "ocs.state"] == ["ocs-a", "ocs-b"]
    assert set(rec.initial_apply) == {"ocs-a", "ocs-b"} and rec.ocs_endpoint == "ocs-a tcp:a; ocs-b tcp:b"
    assert all(r.circuits for r in plan.regions.values()) and warnings == []
    ocs.final_check("inv.yaml")
    assert rec.final_matches is True and set(rec.final_by_ocs) == {"ocs-a", "ocs-b"}
    s = RunSummary.of_run(plan.playbook, rec, plan.regions, run_id="r", status="ok", inventory="i", run_dir="d")
    assert s.ocs["cross_connects"] is None and s.ocs["endpoint"] is None and s.ocs["matches_last_plan"] is True
    assert s.ocs["by_ocs"]["ocs-a"]["cross_connects"] == sorted([i, o] for i, o in drivers["ocs-a"].state.items())
    # one switch changed behind the run's back: that one is named
    drivers["ocs-b"].state.pop(150)
    with pytest.raises(OperationFailed, match=r"does not match the last plan on ocs-b$"):
        ocs.final_check("inv.yaml")
    assert rec.final_by_ocs["ocs-a"]["matches_last_plan"] is True and rec.final_by_ocs["ocs-b"]["matches_last_plan"] is False
    ocs.close()
    assert all(d.closed for d in drivers.values())


def _intent(apply_id, ocs, reason):
    return {"op": "ocs.intent", "apply_id": apply_id, "ocs": ocs, "reason": reason, "before": [[1, 193]],
            "desired": [[1, 194]], "diff": {"add": [[1, 194]], "delete": [[1, 193]], "keep": 0}}


def test_the_recovery_hint_names_the_ocs_left_half_changed_with_several():
    """Issue 22: with several OCSes ``mfctl ocs recover`` without ``--ocs`` is a usage error, so the hint
    after a run that left one switch half-changed names that switch (and only it: the other one's
    last change finished)."""
    from mfctl.inventory import load_inventory
    from mfctl.ocs.driver import driver_from_inventory, recover_command
    from mfctl.runtime.reconfig import Reconfiguration, recovery_hint

    a = Reconfiguration(epoch=3, region="region0", iteration=5, circuits_planned=[], outcome="applied", ocs="ocs-a")
    b = Reconfiguration(epoch=4, region="region1", iteration=6, circuits_planned=[], outcome="partial", ocs="ocs-b")
    recs = [_intent("a1", "ocs-a", "epoch 3"), {"op": "ocs.outcome", "apply_id": "a1", "ocs": "ocs-a", "ok": True},
            _intent("b1", "ocs-b", "epoch 4"),
            {"op": "ocs.outcome", "apply_id": "b1", "ocs": "ocs-b", "ok": False, "error": "SROF"}]
    hints = recovery_hint([a, b], lambda: recs, "/tmp/inv.yaml", ocses=2)
    assert hints == ["OCS ocs-b was left differing from the plan by epoch 4 (partial; change 'epoch 4' unfinished): "
                     "run `mfctl ocs recover -i /tmp/inv.yaml --ocs ocs-b` after the run to finish it, or with "
                     "--rollback to undo it"]
    # both switches half-changed: a hint each, each for its own pending change
    a.outcome = "unknown"
    recs[1] = {"op": "ocs.outcome", "apply_id": "a1", "ocs": "ocs-a", "ok": False}
    hints = recovery_hint([a, b], lambda: recs, "/tmp/inv.yaml", ocses=2)
    assert [h.split(" was")[0] for h in hints] == ["OCS ocs-a", "OCS ocs-b"]
    assert "--ocs ocs-a`" in hints[0] and "'epoch 3'" in hints[0] and "--ocs ocs-b`" in hints[1]
    # one OCS: no --ocs (the only one is the default), the wording as before
    one = recovery_hint([Reconfiguration(epoch=1, region="region0", iteration=2, circuits_planned=[], outcome="partial",
                                         ocs="ocs")], lambda: [_intent("x", "ocs", "epoch 1")], "inv.yaml")
    assert one == ["the OCS was left differing from the plan by epoch 1 (partial; change 'epoch 1' unfinished): run "
                   "`mfctl ocs recover -i inv.yaml` after the run to finish it, or with --rollback to undo it"]
    # the driver's own errors ("... run mfctl ocs recover") say the same command
    inv = load_inventory(TWO)
    assert recover_command(inv, "ocs-b") == f"mfctl ocs recover -i {inv.source} --ocs ocs-b"
    assert driver_from_inventory(inv, ocs="ocs-a").recover_command == f"mfctl ocs recover -i {inv.source} --ocs ocs-a"
    proto = load_inventory(DATA.parent.parent / "inventory" / "mfabric-prototype.yaml")
    assert driver_from_inventory(proto).recover_command == f"mfctl ocs recover -i {proto.source}"
