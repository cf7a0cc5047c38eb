"""Provisioning's per-run records in the journal (``<state>/provision/<inventory>.journal.jsonl``)
and reading them back (``mfctl provision journal``).

A run is a ``provision.run`` record with ``state: start`` — its ``run`` id, who (user@machine),
the recipe (path and SHA-256 of its text), the inventory, the hosts, the rollout options and the
plan (every host's actions as ``phase: what on target``) — then every record of that run carries
``run`` (actions, re-plans, batches, drains), and a ``provision.run`` record with ``state: end``
gives the outcome (per host ok/failed/not verified/skipped, the exit code). A run with a start
and no end was killed (``outcome: unfinished``).
"""

from __future__ import annotations

import getpass
import hashlib
import socket
import time
import uuid
from pathlib import Path


class RunJournal:
    """A :class:`mfctl.ocs.journal.Journal` whose every record carries this run's id."""

    def __init__(self, journal, run_id: str | None = None):
        self.journal = journal
        self.run_id = run_id or time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]

    def append(self, op: str, **fields) -> dict:
        return self.journal.append(op, run=self.run_id, **fields)

    def start(self, *, recipe: Path, inventory: str, hosts: list[str], plans, options: dict) -> dict:
        """The run's first record (who, recipe and its SHA-256, inventory, hosts, options, the plan)."""
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = "?"
        try:
            sha = hashlib.sha256(Path(recipe).read_bytes()).hexdigest()
        except OSError:
            sha = None
        plan = {hp.host: ([f"{a.phase}: {a.what} on {a.target}" for a in hp.actions] if not hp.error else
                          [f"cannot read: {hp.error}"]) for hp in plans}
        return self.append("provision.run", state="start", who=f"{user}@{socket.gethostname()}",
                           recipe=str(recipe), recipe_sha256=sha, inventory=inventory, hosts=hosts, options=options,
                           changes=sum(len(hp.actions) for hp in plans), plan=plan)

    def end(self, results, exit_code: int) -> dict:
        """The run's last record: each host's outcome and the command's exit code."""
        code = int(exit_code)
        return self.append("provision.run", state="end", exit_code=code,
                           outcome="ok" if code == 0 else "interrupted" if code == 130 else "failed",
                           hosts={r.host: outcome_of(r) for r in results})


def outcome_of(r) -> str:
    """One host's outcome as a word: ok, failed, interrupted, not verified, left after verify, skipped."""
    if r.skipped:
        return "skipped"
    if r.failed and str(r.failed.get("error", "")).startswith("interrupted"):
        return "interrupted"
    if r.failed:
        return "failed"
    if r.verify_error:
        return "not verified"
    return "left after verify" if r.left else ("ok" if r.verified else "not verified")


def runs(records: list[dict]) -> list[dict]:
    """One summary per run in ``records`` (a journal's :meth:`records`), oldest first: ``run``,
    ``started``/``ended`` (unix s), ``who``, ``recipe``, ``recipe_sha256``, ``hosts``,
    ``changes``, ``outcome`` (ok, failed, unfinished), ``exit_code``, ``actions`` done/failed."""
    by: dict[str, dict] = {}
    for rec in records:
        rid = rec.get("run")
        if not isinstance(rid, str):
            continue
        s = by.setdefault(rid, {"run": rid, "started": None, "ended": None, "who": None, "recipe": None,
                                "recipe_sha256": None, "hosts": [], "changes": 0, "outcome": "unfinished",
                                "exit_code": None, "done": 0, "failed": 0, "host_outcomes": {}})
        if rec.get("op") == "provision.run" and rec.get("state") == "start":
            s.update(started=rec.get("ts"), who=rec.get("who"), recipe=rec.get("recipe"),
                     recipe_sha256=rec.get("recipe_sha256"), hosts=rec.get("hosts") or [], changes=rec.get("changes", 0),
                     options=rec.get("options"))
        elif rec.get("op") == "provision.run" and rec.get("state") == "end":
            s.update(ended=rec.get("ts"), outcome=rec.get("outcome"), exit_code=rec.get("exit_code"),
                     host_outcomes=rec.get("hosts") or {})
        elif rec.get("op") == "provision.action" and rec.get("state") in ("done", "failed"):
            s[rec["state"]] += 1
    return sorted(by.values(), key=lambda s: s["started"] or 0)


def run_records(records: list[dict], run_id: str) -> list[dict]:
    """Every record of run ``run_id`` (a unique prefix is enough), in journal order."""
    return [r for r in records if r.get("run") == run_id]


def resolve(records: list[dict], prefix: str) -> str | None:
    """The run id ``prefix`` names (exact, else the one run it starts), or None."""
    ids = list(dict.fromkeys(r["run"] for r in records if isinstance(r.get("run"), str)))
    if prefix in ids:
        return prefix
    hits = [i for i in ids if i.startswith(prefix)]
    return hits[0] if len(hits) == 1 else None
