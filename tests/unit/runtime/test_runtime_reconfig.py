"""The reconfiguration protocol's state machine (mfctl.runtime.reconfig) with fakes, the link
poller and the health sampler with fake pools, then end to end on the mock: an OCS DENY in
training, a rollback that fails too, and health samples whose nvidia-smi never answers."""

import json
import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from mfctl.errors import OperationFailed
from mfctl.fabric import mapping
from mfctl.ocs.client import TL1Deny, TL1Timeout
from mfctl.ocs.driver import ApplyResult, diff
from mfctl.ocs.tl1 import Reply
from mfctl.runtime.reconfig import Decision, LinkPoller, LinkWait, Phase, Proposal, Reconfigurator
from mfctl.transport.ssh import CommandResult, SSHPool
from support import DATA, PROTOTYPE, mfctl_cmd

# --- fakes ---------------------------------------------------------------------------------
HOSTS = ["h1", "h2", "h3"]
# two lanes per host; lane k of host h: OCS input (TX) port 10*h+k, output (RX) port 100 + 10*h+k
LANES = {h: [mapping.LaneRef(h, "nic0", k, f"eth{k}", 0, 10 * (n + 1) + k, 100 + 10 * (n + 1) + k) for k in range(2)]
         for n, h in enumerate(HOSTS)}
REGION_PORTS = {p for ls in LANES.values() for lane in ls for p in (lane.ocs_tx, lane.ocs_rx)}
OTHER = {1: 201}  # a cross-connect outside the region: always left alone


def C(a, ka, b, kb):
    return mapping.Circuit(LANES[a][ka], LANES[b][kb])


OLD = [C("h1", 0, "h2", 0), C("h2", 1, "h3", 0), C("h1", 1, "h3", 1)]
NEW = [C("h1", 0, "h2", 0), C("h1", 1, "h2", 1)]  # keeps h1-h2 #0, replaces the two via h3 with a second h1-h2


def xc(circuits):
    return {**OTHER, **mapping.cross_connect_map(circuits)}


def deny(msg="switching failure on port 21"):
    return TL1Deny("ENT-PATCH::x:1;", Reply(ctag="1", code="DENY", comments=[msg], error_code="SROF"))


class FakeOCS:
    """An OCS whose apply() follows a script: each entry is None (works) or a callable
    ``(ocs, desired) -> exception`` run before raising (it may change ``ocs.state``)."""

    def __init__(self, state, script=(), read_fails=False):
        self.state = dict(state)
        self.script = list(script)
        self.read_fails = read_fails
        self.applies = []

    def apply(self, desired, *, reason=""):
        self.applies.append((reason, dict(desired)))
        step = self.script.pop(0) if self.script else None
        before = dict(self.state)
        if step is not None:
            raise step(self, desired)
        self.state = dict(desired)
        return ApplyResult(diff=diff(before, desired), readback=dict(self.state), verified=True, t_switch_ms=42.0,
                           t_verify_ms=3.0)

    def cross_connects(self):
        if self.read_fails:
            raise TL1Timeout("OCS ocs1: no reply to RTRV-PATCH within 10 s")
        return dict(self.state)


def half_applied(exc):
    """The deletions took, then the switch refused the additions (the driver did not roll back)."""
    def step(ocs, desired):
        d = diff(ocs.state, desired)
        for i in d.delete:
            ocs.state.pop(i)
        return exc
    return step


def refused_and_rolled_back(ocs, desired):  # the driver's own rollback after a DENY
    e = deny()
    e.left = "rolled-back"
    return e


def refused_unchanged(ocs, desired):
    e = deny()
    e.left = "unchanged"
    return e


class FakeWorkers:
    def __init__(self, missing=None):
        self.sent = []
        self.missing = missing or {}  # mtype → hosts that do not answer

    def broadcast(self, hosts, msg):
        self.sent.append(msg)
        return []

    def await_all(self, hosts, mtype, epoch, timeout_testbed_s):
        return set(self.missing.get(mtype, ()))

    def types(self):
        return [m["type"] for m in self.sent]

    def last(self, mtype):
        return [m for m in self.sent if m["type"] == mtype][-1]


