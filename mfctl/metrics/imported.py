"""A real training log turned into a run directory (``mfctl runs import-log``): the same
``metrics.db`` and ``summary.json`` as a simulated run, so ``runs show``, ``metrics export`` and
``runs report`` work on it.

Megatron logs every N iterations, each line the mean of the N since the previous one: each
logged line stands for them (``steps``). Tokens come from ``consumed tokens`` when the log has
them, else ``global batch × seq_len`` (said in the summary's ``note``). Times: seconds.

A line whose elapsed time is not a finite number (``nan``, ``inf``, ``1e400``) is not counted:
its line numbers are in the summary's ``note`` and ``lines_not_counted`` (``runs import-log``
warns of them on stderr). The run directory is written under a hidden name and renamed to the
run id once complete: a failure leaves nothing (``runs list`` never lists a half-written import).
"""

from __future__ import annotations

import math
import secrets
import shutil
import time
from pathlib import Path

from mfctl.errors import ConfigError, ParseError
from mfctl.hosts.trainlog import MAX_INT, parse_train_log
from mfctl.metrics.store import MetricsStore
from mfctl.runtime.summary import TRAINING_LOG, RunSummary


def _rows(tl, seq_len: int) -> tuple[list[dict], bool, list[int]]:
    """One iteration row per logged line (with the ``steps`` it stands for); whether tokens had to
    be assumed from ``seq_len``; the lines not counted (elapsed time not a finite number)."""
    rows, prev_tokens, assumed_seq, uncounted = [], None, False, []
    for r in tl.iterations:
        steps = r.steps  # the parser's: a log that starts mid-run does not stand for iterations 1..N
        if r.consumed_tokens is not None:  # a running total: the first line's is the mean since iteration 1
            tokens = (r.consumed_tokens - prev_tokens) // steps if prev_tokens is not None else r.consumed_tokens // r.iteration
            prev_tokens = r.consumed_tokens
        else:
            tokens = (r.global_batch or 0) * seq_len
            assumed_seq = True
        if r.elapsed_ms is None:
            uncounted.append(r.line_no)  # "nan", "inf", "1e400": no time to count
            continue
        tokens = tokens * r.trained_steps // steps  # iterations the loss scaler skipped trained nothing
        rows.append({"iteration": r.iteration, "seconds": r.elapsed_ms / 1000,  # per iteration
                     "tokens": tokens, "epoch": 0, "paused": False, "steps": steps, "line": r.line_no})
    return rows, assumed_seq, uncounted


def _lines(nos: list[int]) -> str:
    return ("line " if len(nos) == 1 else "lines ") + ", ".join(map(str, nos))


def _content(raw: bytes) -> str:
    """What identifies a log: its text as the parsers read it (:func:`mfctl.hosts.textin.clean`:
    no BOM, LF line ends), without trailing blanks or blank lines — a copy that went through an
    editor or Windows (CRLF) is the same log."""
    from mfctl.hosts.textin import clean

    return "\n".join(line.rstrip() for line in clean(raw).splitlines()).strip("\n")


def find_import(runs_dir: Path, sha256: str, seq_len: int | None) -> Path | None:
    """The run directory under ``runs_dir`` a log with this content (``sha256`` of :func:`_content`) was
    imported into with the same ``seq_len`` (None: the log's own token counts were used), or None."""
    import json

    from mfctl.runtime.rundir import run_dirs

    for rd in run_dirs(runs_dir):
        try:
            d = json.loads((rd / "summary.json").read_text())
        except (OSError, ValueError):
            continue
        if isinstance(d, dict) and d.get("source_sha256") == sha256 and d.get("source_seq_len") == seq_len:
            return rd
    return None


