"""``mfctl profile``'s service: nccl-tests all-to-all and all-reduce sweeps and a GEMM sweep on one
host, each fitted to ``t = α + β·n`` (:func:`mfctl.fabric.profile.fit_linear`), stored per
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


def run_profile(ctx, host: str | None = None, *, hidden: int = 4096, ffn_hidden: int = 14336) -> dict:
    """Sweep and fit on ``host`` (default: the inventory's first) and return the
    ``mfctl.profile/v1`` object (fits: :meth:`mfctl.fabric.profile.Fit.to_dict`, s and units/s).
    Raises UsageError for an unknown host, OperationFailed for output that is not the tools'."""
    import numpy as np

    from mfctl.errors import OperationFailed, ParseError, UsageError
    from mfctl.fabric.profile import fit_linear
    from mfctl.hosts.gemm import gemm_argv, parse_gemm
    from mfctl.hosts.nccl_tests import parse_perf, perf_argv

    inv = ctx.inventory
    h = host or inv.hosts[0].name
    if h not in {x.name for x in inv.hosts}:
        raise UsageError(f"unknown host {h!r}")
    fits = []
    with ctx.pool(command_timeout=max(ctx.command_timeout, SWEEP_TIMEOUT_S)) as pool:
        for test in ("alltoall_perf", "all_reduce_perf"):
            res = parse_perf(pool.run_checked(h, perf_argv(test, "64K", "1G", 2, inv.host(h).gpus.count)))
            timed = [(x.size_bytes, x.time_us * 1e-6) for x in res.rows if x.time_us is not None]  # N/A: no point
            fits.append(fit_linear(test.removesuffix("_perf"), np.array([n for n, _ in timed]),
                                   np.array([t for _, t in timed]), "byte"))
        try:
            rows = parse_gemm(pool.run_checked(h, gemm_argv(hidden, ffn_hidden)))
        except ParseError as e:
            raise OperationFailed(f"{h}: {e}") from None
        fits.append(fit_linear("gemm", np.array([r.flops for r in rows]), np.array([r.time_s for r in rows]), "flop"))
    return {"schema": "mfctl.profile/v1", "inventory": inv.name, "host": h, "fits": [f.to_dict() for f in fits]}


def store(doc: dict) -> Path:
    """Write a profile where :func:`load_fits` finds it; return the path."""
    p = profile_path(doc["inventory"])
    p.write_text(json.dumps(doc, indent=2))
    return p
