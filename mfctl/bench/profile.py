"""``mfctl profile``'s service: nccl-tests all-to-all and all-reduce sweeps and a GEMM sweep on
each host profiled, each fitted to ``t = α + β·n`` (:func:`mfctl.fabric.profile.fit_linear`), stored per
inventory for ``mfctl schedule`` (:func:`load_fits`)."""

from __future__ import annotations

import json
from pathlib import Path

#: the sweeps take minutes on real hosts: the per-command timeout is at least this, s
SWEEP_TIMEOUT_S = 300.0


def profile_path(inventory_name: str) -> Path:
    """``<state_dir>/profiles/<inventory>.json`` (the directory is created)."""
    from mfctl import settings

    d = settings.state_dir() / "profiles"
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{inventory_name}.json"


def load_fits(inventory_name: str) -> tuple[dict[str, dict], Path]:
    """The stored fits by task (``{}`` when there is no profile yet), and where they are (or would be)."""
    p = profile_path(inventory_name)
    return ({f["task"]: f for f in json.loads(p.read_text())["fits"]} if p.exists() else {}), p


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
    fits = per_host[names[0]]
    if len(names) > 1:  # each task's slowest host: the one a step waits for
        fits = [min((per_host[h][i] | {"host": h} for h in names), key=lambda f: f["rate_per_s"])
                for i in range(len(fits))]
    return {"schema": "mfctl.profile/v1", "inventory": inv.name, "host": hostset(names), "hosts": names,
            "fits": fits, "per_host": per_host}


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
