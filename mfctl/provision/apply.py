"""Provisioning's apply and verify: each host's planned actions in order (hosts in parallel),
stopping that host at its first failed action; after a host's last firmware reset (``mlxfwreset``:
the driver restart recreates the netdevs, so MTU, addresses and QoS set before it are gone and a
re-split port's names differ) the host is re-read and re-planned and the fresh post-reset actions
run instead of the ones planned before it. Then every host is re-read and re-planned: anything left
is a verification failure, and a host that cannot be re-read is *not verified* (exit 4), never
verified. Every action is journalled (start, then done or failed), and so is every re-plan.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mfctl.errors import ExitCode
from mfctl.provision.models import FirmwareManifest, ProvisionSpec
from mfctl.provision.plan import PHASES, Action, HostPlan, plan

if TYPE_CHECKING:
    from mfctl.observer import Observer

#: the phases a firmware reset undoes or makes possible: re-planned after the host's last reset
POST_RESET = PHASES[PHASES.index("firmware-reset") + 1:]


@dataclass
class ApplyResult:
    """What apply did on one host: the actions applied in order, the one that failed (``step``,
    ``error``), whether it was verified, what the re-read found left (:func:`verify`) or why the
    host could not be re-read (``verify_error``), and ``skipped``: why it was not touched at all
    (an earlier rollout batch failed, the management NIC guard, a Slurm drain that did not finish)."""

    host: str
    applied: list[dict] = field(default_factory=list)
    failed: dict | None = None
    elapsed_s: float = 0.0
    left: list[dict] = field(default_factory=list)  #: actions the verification still finds
    verify_error: str | None = None  #: the host could not be re-read
    verified: bool = False  #: re-read after apply and nothing left
    skipped: str | None = None  #: never started, and why
    replans: int = 0  #: re-plans after a firmware reset
    notes: list[str] = field(default_factory=list)  #: drain/resume and the like, for people
    outcomes: list[str] = field(default_factory=list)  #: the findings reported (:attr:`Action.outcome`), as data

    @property
    def error(self) -> str | None:
        return self.skipped or (self.failed["error"] if self.failed else self.verify_error)

    @property
    def ok(self) -> bool:
        """Applied without failure and verified (nothing left)."""
        return self.skipped is None and self.failed is None and self.verified

    @property
    def exit_code(self) -> ExitCode:
        """UNREACHABLE (4) when the host could not be read before apply or re-read after it (not
        verified), FAILED (1) when an action failed, anything is left after verify or the host was
        skipped, else OK."""
        if self.verify_error or (self.failed and self.failed.get("step") == "read"):
            return ExitCode.UNREACHABLE
        return ExitCode.OK if self.ok else ExitCode.FAILED

    def to_dict(self) -> dict:
        return {"host": self.host, "ok": self.ok, "verified": self.verified, "verify_error": self.verify_error,
                "skipped": self.skipped, "applied": self.applied, "failed": self.failed, "replans": self.replans,
                "notes": self.notes, "elapsed_s": round(self.elapsed_s, 3)}


#: ``replan(host) -> HostPlan``: re-read one host and plan it afresh (after a firmware reset)
Replan = Callable[[str], HostPlan]
#: ``on_step(host, index, total, action)``: a host starts an action (progress)
OnStep = Callable[[str, int, int, Action], None]


def apply(pool, plans: list[HostPlan], journal=None, stop=None, *, observer: Observer | None = None,
          replan: Replan | None = None, on_step: OnStep | None = None) -> list[ApplyResult]:
    """Run each host's actions in order (hosts in parallel); a host stops at its first
    failure. A host with an action that cannot be automated is refused before anything is
    touched. ``stop`` (a threading.Event, set on Ctrl-C) stops every host after its current
    action. ``replan``: after a host's last ``firmware-reset`` action, its post-reset actions are
    planned afresh from a re-read (:func:`replanner`). Results in the plans' order."""
    by_host = {hp.host: hp for hp in plans}

    def one(host: str) -> ApplyResult:
        return _apply_host(pool, by_host[host], journal, stop, replan, on_step)

    return pool.map(list(by_host), one, observer=observer, phase="apply").values()


def replanner(pool, inv, spec: ProvisionSpec, manifest: FirmwareManifest | None) -> Replan:
    """A :data:`Replan` for ``inv``'s hosts: :func:`mfctl.provision.plan.read_actual` and
    :func:`~mfctl.provision.plan.plan_host`, a read failure as the plan's ``error``."""
    from mfctl.errors import MfctlError
    from mfctl.provision import plan as plan_mod

    def again(host: str) -> HostPlan:
        index = {h.name: i for i, h in enumerate(inv.hosts)}
        h = inv.host(host)
        try:
            act = plan_mod.read_actual(pool, h)
        except MfctlError as e:
            return HostPlan(host, error=str(e))
        return HostPlan(host, plan_mod.plan_host(inv, index[host], h, spec, manifest, act))

    return again


def _irqbalance_pass(spec: ProvisionSpec, results: list[ApplyResult]) -> float:
    """Seconds to wait before the verify's re-read: one irqbalance pass (``irq.irqbalance_interval_s``)
    where IRQs were pinned beside a running irqbalance (``irq.irqbalance: report``) — read at once, the
    pinning is still there and would be called verified, then irqbalance moves it; else 0. The read
    that decides "verified" is the one after the pass."""
    from mfctl.provision.steps.irq import OUTCOME_IRQBALANCE

    pinned = any(OUTCOME_IRQBALANCE in r.outcomes and any(a.get("phase") == "irq" and a.get("what") == "IRQ affinity"
                                                          for a in r.applied) for r in results)
    return spec.irq.irqbalance_interval_s if pinned else 0.0


