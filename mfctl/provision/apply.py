"""Provisioning's apply and verify: each host's planned actions in order (hosts in parallel),
stopping that host at its first failed action; then every host is re-read and re-planned: anything
left is a verification failure. Every action is journalled (start, then done or failed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mfctl.errors import ExitCode
from mfctl.provision.models import FirmwareManifest, ProvisionSpec
from mfctl.provision.plan import Action, HostPlan, plan

if TYPE_CHECKING:
    from mfctl.observer import Observer


@dataclass
class ApplyResult:
    """What apply did on one host: the actions applied in order, the one that failed (``step``,
    ``error``), and what the re-read found left (:func:`verify`)."""

    host: str
    applied: list[dict] = field(default_factory=list)
    failed: dict | None = None
    elapsed_s: float = 0.0
    left: list[dict] = field(default_factory=list)  #: actions the verification still finds
    verify_error: str | None = None  #: the host could not be re-read

    @property
    def error(self) -> str | None:
        return self.failed["error"] if self.failed else self.verify_error

    @property
    def exit_code(self) -> ExitCode:
        """FAILED (1) when an action failed or the verification found anything left (or could not
        read the host), else OK."""
        return ExitCode.FAILED if self.failed or self.left or self.verify_error else ExitCode.OK

    def to_dict(self) -> dict:
        return {"host": self.host, "ok": self.failed is None, "applied": self.applied, "failed": self.failed,
                "elapsed_s": round(self.elapsed_s, 3)}


def apply(pool, plans: list[HostPlan], journal=None, stop=None, *, observer: Observer | None = None) -> list[ApplyResult]:
    """Run each host's actions in order (hosts in parallel); a host stops at its first
    failure. A host with an action that cannot be automated is refused before anything is
    touched. ``stop`` (a threading.Event, set on Ctrl-C) stops every host after its current
    action. Results in the plans' order."""
    by_host = {hp.host: hp for hp in plans}

    def one(host: str) -> ApplyResult:
        return _apply_host(pool, by_host[host], journal, stop)

    return pool.map(list(by_host), one, observer=observer, phase="apply").values()


def verify(pool, inv, spec: ProvisionSpec, manifest: FirmwareManifest | None, results: list[ApplyResult],
           hosts: list[str] | None = None, *, observer: Observer | None = None) -> list[ApplyResult]:
    """Re-read and re-plan every host after :func:`apply`; what is left (or a host that cannot be
    read) goes into its result's ``left`` / ``verify_error``. Returns ``results``."""
    again = {v.host: v for v in plan(pool, inv, spec, manifest, hosts, observer=observer, phase="verify")}
    for r in results:
        v = again.get(r.host)
        if v is not None:
            r.left, r.verify_error = [a.to_dict() for a in v.actions], v.error
    return results


def _run_action(pool, host: str, a: Action) -> str | None:
    """Run an action's commands in order; why it failed, or None."""
    for argv in a.argvs:
        r = pool.run(host, argv)
        if not r.ok:
            return f"{' '.join(argv)}: " + (r.error or f"exit {r.rc}: {(r.stderr or r.stdout).strip()[:300]}")
        if a.expect and argv[0] == "sha256sum" and not r.stdout.startswith(a.expect["sha256"]):
            return f"image checksum mismatch: {r.stdout.split()[0] if r.stdout else '?'} != manifest {a.expect['sha256']}"
    return None


def _apply_host(pool, hp: HostPlan, journal, stop) -> ApplyResult:
    """One host's actions in order, stopping at the first failure (see :func:`apply`)."""
    t0 = time.monotonic()
    res = ApplyResult(hp.host)
    if hp.error:
        res.failed = {"step": "read", "error": hp.error}
        return res
    manual = [a for a in hp.actions if a.manual]
    if manual:
        res.failed = {"step": f"{manual[0].phase}: {manual[0].what} on {manual[0].target}",
                      "error": f"cannot be automated ({manual[0].manual}); nothing was changed on this host"}
        return res
    for a in hp.actions:
        if stop is not None and stop.is_set():
            res.failed = {"step": f"{a.phase}: {a.what} on {a.target}", "error": "interrupted before this step"}
            break
        if journal:
            journal.append("provision.action", host=hp.host, **a.to_dict(), state="start")
        err = a.manual or _run_action(pool, hp.host, a)
        if journal:
            journal.append("provision.action", host=hp.host, phase=a.phase, target=a.target, what=a.what,
                           state="failed" if err else "done", error=err)
        if err:
            res.failed = {"step": f"{a.phase}: {a.what} on {a.target}", "error": err}
            break
        res.applied.append(a.to_dict())
    res.elapsed_s = time.monotonic() - t0
    return res
