"""The training phase of a run: the controller's events in, iterations recorded, the policy
asked, reconfigurations run (DESIGN §6).

:class:`Training` works on the run's :class:`~mfctl.runtime.summary.RunRecord` once the runtime
is launched: it reads the controller's events
(failing when a worker exits or disconnects before finishing), records iterations and traffic
predictions, and runs each change the policy (:mod:`mfctl.runtime.policy`) proposes through the
reconfiguration protocol (:class:`mfctl.runtime.reconfig.Reconfigurator`) — it is the protocol's
``Workers``. Times: testbed seconds unless said (wall × the testbed's time scale).
"""

from __future__ import annotations

import logging
import queue
import time
from pathlib import Path
from typing import Callable

import numpy as np

from mfctl.errors import OperationFailed
from mfctl.runtime import policy
from mfctl.runtime.plan import RegionState, RunPlan
from mfctl.runtime.reconfig import LinkPoller, Proposal, Reconfiguration, Reconfigurator, WaitTimeout, reread_ocs
from mfctl.runtime.summary import RunRecord
from mfctl.signals import DeferSignals

log = logging.getLogger(__name__)
HELLO_TIMEOUT_S = 30.0  # wall seconds for every worker's hello after the launch
PROGRESS_TIMEOUT_S = 300.0  # wall seconds without any message from the runtime during training
#: wall seconds a lost connection waits for the launcher's word on the worker (a batch job's end
#: state — TIMEOUT, CANCELLED, NODE_FAIL — is known once torchrun, srun and Slurm's KillWait are
#: done: 2-4 s on an idle 2-core machine, over 5 s with a loaded one); it returns as soon as it has it
LOST_WAIT_S = 15.0