def verify(pool, inv, spec: ProvisionSpec, manifest: FirmwareManifest | None, results: list[ApplyResult],
           hosts: list[str] | None = None, *, observer: Observer | None = None) -> list[ApplyResult]:
    """Re-read and re-plan every host after :func:`apply` (not the skipped ones); what is left goes
    into its result's ``left``, a host that cannot be re-read gets ``verify_error`` (and is not
    verified); ``verified`` only when the re-read found nothing left. Returns ``results``."""
    names = [r.host for r in results if r.skipped is None and (hosts is None or r.host in hosts)]
    wait = _irqbalance_pass(spec, [r for r in results if r.host in names])
    if wait:
        if observer is not None:
            observer.phase("verify", f"waiting {wait:g} s, one irqbalance pass, before reading the pinned IRQs back")
        time.sleep(wait)
    again = {v.host: v for v in plan(pool, inv, spec, manifest, names, observer=observer, phase="verify")} if names else {}
    for r in results:
        v = again.get(r.host)
        if v is None:
            continue
        # a finding (not supported on this card, no pinned image) is reported by plan, not left to do
        r.left, r.verify_error = [a.to_dict() for a in v.actions if a.is_drift], v.error
        r.verified = v.error is None and not r.left
    return results


def _run_action(pool, host: str, a: Action) -> str | None:
    """Run an action's commands in order, each under the action's own timeout (``a.timeout_s``: a
    firmware burn or reset outlasts the per-command one; None: the pool's); why it failed, or None.
    An outcome (:attr:`Action.outcome`: a finding, a reboot for a person) runs nothing."""
    if not a.runs:
        return None
    for argv in a.argvs:
        r = pool.run(host, argv, timeout=a.timeout_s)
        if not r.ok:
            return f"{' '.join(argv)}: " + (r.error or f"exit {r.rc}: {(r.stderr or r.stdout).strip()[:300]}")
        if a.expect and argv[0] == "sha256sum" and not r.stdout.startswith(a.expect["sha256"]):
            return f"image checksum mismatch: {r.stdout.split()[0] if r.stdout else '?'} != manifest {a.expect['sha256']}"
    return None


def _step(a: Action) -> str:
    return f"{a.phase}: {a.what} on {a.target}"


def _apply_host(pool, hp: HostPlan, journal, stop, replan: Replan | None = None,
                on_step: OnStep | None = None) -> ApplyResult:
    """One host's actions in order, stopping at the first failure (see :func:`apply`)."""
    t0 = time.monotonic()
    res = ApplyResult(hp.host)
    if hp.error:
        res.failed = {"step": "read", "error": hp.error}
        return res
    manual = [a for a in hp.actions if a.manual]
    if manual:
        res.failed = {"step": _step(manual[0]),
                      "error": f"cannot be automated ({manual[0].manual}); nothing was changed on this host"}
        return res
    todo = list(hp.actions)
    i = 0
    while i < len(todo):
        a = todo[i]
        if not a.runs:  # an outcome (a finding, a reboot for a person): reported, never run, not "applied"
            res.notes.append(f"{a.target}: {a.after}" if a.what == a.target else f"{a.target}: {a.what}: {a.after}")
            if a.outcome:
                res.outcomes.append(a.outcome)
            i += 1
            continue
        if stop is not None and stop.is_set():
            res.failed = {"step": _step(a), "error": "interrupted before this step"}
            break
        if on_step is not None:
            on_step(hp.host, i + 1, len(todo), a)
        if journal:
            journal.append("provision.action", host=hp.host, **a.to_dict(), state="start")
        err = a.manual or _run_action(pool, hp.host, a)
        if journal:
            journal.append("provision.action", host=hp.host, phase=a.phase, target=a.target, what=a.what,
                           state="failed" if err else "done", error=err)
        if err:
            res.failed = {"step": _step(a), "error": err}
            break
        res.applied.append(a.to_dict())
        i += 1
        last_reset = not any(b.phase == "firmware-reset" and b.runs for b in todo[i:])
        if a.phase == "firmware-reset" and replan is not None and last_reset:
            fresh = _replan_after_reset(hp.host, replan, journal, [b for b in todo[i:]])
            res.replans += 1
            if isinstance(fresh, dict):
                res.failed = fresh
                break
            todo = todo[:i] + fresh
    res.elapsed_s = time.monotonic() - t0
    return res


def _replan_after_reset(host: str, replan: Replan, journal, planned: list[Action]) -> list[Action] | dict:
    """The host's post-reset actions planned afresh from a re-read (the netdevs the driver restart
    recreated, by the names they have now), or the failure (a dict as ``ApplyResult.failed``):
    the host could not be re-read, or it still needs firmware work the reset should have done."""
    hp = replan(host)
    if hp.error:
        err = {"step": "re-read after the firmware reset", "error": f"{host}: could not be re-read after mlxfwreset: {hp.error}"}
        if journal:
            journal.append("provision.replan", host=host, state="failed", error=err["error"])
        return err
    before = [b for b in hp.actions if b.phase not in POST_RESET and b.runs]  # findings stay: nothing to do
    fresh = [b for b in hp.actions if b.phase in POST_RESET]
    if journal:
        journal.append("provision.replan", host=host, state="done", reason="after the host's last firmware reset",
                       planned_before=[_step(b) for b in planned], planned_now=[_step(b) for b in fresh],
                       still_before_reset=[_step(b) for b in before])
    if before:
        return {"step": "re-plan after the firmware reset",
                "error": f"{host}: after mlxfwreset the host still needs {'; '.join(_step(b) for b in before)[:400]} "
                         "(the reset did not make the firmware change active: a cold reboot may be needed)"}
    return fresh
