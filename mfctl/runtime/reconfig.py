"""The in-training reconfiguration protocol as a small state machine (docs/runtime-protocol.md).

One reconfiguration of one region goes through these phases::

    PROPOSE ─all paused─▶ APPLY ─read back = plan──────────────────────▶ LINKUP ─▶ ROUTES ─all resume─▶ DONE
       │                    ├─DENY the driver answered─▶ READBACK ─────▶ LINKUP       └─resume timeout─▶ FAILED
       │                    └─other failure─▶ ROLLBACK ─ok────────────▶ LINKUP
       │                                         └─fails─▶ READBACK ──▶ LINKUP
       └─drain timeout (cancelled: the OCS is not touched)─▶ ROUTES

APPLY failures: DENY, partial, timeout, lost link, read-back mismatch, unconfirmed read. A DENY
the driver answered carries its word in ``TL1Deny.left`` (it rolled back itself, nothing had
changed, or its rollback failed — then the change stays pending in the OCS journal for
``mfctl ocs recover``, and a second rollback would hide it). READBACK is a fresh confirmed read:
the region runs on the duplex circuits it shows (the other pairs over the EPS); when the OCS
cannot be read, on the circuits the change kept (the driver never touches those), checked by
the link polls.

Each failure is handled in one place (its phase's method) and leaves a :class:`Failure` in the
:class:`Reconfiguration` record; only a resume timeout fails the run (``fatal``). Whatever the
outcome, the workers get ``routes`` for the circuits that are really there and up, and
:attr:`Reconfiguration.ocs_state` is what the OCS holds (a read-back), so the caller's
"last plan" stays true.

Times: ``t_switch_ms``, ``t_verify_ms``, ``t_rollback_ms`` are wall clock (the OCS models physical
time in real time); ``t_drain_ms``, ``t_linkup_ms``, ``t_resume_ms``, ``t_runtime_ms`` are testbed
time (wall × ``scale``).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

from mfctl.errors import MfctlError, OperationFailed, UnreachableError
from mfctl.fabric import mapping
from mfctl.hosts import iproute
from mfctl.ocs.driver import diff as xc_diff

log = logging.getLogger(__name__)


class Phase(str, enum.Enum):
    PROPOSE = "propose"  #: ``propose`` sent; waiting for ``paused`` from every host
    APPLY = "apply"  #: the cross-connect diff on the OCS, read back
    ROLLBACK = "rollback"  #: the apply failed: back to the old cross-connects
    READBACK = "readback"  #: a fresh read decides what is up (after the driver's own rollback, or ours failed)
    LINKUP = "link-up"  #: polling the lanes of the circuits that changed
    ROUTES = "routes"  #: ``routes`` sent; waiting for ``resume`` from every host
    DONE = "done"
    FAILED = "failed"


#: what the region runs on afterwards
OUTCOMES = {
    "applied": "the new plan is on the OCS",
    "rolled-back": "the apply failed; the old circuits were put back (read back)",
    "kept-old": "the apply failed before it changed anything; the old circuits stayed",
    "partial": "the apply and the rollback failed; the region runs on the circuits a fresh read-back shows",
    "unknown": "the OCS could not be read back; the region runs on the circuits the change never touched",
    "cancelled": "not every worker paused in time; the OCS was not touched",
}


class WaitTimeout(OperationFailed):
    """A wait for workers' messages ran out of time (the caller's ``await_all`` may raise it)."""


class Workers(Protocol):
    """The region's runtime workers, as the controller reaches them."""

    def broadcast(self, hosts: list[str], msg: dict) -> list[str]:
        """Send ``msg`` to each host; return the hosts that could not be reached."""

    def await_all(self, hosts: list[str], mtype: str, epoch: int, timeout_testbed_s: float) -> set[str]:
        """Wait until every host (that has not finished training) sent ``mtype`` for ``epoch``,
        handling other messages meanwhile; return the hosts that did not within the timeout
        (testbed seconds). Raises when a worker is lost. A Workers may also keep ``heard`` (host →
        its message) of the last wait: the hosts that sent it, not those skipped as finished."""


class OCS(Protocol):
    def apply(self, desired: dict[int, int], *, reason: str = ""): ...  # -> mfctl.ocs.driver.ApplyResult
    def cross_connects(self) -> dict[int, int]: ...


