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

import contextlib
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from mfctl.errors import OperationFailed
from mfctl.runtime import messages, policy
from mfctl.runtime.plan import RegionState, RunPlan
from mfctl.runtime.protocol import ProtocolError
from mfctl.runtime.reconfig import LinkPoller, OCSDevice, Proposal, Reconfiguration, Reconfigurator, WaitTimeout, reread_ocs
from mfctl.runtime.summary import RunRecord
from mfctl.signals import DeferSignals

log = logging.getLogger(__name__)
HELLO_TIMEOUT_S = 30.0  # wall seconds for every worker's hello after the launch ...
#: ... plus this much per host: a job's processes start, import and connect on every node (128 hosts:
#: 62 s; the mock starts them all on one machine — measured 28 s for 128 hosts at a load of 20 on 2 cores)
HELLO_PER_HOST_S = 0.25
PROGRESS_TIMEOUT_S = 300.0  # wall seconds without any message from the runtime during training
#: wall seconds a lost connection waits for the launcher's word on the worker (a batch job's end
#: state — TIMEOUT, CANCELLED, NODE_FAIL — is known once torchrun, srun and Slurm's KillWait are
#: done: 2-4 s on an idle 2-core machine, over 5 s with a loaded one); it returns as soon as it has it
LOST_WAIT_S = 15.0
#: wall seconds the end of training waits for reconfigurations still under way (their OCS change is
#: never cut short; a link-up wait is bounded by runtime.linkup_timeout_s, the workers' by their timeouts)
JOIN_TIMEOUT_S = 60.0


@dataclass
class InFlight:
    """One region's reconfiguration under way in a thread of its own: its epoch, the hosts'
    ``paused``/``resume`` for it (``mailbox``, fed by the training loop), its record so far."""

    region: str
    epoch: int
    hosts: list[str]
    machine: Reconfigurator
    t_decided: float  # time.monotonic() of the policy's decision
    mailbox: queue.Queue = field(default_factory=queue.Queue)
    thread: threading.Thread | None = None
    error: BaseException | None = None
    cpu_s: float = 0.0  # the thread's CPU time