class FakeLinks:
    def __init__(self, down=()):
        self.down = list(down)
        self.asked = []

    def wait(self, circuits, **kw):
        self.asked.append(list(circuits))
        lanes = {f"{lane.host}:{lane.netdev}" for c in circuits for lane in (c.a, c.b)}
        return LinkWait(down=sorted(lanes & set(self.down)), up_at=time.monotonic(), polls=[0.001])


def proposal(**kw):
    return Proposal(epoch=3, region="r0", hosts=HOSTS, lanes=LANES, iteration=7, old=list(OLD), new=list(NEW),
                    planned=mapping.circuit_matrix(NEW, HOSTS), ocs_before=xc(OLD), region_ports=REGION_PORTS,
                    decision=Decision(method="best"), **kw)


def run(ocs, workers=None, links=None, **kw):
    journal = []
    r = Reconfigurator(ocs, workers or FakeWorkers(), links or FakeLinks(), scale=20.0,
                       journal=lambda op, **f: journal.append((op, f))).run(proposal(**kw))
    return r, journal


def routed_pairs(msg):
    return sorted(k for k, v in msg["routes"].items() if v["via"] == "ocs")


# --- the state machine ---------------------------------------------------------------------
def test_a_reconfiguration_goes_through_its_phases_and_keeps_the_records_keys():
    ocs, w, links = FakeOCS(xc(OLD)), FakeWorkers(), FakeLinks()
    r, journal = run(ocs, w, links)
    assert [p for p, _ in r.phases] == ["propose", "apply", "link-up", "routes", "done"] and r.phase is Phase.DONE
    assert w.types() == ["propose", "applied", "routes"] and r.outcome == "applied" and r.ok
    assert ocs.state == xc(NEW) == r.ocs_state  # the region's cross-connects replaced, the others left alone
    assert links.asked == [[NEW[1]]]  # only the circuit that changed is polled
    assert w.last("routes")["circuits"] == mapping.circuit_matrix(NEW, HOSTS).tolist()
    d = r.to_dict()
    legacy = {"epoch", "region", "iteration", "reason", "circuits", "xc_added", "xc_removed", "t_plan_ms", "t_drain_ms",
              "t_switch_ms", "t_verify_ms", "t_linkup_ms", "t_resume_ms", "t_runtime_ms", "predicted_gain_s",
              "predicted_cost_s", "objective_before_s", "objective_after_s", "lanes_failed", "method"}
    assert legacy <= set(d) and d["outcome"] == "applied" and d["error"] is None and d["t_switch_ms"] == 42.0
    assert (d["xc_added"], d["xc_removed"]) == (2, 4)
    assert [op for op, _ in journal] == ["reconfig.propose", "reconfig.done"]
    json.dumps(d)


@pytest.mark.parametrize("step, outcome, phases", [
    # deletions made, additions refused, the driver did not roll back: mfctl does
    (half_applied(deny()), "rolled-back", ["apply", "rollback"]),
    # the driver rolled back itself (TL1Deny.left): a fresh read confirms, no second rollback
    (refused_and_rolled_back, "rolled-back", ["apply", "readback"]),
    (refused_unchanged, "kept-old", ["apply", "readback"]),  # refused before anything changed
    (half_applied(OperationFailed("OCS ocs1: read-back differs from plan after 2 retries")), "rolled-back",
     ["apply", "rollback"]),
    (half_applied(TL1Timeout("OCS ocs1: no reply to ENT-PATCH within 10 s")), "rolled-back", ["apply", "rollback"]),
], ids=["deny-half-applied", "deny-driver-rolled-back", "deny-unchanged", "readback-mismatch", "timeout"])
def test_a_failed_apply_goes_back_to_the_old_circuits_and_training_resumes_on_them(step, outcome, phases):
    ocs, w, links = FakeOCS(xc(OLD), [step]), FakeWorkers(), FakeLinks()
    r, journal = run(ocs, w, links)
    assert r.outcome == outcome and r.phase is Phase.DONE and not r.fatal
    assert [p for p, _ in r.phases] == ["propose"] + phases + ["link-up", "routes", "done"]
    assert ocs.state == xc(OLD) == r.ocs_state  # what the caller takes as its last plan is what the OCS holds
    assert [reason for reason, _ in ocs.applies] == ["epoch 3"] + ["epoch 3 rollback"] * ("rollback" in phases)
    assert ocs.applies[-1][1] == (xc(OLD) if "rollback" in phases else xc(NEW))
    assert w.types() == ["propose", "applied", "routes"]
    assert w.last("applied")["outcome"] == outcome
    assert w.last("routes")["circuits"] == mapping.circuit_matrix(OLD, HOSTS).tolist()
    assert r.in_force == OLD and r.routed == OLD
    assert r.failures[0].phase == "apply" and r.error.split(":")[0] in ("TL1Deny", "OperationFailed", "TL1Timeout")
    assert not r.ocs_needs_recovery and r.ocs_matches_plan is False
    assert ("reconfig.failure", {"epoch": 3, "region": "r0", "phase": "apply", "error": r.error}) in journal
    assert "old circuits" in r.describe()
    # the circuits that may have gone dark are polled before they carry traffic again
    assert links.asked == [[c for c in OLD if c not in NEW]]