class OCSDevice:
    """One OCS as the run's regions share it: its ``driver``, a lock held by one region's change
    at a time (APPLY to its read-back: ROLLBACK, READBACK), and ``state``, what it holds as last
    read back (``{input: output}``; None: unknown since a failed read).

    Regions on different OCSes change in parallel; on the same OCS one after the other, each its
    own TL1 change computed from the switch's state at that moment (so a region's change never
    undoes another's, and a DENY or rollback stays the region's). Serialising costs a waiting
    region the switch time of those ahead (41 ms + 0.18 ms per cross-connect each, paper App. C)
    against a link-up of 5.67 s; batching several regions into one change would save that but
    tie their failures together (docs/scale.md)."""

    def __init__(self, name: str, driver, state: dict[int, int] | None):
        self.name, self.driver, self.state = name, driver, state
        self.lock = threading.Lock()
        self.changes = 0  # TL1 changes run through this device by reconfigurations


@dataclass
class LinkWait:
    """The result of waiting for lanes: ``down`` lanes (``host:netdev``) still down at the
    deadline, ``up_at`` (``time.monotonic()`` s) when the last lane was seen up — the midpoint
    of the poll that saw it —, ``polls`` the wall seconds of each poll round, ``errors`` the last
    failed poll per host."""

    down: list[str]
    up_at: float
    polls: list[float] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)


