"""Honest wall-clock timings of a torch job's all-to-all and expert GEMMs, for ``mfctl profile --run``.

A training job wraps its expert-parallel ``all_to_all_single`` and its expert FFN matmuls in one
:class:`Timings`, and sends :meth:`Timings.drain` as the ``timings`` field of its ``iteration``
message (docs/runtime-protocol.md); the controller stores them in the run's ``metrics.db``
(``timings`` table, docs/metrics.md) and ``mfctl profile --run RUN`` fits ``t = α + β·n`` per task
(:func:`mfctl.fabric.profile.fit_linear`), which ``mfctl schedule`` then uses.

What is timed. ``time.perf_counter`` around the call. When the tensors are CUDA tensors the device
is synchronized (``torch.cuda.synchronize``) before the first reading — so earlier queued kernels
are not billed to this call — and before the second — so the call's own kernels are finished, not
merely launched. On the CPU (gloo) the calls are synchronous and nothing is synchronized. An
all-to-all's time is this rank's: it includes waiting for the slowest peer to join. In a training
job that wait (the ranks' load imbalance: a router's uneven expert loads, a preempted peer) can be
most of it — a 64 B count exchange measured slower than a 128 KiB dispatch in the plain-torch MoE
job on the loaded mock — so ``Timings(sync_peers=True)`` first waits for every rank of the group
(``torch.distributed.barrier``, untimed) and then times the collective alone, as nccl-tests'
back-to-back ``alltoall_perf`` iterations do; it costs one barrier per call.

Units. ``n`` of ``"alltoall"`` is bytes of this rank's send buffer (``input.numel() ×
input.element_size()``: nccl-tests' ``alltoall_perf`` "size" column), unit ``"byte"``; ``n`` of
``"gemm"`` is the FLOP count the caller states (``2·m·k·n`` for an ``(m×k)·(k×n)`` matmul), unit
``"flop"``; ``seconds`` are wall seconds.

Which samples are kept. At most ``max_samples`` per task between two drains, chosen by reservoir
sampling (Vitter's algorithm R, a private seeded ``random.Random``): every call since the last
drain is kept with the same probability, so a long interval is sampled uniformly instead of only
its first calls, and the memory and the message stay bounded. :meth:`drain` returns them in call order.

torch is imported only when a CUDA tensor must be synchronized or a collective is run, so
importing this module (and ``mfctl``) never needs torch.
"""

from __future__ import annotations

import math
import random
import threading
import time
from typing import Any, Callable

#: task names and the unit of their ``n`` (what ``mfctl profile --run`` fits)
TASK_UNITS = {"alltoall": "byte", "gemm": "flop"}


def _cuda_device(tensors) -> Any:
    """The device of the first CUDA tensor among ``tensors`` (None when there is none). Reads
    ``is_cuda`` without importing torch: a non-tensor has none."""
    for x in tensors:
        if getattr(x, "is_cuda", False) is True:
            return x.device
    return None


def _sync(device) -> None:
    if device is not None:
        import torch

        torch.cuda.synchronize(device)


class Timings:
    """Per-task samples ``(n, seconds)`` of one rank, bounded by ``max_samples`` per task between
    drains (reservoir sampling; see the module doc). Thread-safe. ``seed`` seeds the reservoir's
    choice (reproducible runs); ``sync_peers``: barrier the group before each timed all-to-all, so
    that its time leaves out the wait for the slowest rank (module doc)."""

    def __init__(self, max_samples: int = 64, *, seed: int = 0, sync_peers: bool = False):
        if not isinstance(max_samples, int) or isinstance(max_samples, bool) or max_samples < 1:
            raise ValueError(f"max_samples must be a positive int, got {max_samples!r}")
        self.max_samples = max_samples
        self.sync_peers = bool(sync_peers)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._seq = 0
        self._kept: dict[str, list[tuple[int, float, float]]] = {}  # task → [(call seq, n, seconds)]
        self._seen: dict[str, int] = {}  # task → calls since the last drain

    def record(self, task: str, n: float, seconds: float) -> None:
        """Record one measurement of ``task`` (a key of :data:`TASK_UNITS`): ``n`` units of work
        took ``seconds`` wall seconds. Raises ValueError for an unknown task or a non-finite or
        negative ``n``/``seconds``."""
        if task not in TASK_UNITS:
            raise ValueError(f"unknown task {task!r} (known: {', '.join(TASK_UNITS)})")
        n, seconds = float(n), float(seconds)
        if not (math.isfinite(n) and n >= 0 and math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"{task}: n and seconds must be finite and >= 0, got n={n}, seconds={seconds}")
        with self._lock:
            self._seq += 1
            seen = self._seen.get(task, 0) + 1
            self._seen[task] = seen
            kept = self._kept.setdefault(task, [])
            if len(kept) < self.max_samples:
                kept.append((self._seq, n, seconds))
            else:  # algorithm R: the seen-th call replaces a kept one with probability max_samples/seen
                j = self._rng.randrange(seen)
                if j < self.max_samples:
                    kept[j] = (self._seq, n, seconds)

    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None, group=None):
        """``torch.distributed.all_to_all_single(output, input, output_split_sizes,
        input_split_sizes, group=group)`` (synchronous), timed and recorded as ``"alltoall"`` with
        ``n`` = bytes of ``input`` (this rank's send buffer); with ``sync_peers`` after an untimed
        barrier of ``group``. Returns what torch returns (None)."""
        import torch.distributed as dist

        device = _cuda_device((input, output))
        n = input.numel() * input.element_size()
        _sync(device)
        if self.sync_peers:  # every rank is here: the time is the collective's, not this rank's wait
            dist.barrier(group=group)
            _sync(device)
        t0 = time.perf_counter()
        out = dist.all_to_all_single(output, input, output_split_sizes=output_split_sizes,
                                     input_split_sizes=input_split_sizes, group=group)
        _sync(device)
        self.record("alltoall", n, time.perf_counter() - t0)
        return out

    def gemm(self, fn: Callable, *args, flops: float):
        """``fn(*args)``, timed and recorded as ``"gemm"`` with ``n`` = ``flops`` (FLOP, as the
        caller counts them: ``2·m·k·n`` per ``(m×k)·(k×n)`` matmul); returns ``fn``'s result. The
        device is synchronized around the call when any of ``args`` is a CUDA tensor."""
        flops = float(flops)
        if not (math.isfinite(flops) and flops >= 0):
            raise ValueError(f"gemm: flops must be finite and >= 0, got {flops}")
        device = _cuda_device(args)
        _sync(device)
        t0 = time.perf_counter()
        out = fn(*args)
        _sync(device)
        self.record("gemm", flops, time.perf_counter() - t0)
        return out

    def drain(self) -> list[dict]:
        """The samples recorded since the last drain, in call order, as ``[{"task", "n", "unit",
        "seconds"}, ...]`` (``n`` an int when whole: bytes or FLOP; ``seconds`` wall s) — the
        ``iteration`` message's ``timings`` field — and start afresh."""
        with self._lock:
            kept, self._kept, self._seen = self._kept, {}, {}
        rows = sorted((seq, task, n, s) for task, xs in kept.items() for seq, n, s in xs)
        return [{"task": task, "n": int(n) if n.is_integer() and abs(n) < 2**63 else n, "unit": TASK_UNITS[task],
                 "seconds": s} for _, task, n, s in rows]