def test_when_the_rollback_fails_too_the_region_runs_on_what_a_fresh_read_shows():
    ocs = FakeOCS(xc(OLD), [half_applied(deny()), lambda o, d: deny("rollback refused")])
    w = FakeWorkers()
    r, journal = run(ocs, w, FakeLinks())
    # the two circuits via h3 were deleted, their replacement refused: only h1-h2 #0 is left
    assert r.outcome == "partial" and r.ocs_needs_recovery and r.phase is Phase.DONE
    assert r.ocs_state == ocs.state == xc([OLD[0]])
    assert r.in_force == [OLD[0]] and r.routed == [OLD[0]]
    assert routed_pairs(w.last("routes")) == ["h1->h2", "h2->h1"]  # the rest over the EPS
    assert [f.phase for f in r.failures] == ["apply", "rollback"]
    assert "neither plan" in r.describe() and "EPS" in r.describe()
    assert [op for op, _ in journal].count("reconfig.failure") == 2


def test_when_the_drivers_own_rollback_failed_mfctl_does_not_try_another_and_runs_on_what_is_up():
    """A second rollback would start a new change in the OCS journal and hide the pending one
    from `mfctl ocs recover`."""
    def rollback_failed(ocs, desired):
        e = half_applied(deny())(ocs, desired)
        e.left = "unknown"
        return e

    ocs = FakeOCS(xc(OLD), [rollback_failed])
    r, _ = run(ocs, FakeWorkers(), FakeLinks())
    assert [reason for reason, _ in ocs.applies] == ["epoch 3"]
    assert r.outcome == "partial" and r.in_force == [OLD[0]] and r.ocs_state == xc([OLD[0]])


def test_an_ocs_that_cannot_be_read_leaves_the_untouched_circuits_checked_by_their_links():
    ocs = FakeOCS(xc(OLD), [half_applied(deny()), half_applied(deny())])
    ocs.read_fails = True
    links = FakeLinks()
    r, _ = run(ocs, FakeWorkers(), links)
    assert r.outcome == "unknown" and r.ocs_state is None and r.ocs_needs_recovery
    assert r.in_force == [OLD[0]] == r.routed and links.asked == [[OLD[0]]]
    assert [f.phase for f in r.failures] == ["apply", "rollback", "readback"]


def test_a_drain_timeout_cancels_without_touching_the_ocs():
    ocs, w = FakeOCS(xc(OLD)), FakeWorkers(missing={"paused": {"h2"}})
    r, _ = run(ocs, w, FakeLinks())
    assert r.outcome == "cancelled" and ocs.applies == [] and r.phase is Phase.DONE
    assert w.types() == ["propose", "routes"]  # the paused ones go back to the old routes
    assert w.last("routes")["circuits"] == mapping.circuit_matrix(OLD, HOSTS).tolist()
    assert r.failures[0].phase == "propose" and "h2" in r.error and r.ocs_state == xc(OLD)