class LinkPoller:
    """Poll ``ip -j link`` on hosts until lanes are up.

    Give it an SSH pool of its own (:class:`mfctl.transport.ssh.SSHPool`): a host's session runs
    one command at a time, so a poll sharing a session with another command (a health sample
    whose ``nvidia-smi`` hangs) would wait for it. Each poll round has a timeout
    (``poll_timeout_s`` wall seconds, at most the time left, at least ``min_poll_timeout_s``); a
    host whose poll fails or times out is polled again at the next round.
    """

    def __init__(self, pool, *, timeout_s: float, interval_s: float, poll_timeout_s: float,
                 min_poll_timeout_s: float = 0.5, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self.pool = pool
        self.timeout_s = timeout_s  # wall seconds for all the lanes to come up
        self.interval_s = interval_s  # wall seconds between poll rounds
        self.poll_timeout_s = poll_timeout_s
        self.min_poll_timeout_s = min_poll_timeout_s
        self.clock, self.sleep = clock, sleep

    @classmethod
    def for_run(cls, pool, *, linkup_timeout_s: float, scale: float, command_timeout_s: float) -> "LinkPoller":
        """A run's poller on ``pool`` (sessions of its own: a poll must not wait behind another
        command — a Slurm poll, a hung tool): ``linkup_timeout_s`` testbed seconds for the lanes,
        a round every 0.25 testbed s, each poll at most ``command_timeout_s`` wall s."""
        timeout_s = linkup_timeout_s / scale
        return cls(pool, timeout_s=timeout_s, interval_s=max(0.005, 0.25 / scale),
                   poll_timeout_s=min(command_timeout_s, max(1.0, timeout_s)))

    def wait(self, circuits: list[mapping.Circuit], *, timeout_s: float | None = None) -> LinkWait:
        """Wait (≤ ``timeout_s`` wall seconds, default :attr:`timeout_s`) until both lanes of
        every circuit are up."""
        want: dict[str, set[str]] = {}
        for c in circuits:
            for lane in (c.a, c.b):
                want.setdefault(lane.host, set()).add(lane.netdev)
        deadline = self.clock() + (self.timeout_s if timeout_s is None else timeout_s)
        out = LinkWait(down=[], up_at=self.clock())
        while want:
            hosts = sorted(want)
            t_sent = self.clock()
            per_poll = max(self.min_poll_timeout_s, min(self.poll_timeout_s, deadline - t_sent))
            results = self.pool.run_many(hosts, lambda h: iproute.link_argv(), timeout=per_poll)
            t_back = self.clock()
            out.polls.append(t_back - t_sent)
            for r in results:
                _take_poll(r, want, out.errors)
            out.up_at = (t_sent + t_back) / 2  # the hosts read their links somewhere inside the poll
            if not want or self.clock() > deadline:
                break
            self.sleep(self.interval_s)
        out.down = sorted(f"{h}:{d}" for h, ds in want.items() for d in ds)
        return out


def _take_poll(r, want: dict[str, set[str]], errors: dict[str, str]) -> None:
    """One host's ``ip -j link`` result: its lanes seen up leave ``want``; a failed poll is kept
    in ``errors`` (until one succeeds)."""
    if not r.ok:
        errors[r.host] = r.error or f"exit {r.rc}: {r.stderr.strip()[:200]}"
        log.info("link poll on %s failed: %s", r.host, errors[r.host])
        return
    try:
        links = iproute.parse_links(r.stdout)
    except MfctlError as e:
        errors[r.host] = str(e)
        log.warning("link poll on %s: %s", r.host, e)
        return
    errors.pop(r.host, None)
    want[r.host] = {d for d in want[r.host] if not (d in links and links[d].up)}
    if not want[r.host]:
        del want[r.host]


@dataclass
class Decision:
    """Why the policy proposed a change, with its figures (testbed s; ``t_plan_ms`` wall ms):
    the planner's ``method``, the predicted gain over the window and cost of reconfiguring, the
    all-to-all objective per micro-batch before and after. Shared by :class:`Proposal` and
    :class:`Reconfiguration` (the record's ``to_dict`` flattens it)."""

    reason: str = "predicted gain > cost"
    method: str = ""
    predicted_gain_s: float = 0.0
    predicted_cost_s: float = 0.0
    objective_before_s: float = 0.0
    objective_after_s: float = 0.0
    t_plan_ms: float = 0.0

    def to_dict(self) -> dict:
        return {"predicted_gain_s": round(self.predicted_gain_s, 4), "predicted_cost_s": round(self.predicted_cost_s, 4),
                "objective_before_s": round(self.objective_before_s, 6),
                "objective_after_s": round(self.objective_after_s, 6)}


@dataclass
class Proposal:
    """What the policy decided for one region: from ``old`` circuits (those in force, of which
    ``routed`` carry traffic) to ``new``. ``ocs_before`` is the whole OCS as last read back
    (``{input: output}``); ``region_ports`` the OCS ports of the region's lanes (cross-connects
    on other ports are left alone)."""

    epoch: int
    region: str
    hosts: list[str]
    lanes: dict[str, list[mapping.LaneRef]]
    iteration: int
    old: list[mapping.Circuit]
    new: list[mapping.Circuit]
    planned: np.ndarray  # the planner's n × n circuit matrix
    ocs_before: dict[int, int]
    region_ports: set[int]
    routed: list[mapping.Circuit] | None = None  # default: every old circuit
    decision: Decision = field(default_factory=Decision)

    def desired(self) -> dict[int, int]:
        """The whole OCS after the change: the region's cross-connects replaced by the new circuits'."""
        out = {i: o for i, o in self.ocs_before.items() if i not in self.region_ports and o not in self.region_ports}
        out.update(mapping.cross_connect_map(self.new))
        return out

    @property
    def keep(self) -> list[mapping.Circuit]:
        """The new circuits that are old ones too (the driver never touches their cross-connects)."""
        return [c for c in self.new if c in self.old]


@dataclass
class Failure:
    phase: str
    error: str

    def to_dict(self) -> dict:
        return {"phase": self.phase, "error": self.error}


@dataclass
class Reconfiguration:
    """The record of one reconfiguration (``to_dict()``: the ``reconfigurations`` entries of
    ``summary.json``, the metrics store's row, the journal's ``reconfig.done``).

    ``circuits`` is the circuit matrix the OCS holds for the region afterwards, ``circuits_routed``
    the circuits whose lanes are up (the routes; other pairs go over the EPS), ``circuits_planned``
    the plan. Phase times in ms (see the module docstring for which clock)."""

    epoch: int
    region: str
    iteration: int
    circuits_planned: list
    decision: Decision = field(default_factory=Decision)
    outcome: str = "applied"  # one of OUTCOMES
    phase: Phase = Phase.PROPOSE  # the phase reached (DONE, or FAILED)
    failures: list[Failure] = field(default_factory=list)
    fatal: str | None = None  # the run cannot go on (a worker that did not resume)
    xc_added: int = 0
    xc_removed: int = 0
    t_drain_ms: float = 0.0
    t_switch_ms: float = 0.0
    t_verify_ms: float = 0.0
    t_rollback_ms: float = 0.0
    t_linkup_ms: float = 0.0
    t_resume_ms: float = 0.0
    lanes_down: list[str] = field(default_factory=list)
    ocs_matches_plan: bool | None = None  # the OCS read back equals the plan
    ocs_matches_before: bool | None = None  # ... equals what it held before
    phases: list[tuple[str, float]] = field(default_factory=list)  # (phase, wall ms since the start)
    ocs: str = ""  # the OCS (OCSDevice.name) the region's lanes reach
    t_ocs_wait_ms: float = 0.0  # wall ms waiting for the OCS while another region's change held it
    t_decision_to_resume_ms: float = 0.0  # wall ms from the policy's decision to every host resumed
    #: the change was made on the OCS but no iteration ran on it: training ended (or the run stopped)
    #: before the workers resumed on it, or they resumed after the last iteration
    never_resumed: bool = False
    resumed_iteration: int | None = None  # the iteration after which the last host resumed on it
    # not serialised: for the caller
    in_force: list[mapping.Circuit] = field(default_factory=list, repr=False)  # on the OCS now
    routed: list[mapping.Circuit] = field(default_factory=list, repr=False)  # ... and with lanes up
    ocs_state: dict[int, int] | None = field(default=None, repr=False)  # the OCS read back; None: unknown
    hosts: list[str] = field(default_factory=list, repr=False)

    @classmethod
    def start(cls, p: Proposal) -> "Reconfiguration":
        """The record of ``p`` before its first phase: the OCS holds ``ocs_before``, the old
        circuits are in force."""
        return cls(epoch=p.epoch, region=p.region, iteration=p.iteration, circuits_planned=np.asarray(p.planned).tolist(),
                   decision=p.decision, hosts=list(p.hosts), in_force=list(p.old),
                   routed=list(p.routed if p.routed is not None else p.old), ocs_state=dict(p.ocs_before))

    @property
    def t_runtime_ms(self) -> float:
        """Drain + resume, testbed ms (the runtime's share), as the records round it."""
        return round(self.t_drain_ms + self.t_resume_ms, 1)

    @property
    def t_total_s(self) -> float:
        """Drain + switch + link-up + resume, testbed-ish seconds (the policy's expected cost)."""
        return (self.t_switch_ms + self.t_linkup_ms + self.t_drain_ms + self.t_resume_ms) / 1000

    @property
    def error(self) -> str | None:
        return self.failures[0].error if self.failures else None

    @property
    def ok(self) -> bool:
        return self.outcome == "applied" and not self.failures and not self.lanes_down and not self.never_resumed

    @property
    def ocs_needs_recovery(self) -> bool:
        """The OCS holds neither the old nor the new plan (or could not be read): ``mfctl ocs recover``."""
        return self.outcome in ("partial", "unknown")

    def to_dict(self) -> dict:
        mat = mapping.circuit_matrix(self.in_force, self.hosts).tolist() if self.hosts else self.circuits_planned
        routed = mapping.circuit_matrix(self.routed, self.hosts).tolist() if self.hosts else None
        dec = self.decision
        return {"epoch": self.epoch, "region": self.region, "iteration": self.iteration, "reason": dec.reason,
                "circuits": mat, "circuits_planned": self.circuits_planned, "circuits_routed": routed,
                "outcome": self.outcome, "error": self.error, "failures": [f.to_dict() for f in self.failures],
                "xc_added": self.xc_added, "xc_removed": self.xc_removed,
                "t_plan_ms": round(dec.t_plan_ms, 3), "t_drain_ms": round(self.t_drain_ms, 1),
                "t_switch_ms": round(self.t_switch_ms, 2), "t_verify_ms": round(self.t_verify_ms, 2),
                "t_rollback_ms": round(self.t_rollback_ms, 2), "t_linkup_ms": round(self.t_linkup_ms, 1),
                "t_resume_ms": round(self.t_resume_ms, 1), "t_runtime_ms": self.t_runtime_ms,
                **dec.to_dict(), "lanes_failed": len(self.lanes_down), "lanes_down": self.lanes_down, "method": dec.method,
                "ocs_matches_plan": self.ocs_matches_plan, "ocs_needs_recovery": self.ocs_needs_recovery,
                "phases": [[p, round(t, 3)] for p, t in self.phases], "ocs": self.ocs,
                "t_ocs_wait_ms": round(self.t_ocs_wait_ms, 2),
                "t_decision_to_resume_ms": round(self.t_decision_to_resume_ms, 1),
                "never_resumed": self.never_resumed, "resumed_iteration": self.resumed_iteration}

    def describe(self) -> str | None:
        """One sentence for the operator when it did not go as planned (None when it did)."""
        if self.outcome == "applied" and self.never_resumed:
            why = "; ".join(f"{f.phase}: {f.error}" for f in self.failures)
            return (f"epoch {self.epoch} ({self.region}, iteration {self.iteration}): applied to the OCS but never "
                    f"resumed on: training ended first (link-up {self.t_linkup_ms / 1000:.2f} s), no iteration ran on "
                    f"the new circuits" + (f" ({why})" if why else ""))
        if self.outcome == "applied" and all(f.phase == Phase.LINKUP.value for f in self.failures):
            return None  # (lanes that did not come up are said on their own)
        e = f"epoch {self.epoch} ({self.region}, iteration {self.iteration})"
        why = "; ".join(f"{f.phase}: {f.error}" for f in self.failures)
        n = len(self.routed)
        if self.phase is Phase.FAILED:
            return f"{e}: reconfiguration stopped ({why}); {OUTCOMES[self.outcome]}"
        return {
            "applied": f"{e}: the OCS holds the new plan after all ({why})",
            "rolled-back": f"{e}: reconfiguration failed ({why}); rolled back to the old circuits, training "
                           f"continued on them ({n} routed)",
            "kept-old": f"{e}: reconfiguration failed ({why}); the OCS still held the old circuits, training "
                        f"continued on them ({n} routed)",
            "partial": f"{e}: reconfiguration failed and so did its rollback ({why}); the OCS holds neither plan: "
                       f"training continued on the {n} circuits that are up (the other pairs over the EPS)",
            "unknown": f"{e}: reconfiguration failed and the OCS could not be read back ({why}); training "
                       f"continued on the {n} circuits the change did not touch (the other pairs over the EPS)",
            "cancelled": f"{e}: reconfiguration cancelled ({why}); the OCS was not touched, training continued "
                         f"on the old circuits",
        }[self.outcome]


class Reconfigurator:
    """Runs :class:`Proposal`\\ s through the phases. ``drain_timeout_s`` and ``resume_timeout_s``
    are testbed seconds, ``scale`` the time scale (testbed seconds per wall second). ``journal``
    is called as ``journal(op, **fields)`` (``reconfig.propose``, ``reconfig.failure``,
    ``reconfig.done``); ``guard`` is a context manager around OCS changes (deferring signals:
    never half-applied by a Ctrl-C).

    ``device`` (an :class:`OCSDevice` whose driver is ``ocs``): the OCS is shared with other
    regions changing concurrently. Its lock is then held from APPLY to the read-back that ends
    it (never during LINKUP or the workers' waits), the proposal's ``ocs_before`` is taken from
    :attr:`OCSDevice.state` under it — the other regions' latest changes included — and the
    state is left as this change read it back."""

    def __init__(self, ocs: OCS, workers: Workers, links: LinkPoller, *, scale: float = 1.0,
                 drain_timeout_s: float = 60.0, resume_timeout_s: float = 60.0,
                 journal: Callable[..., object] | None = None,
                 guard: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
                 clock: Callable[[], float] = time.monotonic, device: OCSDevice | None = None):
        self.device, self._held = device, False
        self.ocs, self.workers, self.links = ocs, workers, links
        self.scale = scale
        self.drain_timeout_s, self.resume_timeout_s = drain_timeout_s, resume_timeout_s
        self.journal = journal or (lambda op, **kw: None)
        self.guard = guard
        self.clock = clock
        self.rec: Reconfiguration | None = None  # the one under way, or the last one
        self.p: Proposal | None = None  # ... and its proposal
        self.keep: list[mapping.Circuit] = []  # circuits the change keeps
        self.touched: list[mapping.Circuit] = []  # circuits whose lanes went dark: to poll
        self._apply_left: str | None = None  # the driver's word on a failed apply (TL1Deny.left)
        self._apply_chain: dict | None = None  # the failed change, for a rollback in its chain
        self._t0 = 0.0

    # ---------------------------------------------------------------------------------------
    def run(self, p: Proposal) -> Reconfiguration:
        """Run one reconfiguration to ``DONE`` (or ``FAILED``: ``fatal`` says why). Raises only
        what ``Workers.await_all`` raises (a lost worker) and KeyboardInterrupt; :attr:`rec` then
        holds the record so far (journalled), its ``ocs_state`` what the OCS holds."""
        self.p = p
        self.rec = Reconfiguration.start(p)
        self.keep = p.keep
        self._apply_left = self._apply_chain = None
        self.touched = []
        self._t0 = self.clock()
        self.journal("reconfig.propose", epoch=p.epoch, region=p.region, iteration=p.iteration,
                     circuits=np.asarray(p.planned).tolist(), predicted_gain_s=p.decision.predicted_gain_s,
                     predicted_cost_s=p.decision.predicted_cost_s)
        handlers = {Phase.PROPOSE: self._propose, Phase.APPLY: self._apply, Phase.ROLLBACK: self._rollback,
                    Phase.READBACK: self._readback, Phase.LINKUP: self._linkup, Phase.ROUTES: self._routes}
        phase = Phase.PROPOSE
        if self.device is not None:
            self.rec.ocs = self.device.name
        try:
            while phase not in (Phase.DONE, Phase.FAILED):
                if phase is Phase.APPLY:
                    phase = self._hold_device()
                elif phase in (Phase.LINKUP, Phase.ROUTES):
                    self._release_device()
                self.rec.phases.append((phase.value, (self.clock() - self._t0) * 1000))
                phase = handlers[phase]()
        except BaseException as e:  # Ctrl-C, a lost worker: the record says where it stopped (and what the OCS holds)
            self._release_device()
            self.rec.never_resumed = phase in (Phase.LINKUP, Phase.ROUTES)  # (the OCS changed; no resume came)
            self._fail(phase, "interrupted" if isinstance(e, KeyboardInterrupt) else _describe(e))
            self.rec.phase = Phase.FAILED
            self.rec.fatal = self.rec.fatal or self.rec.failures[-1].error
            self.journal("reconfig.done", **self.rec.to_dict())
            raise
        self.rec.phase = phase
        self.rec.phases.append((phase.value, (self.clock() - self._t0) * 1000))
        self.journal("reconfig.done", **self.rec.to_dict())
        return self.rec

    def _hold_device(self) -> Phase:
        """Take the shared OCS (waiting for another region's change on it) and base the proposal
        on what it holds now: APPLY, or READBACK when that is unknown and cannot be read."""
        dev, p = self.device, self.p
        if dev is None:
            return Phase.APPLY
        t0 = self.clock()
        dev.lock.acquire()
        self._held = True
        self.rec.t_ocs_wait_ms = (self.clock() - t0) * 1000
        if dev.state is None:  # unknown since a failed change (this region's or another's): read it first
            try:
                dev.state = self.ocs.cross_connects()
            except (OperationFailed, UnreachableError) as e:
                self._fail(Phase.APPLY, f"the OCS's state is unknown and could not be read: {_describe(e)}")
                return Phase.READBACK
        p.ocs_before = dict(dev.state)
        self.rec.ocs_state = dict(dev.state)
        dev.changes += 1
        return Phase.APPLY

    def _release_device(self) -> None:
        """Leave the shared OCS as this change read it back (None: unknown)."""
        if self.device is None or not self._held:
            return
        self.device.state = None if self.rec.ocs_state is None else dict(self.rec.ocs_state)
        self._held = False
        self.device.lock.release()

    def _fail(self, phase: Phase, error: str) -> None:
        self.rec.failures.append(Failure(phase.value, error))
        log.warning("reconfiguration epoch %d (%s): %s failed: %s", self.p.epoch, self.p.region, phase.value, error)
        self.journal("reconfig.failure", epoch=self.p.epoch, region=self.p.region, phase=phase.value, error=error)

    def _testbed_ms(self, since: float) -> float:
        return (self.clock() - since) * 1000 * self.scale

    # --- phases: each returns the next ----------------------------------------------------
    def _propose(self) -> Phase:
        p = self.p
        t0 = self.clock()
        C_keep = mapping.circuit_matrix(self.keep, p.hosts)
        self.workers.broadcast(p.hosts, {"type": "propose", "epoch": p.epoch, "keep_circuits": C_keep.tolist(),
                                         "circuits": np.asarray(p.planned).tolist()})
        missing = self.workers.await_all(p.hosts, "paused", p.epoch, self.drain_timeout_s)
        self.rec.t_drain_ms = self._testbed_ms(t0)
        if missing:
            self._fail(Phase.PROPOSE, f"no paused from {', '.join(sorted(missing))} within drain_timeout_s "
                                      f"{self.drain_timeout_s:g} s")
            self.rec.outcome = "cancelled"
            self.rec.ocs_matches_plan = self.rec.ocs_state == p.desired()
            return Phase.ROUTES  # the paused ones go back to the old routes; the OCS is left alone
        return Phase.APPLY

    def _apply(self) -> Phase:
        p = self.p
        desired = p.desired()
        d = xc_diff(p.ocs_before, desired)
        self.rec.xc_added, self.rec.xc_removed = len(d.add), len(d.delete)
        t0 = self.clock()
        res = None
        try:
            with self.guard():
                res = self.ocs.apply(desired, reason=f"epoch {p.epoch}")
        except KeyboardInterrupt:  # held while the change ran, raised when it was done: the OCS holds it
            if res is not None:
                self._settle("applied", dict(res.readback), list(p.new))
            raise
        except (OperationFailed, UnreachableError) as e:  # DENY, partial, timeout, link lost, read-back mismatch
            self.rec.t_switch_ms = (self.clock() - t0) * 1000
            self._fail(Phase.APPLY, _describe(e))
            # the driver's word on a DENY: it rolled back itself ("rolled-back"), nothing had changed
            # ("unchanged"), or its rollback failed ("unknown") — then the change stays pending in the
            # OCS journal for `mfctl ocs recover`, and a rollback of ours would hide it
            self._apply_left = getattr(e, "left", None)
            self._apply_chain = getattr(e, "chain", None)  # the failed change, for a rollback in its chain
            return Phase.READBACK if self._apply_left else Phase.ROLLBACK
        self.rec.t_switch_ms, self.rec.t_verify_ms = res.t_switch_ms, res.t_verify_ms
        self.rec.xc_added, self.rec.xc_removed = len(res.diff.add), len(res.diff.delete)
        self._settle("applied", dict(res.readback), list(p.new))
        return self._announce()

    def _rollback(self) -> Phase:
        p = self.p
        t0 = self.clock()
        res = None
        try:
            with self.guard():
                if self._apply_chain:  # the driver's failed change: undone in its journal chain, recover sees it whole
                    res = self.ocs.revert(self._apply_chain, reason=f"epoch {p.epoch} rollback")
                else:
                    res = self.ocs.apply(p.ocs_before, reason=f"epoch {p.epoch} rollback")
        except KeyboardInterrupt:
            if res is not None:
                self._settle("kept-old" if res.diff.empty else "rolled-back", dict(res.readback), list(p.old))
            raise
        except (OperationFailed, UnreachableError) as e:
            self.rec.t_rollback_ms = (self.clock() - t0) * 1000
            self._fail(Phase.ROLLBACK, _describe(e))
            return Phase.READBACK
        self.rec.t_rollback_ms = (self.clock() - t0) * 1000
        # nothing to change: the switch held the old cross-connects still
        self._settle("kept-old" if res.diff.empty else "rolled-back", dict(res.readback), list(p.old))
        return self._announce()

    def _readback(self) -> Phase:
        p = self.p
        try:
            rb = self.ocs.cross_connects()
        except (OperationFailed, UnreachableError) as e:
            self._fail(Phase.READBACK, _describe(e))
            # the driver never touches a cross-connect that is kept, so the kept circuits are the
            # ones to trust — and the link polls check them
            self.rec.outcome = "unknown"
            self.rec.ocs_state = None
            self.rec.in_force = list(self.keep)
            self.touched = list(self.keep)
            return self._announce()
        if rb == p.desired():
            self._settle("applied", rb, list(p.new))
        elif rb == p.ocs_before:
            self._settle("rolled-back" if self._apply_left == "rolled-back" else "kept-old", rb, list(p.old))
        else:
            self._settle("partial", rb, _known(mapping.circuits_from_cross_connects(p.lanes, rb), p.old + p.new))
        return self._announce()

    def _settle(self, outcome: str, readback: dict[int, int], in_force: list[mapping.Circuit]) -> None:
        """The OCS now holds ``readback``; the region's circuits on it are ``in_force``."""
        p = self.p
        self.rec.outcome = outcome
        self.rec.ocs_state = readback
        self.rec.ocs_matches_plan = readback == p.desired()
        self.rec.in_force = in_force
        # lanes that went dark: every circuit in force that the change did not keep
        self.touched = [c for c in in_force if c not in self.keep]

    def _announce(self) -> Phase:
        self.workers.broadcast(self.p.hosts, {"type": "applied", "epoch": self.p.epoch,
                                              "t_switch_ms": round(self.rec.t_switch_ms, 3),
                                              "outcome": self.rec.outcome})
        return Phase.LINKUP

    def _linkup(self) -> Phase:
        t1 = self.clock()
        lw = self.links.wait(self.touched) if self.touched else LinkWait(down=[], up_at=t1)
        self.rec.t_linkup_ms = max(0.0, (lw.up_at - t1) * 1000 * self.scale)
        self.rec.lanes_down = lw.down
        down = set(lw.down)
        before = self.rec.routed
        # a circuit carries traffic when its lanes are up: polled now, or routed before and untouched
        self.rec.routed = [c for c in self.rec.in_force
                           if not {f"{c.a.host}:{c.a.netdev}", f"{c.b.host}:{c.b.netdev}"} & down
                           and (c in self.touched or c in before)]
        if lw.down:
            slowest = max(lw.polls) * 1e3 if lw.polls else 0.0
            errs = "; ".join(f"{h}: {e}" for h, e in sorted(lw.errors.items()))
            self._fail(Phase.LINKUP, f"lanes did not come up: {', '.join(lw.down)} — their pairs use the EPS "
                                     f"({len(lw.polls)} polls, slowest {slowest:.0f} ms wall"
                                     + (f"; poll errors: {errs}" if errs else "") + ")")
        return Phase.ROUTES

    def _routes(self) -> Phase:
        p = self.p
        t2 = self.clock()
        C_use = mapping.circuit_matrix(self.rec.routed, p.hosts)
        self.workers.broadcast(p.hosts, {"type": "routes", "epoch": p.epoch, "circuits": C_use.tolist(),
                                         "routes": mapping.route_table(self.rec.routed, p.hosts)})
        missing = self.workers.await_all(p.hosts, "resume", p.epoch, self.resume_timeout_s)
        self.rec.t_resume_ms = self._testbed_ms(t2)
        heard = getattr(self.workers, "heard", None)  # who resumed (the others had finished training)
        if heard is not None and not missing:
            its = [m.get("iteration") for m in heard.values()]
            self.rec.resumed_iteration = max((i for i in its if isinstance(i, int)), default=None)
            self.rec.never_resumed = not heard  # every host finished training before the routes came
        if missing:
            msg = (f"no resume for epoch {p.epoch} from {', '.join(sorted(missing))} within resume_timeout_s "
                   f"{self.resume_timeout_s:g} s")
            self._fail(Phase.ROUTES, msg)
            self.rec.fatal = msg
            return Phase.FAILED
        return Phase.DONE


# --- after a failed reconfiguration: what the OCS holds, what to tell the operator --------------
def reread_ocs(ocs: OCS, regions, journal: Callable[..., object], endpoint: str = "") -> dict[int, int] | None:
    """Read the OCS again after it could not be read; its cross-connects, or None when it still
    cannot be read. Each region (:class:`mfctl.runtime.plan.RegionState`) then holds the circuits
    the read shows; a circuit new to us carries no traffic until polled up."""
    try:
        rb = ocs.cross_connects()
    except (OperationFailed, UnreachableError) as e:
        log.warning("OCS still unreadable: %s", e)
        return None
    for reg in regions:
        found = mapping.circuits_from_cross_connects(reg.lanes, rb)
        routed = reg.in_use
        reg.circuits = _known(found, reg.circuits)
        reg.routed = [c for c in reg.circuits if c in routed]
    journal("ocs.state", endpoint=endpoint, cross_connects=sorted(rb.items()), reread=True)
    return rb


def recovery_hint(reconfigs: list[Reconfiguration], journal_records: Callable[[], list[dict]], inventory: str,
                  ocses: int = 1) -> list[str]:
    """The warnings to run ``mfctl ocs recover`` — one per OCS whose last reconfiguration (not
    cancelled) left it differing from its plan with that change still pending in the run's journal
    (``journal_records()``, that OCS's records, as ``ocs recover`` finds them: a later change on the
    same switch supersedes it). With several OCSes in the inventory (``ocses``) the command names
    the switch (``--ocs NAME``: without it ``ocs recover`` is a usage error there)."""
    import shlex

    from mfctl.ocs.driver import pending_apply

    last_by_ocs: dict[str, Reconfiguration] = {}
    for r in reconfigs:
        if r.outcome != "cancelled":
            last_by_ocs[r.ocs] = r
    hints = []
    records: list[dict] | None = None
    for name, last in last_by_ocs.items():
        if not last.ocs_needs_recovery:
            continue
        try:
            if records is None:
                records = [r for r in journal_records() if str(r.get("op", "")).startswith("ocs.")]
            mine = records if ocses <= 1 or not name else [r for r in records if r.get("ocs") in (name, None)]
            pend = pending_apply(mine)
        except (OSError, ValueError) as e:
            log.warning("run journal not readable for the recovery hint: %s", e)
            pend = {"reason": f"epoch {last.epoch}"}
        if pend is None:
            continue
        which = f" --ocs {name}" if ocses > 1 and name else ""
        on = f"OCS {name}" if ocses > 1 and name else "the OCS"
        hints.append(f"{on} was left differing from the plan by epoch {last.epoch} ({last.outcome}; change "
                     f"{pend.get('reason')!r} unfinished): run `mfctl ocs recover -i {shlex.quote(inventory)}{which}` "
                     "after the run to finish it, or with --rollback to undo it")
    return hints


def _known(found: list[mapping.Circuit], known: list[mapping.Circuit]) -> list[mapping.Circuit]:
    """Circuits recovered from a read-back, as the same objects as the known ones that join the
    same two lanes (a read-back does not know which end is ``a``)."""
    by_lanes = {frozenset((c.a.key, c.b.key)): c for c in known}
    return [by_lanes.get(frozenset((c.a.key, c.b.key)), c) for c in found]


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"