class Training:
    """The run's training phase on the launched runtime: ``ctrl`` (:class:`~mfctl.runtime.controller.Controller`),
    ``launcher`` (its ``workers``), the OCS ``driver`` and the ``links`` poller. ``warn(message)``
    records a warning of the run; ``store`` is the run's :class:`~mfctl.metrics.store.MetricsStore`,
    ``journal`` its :class:`~mfctl.ocs.journal.Journal`."""

    def __init__(self, plan: RunPlan, record: RunRecord, *, ctrl, launcher, driver, links: LinkPoller, store, journal,
                 observer, warn: Callable[[str], None], scale: float, log_dir: Path):
        self.plan, self.pb, self.record = plan, plan.playbook, record
        self.ctrl, self.launcher, self.driver, self.links = ctrl, launcher, driver, links
        self.store, self.journal, self.obs, self.warn = store, journal, observer, warn
        self.scale, self.log_dir = scale, log_dir
        self.failed: str | None = None

    # --- events ----------------------------------------------------------------------------
    def next_event(self, deadline: float, waiting_for: str) -> tuple[str, dict]:
        """The controller's next ``(host, message)``. Raises WaitTimeout at ``deadline``
        (``time.monotonic()``), OperationFailed when a worker ended before finishing and no
        message of it is left to read."""
        done = self.record.done_hosts
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeout(f"timed out waiting for {waiting_for}")
            lost = [w for w in self.launcher.workers.values()
                    if w.done.is_set() and w.host not in done and w.host not in self.ctrl.workers]
            if lost and self.ctrl.events.empty():
                w = lost[0]
                why = f"{w.error}, " if w.error else ""
                raise OperationFailed(f"runtime on {w.host} exited ({why}rc {w.rc}) before finishing; see {w.log_path}")
            try:
                return self.ctrl.events.get(timeout=min(remaining, 0.2))
            except queue.Empty:
                continue

    def wait_hellos(self, hosts: list[str]) -> None:
        """Wait for every worker's ``hello`` (:data:`HELLO_TIMEOUT_S`), handling other messages."""
        pending = set(hosts)
        deadline = time.monotonic() + HELLO_TIMEOUT_S
        while pending:
            host, msg = self.next_event(deadline, "runtime workers to connect: " + ", ".join(sorted(pending)))
            if msg["type"] == "hello":
                pending.discard(host)
            else:
                self.handle(host, msg)

    def loop(self, hosts: set[str]) -> None:
        """Train until every host said ``bye``. Raises OperationFailed when a runtime reports an
        error, disconnects, or says nothing for :data:`PROGRESS_TIMEOUT_S`."""
        self.obs.phase("train", f"training {self.pb.training.iterations} iterations")
        while self.record.done_hosts != hosts:
            host, msg = self.next_event(time.monotonic() + PROGRESS_TIMEOUT_S, "runtime progress")
            self.handle(host, msg, allow_reconfig=True)
            if self.failed:
                raise OperationFailed(self.failed)

    def handle(self, host: str, msg: dict, allow_reconfig: bool = False) -> None:
        t = msg["type"]
        if t == "iteration":
            self.store.iteration(host, msg)
            if "timings" in msg:  # the job's measured all-to-all/GEMM times (validated, bounded: mfctl profile --run)
                self.store.timings(host, msg.get("iteration"), msg["timings"])
            reg = self.plan.region_of(host)
            if host == reg.hosts[0]:
                self.record.iterations[msg["iteration"]] = msg
                reg.last_iter_s = msg["seconds"]
                self.obs.iteration(msg["iteration"], self.pb.training.iterations, msg)
        elif t == "traffic":
            self._traffic(next(r for r in self.plan.regions.values() if host == r.hosts[0]), msg, allow_reconfig)
        elif t == "bye":
            self.record.done_hosts.add(host)
        elif t == "error":
            self.failed = f"runtime on {host} reported: {msg.get('message')}"
        elif t == "_disconnected" and host not in self.record.done_hosts:
            self.failed = (f"runtime on {host} disconnected before finishing{self._why_lost(host)} "
                           f"(see {self.log_dir / (host + '.log')})")
            raise OperationFailed(self.failed)

    def _why_lost(self, host: str) -> str:
        """``": <why>"`` when the launcher says within :data:`LOST_WAIT_S` how ``host``'s worker
        ended (its error, or a non-zero rc) — or, still ending, what its output said of it
        (torchrun's ``failed (exitcode: 17) local_rank: 0 …``: ``Worker.notes``) — else ``""``."""
        w = self.launcher.workers.get(host)
        if w is None:
            return ""
        if not w.done.wait(LOST_WAIT_S):
            return f": {w.notes[0]} (its launcher still ending)" if w.notes else ""
        return f": {w.error}" if w.error else (f": exit code {w.rc}" if w.rc else "")

    # --- traffic → policy → reconfiguration ---------------------------------------------------
    def _record_prediction(self, iteration: int, region: str, name: str, err: float) -> None:
        self.store.prediction(iteration, region, name, err)
        self.record.pred_errors.setdefault(name, []).append(err)

    def _traffic(self, reg: RegionState, msg: dict, allow_reconfig: bool) -> None:
        """A region leader's per-layer traffic: predictions scored, the policy asked."""
        it, pr = msg["iteration"], self.record
        B = np.asarray(msg["matrices"], dtype=float)
        reg.predicted = policy.score_predictions(self.plan, reg, it, B, msg.get("tokens") or {}, self._record_prediction)
        if not (allow_reconfig and self.pb.policy.enabled and policy.due(self.plan, reg, it)):
            return
        if pr.last_plan is None:  # what the OCS holds is not known: no change is planned on top of it
            pr.last_plan = reread_ocs(self.driver, self.plan.regions.values(), self.journal.append, self.driver.endpoint)
            if pr.last_plan is None:
                return
        cand = policy.consider(self.plan, reg, it, policy.expected_reconfig_s(self.plan, pr.reconfigs), self.journal.append)
        if cand is not None:
            self.reconfigure(reg, it, cand)

    def reconfigure(self, reg: RegionState, iteration: int, cand: policy.Candidate) -> None:
        """Run one reconfiguration and take in its outcome: the region's circuits and routes, the
        last plan (= what the OCS holds), the records, a warning when it did not go as planned.
        Raises OperationFailed only when a worker did not resume (the OCS is consistent with the
        records by then)."""
        pr = self.record
        assert pr.last_plan is not None  # (read again first when unknown: _traffic)
        pr.epoch += 1
        self.obs.phase("reconfig", f"epoch {pr.epoch}: {reg.name} at iteration {iteration}")
        prop = Proposal(epoch=pr.epoch, region=reg.name, hosts=list(reg.hosts), lanes=reg.lanes, iteration=iteration,
                        old=list(reg.circuits), new=list(cand.new), planned=cand.planned, ocs_before=dict(pr.last_plan),
                        region_ports=reg.ocs_ports, routed=reg.routed, decision=cand.decision)
        machine = Reconfigurator(self.driver, self, self.links, scale=self.scale,
                                 drain_timeout_s=self.pb.runtime.drain_timeout_s,
                                 resume_timeout_s=self.pb.runtime.resume_timeout_s,
                                 journal=self.journal.append, guard=DeferSignals)
        try:
            rec = machine.run(prop)
        except BaseException:  # interrupted, a worker lost: the records and the last plan stay true
            if machine.rec is not None:
                self._take(reg, machine.rec)
            raise
        self._take(reg, rec)
        if rec.fatal:
            raise OperationFailed(rec.fatal)

    def _take(self, reg: RegionState, rec: Reconfiguration) -> None:
        reg.circuits, reg.routed = rec.in_force, rec.routed
        self.record.last_plan = rec.ocs_state  # the OCS as read back (None: it could not be read)
        reg.last_reconfig_iter = rec.iteration
        self.record.reconfigs.append(rec)
        self.store.reconfiguration(rec.to_dict())
        log.info("reconfiguration epoch %d %s: +%d/-%d cross-connects, switch %.1f ms, link-up %.2f s, runtime %.0f ms",
                 rec.epoch, rec.outcome, rec.xc_added, rec.xc_removed, rec.t_switch_ms, rec.t_linkup_ms / 1000,
                 rec.t_runtime_ms)
        what = rec.describe()
        if what:
            self.warn(what)
        elif rec.lanes_down:
            self.warn(f"epoch {rec.epoch}: {rec.failures[-1].error}" if rec.failures else
                      f"epoch {rec.epoch}: lanes did not come up: {', '.join(rec.lanes_down)}")
        self.obs.reconfiguration(rec)

    # --- the workers, as the reconfiguration protocol sees them (reconfig.Workers) -------------
    def broadcast(self, hosts: list[str], msg: dict) -> list[str]:
        return self.ctrl.broadcast(hosts, msg)

    def await_all(self, hosts: list[str], mtype: str, epoch: int, timeout_testbed_s: float) -> set[str]:
        """Wait for ``mtype`` of ``epoch`` from every host that has not finished training (a
        finished one has nothing to drain or resume), handling the other messages; return the
        hosts still missing after ``timeout_testbed_s`` (+ 2 s wall of slack)."""
        done = self.record.done_hosts
        pending = set(hosts) - done
        deadline = time.monotonic() + timeout_testbed_s / self.scale + 2
        while pending:
            try:
                host, msg = self.next_event(deadline, f"{mtype} for epoch {epoch} from {', '.join(sorted(pending))}")
            except WaitTimeout:
                return pending
            if msg["type"] == mtype and msg.get("epoch") == epoch:
                pending.discard(host)
            else:
                self.handle(host, msg)
                pending -= done
        return set()