def test_lanes_that_do_not_come_up_put_their_pairs_on_the_eps():
    w = FakeWorkers()
    r, _ = run(FakeOCS(xc(OLD)), w, FakeLinks(down=["h2:eth1"]))
    assert r.outcome == "applied" and r.lanes_down == ["h2:eth1"] and not r.fatal
    assert r.in_force == NEW and r.routed == [NEW[0]]
    assert w.last("routes")["circuits"][0][1] == 1  # one circuit h1-h2 in the routes, not two
    assert r.to_dict()["lanes_failed"] == 1 and r.failures[0].phase == "link-up"
    assert r.describe() is None and "h2:eth1" in r.error  # (the job warns with the link-up error itself)


def test_a_circuit_whose_lanes_were_down_before_stays_off_the_routes_until_polled_up():
    r, _ = run(FakeOCS(xc(OLD)), FakeWorkers(), FakeLinks(), routed=[OLD[1], OLD[2]])  # h1-h2 #0 was down
    assert r.routed == [NEW[1]]


def test_a_resume_timeout_fails_the_run_with_the_ocs_consistent():
    ocs = FakeOCS(xc(OLD))
    r, journal = run(ocs, FakeWorkers(missing={"resume": {"h3"}}), FakeLinks())
    assert r.phase is Phase.FAILED and "h3" in r.fatal and r.ocs_state == ocs.state == xc(NEW)
    assert journal[-1][0] == "reconfig.done"


def test_a_ctrl_c_held_during_the_apply_leaves_a_record_of_what_the_ocs_holds():
    import contextlib

    @contextlib.contextmanager
    def guard():  # as DeferSignals: the signal that came during the change is raised when it is done
        yield
        raise KeyboardInterrupt

    journal = []
    m = Reconfigurator(FakeOCS(xc(OLD)), FakeWorkers(), FakeLinks(), guard=guard,
                       journal=lambda op, **f: journal.append((op, f)))
    with pytest.raises(KeyboardInterrupt):
        m.run(proposal())
    assert m.rec.ocs_state == xc(NEW) and m.rec.in_force == NEW and m.rec.phase is Phase.FAILED
    assert journal[-1][0] == "reconfig.done" and journal[-1][1]["failures"] == [{"phase": "apply", "error": "interrupted"}]


# --- link polls ----------------------------------------------------------------------------
class FakePool:
    """``ip -j link`` answers: every lane up, except hosts in ``hang`` (a timeout error after the
    timeout asked for, capped at 0.05 s) for the first ``hang_polls`` polls."""

    def __init__(self, hang=(), hang_polls=10**9):
        self.hang, self.hang_polls = set(hang), hang_polls
        self.timeouts = []
        self.polls = 0

    def run_many(self, hosts, argv_for, timeout=None, **kw):
        self.polls += 1
        self.timeouts.append(timeout)
        out = []
        for h in hosts:
            r = CommandResult(host=h, argv=list(argv_for(h)))
            if h in self.hang and self.polls <= self.hang_polls:
                time.sleep(min(timeout, 0.05))
                r.error = f"timeout: command did not finish within {timeout:g} s"
            else:
                r.rc = 0
                r.stdout = json.dumps([{"ifname": f"eth{k}", "operstate": "UP", "flags": ["UP", "LOWER_UP"]}
                                       for k in range(2)])
            out.append(r)
        return out


def test_each_link_poll_has_a_timeout_and_a_host_that_does_not_answer_is_polled_again():
    pool = FakePool(hang={"h2"}, hang_polls=2)
    lw = LinkPoller(pool, timeout_s=5.0, interval_s=0.001, poll_timeout_s=0.3, min_poll_timeout_s=0.01).wait(OLD)
    assert lw.down == [] and pool.polls == 3 and all(t is not None and t <= 0.3 for t in pool.timeouts)
    pool = FakePool(hang={"h2"})
    t0 = time.monotonic()
    lw = LinkPoller(pool, timeout_s=0.2, interval_s=0.001, poll_timeout_s=10.0, min_poll_timeout_s=0.01).wait(OLD)
    assert lw.down == ["h2:eth0", "h2:eth1"] and "timeout" in lw.errors["h2"]
    assert time.monotonic() - t0 < 1.0  # a poll never waits past the link-up deadline (plus the floor)


