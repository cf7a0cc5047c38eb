"""Training logs: Megatron(-LM / -Core / -DeepSpeed) iteration lines and DeepSpeed step lines.

Megatron: `` [2024-10-25 03:08:49] iteration       20/   40000 | consumed samples: 1280 |
elapsed time per iteration (ms): 1639.0 | throughput per GPU (TFLOP/s/GPU): 11.9 | … |
lm loss: 1.156039E+01 | … | number of skipped iterations:   0 | number of nan iterations: 0 |``
(the timestamp is optional; Megatron-DeepSpeed adds ``consumed tokens``, ``moe loss`` and its
per-GPU ``TFLOPs: 19.97``). Every line is the mean over the iterations since the previous one
(``--log-interval``); its skipped/nan counts are that interval's (Megatron resets them each log).
Megatron ends every iteration line with ``|``: a line without it was cut (a log still being
written, an excerpt) and is set aside in :attr:`TrainLog.cut_lines`, never read as numbers.

DeepSpeed: ``[Rank 0] step=10, skipped=6, lr=[…]`` and the loss scaler's
``[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768``
(``[deepscale]`` before DeepSpeed 0.5; "but hysteresis is 2. Reducing hysteresis to 1").
Other lines (warnings, memory reports, timers) are ignored; a complete iteration line without
its elapsed time raises ParseError naming its line, and so does one whose iteration numbers are
not 1..2**63-1 (a 64-bit integer, as every store of them holds), whose elapsed time is negative or
whose counts (global batch, consumed samples/tokens, skipped/nan iterations) are negative or over
2**63-1. Values: numbers; ``nan``/``inf`` are kept
out of the numbers (``None``, the field named in ``nonfinite``); durations such as ``1m 52s``
are read as seconds (milliseconds in a ``(ms)`` field); any other value is kept as text in
``text``, never dropped silently.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

from mfctl.errors import ParseError
from mfctl.hosts.textin import normalized

_ITER = re.compile(r"(?:\[(?P<ts>[\d-]+ [\d:]+)\]\s*)?\biteration\s+(?P<it>\d+)\s*/\s*(?P<total>\d+)\s*\|(?P<rest>.*)$")
_DS = re.compile(r"\[Rank (?P<rank>\d+)\] step=(?P<step>\d+), skipped=(?P<skipped>\d+)")
_OVERFLOW = re.compile(r"\[(?:deepspeed|deepscale)\] OVERFLOW! Rank (?P<rank>\d+) Skipping step\.\s*"
                       r"Attempted loss scale: (?P<scale>[\d.eE+]+)(?:, reducing to (?P<new>[\d.eE+]+))?"
                       r"(?P<hyst>, but hysteresis is \d+)?")
#: Megatron's start of training (fresh or resumed) and its checkpoint load ("at iteration N").
_START = re.compile(r"\[before the start of training step\]")
_LOADED = re.compile(r"successfully loaded checkpoint from .* at iteration (?P<it>\d+)")
_DURATION = re.compile(r"^(?:(?P<h>\d+(?:\.\d+)?)\s*h)?\s*(?:(?P<m>\d+(?:\.\d+)?)\s*m(?:in)?)?\s*"
                       r"(?:(?P<s>\d+(?:\.\d+)?)\s*s)?\s*(?:(?P<ms>\d+(?:\.\d+)?)\s*ms)?$")

ELAPSED = "elapsed time per iteration (ms)"
MAX_INT = 2**63 - 1  #: the largest count a line may give: a 64-bit integer (SQLite's INTEGER, numpy's int64)
#: Counts that cannot be negative (the iteration numbers are checked apart).
COUNTS = ("global batch size", "consumed samples", "consumed tokens", "number of skipped iterations",
          "number of nan iterations")
#: Fields read into IterationRecord's own attributes (the rest go to ``extra``).
KNOWN = {ELAPSED: "elapsed_ms", "throughput per GPU (TFLOP/s/GPU)": "tflops_per_gpu", "TFLOPs": "tflops_per_gpu",
         "lm loss": "lm_loss", "global batch size": "global_batch", "consumed samples": "consumed_samples",
         "consumed tokens": "consumed_tokens", "number of skipped iterations": "skipped",
         "number of nan iterations": "nan"}


@dataclass
class IterationRecord:
    """One logged Megatron line: the mean of ``steps`` iterations ending at ``iteration``."""

    iteration: int
    total: int
    timestamp: str | None
    elapsed_ms: float | None
    tflops_per_gpu: float | None  # "throughput per GPU (TFLOP/s/GPU)" or Megatron-DeepSpeed's "TFLOPs"
    lm_loss: float | None
    global_batch: int | None
    consumed_samples: int | None
    consumed_tokens: int | None
    skipped: int | None  # this interval's skipped iterations (loss scaler)
    nan: int | None
    extra: dict[str, float] = field(default_factory=dict)
    steps: int = 1  # the iterations this line stands for (see TrainLog.log_interval)
    line_no: int = 0
    nonfinite: list[str] = field(default_factory=list)  # fields that read nan / inf (their value: None)
    text: dict[str, str] = field(default_factory=dict)  # fields whose value is not a number

    @property
    def trained_steps(self) -> int:
        """The iterations of this interval the optimizer took (skipped ones trained nothing)."""
        return max(0, self.steps - (self.skipped or 0))


@dataclass
class Overflow:
    """A DeepSpeed loss-scaler overflow: the step was skipped."""

    line_no: int
    rank: int
    attempted_scale: float
    new_scale: float | None  # None: hysteresis absorbed it (scale kept)


@dataclass
class TrainLog:
    iterations: list[IterationRecord] = field(default_factory=list)
    deepspeed_steps: list[tuple[int, int]] = field(default_factory=list)  # (step, skipped so far)
    overflows: list[Overflow] = field(default_factory=list)
    cut_lines: list[int] = field(default_factory=list)  # iteration lines cut before their end (not read)
    log_interval: int | None = None  # the usual gap between logged iterations; None with one line
    start_iteration: int | None = None  # 0: the log starts with the run; N: resumed at N; None: unknown (excerpt)

    @property
    def first_iteration(self) -> int | None:
        """The first iteration the log covers (> 1 for a resumed run or an excerpt)."""
        return self.iterations[0].iteration - self.iterations[0].steps + 1 if self.iterations else None

    @property
    def skipped_iterations(self) -> int:
        """Iterations skipped by the loss scaler over the whole log: Megatron's per-interval counts
        summed, or DeepSpeed's last running ``skipped=`` count, or its OVERFLOW lines."""
        if self.iterations and any(r.skipped is not None for r in self.iterations):
            return sum(r.skipped or 0 for r in self.iterations)
        if self.deepspeed_steps:
            return self.deepspeed_steps[-1][1]
        return len(self.overflows)  # every OVERFLOW line is a skipped step


