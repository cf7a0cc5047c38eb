"""A real gloo job on the CPU, ``--world`` ranks, each measuring through
:class:`mfctl.integrations.torch_timing.Timings` ``all_to_all_single`` over a sweep of send-buffer
sizes and an expert FFN's two GEMMs over a sweep of token counts, and writing its drained samples
(``[{"task", "n", "unit", "seconds"}, ...]``) to ``OUTDIR/rank<R>.json``; then 64 KiB all-to-alls
with rank 1 arriving 20 ms late, timed without and with ``sync_peers`` (marked ``"skew": true``).

    python gloo_timings_ranks.py --world W --port P --outdir DIR [--reps N]

The ranks are processes forked from this one once torch is imported (torch imported once, not
per rank: on a loaded 2-core machine an import takes 15 s of wall), each with its own gloo
process group over 127.0.0.1:P; exit 0 when every rank did.

One intra-op thread per rank (``torch.set_num_threads(1)``): the ranks share the machine's cores,
as the ranks of one host share its GPUs' host threads. Sizes: send buffers of 1 KiB … 1 MiB
(×4 steps; float32, equal splits), FFN hidden 128 × expert width 512 (×4 token steps 1 … 1024).
"""

import argparse
import json
import os

import torch
import torch.distributed as dist

from mfctl.integrations.torch_timing import Timings

SEND_BYTES = [2**k for k in range(10, 21, 2)]  # 1 KiB .. 1 MiB
TOKENS = [4**k for k in range(6)]  # 1 .. 1024
HIDDEN, FFN = 128, 512
SKEW_S, SKEW_CALLS = 0.020, 8  # rank 1's extra compute before each all-to-all of the skew phase


def rank_main(rank: int, a: argparse.Namespace) -> None:
    import datetime
    import time

    t0 = time.monotonic()
    torch.set_num_threads(1)
    torch.manual_seed(rank)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(a.port))
    dist.init_process_group("gloo", rank=rank, world_size=a.world, timeout=datetime.timedelta(seconds=60))
    try:
        warm = torch.ones(a.world)
        dist.all_to_all_single(torch.empty_like(warm), warm)  # the connections are set up before timing
        t = Timings(max_samples=len(SEND_BYTES) * a.reps * 2)
        for _ in range(a.reps):
            for n in SEND_BYTES:
                x = torch.ones(n // 4)
                t.all_to_all_single(torch.empty_like(x), x)
        w1, w2 = torch.randn(HIDDEN, FFN), torch.randn(FFN, HIDDEN)
        for _ in range(a.reps):
            for tok in TOKENS:
                x = torch.randn(tok, HIDDEN)
                h = torch.relu(t.gemm(torch.matmul, x, w1, flops=2 * tok * HIDDEN * FFN))
                t.gemm(torch.matmul, h, w2, flops=2 * tok * FFN * HIDDEN)
        samples = t.drain()
        # a skewed peer: rank 1 computes 20 ms longer before each all-to-all (a hot expert's rank);
        # rank 0's time includes that wait, unless the peers are synchronized before the clock starts
        for sync in (False, True):
            skew = Timings(max_samples=SKEW_CALLS, sync_peers=sync)
            for _ in range(SKEW_CALLS):
                if rank == 1:
                    time.sleep(SKEW_S)
                x = torch.ones(65536 // 4)
                skew.all_to_all_single(torch.empty_like(x), x)
            samples += [s | {"skew": True, "sync_peers": sync} for s in skew.drain()]
        dist.barrier()
        print(f"rank {rank}: rendezvous and sweeps {time.monotonic() - t0:.1f} s wall, "
              f"{time.process_time():.1f} s CPU", flush=True)
    finally:
        dist.destroy_process_group()
    with open(os.path.join(a.outdir, f"rank{rank}.json"), "w") as f:
        json.dump(samples, f)


def main() -> None:
    import multiprocessing as mp
    import sys

    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--outdir", required=True)
    ap.add_argument("--reps", type=int, default=32)
    a = ap.parse_args()
    ranks = [mp.get_context("fork").Process(target=rank_main, args=(r, a)) for r in range(a.world)]
    for p in ranks:
        p.start()
    for p in ranks:
        p.join(90)
    for p in ranks:
        if p.is_alive():
            p.kill()
            p.join()
    sys.exit(0 if all(p.exitcode == 0 for p in ranks) else 1)


if __name__ == "__main__":
    main()