# --- the health sampler --------------------------------------------------------------------
def test_a_hung_health_sample_is_a_finding_not_a_failed_query():
    from mfctl.inventory import load_inventory
    from mfctl.runtime.sampler import HealthSampler

    inv = load_inventory(PROTOTYPE)

    class Pool:
        command_timeout = 0.2
        fanout = 4
        map = SSHPool.map  # the real fan-out over this stand-in's run

        def run(self, host, argv, timeout=None, abort=None, **kw):
            r = CommandResult(host=host, argv=list(argv))
            if argv[0] == "nvidia-smi" and host == "gpu02":
                r.error, r.elapsed_s = "timeout: command did not finish within 0.2 s", 0.2
            else:
                r.rc, r.stderr = 127, "command not found"
            return r

        def close(self):
            pass

    stored, told = [], []
    s = HealthSampler(Pool(), inv, interval_s=0.01, store=lambda h, st, f: stored.append((h, f)),
                      on_timeout=lambda h, f: told.append((h, f.code))).start()
    deadline = time.monotonic() + 5
    while not any(h == "gpu02" for h, _ in stored) and time.monotonic() < deadline:
        time.sleep(0.01)
    s.stop()
    n = len(stored)
    time.sleep(0.05)
    assert len(stored) == n  # nothing stored after stop()
    codes = {f["code"] for h, fs in stored if h == "gpu02" for f in fs}
    assert "health.sample_timeout" in codes and "gpu.query_failed" not in codes
    assert all("health.sample_timeout" not in {f["code"] for f in fs} for h, fs in stored if h != "gpu02")
    assert ("gpu02", "health.sample_timeout") in told


def _slow_sampler_pool(delay_s: float, calls: list, fast: int = 0):
    """A sampler pool whose every command but each host's first ``fast`` takes ``delay_s`` (ended
    early by the abort event)."""

    class Pool:
        command_timeout = 5.0
        fanout = 4
        map = SSHPool.map

        def run(self, host, argv, timeout=None, abort=None, **kw):
            calls.append((host, argv[0]))
            r = CommandResult(host=host, argv=list(argv))
            if sum(h == host for h, _ in calls) > fast and abort is not None and abort.wait(delay_s):
                r.error = "interrupted: the command was abandoned"
            else:
                r.rc, r.stderr = 127, "command not found"
            return r

        def close(self):
            pass

    return Pool()


def test_a_sweep_under_way_when_the_run_ends_is_finished_and_stored():
    """stop() lets the sweeps under way finish (within finish_s) and stores them: a short run on a
    loaded machine (a host's sweep over OpenSSH ~2-5 s) otherwise kept no sample at all."""
    from mfctl.inventory import load_inventory
    from mfctl.runtime.sampler import HealthSampler

    inv = load_inventory(PROTOTYPE)
    stored, calls = [], []
    s = HealthSampler(_slow_sampler_pool(0.02, calls), inv, interval_s=0.05,
                      store=lambda h, st, f: stored.append(h)).start()
    deadline = time.monotonic() + 5
    while len({h for h, _ in calls}) < 4 and time.monotonic() < deadline:  # every host's first sweep under way
        time.sleep(0.005)
    assert not stored  # (a sweep is ~17 commands: ~0.3 s)
    t0 = time.monotonic()
    s.stop(finish_s=5.0)
    assert sorted(stored) == ["gpu01", "gpu02", "gpu03", "gpu04"]  # each host's sweep, none started after stop()
    assert time.monotonic() - t0 < 2.0
    n = len(calls)
    time.sleep(0.1)
    assert len(calls) == n and len(stored) == 4