def _value(v: str, key: str) -> tuple[object, str]:
    """(value, kind): kind is "num", "nonfinite" or "text"."""
    v = v.strip()
    if re.fullmatch(r"[+-]?\d+", v):
        return int(v), "num"
    try:
        x = float(v)
    except ValueError:
        d = _DURATION.match(v)
        if v and d and any(d.groupdict().values()):
            secs = sum(float(d[k] or 0) * f for k, f in (("h", 3600), ("m", 60), ("s", 1), ("ms", 0.001)))
            return (secs * 1000 if "(ms)" in key else secs), "num"
        return v, "text"
    if not math.isfinite(x):
        return None, "nonfinite"
    return x, "num"


def _record(no: int, m: re.Match, ln: str) -> IterationRecord:
    kv: dict[str, object] = {}
    nonfinite: list[str] = []
    text: dict[str, str] = {}
    for part in m.group("rest").split("|"):
        if ":" not in part:
            continue
        k, _, v = part.rpartition(":")
        k = k.strip()
        val, kind = _value(v, k)
        if kind == "nonfinite":
            nonfinite.append(k)
        elif kind == "text":
            text[k] = str(val)
            continue
        kv[k] = val
    if ELAPSED not in kv and ELAPSED not in nonfinite:
        raise ParseError("megatron log", no, f"'{ELAPSED}: N' in an iteration line", ln.strip()[:120])
    for k in ("it", "total"):
        if not 1 <= int(m.group(k)) <= MAX_INT:
            raise ParseError("megatron log", no, f"iteration numbers 'N/ M' from 1 to {MAX_INT}",
                             f"{m.group('it')}/ {m.group('total')}")
    elapsed = kv.get(ELAPSED)
    if isinstance(elapsed, (int, float)) and elapsed < 0:
        raise ParseError("megatron log", no, f"'{ELAPSED}' of 0 or more", f"{ELAPSED}: {elapsed}")
    for k in COUNTS:
        x = kv.get(k)
        if isinstance(x, (int, float)) and not 0 <= x <= MAX_INT:
            raise ParseError("megatron log", no, f"'{k}' from 0 to {MAX_INT}", f"{k}: {x}")

    def num(k: str, as_int: bool = False):
        names = [n for n, a in KNOWN.items() if a == k]
        x = next((kv[n] for n in names if kv.get(n) is not None), None)
        return int(x) if as_int and isinstance(x, float) and x.is_integer() else x

    return IterationRecord(
        iteration=int(m.group("it")), total=int(m.group("total")), timestamp=m.group("ts"),
        elapsed_ms=num("elapsed_ms"), tflops_per_gpu=num("tflops_per_gpu"), lm_loss=num("lm_loss"),
        global_batch=num("global_batch", True), consumed_samples=num("consumed_samples", True),
        consumed_tokens=num("consumed_tokens", True), skipped=num("skipped", True), nan=num("nan", True),
        extra={k: v for k, v in kv.items() if k not in KNOWN and isinstance(v, (int, float))},
        line_no=no, nonfinite=nonfinite, text=text)