@dataclass
class ControllerCPU:
    """The controller's own CPU time in training (thread CPU, s): handling the runtime's messages
    (receive, predict, decide, plan, log) in the training loop, and the reconfigurations' threads
    (the protocol, OCS commands, link polls); ``iterations`` the leader iterations recorded;
    ``process_s`` the whole mfctl process's CPU over the same time (its socket readers, SSH pools
    and health sampler included)."""

    handle_s: float = 0.0
    reconfig_s: float = 0.0
    messages: int = 0
    iterations: int = 0
    process_s: float = 0.0
    wall_s: float = 0.0

    def to_dict(self) -> dict:
        n = max(1, self.iterations)
        return {"handle_cpu_s": round(self.handle_s, 4), "reconfig_cpu_s": round(self.reconfig_s, 4),
                "process_cpu_s": round(self.process_s, 3), "wall_s": round(self.wall_s, 3), "messages": self.messages,
                "iterations": self.iterations, "handle_cpu_ms_per_iteration": round(self.handle_s / n * 1000, 3),
                "process_cpu_ms_per_iteration": round(self.process_s / n * 1000, 2)}


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
        # the OCSes the regions reach (one TL1 change at a time on each: reconfig.OCSDevice); regions
        # reconfigure concurrently, each in a thread of its own, while this loop goes on handling events
        self.devices: dict[str, OCSDevice] = {}
        drivers = self._drivers()
        known = getattr(record, "last_plans", None) or {}  # what each OCS holds, by name (RunOCS.set_initial)
        for name, drv in drivers.items():
            self.devices[name] = OCSDevice(name, drv, known.get(name, record.last_plan if len(drivers) == 1 else None))
        self.inflight: dict[str, InFlight] = {}  # region → its reconfiguration under way
        self.region_names = {h: r.name for r in plan.regions.values() for h in r.hosts}  # host → its region
        self.considered: dict[str, int] = {}  # region → the iteration it was last planned at
        self.latest_traffic: dict[str, int] = {}  # region → its newest traffic's iteration (set as it arrives)
        self.fastest_iter_s: dict[str, float] = {}  # region → its fastest iteration so far (testbed s): the policy's pace
        self.ended: set[str] = set()  # hosts whose bye has arrived (set as it arrives)
        self._shown_iteration = 0  # the newest iteration the observer has heard of
        self._warned_figures: set[str] = set()  # hosts told of figures left out of their iteration messages
        self.writer = _StoreWriter(store)
        self.finished: queue.Queue[InFlight] = queue.Queue()
        self.cpu = ControllerCPU()
        self._abort = threading.Event()
        # a reconfiguration's paused/resume go to its thread as they arrive, not behind a backlog of
        # other regions' messages in the training loop (the controller's reader threads put them)
        ctrl.events = _Router(ctrl.events, self)

    def _drivers(self) -> dict[str, object]:
        """The run's OCS drivers by OCS name: ``driver`` a mapping (several OCSes), else the only one."""
        if isinstance(self.driver, dict):
            return dict(self.driver)
        names = getattr(self.plan, "ocs_names", None) or ["ocs"]
        return {names[0]: self.driver}

    def device_of(self, reg: RegionState) -> OCSDevice:
        """The OCS a region's lanes reach: the region's ``ocs`` (inventory ``regions[].ocs``), else
        the only one."""
        name = getattr(reg, "ocs", None)
        if name and name in self.devices:
            return self.devices[name]
        return next(iter(self.devices.values()))

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
        """Wait for every worker's ``hello`` (:data:`HELLO_TIMEOUT_S` + :data:`HELLO_PER_HOST_S`
        per host), handling other messages."""
        pending = set(hosts)
        deadline = time.monotonic() + HELLO_TIMEOUT_S + HELLO_PER_HOST_S * len(hosts)
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
        p0, w0 = time.process_time(), time.monotonic()
        try:
            while self.record.done_hosts != hosts or self.inflight:
                try:  # (with reconfigurations under way: back every 50 ms to take in those that ended)
                    wait = 0.05 if self.inflight else PROGRESS_TIMEOUT_S
                    host, msg = self.next_event(time.monotonic() + wait, "runtime progress")
                except WaitTimeout:
                    if not self.inflight:
                        raise
                else:
                    t0 = time.thread_time()
                    self.handle(host, msg, allow_reconfig=True)
                    self.cpu.handle_s += time.thread_time() - t0
                    self.cpu.messages += 1
                self._take_finished()
                if self.failed:
                    raise OperationFailed(self.failed)
        finally:
            self._join_inflight()
            self.writer.close()
            self.cpu.process_s, self.cpu.wall_s = time.process_time() - p0, time.monotonic() - w0
            self.cpu.iterations = len(self.record.iterations)
            self.journal.append("controller.cpu", sync=False, **self.cpu.to_dict())

    def handle(self, host: str, msg: dict, allow_reconfig: bool = False) -> None:
        t = msg["type"]
        if t in ("paused", "resume"):  # of no reconfiguration under way (_Router gave it the others'): late
            log.info("%s from %s for epoch %s: no reconfiguration of it under way", t, host, msg.get("epoch"))
        elif t in ("iteration", "traffic"):
            try:
                (self._iteration if t == "iteration" else self._traffic)(host, msg, allow_reconfig)
            except ProtocolError as e:  # a figure the run cannot do without: the run fails, saying which and whose
                self.failed = f"runtime on {host} sent a bad message: {e}"
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
        self.writer.put(self.store.prediction, iteration, region, name, err)
        self.record.pred_errors.setdefault(name, []).append(err)

    def _iteration(self, host: str, msg: dict, _allow_reconfig: bool) -> None:
        """A host's ``iteration`` (checked: :func:`mfctl.runtime.messages.iteration`): stored; a
        region leader's is the region's iteration (the job's with the other regions')."""
        msg, dropped = messages.iteration(msg)
        if dropped and host not in self._warned_figures:
            self._warned_figures.add(host)
            self.warn(f"runtime on {host} sent iteration figures that are not numbers of their kind: "
                      f"{', '.join(dropped)} (left out; said once per host)")
        self.writer.put(self.store.iteration, host, msg)
        if "timings" in msg:  # the job's measured all-to-all/GEMM times (validated, bounded: mfctl profile --run)
            self.store.timings(host, msg.get("iteration"), msg.pop("timings"))  # (stored: not kept in the record)
        reg = self.plan.region_of(host)
        if host == reg.hosts[0]:
            self.record.add_iteration(reg.name, msg)
            reg.last_iter_s = msg["seconds"]
            self.fastest_iter_s[reg.name] = min(self.fastest_iter_s.get(reg.name, msg["seconds"]), msg["seconds"])
            if msg["iteration"] > self._shown_iteration:  # several regions: each iteration once, in order
                self._shown_iteration = msg["iteration"]
                self.obs.iteration(msg["iteration"], self.pb.training.iterations, msg)

    def _traffic(self, host: str, msg: dict, allow_reconfig: bool) -> None:
        """A region leader's per-layer traffic (checked: :func:`mfctl.runtime.messages.traffic_matrices`):
        predictions scored, the policy asked (unless the region is being reconfigured already).
        Another host's traffic is not the protocol's (leader only) and is ignored."""
        reg = self.plan.region_of(host)
        if host != reg.hosts[0]:
            log.info("traffic from %s, not its region's leader %s: ignored", host, reg.hosts[0])
            return
        B = messages.traffic_matrices(msg, len(reg.hosts))
        it = msg["iteration"]
        got = msg.get("tokens")
        tokens: dict = got if isinstance(got, dict) else {}
        reg.predicted = policy.score_predictions(self.plan, reg, it, B, tokens, self._record_prediction)
        if not (allow_reconfig and self.pb.policy.enabled and reg.name not in self.inflight
                and policy.due(self.plan, reg, it)):
            return
        if self.latest_traffic.get(reg.name, it) > it:  # newer traffic of the region waits: decide on that one
            return
        # a region is planned at most every min_interval_iterations, a change made or not (planning
        # is the controller's main cost: ~35 ms of CPU for a 64-GPU region)
        last = self.considered.get(reg.name)
        if last is not None and it - last < self.pb.policy.min_interval_iterations:
            return
        dev = self.device_of(reg)
        if dev.state is None:  # what the OCS holds is not known: no change is planned on top of it
            if not dev.lock.acquire(blocking=False):
                return  # another region's change holds it: asked again at this region's next traffic
            try:
                dev.state = reread_ocs(dev.driver, [r for r in self.plan.regions.values() if self.device_of(r) is dev],
                                       self.journal.append, getattr(dev.driver, "endpoint", ""))
            finally:
                dev.lock.release()
            self._sync_last_plan()
            if dev.state is None:
                return
        self.considered[reg.name] = it
        cand = policy.consider(self.plan, reg, it, policy.expected_reconfig_s(self.plan, self.record.reconfigs),
                               self.journal.append, fastest_iter_s=self.fastest_iter_s.get(reg.name))
        if cand is not None:
            self.reconfigure(reg, it, cand)

    def reconfigure(self, reg: RegionState, iteration: int, cand: policy.Candidate) -> None:
        """Start one reconfiguration of ``reg`` in a thread of its own (:class:`InFlight`); the
        training loop goes on handling every region's messages meanwhile, feeding this one's
        ``paused``/``resume`` to its thread, and takes in its outcome when it ends
        (:meth:`_take_finished`)."""
        pr, dev = self.record, self.device_of(reg)
        pr.epoch += 1
        self.obs.phase("reconfig", f"epoch {pr.epoch}: {reg.name} at iteration {iteration}")
        prop = Proposal(epoch=pr.epoch, region=reg.name, hosts=list(reg.hosts), lanes=reg.lanes, iteration=iteration,
                        old=list(reg.circuits), new=list(cand.new), planned=cand.planned,
                        ocs_before=dict(dev.state or {}), region_ports=reg.ocs_ports, routed=reg.routed,
                        decision=cand.decision)
        fl = InFlight(reg.name, pr.epoch, list(reg.hosts), machine=None, t_decided=time.monotonic())  # type: ignore[arg-type]
        fl.machine = Reconfigurator(dev.driver, _RegionWorkers(self, fl), self.links, scale=self.scale,
                                    drain_timeout_s=self.pb.runtime.drain_timeout_s,
                                    resume_timeout_s=self.pb.runtime.resume_timeout_s,
                                    journal=self.journal.append, guard=DeferSignals, device=dev)
        fl.thread = threading.Thread(target=self._run_inflight, args=(fl, prop), daemon=True,
                                     name=f"reconfig-{reg.name}-{pr.epoch}")
        self.inflight[reg.name] = fl
        fl.thread.start()

    def _run_inflight(self, fl: InFlight, prop: Proposal) -> None:
        t0 = time.thread_time()
        try:
            fl.machine.run(prop)
        except BaseException as e:  # a worker lost, the run ending: the record (journalled) says where it stopped
            fl.error = e
        finally:
            fl.cpu_s = time.thread_time() - t0
            if fl.machine.rec is not None:
                fl.machine.rec.t_decision_to_resume_ms = (time.monotonic() - fl.t_decided) * 1000
            self.finished.put(fl)

    def _take_finished(self) -> None:
        """Take in the reconfigurations that ended (in this thread: the records, the metrics store
        and the observer are the training loop's). Raises OperationFailed for one that cannot go on
        (a worker that did not resume: the OCS is consistent with the records by then)."""
        while True:
            try:
                fl = self.finished.get_nowait()
            except queue.Empty:
                return
            self.inflight.pop(fl.region, None)
            self.cpu.reconfig_s += fl.cpu_s
            rec = fl.machine.rec
            if rec is not None:
                self._take(self.plan.regions[fl.region], rec)
            if fl.error is not None and not self._abort.is_set():
                if isinstance(fl.error, OperationFailed):
                    raise fl.error
                raise OperationFailed(f"reconfiguration of {fl.region} (epoch {fl.epoch}) failed: {fl.error}")
            if rec is not None and rec.fatal:
                raise OperationFailed(rec.fatal)

    def _join_inflight(self) -> None:
        """The end of training (or of the run): reconfigurations under way are told so (their
        waits for the workers end) and waited for (an OCS change is never left half-made), then
        their records are taken in."""
        if not self.inflight:
            return
        self._abort.set()
        with DeferSignals(reraise=False, on_signal=lambda s: self.warn("waiting for the reconfigurations under way "
                                                                       "to finish their OCS changes")):
            deadline = time.monotonic() + JOIN_TIMEOUT_S
            for fl in list(self.inflight.values()):
                fl.mailbox.put(("", {"type": "_abort"}))
                if fl.thread is not None:
                    fl.thread.join(max(0.0, deadline - time.monotonic()))
        try:
            self._take_finished()
        except OperationFailed as e:
            log.warning("%s", e)
        for fl in self.inflight.values():
            log.warning("reconfiguration of %s (epoch %d) still under way at the end of training", fl.region, fl.epoch)

    def _sync_last_plan(self) -> None:
        """What each OCS holds into the record: ``last_plans`` by name, and ``last_plan`` when
        there is only one (the final read-back is checked against them)."""
        plans = getattr(self.record, "last_plans", None)
        for name, dev in self.devices.items():
            if isinstance(plans, dict):
                plans[name] = dev.state
        if len(self.devices) == 1:
            self.record.last_plan = next(iter(self.devices.values())).state

    def _take(self, reg: RegionState, rec: Reconfiguration) -> None:
        if rec.resumed_iteration is not None and rec.resumed_iteration >= self.pb.training.iterations:
            rec.never_resumed = True  # resumed after the last iteration: nothing trained on it
        reg.circuits, reg.routed = rec.in_force, rec.routed
        self._sync_last_plan()  # the OCS as read back (None: it could not be read)
        reg.last_reconfig_iter = rec.iteration
        self.record.reconfigs.append(rec)
        self.store.reconfiguration(rec.to_dict())
        log.info("reconfiguration epoch %d %s %s: +%d/-%d cross-connects, switch %.1f ms, link-up %.2f s, runtime %.0f ms, "
                 "decision to resume %.0f ms wall (OCS wait %.1f ms)", rec.epoch, rec.region, rec.outcome, rec.xc_added,
                 rec.xc_removed, rec.t_switch_ms, rec.t_linkup_ms / 1000, rec.t_runtime_ms, rec.t_decision_to_resume_ms,
                 rec.t_ocs_wait_ms)
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


