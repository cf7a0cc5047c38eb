"""Every limit of the health sweep, declared once, and ``--threshold NAME=VALUE`` parsing.

Sources: A100 datasheet class for the temperatures (slowdown begins near 85 °C); mlx5 counter
semantics for the NIC error counters (mfctl/hosts/ethtool.py); 802.1p for the RoCE priority.
"""

from __future__ import annotations

import math

from mfctl.health.history import KEEP_READINGS_S

XID_WINDOW_MAX_S = 10 * 365 * 86400.0  # xid_window_s: "any XID since boot" is a window longer than any uptime

#: Every threshold of the health sweep, in one table (override with ``mfctl health --threshold name=value``).
THRESHOLDS = {
    "gpu_temp_warn_c": 80.0,  # A100 slowdown begins near 85 °C (datasheet class)
    "gpu_temp_crit_c": 87.0,
    "wrong_priority_share": 0.01,  # RoCE bytes outside the lossless priority, as a share of all bytes
    "nic_phy_errors_max": 0.0,  # physical-layer error frames (CRC, symbol, length) a NIC may gain between sweeps
    "nic_drops_max": 0.0,  # frames dropped for lack of buffers (discards, out of buffer) between sweeps
    "nic_error_window_s": 3600.0,  # NIC error counters: what they gained over (at least) this window, from earlier sweeps
    "xid_window_s": 86400.0,  # a kernel-log XID older than this is history (a warning), not a present fault
    "roce_priority": 3.0,
    "sm_clock_min_share": 0.5,  # SM clock below this share of clocks.max.sm on a busy GPU, with no reason given
}


def parse_overrides(specs: list[str] | None) -> dict[str, float]:
    """``--threshold NAME=VALUE`` options (``mfctl health``, ``mfctl run``) as overrides, checked
    alone and together (:func:`thresholds`). Raises UsageError (exit 2) naming the option."""
    from mfctl.errors import UsageError

    overrides = {}
    for t in specs or []:
        k, eq, v = t.partition("=")
        if not eq or " " in v.strip():
            raise UsageError(f"--threshold {t!r}: expected NAME=NUMBER, one per --threshold (repeat the option)")
        if k not in THRESHOLDS:
            raise UsageError(f"--threshold {t!r}: expected name=number with name one of {', '.join(THRESHOLDS)}")
        try:
            overrides[k] = float(v)
        except ValueError:
            raise UsageError(f"--threshold {t!r}: expected a number") from None
    try:
        thresholds(overrides)  # each value, and the pairs that must agree (warning below critical)
    except ValueError as e:
        raise UsageError(f"--threshold {e}") from None
    return overrides


def _check_one(k: str, v: float) -> None:
    """Raise ValueError when threshold ``k`` cannot take the value ``v``."""
    if not math.isfinite(v):
        raise ValueError(f"{k}={v}: expected a finite number")
    if k.endswith("_share") and not 0 <= v <= 1:
        raise ValueError(f"{k}={v:g}: expected a share from 0 to 1")
    if k.endswith("_max") and v < 0:
        raise ValueError(f"{k}={v:g}: expected a count of 0 or more")
    if k == "xid_window_s" and not 0 < v <= XID_WINDOW_MAX_S:
        raise ValueError(f"{k}={v:g}: expected a duration above 0 s and at most {XID_WINDOW_MAX_S:g} s (10 years: "
                         "every XID since boot is then a present fault)")
    if k.endswith("_window_s") and k != "xid_window_s" and not 0 < v <= KEEP_READINGS_S:
        raise ValueError(f"{k}={v:g}: expected a duration above 0 s and at most {KEEP_READINGS_S:g} s (a week"
                         f"{': the readings are kept that long' if k.startswith('nic_') else ''})")
    if k == "roce_priority" and (v != int(v) or not 0 <= v <= 7):
        raise ValueError(f"{k}={v:g}: expected an 802.1p priority from 0 to 7")


def _check_temperatures(out: dict[str, float], given: dict) -> None:
    """The warning temperature must be below the critical one; blame the value that was given
    (both given: the warning)."""
    w, c = out["gpu_temp_warn_c"], out["gpu_temp_crit_c"]
    if w < c:
        return
    if "gpu_temp_crit_c" in given and "gpu_temp_warn_c" not in given:
        raise ValueError(f"gpu_temp_crit_c={c:g}: expected above gpu_temp_warn_c ({w:g}, the default)")
    raise ValueError(f"gpu_temp_warn_c={w:g}: expected below gpu_temp_crit_c "
                     f"({c:g}{'' if 'gpu_temp_crit_c' in given else ', the default'})")


def thresholds(overrides: dict[str, float] | None = None) -> dict[str, float]:
    """The declared thresholds with ``overrides`` applied; unknown names raise KeyError, a value
    that is not finite, a ``*_share`` outside 0..1, a count below 0, a RoCE priority that is not
    0..7, or a warning temperature at or above the critical one raises ValueError."""
    out, given = dict(THRESHOLDS), dict(overrides or {})
    for k, v in given.items():
        if k not in out:
            raise KeyError(k)
        v = float(v) + 0.0  # (-0 is 0)
        _check_one(k, v)
        out[k] = v
    _check_temperatures(out, given)
    return out