def test_a_sweep_that_does_not_finish_in_time_is_abandoned_and_not_stored():
    from mfctl.inventory import load_inventory
    from mfctl.runtime.sampler import HealthSampler

    inv = load_inventory(PROTOTYPE)
    for finish_s in (0.0, 0.3):  # 0: a failed or interrupted run's stop
        stored, calls = [], []
        s = HealthSampler(_slow_sampler_pool(2.0, calls, fast=2), inv, interval_s=0.01,
                          store=lambda h, st, f, out=stored: out.append(h)).start()
        deadline = time.monotonic() + 5
        while len(calls) < 4 * 3 and time.monotonic() < deadline:  # each host's third command hangs
            time.sleep(0.005)
        t0 = time.monotonic()
        s.stop(finish_s=finish_s)
        took = time.monotonic() - t0
        assert finish_s <= took < finish_s + 1.0, took  # the abandoned commands end at once
        n = len(calls)
        time.sleep(0.1)
        # nothing stored, and after the abandoned command not one more sent to any host (each would be a
        # new SSH session: the abandoned command's was dropped)
        assert stored == [] and len(calls) == n == 4 * 3, (finish_s, calls)


# --- end to end on the mock ----------------------------------------------------------------
SHORT = DATA / "playbooks" / "short.yaml"


def _playbook(tmp_path, runtime=None, **training) -> Path:
    doc = yaml.safe_load(SHORT.read_text())
    doc["inventory"] = str((SHORT.parent / doc["inventory"]).resolve())
    doc["training"].update(training)
    doc["runtime"].update(runtime or {})
    p = tmp_path / "pb.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _run_on_mock(tmp_path, inject, runtime=None, policy=None, **training):
    """Start a mock with ``inject`` at the playbook's time scale, run the playbook on it through
    the CLI; return (exit code, summary, the OCS as ``mfctl ocs show`` reads it afterwards,
    ``mfctl ocs recover --dry-run`` afterwards, the inventory)."""
    from mfctl import mockctl

    env = dict(os.environ)
    st = mockctl.start(PROTOTYPE, tmp_path / "mock", time_scale=50, inject=inject)
    try:
        pb = _playbook(tmp_path, runtime, **training)
        # a negative required gain: the reconfiguration these tests are about happens whatever the machine's
        # load makes of the measured times (on a loaded CI machine a run once decided none paid off)
        doc = yaml.safe_load(pb.read_text())
        doc.setdefault("policy", {}).update({"min_gain_s": -1000.0, **(policy or {})})
        pb.write_text(yaml.safe_dump(doc))
        r = subprocess.run(mfctl_cmd("run", pb, "-i", st["inventory"], "--json"), capture_output=True, text=True,
                           env=env, timeout=180)
        assert r.stdout, r.stderr[-3000:]
        after = []
        for cmd in (("ocs", "show"), ("ocs", "recover", "--dry-run")):
            x = subprocess.run(mfctl_cmd(*cmd, "-i", st["inventory"], "--json"), capture_output=True, text=True,
                               env=env, timeout=60)
            assert x.returncode in (0, 6), x.stderr[-2000:]  # (6: recover --dry-run found something to do)
            after.append(json.loads(x.stdout))
        return r.returncode, json.loads(r.stdout), *after, st["inventory"]
    finally:
        mockctl.stop(tmp_path / "mock")


def _planned_cross_connects(s):
    return sorted([i, o] for c in s["ocs"]["circuits"]["region0"] for i, o in c["cross_connects"])


