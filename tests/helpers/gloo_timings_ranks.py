"""One rank of a real gloo job on the CPU that measures, through
:class:`mfctl.integrations.torch_timing.Timings`, ``all_to_all_single`` over a sweep of send-buffer
sizes and an expert FFN's two GEMMs over a sweep of token counts, and writes the drained samples
(``[{"task", "n", "unit", "seconds"}, ...]``) to ``--out`` as JSON.

    python gloo_timings_ranks.py --rank R --world W --port P --out FILE [--reps N]

One intra-op thread per rank (``torch.set_num_threads(1)``): the ranks share the machine's cores,
as the ranks of one host share its GPUs' host threads. Sizes: send buffers of 1 KiB … 4 MiB
(×4 steps; float32, equal splits), FFN hidden 128 × expert width 512 (×4 token steps 1 … 1024).
"""

import argparse
import json
import os

import torch
import torch.distributed as dist

from mfctl.integrations.torch_timing import Timings

SEND_BYTES = [2**k for k in range(10, 23, 2)]  # 1 KiB .. 4 MiB
TOKENS = [4**k for k in range(6)]  # 1 .. 1024
HIDDEN, FFN = 128, 512


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=24)
    a = ap.parse_args()
    import time

    t0 = time.monotonic()
    torch.set_num_threads(1)
    torch.manual_seed(a.rank)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(a.port))
    dist.init_process_group("gloo", rank=a.rank, world_size=a.world, timeout=__import__("datetime").timedelta(seconds=60))
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
        dist.barrier()
        print(f"rank {a.rank}: rendezvous and sweeps {time.monotonic() - t0:.1f} s wall, "
              f"{time.process_time():.1f} s CPU")
    finally:
        dist.destroy_process_group()
    with open(a.out, "w") as f:
        json.dump(samples, f)


if __name__ == "__main__":
    main()
