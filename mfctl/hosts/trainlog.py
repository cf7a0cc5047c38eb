"""Training logs: Megatron(-LM / -Core / -DeepSpeed) iteration lines and DeepSpeed step lines.

Megatron: `` [2024-10-25 03:08:49] iteration       20/   40000 | consumed samples: 1280 |
elapsed time per iteration (ms): 1639.0 | throughput per GPU (TFLOP/s/GPU): 11.9 | … |
lm loss: 1.156039E+01 | … | number of skipped iterations:   0 | number of nan iterations: 0 |``
(the timestamp is optional; Megatron-DeepSpeed adds ``consumed tokens`` and ``moe loss``).
DeepSpeed: ``[Rank 0] step=10, skipped=0, lr=[…]``. Other lines (warnings, memory reports,
timers) are ignored; a malformed iteration line raises ParseError naming its line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mfctl.errors import ParseError

_ITER = re.compile(r"(?:\[(?P<ts>[\d-]+ [\d:]+)\]\s*)?iteration\s+(?P<it>\d+)\s*/\s*(?P<total>\d+)\s*\|(?P<rest>.*)$")
_DS = re.compile(r"\[Rank (?P<rank>\d+)\] step=(?P<step>\d+), skipped=(?P<skipped>\d+)")


@dataclass
class IterationRecord:
    iteration: int
    total: int
    timestamp: str | None
    elapsed_ms: float | None
    tflops_per_gpu: float | None
    lm_loss: float | None
    global_batch: int | None
    consumed_samples: int | None
    consumed_tokens: int | None
    skipped: int | None
    nan: int | None
    extra: dict[str, float] = field(default_factory=dict)


@dataclass
class TrainLog:
    iterations: list[IterationRecord] = field(default_factory=list)
    deepspeed_steps: list[tuple[int, int]] = field(default_factory=list)  # (step, skipped)


def _num(v: str):
    v = v.strip()
    try:
        return int(v) if re.fullmatch(r"-?\d+", v) else float(v)
    except ValueError:
        return None


def parse_train_log(text: str) -> TrainLog:
    out = TrainLog()
    for no, ln in enumerate(text.splitlines(), 1):
        m = _ITER.search(ln)
        if m:
            kv = {}
            for part in m.group("rest").split("|"):
                if ":" in part:
                    k, _, v = part.rpartition(":")
                    kv[k.strip()] = _num(v)
            if "elapsed time per iteration (ms)" not in kv:
                raise ParseError("megatron log", no, "'elapsed time per iteration (ms): N' in an iteration line",
                                 ln.strip()[:120])
            known = {"elapsed time per iteration (ms)", "throughput per GPU (TFLOP/s/GPU)", "lm loss", "global batch size",
                     "consumed samples", "consumed tokens", "number of skipped iterations", "number of nan iterations"}
            out.iterations.append(IterationRecord(
                iteration=int(m.group("it")), total=int(m.group("total")), timestamp=m.group("ts"),
                elapsed_ms=kv.get("elapsed time per iteration (ms)"), tflops_per_gpu=kv.get("throughput per GPU (TFLOP/s/GPU)"),
                lm_loss=kv.get("lm loss"), global_batch=kv.get("global batch size"), consumed_samples=kv.get("consumed samples"),
                consumed_tokens=kv.get("consumed tokens"), skipped=kv.get("number of skipped iterations"),
                nan=kv.get("number of nan iterations"),
                extra={k: v for k, v in kv.items() if k not in known and isinstance(v, (int, float))}))
            continue
        d = _DS.search(ln)
        if d:
            out.deepspeed_steps.append((int(d.group("step")), int(d.group("skipped"))))
    if not out.iterations and not out.deepspeed_steps:
        raise ParseError("training log", None, "Megatron 'iteration N/ M |' or DeepSpeed '[Rank r] step=N' lines")
    return out