def test_an_ocs_deny_in_training_rolls_back_and_the_run_completes(tmp_path):
    # ENT-PATCH 1 is the initial topology, 2 the first reconfiguration's
    rc, s, shown, recover, _ = _run_on_mock(tmp_path, ["ocs:patch2=deny"], iterations=30)  # (30: time to decide, loaded)
    assert rc == 0 and s["status"] == "ok" and s["iterations"] == s["iterations_planned"] == 30, \
        (rc, s.get("status"), s.get("error"), s.get("warnings"))
    first = s["reconfigurations"][0]
    assert first["outcome"] == "rolled-back" and "SROF" in first["error"] and first["failures"][0]["phase"] == "apply"
    assert first["circuits"] == s["initial_topology"]["circuits"]["region0"]  # back on the old circuits
    assert any("rolled back to the old circuits" in w and "epoch 1" in w for w in s["warnings"])
    assert s["reconfigurations_failed"][0]["outcome"] == "rolled-back"
    # what the OCS holds is the summary's final plan, read back by the run and by mfctl ocs show after it
    assert s["ocs"]["matches_last_plan"] is True
    assert _planned_cross_connects(s) == s["ocs"]["cross_connects"] == \
        sorted([x["in"], x["out"]] for x in shown["cross_connects"])
    recs = [json.loads(ln) for ln in (Path(s["run_dir"]) / "journal.jsonl").read_text().splitlines()]
    assert any(r["op"] == "reconfig.failure" and r["epoch"] == 1 for r in recs)
    db = sqlite3.connect(Path(s["run_dir"]) / "metrics.db")
    assert db.execute("SELECT outcome FROM reconfigurations WHERE epoch=1").fetchone() == ("rolled-back",)
    assert recover["pending"] is None and not any("ocs recover" in w for w in s["warnings"])


def test_when_the_rollback_is_denied_too_training_goes_on_on_what_is_up_and_says_to_recover(tmp_path):
    # the first reconfiguration's deletions take, its additions and the driver's rollback are refused
    # (one reconfiguration only: a later change would supersede the unfinished one, for recover too)
    rc, s, shown, recover, inv = _run_on_mock(tmp_path, ["ocs:patch2=deny:2"], policy={"min_interval_iterations": 50},
                                              iterations=30)  # (30: time to decide on a loaded machine)
    assert rc == 0 and s["status"] == "ok" and s["iterations"] == 30
    assert len(s["reconfigurations"]) == 1
    first = s["reconfigurations"][0]
    assert first["outcome"] == "partial" and [f["phase"] for f in first["failures"]] == ["apply"]
    assert "rollback failed too" in first["error"]
    up = sum(map(sum, first["circuits_routed"])) // 2
    assert 0 < up < sum(map(sum, s["initial_topology"]["circuits"]["region0"])) // 2  # fewer circuits, the rest on the EPS
    assert any(f"mfctl ocs recover -i {inv}" in w and "epoch 1" in w for w in s["warnings"])
    assert recover["pending"]["reason"] == "epoch 1"  # ... and recover finds that change
    assert s["ocs"]["matches_last_plan"] is True  # the last plan is what the OCS really holds
    assert _planned_cross_connects(s) == s["ocs"]["cross_connects"] == \
        sorted([x["in"], x["out"]] for x in shown["cross_connects"])


def test_a_health_sample_that_never_answers_is_a_finding_and_the_lanes_stay_up(tmp_path):
    """Every host's first in-run nvidia-smi (the pre-flight makes two) hangs; samples every 5
    testbed s (0.1 s wall), so it hangs while the first reconfiguration (iteration 2) polls the
    new circuits' lanes."""
    hang = [f"gpu0{i}:nvidia-smi=hang:3" for i in range(1, 5)]
    # resume_timeout_s 600 testbed s = 12 s wall at time scale 50 (60 s = 1.2 s failed on a loaded machine);
    # 80 iterations (~9 s wall): at 40 (~4.5 s) a loaded machine's sweeps reached the hung call of only one
    # host before the run ended (its other samples abandoned at the sampler's stop)
    rc, s, shown, _, _ = _run_on_mock(tmp_path, hang, runtime={"health_interval_s": 5, "resume_timeout_s": 600},
                                      iterations=80)
    assert rc == 0 and s["status"] == "ok" and s["iterations"] == 80, s.get("error")
    assert s["reconfigurations"] and all(r["lanes_failed"] == 0 for r in s["reconfigurations"])
    assert not any("did not come up" in w for w in s["warnings"])
    assert any("health.sample_timeout" in w for w in s["warnings"])
    db = sqlite3.connect(Path(s["run_dir"]) / "metrics.db")
    found = {(h, f["code"]) for h, fs in db.execute("SELECT host, findings_json FROM health")
             for f in json.loads(fs)}
    assert {(f"gpu0{i}", "health.sample_timeout") for i in range(1, 5)} <= found
    assert s["ocs"]["matches_last_plan"] is True