def _steps(recs: list[IterationRecord], start: int | None) -> int | None:
    """Each record's ``steps`` (the gap since the previous line). The first line's: the gap since
    ``start`` when the log shows where the run (re)started, else the log interval (the most common
    gap, at least the line's skipped count), capped at its iteration number: an excerpt or a
    resumed run never stands for iterations 1..N. Returns the interval."""
    gaps = [b.iteration - a.iteration for a, b in zip(recs, recs[1:]) if b.iteration > a.iteration]
    interval = Counter(gaps).most_common(1)[0][0] if gaps else None
    for i, r in enumerate(recs):
        if i:
            r.steps = max(1, r.iteration - recs[i - 1].iteration)
        elif start is not None and r.iteration > start:
            r.steps = r.iteration - start
        else:
            r.steps = max(1, min(r.iteration, max(interval or 1, r.skipped or 0)))
    return interval


@normalized
def parse_train_log(text: str) -> TrainLog:
    """Parse a Megatron / DeepSpeed training log. Raises ParseError naming the line of a complete
    iteration line without its elapsed time, or when the text has no training line at all."""
    out = TrainLog()
    for no, ln in enumerate(text.splitlines(), 1):
        m = _ITER.search(ln)
        if m:
            if not ln.rstrip().endswith("|"):
                out.cut_lines.append(no)  # cut while being written: its last number may be partial
                continue
            out.iterations.append(_record(no, m, ln))
            continue
        if out.start_iteration is None and _START.search(ln):
            out.start_iteration = 0
        c = _LOADED.search(ln)
        if c:
            out.start_iteration = int(c.group("it"))
            continue
        d = _DS.search(ln)
        if d:
            out.deepspeed_steps.append((int(d.group("step")), int(d.group("skipped"))))
            continue
        o = _OVERFLOW.search(ln)
        if o:
            out.overflows.append(Overflow(no, int(o.group("rank")), float(o.group("scale")),
                                          None if o.group("hyst") or not o.group("new") else float(o.group("new"))))
    if not out.iterations and not out.deepspeed_steps and not out.overflows:
        why = f" (line {out.cut_lines[0]} is an iteration line cut before its end)" if out.cut_lines else ""
        raise ParseError("training log", out.cut_lines[0] if out.cut_lines else None,
                         "Megatron 'iteration N/ M |' or DeepSpeed '[Rank r] step=N' lines" + why)
    out.log_interval = _steps(out.iterations, out.start_iteration)
    return out
