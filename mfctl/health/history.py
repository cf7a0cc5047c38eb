"""NIC error counters over time: this sweep's readings, the earlier sweeps' (the baseline file in
the state dir), and what a NIC gained over a window of them — like Prometheus' ``increase()``
over a range (docs/health.md).

A reading is ``{"t": epoch s, "counters": {name: int}, "total": {name: int}}``: the raw mlx5
counters (``ethtool -S``) and each made monotonic across driver reloads.
"""

from __future__ import annotations

import math
from pathlib import Path

#: How long NIC readings are kept (any ``nic_error_window_s`` up to this can be judged), all of
#: those younger than ``THIN_AFTER_S``; older ones are thinned to one per time cell of 1/8 of
#: their age's power-of-two band (~8 per doubling of age: ~110 per NIC for a week, whatever the
#: sweep rate). Cells are aligned, so a kept reading stays kept as it ages.
KEEP_READINGS_S, THIN_AFTER_S = 7 * 24 * 3600.0, 60.0


def _ints(d) -> bool:
    return isinstance(d, dict) and all(isinstance(v, int) and not isinstance(v, bool) for v in d.values())


def _well_formed(x) -> bool:
    t = x.get("t") if isinstance(x, dict) else None
    return (isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t)
            and _ints(x.get("counters")) and _ints(x.get("total", {})))


def history_of(baseline: dict | None, host: str, nic: str) -> list[dict]:
    """One NIC's earlier readings from the readings file, oldest first; only well-formed ones
    (``{"t": epoch s, "counters": {name: int}, "total": {name: int}}``, ``total`` optional): a
    damaged file is no history, never a crash."""
    r = (baseline or {}).get(host)
    r = r.get(nic) if isinstance(r, dict) else None
    r = [r] if isinstance(r, dict) else r if isinstance(r, list) else []
    return sorted((x for x in r if _well_formed(x)), key=lambda x: x["t"])




def reading(stats, history: list[dict], now: float) -> dict:
    """This sweep's reading of a NIC: the raw counters, and ``total`` — each counter made
    monotonic across driver reloads (a value below the previous one counts from zero, as
    Prometheus' ``increase()`` does), so that the errors between any two readings are the
    difference of their totals even when readings in between are thinned away."""
    from mfctl.hosts import ethtool

    raw = {k: stats.counters[k] for k in ethtool.PHY_ERRORS + ethtool.DROPS if k in stats.counters}
    total = {}
    for k, v in raw.items():
        last = next((x for x in reversed(history) if k in x["counters"]), None)  # a counter may skip a reading
        if last is None:
            total[k] = v
        else:
            before = last["counters"][k]
            total[k] = _total(last, k) + (v - before if v >= before else v)
    return {"t": now, "counters": raw, "total": total}


def _total(r: dict, k: str) -> int:
    """Reading ``r``'s reset-proof total of counter ``k`` (its raw value when it has none)."""
    return r.get("total", {}).get(k, r["counters"].get(k, 0))


def reference(history: list[dict], now: float, window_s: float) -> dict | None:
    """The reading to judge a NIC's error counters against: the newest one at least ``window_s``
    old, so that errors stay a finding for a whole window however often someone looks (like
    Prometheus' ``increase()`` over a range); None while no reading is that old."""
    old = [x for x in history if now - x["t"] >= window_s]
    return old[-1] if old else None


def _all_known(now_reading: dict, names: tuple[str, ...], first: dict) -> tuple[dict[str, int], str, bool]:
    """Every error known without a reading a window old: what the history's ``first`` reading
    showed plus all the counters gained since (across driver reloads)."""
    raw, total = now_reading["counters"], now_reading["total"]
    seen = {n: first["counters"].get(n, 0) + total[n] - _total(first, n) if n in first["counters"] else total[n]
            for n in names if n in total}
    reloaded = any(seen[n] != raw[n] for n in seen)
    since = (f"since the driver loaded{' (and before its reload)' if reloaded else ''} (readings for "
             f"{duration(now_reading['t'] - first['t'])} only, less than a window)")
    return {n: v for n, v in seen.items() if v > 0}, since, False


