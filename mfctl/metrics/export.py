"""Export a run's metrics: Prometheus text format (prometheus-client), CSV, JSON.

Prometheus names use base units and the conventions of the exposition format: seconds,
bytes, ``_total`` for counters, ``_info`` for metadata."""

from __future__ import annotations

import csv
import io
import sqlite3
from pathlib import Path

from mfctl.metrics.store import read_only
from mfctl.runtime.rundir import load_summary
from mfctl.runtime.summary import RunSummary


def _db(run_dir: Path) -> sqlite3.Connection:
    """The run's ``metrics.db``, read-only. Raises UsageError when it is missing, DataError (exit 3)
    when it is not an SQLite database or not a run's metrics (no ``iterations`` table)."""
    from mfctl.errors import DataError, UsageError

    p = run_dir / "metrics.db"
    if not p.is_file():
        raise UsageError(f"no metrics database in {run_dir}")
    try:
        db = read_only(p)  # (a run killed with -9 mid-write: its hot journal rolled back aside)
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as e:
        raise DataError(f"{p}: not a readable metrics database ({e})") from None
    if "iterations" not in tables:
        raise DataError(f"{p}: not a run's metrics database (no iterations table)")
    return db


def registry(run_dir: Path):
    """A prometheus_client registry holding the run's metrics."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Info, disable_created_metrics

    disable_created_metrics()  # no *_created series: a finished run's counters are not live processes
    db = _db(run_dir)
    reg = CollectorRegistry()
    try:  # the inventory's name (a mock's inventory file is always inventory.yaml): the run's summary has it
        summary: RunSummary | None = load_summary(run_dir)
    except (OSError, ValueError, TypeError):
        summary = None
    row = db.execute("SELECT run_id, playbook, inventory, status, time_scale FROM run").fetchone()
    if row is None:  # killed before it wrote its row: what the summary (or its recovery) says
        row = (run_dir.name, getattr(summary, "playbook", "") or "", "", getattr(summary, "status", "") or "unknown", "")
    (run_id, playbook, inventory, status, scale) = row
    if summary is not None:  # the row of a run killed with -9 still says "running": its summary says crashed
        status = summary.status
    inv_name = summary.inventory if summary is not None else None
    Info("mfctl_run", "the run", registry=reg).info({
        "run_id": run_id, "playbook": Path(playbook).name if playbook else "",
        "inventory": str(inv_name or (Path(inventory).name if inventory else "")),
        "status": status or "", "time_scale": "" if scale in ("", None) else str(scale)})
    rows = db.execute("SELECT iteration, seconds, tokens, inter_bytes, ocs_bytes, a2a_s FROM iterations "
                      "WHERE host = (SELECT MIN(host) FROM iterations) ORDER BY iteration").fetchall()
    it = Counter("mfctl_iterations", "iterations completed", registry=reg)
    tok = Counter("mfctl_tokens", "tokens trained", registry=reg)
    inter = Counter("mfctl_ep_inter_server_bytes", "inter-server expert-parallel bytes", registry=reg)
    ocs = Counter("mfctl_ep_circuit_bytes", "inter-server expert-parallel bytes carried on OCS circuits", registry=reg)
    train = Counter("mfctl_train_seconds", "training time (testbed seconds)", registry=reg)
    # gauges of the last iteration only when there is one, and the all-to-all time only when it was
    # measured (an imported training log has none): no sample rather than a made-up 0
    last = Gauge("mfctl_iteration_seconds", "the last iteration's time (testbed seconds)", registry=reg) if rows else None
    a2a = (Gauge("mfctl_all_to_all_seconds", "the last iteration's all-to-all time (testbed seconds)", registry=reg)
           if rows and rows[-1][5] is not None else None)
    for _, secs, tokens, ib, ob, _a2a in rows:
        it.inc()
        tok.inc(tokens or 0)
        inter.inc(ib or 0)
        ocs.inc(ob or 0)
        train.inc(secs or 0)
    if last is not None:
        last.set(rows[-1][1] or 0)
    if a2a is not None:
        a2a.set(rows[-1][5])
    # per region and its OCS (the store's rows name the region; the summary's records its OCS): with several
    # regions each one's count and its last reconfiguration's phases are series of their own
    ocs_of = {r.get("epoch"): r.get("ocs") or "" for r in (getattr(summary, "reconfigurations", None) or [])
              if isinstance(r, dict)}
    rc = Counter("mfctl_reconfigurations", "OCS reconfigurations, by region and its OCS", ["region", "ocs"], registry=reg)
    phase = Gauge("mfctl_reconfiguration_phase_seconds", "each region's last reconfiguration's phase times",
                  ["phase", "region", "ocs"], registry=reg)
    for epoch, region, sw, lu, rt in db.execute("SELECT epoch, region, t_switch_ms, t_linkup_ms, t_runtime_ms "
                                                "FROM reconfigurations ORDER BY epoch"):
        region = region or ""
        on = ocs_of.get(epoch) or ""  # (a run whose summary is lost: the OCS is not known)
        rc.labels(region, on).inc()
        phase.labels("switch", region, on).set((sw or 0) / 1000)
        phase.labels("linkup", region, on).set((lu or 0) / 1000)
        phase.labels("runtime", region, on).set((rt or 0) / 1000)
    return reg


def prometheus_text(run_dir: Path) -> str:
    from prometheus_client import generate_latest

    return generate_latest(registry(run_dir)).decode()


#: the tables ``--format csv --table`` and ``--format json`` export (docs/metrics.md)
TABLES = ("iterations", "reconfigurations", "predictions", "health", "timings")


def _rows(db: sqlite3.Connection, table: str) -> tuple[list[str], list[tuple]]:
    """Column names and rows of ``table`` (one of :data:`TABLES`). A run recorded before the table
    existed (``timings`` came with issue 20) has none: its columns from the schema, no rows."""
    from mfctl.metrics.store import SCHEMA

    have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if table not in have:
        empty = sqlite3.connect(":memory:")
        empty.executescript(SCHEMA)
        db = empty
    cur = db.execute(f"SELECT * FROM {table}")  # table name checked against TABLES by the callers
    return [d[0] for d in cur.description], cur.fetchall()


def to_csv(run_dir: Path, table: str) -> str:
    if table not in TABLES:
        from mfctl.errors import UsageError

        raise UsageError(f"--table must be one of {', '.join(TABLES)}")
    cols, rows = _rows(_db(run_dir), table)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(cols)
    w.writerows(rows)
    return buf.getvalue()


def to_json(run_dir: Path) -> dict:
    db = _db(run_dir)
    out: dict = {"schema": "mfctl.metrics/v1"}
    for t in TABLES:
        cols, rows = _rows(db, t)
        out[t] = [dict(zip(cols, r)) for r in rows]
    return out
