"""The run summary: :class:`RunSummary`, the one owner of the ``mfctl.run.summary/v1`` schema.

``runs/<run-id>/summary.json``, ``mfctl run --json``, ``mfctl runs show``, the metrics store's
``run.summary_json``, the runs index, the HTML report and the Prometheus ``_info`` read it; only
this module writes or parses its keys (:meth:`RunSummary.to_dict`, :meth:`RunSummary.from_dict`).

Two kinds share the schema: a run of ``mfctl run`` (:meth:`RunSummary.of_run`) and a training
log turned into a run (``mfctl runs import-log``: ``inventory`` is :data:`TRAINING_LOG`, and it
has ``logged_lines``, ``tflops_per_gpu_mean``, ``skipped_iterations`` and ``note`` instead of the
launch, FSMoE, prediction, initial-topology and OCS keys). Times: ``iteration_time_s``,
``simulated_train_s`` testbed seconds; ``wall_train_s`` wall seconds; reconfiguration phase times
in ms (:mod:`mfctl.runtime.reconfig`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from mfctl.runtime.plan import RegionState
    from mfctl.runtime.playbook import Playbook
    from mfctl.runtime.reconfig import Reconfiguration

SCHEMA = "mfctl.run.summary/v1"
TRAINING_LOG = "(training log)"  #: the ``inventory`` of an imported training log
PHASE_KEYS = ("t_switch_ms", "t_linkup_ms", "t_runtime_ms")  #: averaged in ``reconfiguration_means``

# the keys of each kind, in the order summary.json has always had them
_HEAD = ("schema", "run_id", "status", "error", "playbook", "inventory", "run_dir", "time_scale")
_RUN = _HEAD + ("launcher", "slurm_job", "fsmoe", "iterations", "iterations_planned", "iteration_time_s",
                "tokens_per_s", "iteration_time_by_epoch_s", "tokens", "simulated_train_s", "wall_train_s",
                "ep_inter_server_bytes", "ep_bytes_on_circuits", "ep_share_on_circuits", "reconfigurations",
                "warnings", "prediction_rel_error", "health", "initial_topology")
_RUN_OPTIONAL = ("ocs", "reconfiguration_means", "reconfigurations_failed")  # only when there is something to say
_LOG = _HEAD + ("iterations", "iterations_planned", "tokens", "logged_lines", "iteration_time_s", "tokens_per_s",
                "tflops_per_gpu_mean", "skipped_iterations", "simulated_train_s", "wall_train_s",
                "reconfigurations", "health", "ep_inter_server_bytes", "ep_bytes_on_circuits",
                "ep_share_on_circuits", "note")


def rounded(x, nd: int = 4) -> float | None:
    """``x`` as a float rounded to ``nd`` places (None stays None): the summary's figures."""
    return None if x is None else round(float(x), nd)


_r = rounded


def _iteration_figures(iterations: list[dict]) -> dict:
    """The summary's iteration fields from the leader's iteration messages, in order."""
    # (the figures a runtime may leave out — the Megatron hook sends no bytes — count as none)
    secs = [r["seconds"] for r in iterations]
    inter = sum(r.get("inter_bytes") or 0 for r in iterations)
    on_ocs = sum(r.get("ocs_bytes") or 0 for r in iterations)
    tokens = sum(r.get("tokens") or 0 for r in iterations)
    by_epoch: dict[int, list[float]] = {}
    for r in iterations:  # (with several regions each has epochs of its own: no per-epoch figure)
        if not r.get("paused") and r.get("regions", 1) == 1:
            by_epoch.setdefault(r.get("epoch") or 0, []).append(r["seconds"])
    out = {"iterations": len(iterations), "tokens": tokens, "simulated_train_s": _r(sum(secs)),
           "iteration_time_s": None, "tokens_per_s": None,
           "iteration_time_by_epoch_s": {str(e): _r(np.mean(v)) for e, v in sorted(by_epoch.items())},
           "ep_inter_server_bytes": inter, "ep_bytes_on_circuits": on_ocs,
           "ep_share_on_circuits": _r(on_ocs / inter) if inter else None}
    if secs:
        out["iteration_time_s"] = {"mean": _r(np.mean(secs)), "p50": _r(np.percentile(secs, 50)),
                                   "min": _r(min(secs)), "max": _r(max(secs))}
        out["tokens_per_s"] = _r(tokens / sum(secs)) if tokens else None
    return out


def _failed(reconfigurations: list["Reconfiguration"]) -> list[dict] | None:
    """What did not go as planned, and what the region was left on (None: everything did)."""
    failed = [r for r in reconfigurations if r.outcome != "applied" or r.failures or r.never_resumed]
    return [{"epoch": r.epoch, "region": r.region, "outcome": r.outcome, "error": r.error,
             "ocs_needs_recovery": r.ocs_needs_recovery, "never_resumed": r.never_resumed} for r in failed] or None


