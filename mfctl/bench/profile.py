"""``mfctl profile``'s service: fits of ``t = α + β·n`` per task (:func:`mfctl.fabric.profile.fit_linear`),
stored per inventory for ``mfctl schedule`` (:func:`load_fits`), from one of two sources:

- ``sweep`` (:func:`run_profile`): nccl-tests all-to-all and all-reduce sweeps and a GEMM sweep on
  each host profiled;
- ``run`` (:func:`profile_of_run`): a training run's own measured all-to-all and expert GEMM times,
  which its job sent as ``timings`` (:mod:`mfctl.integrations.torch_timing`) and the controller kept
  in the run's ``metrics.db`` (``timings`` table).

The stored ``mfctl.profile/v1`` object says which in its ``source``."""

from __future__ import annotations

import json
from pathlib import Path

#: a fit whose relative RMS error is above this is said to be poor (a warning; it is stored all the same):
#: nccl-tests' and the GEMM sweep's fits are within a few % on real hosts, a swept gloo job's on a loaded
#: 2-core machine 8–40 % (tests/integration/test_profile_real_timings.py bounds it by the same 50 %)
POOR_FIT = 0.50

#: units/s above which a fitted rate is no hardware's: 10 TB/s of all-to-all or all-reduce per rank (an H100's NVLink is
#: 0.9 TB/s), 10 PFLOP/s of GEMM (an H100's dense bf16 peak is ~1 PFLOP/s)
IMPLAUSIBLE_RATE = {"alltoall": 1e13, "all_reduce": 1e13, "gemm": 1e16}

#: the sweeps take minutes on real hosts: the per-command timeout is at least this, s
SWEEP_TIMEOUT_S = 300.0


def profile_path(inventory_name: str) -> Path:
    """``<state_dir>/profiles/<inventory>.json`` (the directory is created)."""
    from mfctl import settings

    d = settings.state_dir() / "profiles"
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{inventory_name}.json"


def load_profile(inventory_name: str) -> tuple[dict | None, Path]:
    """The stored ``mfctl.profile/v1`` object (None when there is no profile yet) and where it is
    (or would be). Its ``source`` says where the fits come from: ``{"kind": "sweep"}`` or
    ``{"kind": "run", "run_id", "run_dir", "samples"}`` (absent in a profile of an older mfctl: a sweep)."""
    p = profile_path(inventory_name)
    return (json.loads(p.read_text()) if p.exists() else None), p


def load_fits(inventory_name: str) -> tuple[dict[str, dict], Path]:
    """The stored fits by task (``{}`` when there is no profile yet), and where they are (or would
    be); the profile's ``source`` (:func:`load_profile`) says what they were fitted on."""
    doc, p = load_profile(inventory_name)
    return ({f["task"]: f for f in doc["fits"]} if doc else {}), p


def run_profile(ctx, hosts: list[str] | str | None = None, *, hidden: int = 4096, ffn_hidden: int = 14336,
                observer=None) -> dict:
    """Sweep and fit on each of ``hosts`` (inventory names; one name; default: the inventory's
    first), the hosts in parallel, and return the ``mfctl.profile/v1`` object: ``fits`` per task
    (:meth:`mfctl.fabric.profile.Fit.to_dict`, s and units/s; with several hosts the slowest host's
    fit of each task — the one a step waits for — with its ``host``), ``per_host`` fits, ``hosts``.
    ``observer`` hears a ``profile`` phase, each host's sweeps as steps (``step``, when it has
    one) and each host done. Raises UsageError for an unknown host, OperationFailed for output
    that is not the tools' (the first host's in inventory order, after every host has finished)."""
    from concurrent.futures import ThreadPoolExecutor

    from mfctl.errors import MfctlError, UsageError
    from mfctl.inventory.hostsets import hostset
    from mfctl.observer import NullObserver
    from mfctl.transport.results import HostResult

    inv = ctx.inventory
    names = [hosts] if isinstance(hosts, str) else list(hosts or [inv.hosts[0].name])
    known = {x.name for x in inv.hosts}
    for h in names:
        if h not in known:
            raise UsageError(f"unknown host {h!r}")
    obs = observer or NullObserver()
    obs.phase("profile", f"3 sweeps on each of {hostset(names)}", total=len(names))
    with ctx.pool(command_timeout=max(ctx.command_timeout, SWEEP_TIMEOUT_S)) as pool:
        def one(h: str):
            try:
                return _sweep(pool, inv, h, hidden, ffn_hidden, obs)
            except MfctlError as e:
                return e
            finally:
                obs.host_done(h, HostResult(h))

        with ThreadPoolExecutor(max_workers=max(1, min(len(names), 16)), thread_name_prefix="mfctl-profile") as ex:
            got = dict(zip(names, ex.map(one, names)))
    for h in names:
        if isinstance(got[h], MfctlError):
            raise got[h]
    per_host = {h: [f.to_dict() for f in got[h]] for h in names}
    fits = slowest_per_task(per_host)
    return {"schema": "mfctl.profile/v1", "inventory": inv.name, "host": hostset(names), "hosts": names,
            "fits": fits, "per_host": per_host, "source": {"kind": "sweep"}}