class _StoreWriter:
    """The metrics store's per-message rows (iterations, prediction scores) written by a thread of
    their own: each is a committed SQLite insert (~1 ms of CPU, several ms of fsync on a busy
    disk), ~200 per iteration at 1,024 GPUs — the training loop must not wait for them.
    :meth:`close` writes what is queued and ends the thread."""

    #: rows written per commit at most (what is queued when the writer wakes, up to this)
    BATCH = 512

    def __init__(self, store):
        self.store = store
        self.q: queue.Queue = queue.Queue()
        self.errors = 0
        self.thread = threading.Thread(target=self._run, daemon=True, name="metrics-writer")
        self.thread.start()

    def put(self, fn, *args) -> None:
        self.q.put((fn, args))

    def _run(self) -> None:
        done = False
        while not done:
            items = [self.q.get()]
            while len(items) < self.BATCH:
                try:
                    items.append(self.q.get_nowait())
                except queue.Empty:
                    break
            if None in items:  # close(): what was queued before it, then end
                done, items = True, items[:items.index(None)]
            batch = getattr(self.store, "batch", None)
            try:
                with batch() if batch else contextlib.nullcontext():  # one commit for what was queued
                    for fn, args in items:
                        try:
                            fn(*args)
                        except Exception as e:
                            self._failed(e)
            except Exception as e:  # (the commit)
                self._failed(e)

    def _failed(self, e: Exception) -> None:
        """A write failed (a full disk, a closed store): the run goes on, said once."""
        self.errors += 1
        if self.errors == 1:
            log.warning("metrics store write failed (later failures not logged): %s", e)

    def close(self, timeout_s: float = 60.0) -> None:
        self.q.put(None)
        self.thread.join(timeout_s)