# --- a change applied but never resumed on ----------------------------------------------------
class WorkersThatFinished(FakeWorkers):
    """Workers that keep ``heard`` as the training's do: ``resume`` from ``resumed`` (host → the
    iteration it resumed after); the other hosts finished training first (skipped, not waited for)."""

    def __init__(self, resumed=None, ended_at_resume=False):
        super().__init__()
        self.resumed, self.ended_at_resume = resumed or {}, ended_at_resume
        self.heard = {}

    def await_all(self, hosts, mtype, epoch, timeout_testbed_s):
        self.heard = {}
        if mtype == "resume":
            if self.ended_at_resume:  # the training loop's _abort: the run ended during the wait
                raise OperationFailed(f"training ended while waiting for resume for epoch {epoch} from gpu01")
            self.heard = {h: {"type": "resume", "epoch": epoch, "iteration": it} for h, it in self.resumed.items()}
        return set()


def test_a_change_whose_workers_all_finished_before_the_routes_is_applied_but_never_resumed_on():
    """The torch job's run: the link-up outlasted the job, every host had finished training when the
    routes came, and await_all had nobody to wait for — the record said 'applied', no warning. It
    says the change was never resumed on, and why."""
    r, _ = run(FakeOCS(xc(OLD)), WorkersThatFinished(resumed={}))
    assert r.phase is Phase.DONE and r.outcome == "applied"  # the OCS holds the new plan: true
    assert r.never_resumed and not r.ok and r.resumed_iteration is None
    d = r.to_dict()
    assert d["never_resumed"] is True and d["resumed_iteration"] is None
    assert r.describe().startswith("epoch 3 (r0, iteration 7): applied to the OCS but never resumed on: training "
                                   "ended first (link-up ")


def test_a_change_every_host_resumed_on_is_resumed_at_the_last_ones_iteration():
    r, _ = run(FakeOCS(xc(OLD)), WorkersThatFinished(resumed={h: 9 + i for i, h in enumerate(HOSTS)}))
    assert r.outcome == "applied" and not r.never_resumed and r.ok and r.describe() is None
    assert r.resumed_iteration == 9 + len(HOSTS) - 1


def test_a_run_ending_while_waiting_for_resume_says_never_resumed_not_just_applied():
    """After a Ctrl-C the table said 'applied' while the error said 'training ended while waiting for
    resume': the record now says both."""
    rc = Reconfigurator(FakeOCS(xc(OLD)), WorkersThatFinished(ended_at_resume=True), FakeLinks(), scale=20.0,
                        journal=lambda op, **f: None)
    with pytest.raises(OperationFailed):
        rc.run(proposal())
    r = rc.rec
    assert r.outcome == "applied" and r.phase is Phase.FAILED and r.never_resumed and r.to_dict()["never_resumed"]
    assert "applied to the OCS but never resumed on" in r.describe()
    assert "training ended while waiting for resume" in r.describe()


def test_the_summary_lists_a_change_never_resumed_on_among_those_that_did_not_go_as_planned():
    from mfctl.runtime.summary import _failed

    r, _ = run(FakeOCS(xc(OLD)), WorkersThatFinished(resumed={}))
    assert _failed([r]) == [{"epoch": 3, "region": "r0", "outcome": "applied", "error": None,
                             "ocs_needs_recovery": False, "never_resumed": True}]
    ok, _ = run(FakeOCS(xc(OLD)), WorkersThatFinished(resumed={h: 9 for h in HOSTS}))
    assert _failed([ok]) is None


def test_the_run_s_table_says_applied_never_resumed():
    import io

    from rich.console import Console

    from mfctl.cli.run import _reconfig_table

    r, _ = run(FakeOCS(xc(OLD)), WorkersThatFinished(resumed={}))
    out = Console(width=200, record=True, file=io.StringIO())
    out.print(_reconfig_table([r.to_dict()]))
    assert "applied, never resumed" in out.export_text()
