"""``mfctl-gemm-bench``: time bf16 GEMMs of the expert shapes on the local GPU (PyTorch).

Prints one line per shape: ``M N K time_us TFLOP/s``. Needs PyTorch with CUDA on the host;
without it, exits 2 with a message (mfctl profile then reports the host as failed)."""

from __future__ import annotations

import sys


def main(argv=None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    hidden = int(args[args.index("--hidden") + 1]) if "--hidden" in args else 4096
    ffn = int(args[args.index("--ffn") + 1]) if "--ffn" in args else 14336
    try:
        import torch
    except ImportError:
        print("mfctl-gemm-bench: PyTorch is not installed on this host", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("mfctl-gemm-bench: no CUDA device", file=sys.stderr)
        return 2
    for m in (256, 512, 1024, 2048, 4096, 8192, 16384):
        a = torch.randn(m, hidden, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(hidden, ffn, dtype=torch.bfloat16, device="cuda")
        for _ in range(3):
            a @ b
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            a @ b
        end.record()
        torch.cuda.synchronize()
        us = start.elapsed_time(end) * 100  # ms for 10 → us per GEMM
        print(f"{m} {ffn} {hidden} {us:.2f} {2 * m * ffn * hidden / us / 1e6:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