class _Router(queue.Queue):
    """The controller's event queue, as the training sees it: a ``paused``/``resume`` for a
    reconfiguration under way goes straight to its :class:`InFlight` mailbox (from the
    controller's reader thread); everything else is queued for the training loop as before."""

    def __init__(self, old: queue.Queue, training: Training):
        super().__init__()
        self.t = training
        while True:  # what was queued before (hellos)
            try:
                super().put(old.get_nowait())
            except queue.Empty:
                break

    def put(self, item, block: bool = True, timeout: float | None = None) -> None:
        host, msg = item
        t = msg.get("type")
        it = msg.get("iteration")
        if t == "traffic" and host in self.t.region_names and messages.is_count(it):  # the newest traffic of its
            self.t.latest_traffic[self.t.region_names[host]] = it  # region, as it arrives (a bad one: the loop says)
        elif t == "bye":  # finished: a reconfiguration under way waits for it no more (the loop records it too)
            self.t.ended.add(host)
        if t in ("paused", "resume") and host in self.t.region_names:
            fl = self.t.inflight.get(self.t.region_names[host])
            if fl is not None and msg.get("epoch") == fl.epoch:
                fl.mailbox.put(item)
                return
        super().put(item, block, timeout)


class _RegionWorkers:
    """One region's workers as its reconfiguration's thread sees them (:class:`reconfig.Workers`):
    messages go straight to the controller; their ``paused``/``resume`` come through the
    :class:`InFlight` mailbox the training loop feeds."""

    def __init__(self, training: Training, fl: InFlight):
        self.t, self.fl = training, fl

    def broadcast(self, hosts: list[str], msg: dict) -> list[str]:
        return self.t.ctrl.broadcast(hosts, msg)

    def await_all(self, hosts: list[str], mtype: str, epoch: int, timeout_testbed_s: float) -> set[str]:
        """Wait for ``mtype`` of ``epoch`` from every host that has not finished training (a
        finished one has nothing to drain or resume); return the hosts still missing after
        ``timeout_testbed_s`` (+ 2 s wall of slack). Raises OperationFailed when the run is ending."""
        done = self.t.ended  # (a bye still queued for the training loop counts)
        pending = set(hosts) - done
        self.heard: dict[str, dict] = {}  # host → its mtype message (the others finished training first)
        deadline = time.monotonic() + timeout_testbed_s / self.t.scale + 2
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return pending
            try:
                host, msg = self.fl.mailbox.get(timeout=min(remaining, 0.1))
            except queue.Empty:
                pending -= done
                continue
            if msg["type"] == "_abort":
                raise OperationFailed(f"training ended while waiting for {mtype} for epoch {epoch} from "
                                      f"{', '.join(sorted(pending))}")
            if msg["type"] == mtype and msg.get("epoch") == epoch:
                pending.discard(host)
                self.heard[host] = msg
            pending -= done
        return set()