def _finite(x):
    """``x`` with every NaN / infinite float replaced by None (JSON has no NaN: issue 19)."""
    if isinstance(x, float):
        return x if x == x and x not in (float("inf"), float("-inf")) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


@dataclass
class RunRecord:
    """What a run has learnt so far (it outlives a failure: the summary is made of it). The
    topology ``epoch``; the region leaders' ``iteration`` messages by iteration; the
    reconfigurations; each predictor's relative errors; the hosts that finished (``bye``);
    ``last_plan``: what the OCS holds (``{input: output}``; None: unknown since a failed read) —
    with several OCSes ``last_plans`` by OCS name, and ``final_by_ocs`` each one's read-back at the end;
    the initial topology's apply result (:meth:`mfctl.ocs.driver.ApplyResult.to_dict`), circuit
    matrices by region and link-up (testbed ms); the final read-back and whether it matched."""

    epoch: int = 0
    iterations: dict[int, dict] = field(default_factory=dict)
    reconfigs: list["Reconfiguration"] = field(default_factory=list)
    pred_errors: dict[str, list[float]] = field(default_factory=dict)
    done_hosts: set[str] = field(default_factory=set)
    last_plan: dict[int, int] | None = None
    last_plans: dict[str, dict[int, int] | None] = field(default_factory=dict)  # by OCS name (several OCSes)
    final_by_ocs: dict[str, dict] = field(default_factory=dict)  # {name: {endpoint, cross_connects, matches_last_plan}}
    initial_apply: dict | None = None
    initial_circuits: dict[str, list] | None = None
    initial_linkup_ms: float = 0.0
    ocs_endpoint: str | None = None
    final_readback: dict[int, int] | None = None
    final_matches: bool | None = None
    warnings: list[str] = field(default_factory=list)

    by_region: dict[int, dict[str, dict]] = field(default_factory=dict)  # iteration → region → its leader's message

    def add_iteration(self, region: str, msg: dict) -> None:
        """A region leader's ``iteration`` message. The job's iteration (:attr:`iterations`) is
        every region's so far: it takes as long as its slowest region (the data-parallel gradient
        all-reduce waits for it), its tokens and bytes are the regions' sums, it is ``paused`` if
        any region was; ``regions`` says how many reported it. One region: its message as it came."""
        it = msg["iteration"]
        got = self.by_region.setdefault(it, {})
        got[region] = msg
        if len(got) == 1:
            self.iterations[it] = msg
            return
        slowest = max(got.values(), key=lambda m: m.get("seconds") or 0.0)
        total = lambda k: sum(m.get(k) or 0 for m in got.values())  # noqa: E731
        self.iterations[it] = {**slowest, "tokens": total("tokens"), "inter_bytes": total("inter_bytes"),
                               "ocs_bytes": total("ocs_bytes"), "paused": any(m.get("paused") for m in got.values()),
                               "regions": len(got)}

    def rows(self) -> list[dict]:
        return [self.iterations[k] for k in sorted(self.iterations)]


