"""The old home of the health sweep: its names, re-exported from :mod:`mfctl.health` until every
importer has moved (issue 14 §2). New code imports :mod:`mfctl.health` (``sweep`` →
``HealthReport``, ``select_checks``, ``Finding``…)."""

from __future__ import annotations

from mfctl.health.checks.gpu import XID_CRITICAL, XID_MEANING
from mfctl.health.checks.optics import DOM, judge_module
from mfctl.health.findings import Finding, HostHealth, junit
from mfctl.health.history import (
    KEEP_READINGS_S,
    THIN_AFTER_S,
    _duration,
    _history,
    _total,
    baseline_path,
    load_baseline,
    new_errors,
    reading,
    reference,
    remember,
    save_baseline,
)
from mfctl.health.thresholds import THRESHOLDS, XID_WINDOW_MAX_S, parse_overrides, thresholds
from mfctl.health.words import ago as _ago
from mfctl.health.words import indexes as _indexes
from mfctl.health.words import span as _span

#: The checks of the old ``sweep``/``check_host``: the GPU query and the lane links.
BASE_CHECKS = ["gpu", "links"]


def full_sweep(pool, inv, hosts: list[str] | None = None, limits: dict[str, float] | None = None,
               ocs_state: dict | None = None, baseline: dict | None = None, since_boot: bool = False) -> list[HostHealth]:
    """The default checks (:func:`mfctl.health.sweep`), as a list of targets."""
    from mfctl.health import sweep as _sweep

    return _sweep(pool, inv, hosts, limits=limits, ocs_state=ocs_state, baseline=baseline, since_boot=since_boot).targets


def sweep(pool, inv, hosts: list[str] | None = None, limits: dict[str, float] | None = None) -> list[HostHealth]:
    """The GPU query and the lane links only (:data:`BASE_CHECKS`)."""
    from mfctl.health import sweep as _sweep

    return _sweep(pool, inv, hosts, checks=BASE_CHECKS, limits=limits).targets


class _Given:
    """A pool that answers nvidia-smi and ip with the results given."""

    def __init__(self, gpu_res, link_res):
        self.gpu_res, self.link_res = gpu_res, link_res

    def run(self, host, argv, **_):
        return self.gpu_res if argv[0] == "nvidia-smi" else self.link_res


def check_host(inv_host, gpu_res, link_res, limits: dict[str, float] | None = None) -> HostHealth:
    """Judge one host from its GPU query and ``ip -j link`` results (the ``gpu`` and ``links`` checks)."""
    from mfctl.health.checks import CHECKS
    from mfctl.health.runner import sweep_host

    return sweep_host(_Given(gpu_res, link_res), inv_host, [CHECKS[n] for n in BASE_CHECKS], thresholds(limits))


__all__ = ["DOM", "KEEP_READINGS_S", "THIN_AFTER_S", "THRESHOLDS", "XID_CRITICAL", "XID_MEANING", "XID_WINDOW_MAX_S",
           "Finding", "HostHealth", "_ago", "_duration", "_history", "_indexes", "_span", "_total", "baseline_path",
           "check_host", "full_sweep", "judge_module", "junit", "load_baseline", "new_errors", "parse_overrides",
           "reading", "reference", "remember", "save_baseline", "sweep", "thresholds"]