def import_log(log: Path, runs_dir: Path, *, seq_len: int = 4096, force: bool = False) -> RunSummary:
    """Read ``log`` (Megatron / Megatron-DeepSpeed) into a new run under ``runs_dir``; its summary.
    The same content (its sha256) imported again (with the same ``seq_len`` when tokens come from
    it) is the run it was imported into, written nothing (:func:`find_import`; the summary's
    ``already_imported`` says so), unless ``force``: a new run then. Raises ConfigError (the file
    named) when it cannot be read or has no iteration lines."""
    import hashlib

    try:
        raw = log.read_bytes()
        tl = parse_train_log(raw.decode(errors="replace"))
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror}", path=str(log)) from None
    except ParseError as e:
        raise ConfigError(str(e), path=str(log), line=e.line_no) from None
    if not tl.iterations:
        raise ConfigError("no Megatron iteration lines (DeepSpeed step lines alone carry no timing)", path=str(log))
    rows, assumed_seq, uncounted = _rows(tl, seq_len)
    if not rows:
        raise ConfigError("no iteration line with a number for its elapsed time"
                          + (f" ({_lines(uncounted)}: not a finite number)" if uncounted else ""),
                          path=str(log), line=uncounted[0] if uncounted else None)
    for x in rows:  # a count SQLite cannot hold (the parser bounds each line's own numbers)
        if not -MAX_INT <= x["tokens"] <= MAX_INT:
            raise ConfigError(f"tokens per iteration {x['tokens']} out of range (at most {MAX_INT})",
                              path=str(log), line=x["line"])
    sha, key_seq = hashlib.sha256(_content(raw).encode()).hexdigest(), (seq_len if assumed_seq else None)
    prev = None if force else find_import(runs_dir, sha, key_seq)
    if prev is not None:
        from mfctl.runtime.rundir import load_summary

        old = load_summary(prev)
        old.extra["already_imported"] = True
        return old
    run_id = time.strftime("%Y%m%d-%H%M%S-") + "log" + secrets.token_hex(2)
    d = runs_dir.resolve() / run_id
    tmp = d.with_name(f".importing-{run_id}")  # renamed to d once complete: a failure leaves nothing
    try:
        summary = _write(tmp, d, run_id, log, tl, rows, uncounted, seq_len, assumed_seq)
        summary.extra.update(source_sha256=sha, source_seq_len=key_seq)  # what a second import of it finds
        (tmp / "summary.json").write_text(summary.to_json())
        tmp.rename(d)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return summary


def _write(tmp: Path, d: Path, run_id: str, log: Path, tl, rows: list[dict], uncounted: list[int], seq_len: int,
           assumed_seq: bool) -> RunSummary:
    """The run's ``metrics.db`` in ``tmp`` (the directory that becomes ``d``); its summary."""
    secs = [x["seconds"] for x in rows]
    total_s = sum(x["seconds"] * x["steps"] for x in rows)
    if not math.isfinite(total_s):  # finite elapsed times whose sum is not (1e307 ms each)
        raise ConfigError(f"the elapsed times add up to more than a float holds ({_lines([x['line'] for x in rows])})",
                          path=str(log), line=rows[0]["line"])
    total_tokens = sum(x["tokens"] * x["steps"] for x in rows)
    tflops = [r.tflops_per_gpu for r in tl.iterations if r.tflops_per_gpu]
    summary = RunSummary(
        run_id=run_id, status="ok", playbook=log.name, inventory=TRAINING_LOG, run_dir=str(d), time_scale=1.0,
        iterations=sum(x["steps"] for x in rows), iterations_planned=tl.iterations[-1].total, tokens=total_tokens,
        logged_lines=len(rows), tokens_per_s=total_tokens / total_s if total_s else None,
        iteration_time_s={"mean": sum(secs) / len(secs), "p50": sorted(secs)[len(secs) // 2], "min": min(secs),
                          "max": max(secs)},
        tflops_per_gpu_mean=(sum(tflops) / max(1, len(tflops))) or None,
        skipped_iterations=tl.skipped_iterations, simulated_train_s=total_s, wall_train_s=total_s,
        note=(f"{len(rows)} logged lines, each the mean of the iterations since the previous one"
              + (f"; tokens assume {seq_len} tokens per sample (--seq-len): the log has no 'consumed tokens'"
                 if assumed_seq else "")
              + (f"; the log starts at iteration {tl.first_iteration}" if (tl.first_iteration or 1) > 1 else "")
              + (f"; iteration lines cut before their end not read (line {', '.join(map(str, tl.cut_lines))})"
                 if tl.cut_lines else "")
              + (f"; {_lines(uncounted)} not counted: elapsed time per iteration not a finite number"
                 if uncounted else "")))
    if uncounted:
        summary.extra["lines_not_counted"] = uncounted
    store = MetricsStore(tmp / "metrics.db")
    try:
        store.start_run(run_id, str(log.resolve()), TRAINING_LOG, 1.0)
        with store.batch():
            for m in rows:
                store.iteration("log", m)
        store.end_run(run_id, "ok", 0, summary)
    finally:
        store.close()
    return summary