def slowest_per_task(per_host: dict[str, list[dict]]) -> list[dict]:
    """Each task's fit of its slowest host — the lowest ``rate_per_s``, the one a step waits for —
    with its ``host`` when there are several hosts; tasks in :data:`~mfctl.fabric.profile.TASK_UNITS` order."""
    from mfctl.fabric.profile import TASK_UNITS

    tasks = [t for t in TASK_UNITS if any(f["task"] == t for fs in per_host.values() for f in fs)]
    out = []
    for t in tasks:
        got = [f | ({"host": h} if len(per_host) > 1 else {}) for h, fs in per_host.items() for f in fs if f["task"] == t]
        out.append(min(got, key=lambda f: f["rate_per_s"]))
    return out


def profile_of_run(run_dir: Path, inventory_name: str | None = None) -> dict:
    """The ``mfctl.profile/v1`` object of a run's measured ``timings`` (``metrics.db``): per host
    and task, :func:`mfctl.fabric.profile.fit_samples` (each size bin's fastest sample, fitted;
    ``alltoall`` n in bytes of a rank's send buffer, ``gemm`` n in FLOP), with ``samples`` (raw
    rows) beside ``points`` (bins); ``fits`` each task's slowest host's (:func:`slowest_per_task`).
    A host × task with fewer than 2 bins is not fitted and said in ``skipped``; a fit whose β is not
    positive (time not growing with n) is said in ``warnings``. ``inventory``: where
    the fits are stored, ``inventory_name`` if given, else the run's inventory's name (its summary's,
    else its run row's file's) — for a run on a mock of its playbook's inventory, that inventory's
    (:func:`_modelled_inventory`); ``source.run_inventory`` is the run's own.
    Raises UsageError (exit 2: the run named cannot be profiled) when the run recorded no timings or
    its inventory is not known and none is given, OperationFailed (exit 1) when its timings cannot
    be fitted (fewer than 2 size bins on every host), DataError (exit 3) when ``metrics.db`` is
    missing or cannot be read."""
    import sqlite3

    import numpy as np

    from mfctl.errors import DataError, OperationFailed, UsageError
    from mfctl.fabric.profile import TASK_UNITS, fit_samples
    from mfctl.metrics.store import read_only
    from mfctl.runtime.rundir import read_summary
    from mfctl.runtime.summary import TRAINING_LOG

    db_path = Path(run_dir) / "metrics.db"
    if not db_path.is_file():
        raise DataError("no metrics.db: not a run directory, or a run that never started", path=str(db_path))
    try:
        db = read_only(db_path)
        try:
            has = db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='timings'").fetchone()
            rows = db.execute("SELECT host, task, n, seconds FROM timings").fetchall() if has else []
            run_row = db.execute("SELECT playbook FROM run").fetchone()
        finally:
            db.close()
    except sqlite3.Error as e:
        raise DataError(f"not a readable metrics database ({e})", path=str(db_path)) from None
    run_id = Path(run_dir).name
    if not rows:
        raise UsageError(f"run {run_id} recorded no timings to profile: its job sent no 'timings' with its "
                         "iterations (mfctl.integrations.torch_timing.Timings; the simulated runtime measures nothing)")
    run_inventory = read_summary(Path(run_dir)).inventory
    if inventory_name is None:
        inventory_name = _modelled_inventory(run_inventory, run_row[0] if run_row else None)
        if inventory_name in ("?", TRAINING_LOG):
            raise UsageError(f"run {run_id}'s inventory is not known: name it (--inventory)")
    if "/" in inventory_name or inventory_name.startswith("."):  # a file name under profiles/, nothing else
        raise UsageError(f"run {run_id}'s inventory name {inventory_name!r} is not one: name the inventory (--inventory)")
    by: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for host, task, n_, s_ in rows:
        by.setdefault((host, task), []).append((n_, s_))
    per_host: dict[str, list[dict]] = {}
    skipped: list[dict] = []
    warnings: list[str] = []
    hosts = sorted({h for h, _ in by})
    for h in hosts:
        for task, unit in TASK_UNITS.items():
            mine = by.get((h, task))
            if not mine:
                continue
            n, t = np.array([m[0] for m in mine]), np.array([m[1] for m in mine])
            try:
                fit = fit_samples(task, n, t, unit)
            except ValueError as e:
                skipped.append({"host": h, "task": task, "samples": len(mine), "why": str(e)})
                continue
            per_host.setdefault(h, []).append(fit.to_dict() | {"samples": len(mine)})
            if fit.beta_s_per_unit <= 0:  # larger calls no slower: something other than n sets their times
                warnings.append(f"{h} {task}: the time does not grow with n over {n.min():.4g}..{n.max():.4g} {unit} "
                                f"(β = {fit.beta_s_per_unit:.3g} s/{unit}): the fixed cost and the noise outweigh "
                                "the work there — sizes too close together, a loaded host"
                                + (", or waiting for late peers (time with Timings(sync_peers=True))"
                                   if task == "alltoall" else ""))
            elif fit.rate > IMPLAUSIBLE_RATE[task]:
                warnings.append(f"{h} {task}: {fit.rate:.3g} {unit}/s is faster than any hardware "
                                f"(over {IMPLAUSIBLE_RATE[task]:.0e}): the times barely grow with n over "
                                f"{n.min():.4g}..{n.max():.4g} {unit} — the samples cannot tell the rate")
            elif fit.rel_rms_error > POOR_FIT:
                warnings.append(f"{h} {task}: fit error {100 * fit.rel_rms_error:.0f} % (> {100 * POOR_FIT:.0f} %): the "
                                f"times spread widely about α + β·n over {n.min():.4g}..{n.max():.4g} {unit} — a loaded "
                                "host, or sizes over too narrow a range for the fixed cost to be told from the rate; "
                                "mfctl schedule prices with it all the same")
    if not per_host:
        raise OperationFailed(f"run {run_id}'s timings cannot be fitted: "
                              + "; ".join(f"{s['host']} {s['why']} ({s['samples']} samples)" for s in skipped))
    from mfctl.inventory.hostsets import hostset

    fitted = [h for h in hosts if h in per_host]
    return {"schema": "mfctl.profile/v1", "inventory": inventory_name, "host": hostset(fitted), "hosts": fitted,
            "fits": slowest_per_task(per_host), "per_host": per_host, "skipped": skipped, "warnings": warnings,
            "source": {"kind": "run", "run_id": run_id, "run_dir": str(Path(run_dir).resolve()), "samples": len(rows),
                       "run_inventory": run_inventory}}


