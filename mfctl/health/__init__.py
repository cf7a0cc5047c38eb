"""The health sweep (``mfctl health``, and ``mfctl run``'s gate and samples) as a table of named checks.

- :mod:`~mfctl.health.thresholds` — every limit, ``--threshold NAME=VALUE``;
- :mod:`~mfctl.health.findings` — :class:`Finding`, :class:`HostHealth`, the JUnit writer;
- :mod:`~mfctl.health.history` — NIC counter readings kept between sweeps (the baseline);
- :mod:`~mfctl.health.checks` — each check: the commands it runs, the parser (:mod:`mfctl.hosts`),
  its judgement; ``checks/ocs.py`` the OCS's;
- :mod:`~mfctl.health.runner` — the one runner: :func:`sweep` → :class:`HealthReport`.

Services never print: progress goes to an :class:`mfctl.observer.Observer`, results are data.
"""

from __future__ import annotations

from mfctl.health.checks import CHECKS, DEFAULT, NAMES, select_checks
from mfctl.health.findings import Finding, HostHealth, junit
from mfctl.health.history import baseline_path, load_baseline, save_baseline
from mfctl.health.runner import HealthReport, sweep
from mfctl.health.thresholds import THRESHOLDS, parse_overrides, thresholds

__all__ = ["CHECKS", "DEFAULT", "NAMES", "THRESHOLDS", "Finding", "HealthReport", "HostHealth", "baseline_path", "junit",
           "load_baseline", "parse_overrides", "save_baseline", "select_checks", "sweep", "thresholds"]