def new_errors(now_reading: dict, names: tuple[str, ...], ref: dict | None, first: dict | None = None
               ) -> tuple[dict[str, int], str, bool]:
    """The error counters of ``names`` a NIC gained since ``ref`` (:func:`reference`), from the
    two readings' totals (:func:`reading`); the period in words; True for increments, False for
    totals. Without a reading a window old: every error known — the counters now, or, given the
    history's ``first`` reading, what it showed plus all gained since, across driver reloads — as
    errors of unknown age are judged, not hidden."""
    raw, total = now_reading["counters"], now_reading["total"]
    if ref is None:
        if first is None:
            return {n: raw[n] for n in names if raw.get(n, 0) > 0}, "since the driver loaded", False
        return _all_known(now_reading, names, first)
    grown = {n: total[n] - _total(ref, n) for n in names if n in total and total[n] > _total(ref, n)}
    return grown, f"in the last {duration(now_reading['t'] - ref['t'])}", True


def _cell(age: float, t: float) -> tuple[int, int]:
    """The thinning cell of a reading taken at ``t``, ``age`` s old (``age`` ≥ THIN_AFTER_S)."""
    level = int(math.log2(age / THIN_AFTER_S))
    size = THIN_AFTER_S * 2 ** level / 8
    return level, math.floor(t / size)


def remember(history: list[dict], new: dict) -> list[dict]:
    """``history`` with the reading ``new`` added, thinned (:data:`THIN_AFTER_S`): per time cell the
    earliest reading is kept, and the newest reading older than :data:`KEEP_READINGS_S`. Thinning
    only ever makes a reference older (at most ~1/4 of its age), so errors are never hidden before
    their window has passed."""
    now = new["t"]
    past = [x for x in history if x["t"] < now]
    expired = [x for x in past if now - x["t"] > KEEP_READINGS_S]
    kept, cells = [], set()
    for x in past:  # oldest first: the earliest reading of each cell wins
        age = now - x["t"]
        if age > KEEP_READINGS_S:
            continue
        if age >= THIN_AFTER_S:
            cell = _cell(age, x["t"])
            if cell in cells:
                continue
            cells.add(cell)
        kept.append(x)
    return expired[-1:] + kept + [new]


def duration(s: float) -> str:
    """A period for a message: ``45 s``, ``62 min``, ``3.5 h``."""
    s = max(0.0, s)
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


_duration = duration


def baseline_path(inv) -> Path:
    """Where the NIC error counters' readings of this inventory are kept (the state dir)."""
    from mfctl import settings

    return settings.state_path() / "health" / f"{inv.name}-nic-counters.json"


def load_baseline(inv) -> dict:
    """The previous sweeps' NIC readings by host and NIC (``{}`` when there is none or it is unreadable)."""
    import json

    p = baseline_path(inv)
    try:
        if not p.is_file() or p.stat().st_size > 64 << 20:  # a FIFO or a device would block or never end
            return {}
        data = json.loads(p.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def save_baseline(inv, results, before: dict) -> None:
    """Add this sweep's NIC readings (each target's ``nic_counters``) to each NIC's history
    (:func:`remember`: a week, thinned; whatever window the next sweep asks for); hosts not swept
    keep theirs. Written atomically. Raises OSError when the state dir cannot be written."""
    import json
    import os
    import tempfile

    data = {h: v for h, v in before.items() if isinstance(v, dict)}
    for hh in results:
        if hh.nic_counters:
            data[hh.host] = {**data.get(hh.host, {}), **{nic: remember(history_of(before, hh.host, nic), r)
                                                         for nic, r in hh.nic_counters.items()}}
    p = baseline_path(inv)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(tmp, p)