def _modelled_inventory(run_inventory: str, playbook_path: str | None) -> str:
    """The inventory a run's fits are stored for — the one ``mfctl schedule PLAYBOOK`` looks up: the
    run's own, except for a run on a mock (``<name>-mock-<instance>``, :mod:`mfctl.mock.testbed`)
    of its playbook's inventory ``<name>``, which stands for that testbed: then ``<name>``."""
    import logging

    from mfctl.errors import MfctlError

    if not playbook_path or "-mock-" not in run_inventory:
        return run_inventory
    try:
        from mfctl.inventory import load_inventory
        from mfctl.runtime.playbook import load_playbook

        base = load_inventory(load_playbook(playbook_path).inventory_path()).name
    except (MfctlError, OSError) as e:  # the playbook moved or changed since: the run's own name
        logging.getLogger(__name__).info("run's playbook %s not read (%s): fits stored for %s", playbook_path, e,
                                         run_inventory)
        return run_inventory
    return base if run_inventory.startswith(f"{base}-mock-") else run_inventory


def _sweep(pool, inv, h: str, hidden: int, ffn_hidden: int, obs) -> list:
    """One host's nccl-tests all-to-all and all-reduce sweeps and GEMM sweep, fitted (Fit each)."""
    import numpy as np

    from mfctl.errors import OperationFailed, ParseError
    from mfctl.fabric.profile import fit_linear
    from mfctl.hosts.gemm import gemm_argv, parse_gemm
    from mfctl.hosts.nccl_tests import parse_perf, perf_argv

    step = getattr(obs, "step", None)
    fits = []
    for i, test in enumerate(("alltoall_perf", "all_reduce_perf"), 1):
        if step:
            step(h, i, 3, f"{test} 64K..1G")
        res = parse_perf(pool.run_checked(h, perf_argv(test, "64K", "1G", 2, inv.host(h).gpus.count)))
        timed = [(x.size_bytes, x.time_us * 1e-6) for x in res.rows if x.time_us is not None]  # N/A: no point
        fits.append(fit_linear(test.removesuffix("_perf"), np.array([n for n, _ in timed]),
                               np.array([t for _, t in timed]), "byte"))
    if step:
        step(h, 3, 3, f"GEMM sweep (hidden {hidden}, ffn {ffn_hidden})")
    try:
        rows = parse_gemm(pool.run_checked(h, gemm_argv(hidden, ffn_hidden)))
    except ParseError as e:
        raise OperationFailed(f"{h}: {e}") from None
    fits.append(fit_linear("gemm", np.array([r.flops for r in rows]), np.array([r.time_s for r in rows]), "flop"))
    return fits


def store(doc: dict) -> Path:
    """Write a profile where :func:`load_fits` finds it; return the path."""
    p = profile_path(doc["inventory"])
    p.write_text(json.dumps(doc, indent=2))
    return p
