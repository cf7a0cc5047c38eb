"""The run's OCS at both ends (mfctl.runtime.topology.RunOCS) with a fake driver and link poller."""

from types import SimpleNamespace

import pytest

from mfctl.errors import OperationFailed, UnreachableError
from mfctl.fabric import mapping
from mfctl.inventory import load_inventory
from mfctl.observer import RecordingObserver
from mfctl.runtime.plan import plan_run
from mfctl.runtime.playbook import load_playbook
from mfctl.runtime.reconfig import LinkWait
from mfctl.runtime.summary import RunRecord
from mfctl.runtime.topology import RunOCS
from support import PROTOTYPE, ROOT


class FakeDriver:
    endpoint = "tcp:127.0.0.1:3082"

    def __init__(self, state):
        self.state, self.closed, self.unreadable = dict(state), False, False

    def cross_connects(self):
        if self.unreadable:
            raise UnreachableError("OCS gone")
        return dict(self.state)

    def apply(self, desired, *, reason=""):
        self.state = dict(desired)
        return SimpleNamespace(readback=dict(desired), to_dict=lambda: {"reason": reason, "n": len(desired)})

    def close(self):
        self.closed = True


class Journal(list):
    def append(self, op, **fields):
        super().append((op, fields))


def _ocs(state=None):
    plan = plan_run(load_playbook(ROOT / "playbooks" / "mixtral-prototype.yaml"), load_inventory(PROTOTYPE))
    warnings, rec, journal = [], RunRecord(), Journal()
    ocs = RunOCS(FakeDriver(state or {200: 500}), plan, rec, journal=journal, warn=warnings.append, scale=20.0)
    return ocs, rec, journal, warnings


def test_the_initial_topology_is_applied_and_routed_over_the_lanes_that_came_up():
    ocs, rec, journal, warnings = _ocs()
    reg = ocs.plan.regions["region0"]
    first = None

    class Links:
        def wait(self, circuits):
            nonlocal first
            first = circuits[0]
            return LinkWait(down=[f"{first.a.host}:{first.a.netdev}"], up_at=0.0)

    ocs.set_initial(Links(), RecordingObserver())
    assert journal[0][0] == "ocs.state" and journal[0][1]["cross_connects"] == [(200, 500)]
    assert rec.last_plan == ocs.driver.state and rec.last_plan[200] == 500  # a foreign cross-connect kept
    assert rec.initial_circuits["region0"] == mapping.circuit_matrix(reg.circuits, reg.hosts).tolist()
    assert rec.initial_apply == {"reason": "initial topology", "n": len(rec.last_plan)}
    assert reg.routed == [c for c in reg.circuits if c is not first] and len(reg.routed) == len(reg.circuits) - 1
    assert warnings == [f"initial circuits with lanes still down after 30 s: {first.a.host}:{first.a.netdev}"]
    assert rec.ocs_endpoint == "tcp:127.0.0.1:3082"


def test_the_final_read_back_must_be_the_last_plan():
    ocs, rec, journal, warnings = _ocs()
    rec.last_plan = {200: 500}
    ocs.final_check("inv.yaml")
    assert rec.final_matches is True and journal[-1] == ("ocs.final", {"readback": [(200, 500)], "matches_plan": True})
    ocs.driver.state = {1: 388}
    with pytest.raises(OperationFailed, match="does not match the last plan"):
        ocs.final_check("inv.yaml")
    ocs.close()  # read back already: not journalled twice
    assert ocs.driver.closed and [op for op, _ in journal].count("ocs.final") == 2


def test_an_unknown_last_plan_is_a_warning_naming_the_inventory():
    ocs, rec, journal, warnings = _ocs()
    ocs.final_check("/x/inv.yaml")
    assert rec.final_matches is False and "mfctl ocs show -i /x/inv.yaml" in warnings[0]


def test_teardown_journals_what_the_ocs_holds_and_survives_an_unreadable_one():
    ocs, rec, journal, _ = _ocs()
    rec.last_plan = {200: 500}
    ocs.close()
    assert journal == [("ocs.final", {"readback": [(200, 500)], "matches_plan": True})] and ocs.driver.closed
    ocs, rec, journal, _ = _ocs()
    ocs.driver.unreadable = True
    ocs.close()  # (never raises: teardown goes on)
    assert journal == [] and not ocs.driver.closed