@dataclass
class RunSummary:
    """One run's outcome. ``reconfigurations`` holds
    :meth:`mfctl.runtime.reconfig.Reconfiguration.to_dict` entries; ``health`` is ``{hosts, ok,
    sweep_s}``; ``ocs`` (``{endpoint, cross_connects, matches_last_plan, circuits}``, and with
    several OCSes ``by_ocs``: ``{name: {endpoint, cross_connects, matches_last_plan}}``, the top
    level's endpoint and cross_connects None) is there when
    the OCS was read back at the end; ``exit_code`` is not part of summary.json."""

    run_id: str
    status: str  # ok | failed | interrupted
    playbook: str
    inventory: str
    run_dir: str
    error: str | None = None
    time_scale: float = 1.0
    launcher: str | None = None
    slurm_job: int | None = None
    fsmoe: dict | None = None
    iterations: int = 0
    iterations_planned: int = 0
    iteration_time_s: dict | None = None  # {mean, p50, min, max}
    tokens_per_s: float | None = None
    iteration_time_by_epoch_s: dict[str, float] = field(default_factory=dict)
    tokens: int = 0
    simulated_train_s: float | None = 0.0
    wall_train_s: float | None = 0.0
    ep_inter_server_bytes: float = 0
    ep_bytes_on_circuits: float = 0
    ep_share_on_circuits: float | None = None
    reconfigurations: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    prediction_rel_error: dict[str, float | None] = field(default_factory=dict)
    health: dict = field(default_factory=lambda: {"hosts": 0, "ok": 0, "sweep_s": 0.0})
    initial_topology: dict | None = None
    ocs: dict | None = None
    reconfiguration_means: dict | None = None
    reconfigurations_failed: list[dict] | None = None
    # an imported training log's
    logged_lines: int | None = None
    tflops_per_gpu_mean: float | None = None
    skipped_iterations: int | None = None
    note: str | None = None
    exit_code: int | None = None  # the process's (mfctl run), not in summary.json
    extra: dict[str, Any] = field(default_factory=dict, repr=False)  # keys of a newer mfctl, kept as they are

    @property
    def is_training_log(self) -> bool:
        return self.inventory == TRAINING_LOG

    # --- building ------------------------------------------------------------------------------
    @classmethod
    def of_run(cls, pb: "Playbook", rec: RunRecord, regions: dict[str, "RegionState"], **kw) -> "RunSummary":
        """A run's summary from its record, the playbook and the regions (their hosts are the
        matrices' order; their circuits at the end); ``kw`` the other fields (run_id, status,
        error, inventory, run_dir, time_scale, slurm_job, wall_train_s, health; ``warnings``
        beyond the record's)."""
        ocs: dict[str, Any] | None = None
        if rec.final_readback is not None:
            ocs = {"endpoint": rec.ocs_endpoint, "cross_connects": sorted([i, o] for i, o in rec.final_readback.items()),
                   "matches_last_plan": rec.final_matches,
                   "circuits": {r.name: [c.to_dict() for c in r.circuits] for r in regions.values()}}
            if rec.final_by_ocs:  # several OCSes: each one's read-back (their port numbers overlap: never merged)
                ocs |= {"endpoint": None, "cross_connects": None, "by_ocs": rec.final_by_ocs}
        t = pb.training
        return cls.of_iterations(
            iterations=rec.rows(), reconfigurations=rec.reconfigs, prediction_errors=rec.pred_errors, playbook=pb.name,
            launcher=pb.runtime.launcher, iterations_planned=t.iterations,
            fsmoe={"pipeline_degree": t.pipeline_degree,  # 0: best per layer
                   "bp_pipeline_degree": t.bp_pipeline_degree, "grad_partitions": t.grad_partitions},
            initial_topology={"mode": pb.topology.initial, "circuits": rec.initial_circuits,
                              "hosts": {r: list(st.hosts) for r, st in regions.items()},  # matrix order
                              "apply": rec.initial_apply, "linkup_ms": _r(rec.initial_linkup_ms)},
            ocs=ocs, **kw | {"warnings": rec.warnings + kw.get("warnings", [])})

    @classmethod
    def of_iterations(cls, *, iterations: list[dict], reconfigurations: list, prediction_errors: dict[str, list[float]],
                      **kw) -> "RunSummary":
        """A run's summary from the leader's ``iteration`` messages (``seconds``, ``tokens``,
        ``epoch``, ``paused``, ``inter_bytes``, ``ocs_bytes``) in order, its
        :class:`~mfctl.runtime.reconfig.Reconfiguration` records and each predictor's relative
        errors; ``kw`` the other fields."""
        recs = [r.to_dict() for r in reconfigurations]
        s = cls(**_iteration_figures(iterations), reconfigurations=recs,
                prediction_rel_error={k: _r(np.mean(v)) for k, v in sorted(prediction_errors.items())}, **kw)
        s.wall_train_s = _r(s.wall_train_s)
        s.health = {**s.health, "sweep_s": _r(s.health.get("sweep_s", 0.0))}
        if recs:
            s.reconfiguration_means = {k: _r(np.mean([r[k] for r in recs])) for k in PHASE_KEYS}
            s.reconfigurations_failed = _failed(reconfigurations)
        return s

    # --- the schema ----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """summary.json's object (keys in their usual order; ``exit_code`` left out)."""
        vals = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("extra", "exit_code")}
        vals["schema"] = SCHEMA
        if self.is_training_log:
            out = {k: vals[k] for k in _LOG}
        else:
            out = {k: vals[k] for k in _RUN}
            out.update({k: vals[k] for k in _RUN_OPTIONAL if vals[k] is not None})
        out.update(self.extra)
        return _finite(out)

    def to_json(self) -> str:
        """summary.json's text (JSON: a NaN or infinity is null, never a bare ``NaN``)."""
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    @classmethod
    def from_dict(cls, d: dict) -> "RunSummary":
        """Read a summary.json object (older runs may lack keys: their defaults). Raises
        ValueError when ``d`` is not a run summary."""
        if not isinstance(d, dict) or not isinstance(d.get("run_id"), str):
            raise ValueError("not a run summary object")
        if d.get("schema", SCHEMA) != SCHEMA:
            raise ValueError(f"schema {d.get('schema')!r}, not {SCHEMA}")
        names = set(cls.__dataclass_fields__) - {"extra", "exit_code"}
        kw = {k: v for k, v in d.items() if k in names}
        kw.setdefault("status", "unknown")
        kw.setdefault("playbook", "?")
        kw.setdefault("inventory", "?")
        kw.setdefault("run_dir", "")
        for k in ("reconfigurations", "warnings"):
            if kw.get(k) is None:
                kw.pop(k, None)
        return cls(**kw, exit_code=d.get("exit_code"),
                   extra={k: v for k, v in d.items() if k not in names and k not in ("schema", "exit_code")})
