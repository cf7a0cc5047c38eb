"""Benchmarks the mock host answers: nccl-tests' ``all_reduce_perf`` / ``alltoall_perf`` and
``mfctl-gemm-bench``, from modelled costs of an 8 x A100 node (α + β·n, ±2 % noise)."""

from __future__ import annotations

import random

NCCL_MODEL = {"all_reduce_perf": (22e-6, 1 / 110e9, 2.0), "alltoall_perf": (35e-6, 1 / 95e9, 1.0)}


def nccl(cfg, argv, out, err):
    test, args = argv[0], argv[1:]
    def size(x):
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        return int(float(x[:-1]) * mult[x[-1]]) if x[-1] in mult else int(x)
    try:
        b = size(args[args.index("-b") + 1]) if "-b" in args else 8
        e = size(args[args.index("-e") + 1]) if "-e" in args else 1 << 28
        f = int(args[args.index("-f") + 1]) if "-f" in args else 2
    except (ValueError, IndexError):
        err(f"{test}: invalid size arguments\n")
        return 1
    alpha, beta, busfactor = NCCL_MODEL[test]
    if test == "alltoall_perf" and "-n" in args:  # the inter-node variant: the host's live NIC lanes
        rate = 0.0
        for nic in cfg.nics.values():
            for nd in nic.netdevs:
                lane = cfg.lane_for(nd)
                if lane is not None and (lane.ocs_tx is None or cfg.host.lane_up(lane)):
                    rate += nic.speed_gbps / len(nic.netdevs) * 1e9 / 8 * 0.92
        beta, busfactor = 1 / max(rate, 1.0), 1.0
    rnd = random.Random(f"{cfg.host.name}{test}")
    redop = "sum" if test == "all_reduce_perf" else "none"
    lines = [f"# nThread 1 nGpus 8 minBytes {b} maxBytes {e} step: {f}(factor) "
             "warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
             "#", f"#{'':>59}out-of-place                       in-place          ",
             "#       size         count      type   redop    root     time   algbw   busbw #wrong"
             "     time   algbw   busbw #wrong",
             "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
             "            (us)  (GB/s)  (GB/s)       "]
    n = b
    while n <= e:
        t = (alpha + beta * n) * rnd.uniform(0.98, 1.02)
        algbw = n / t / 1e9
        lines.append(f"{n:>12} {n // 4:>13}     float {redop:>7}      -1 {t * 1e6:>8.2f} "
                     f"{algbw:>7.2f} {algbw * busfactor:>7.2f}"
                     f"      0 {t * 1e6 * rnd.uniform(0.99, 1.01):>8.2f} {algbw:>7.2f} {algbw * busfactor:>7.2f}      0")
        n *= f
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 42.0", "#"]
    out("\n".join(lines) + "\n")
    return 0


def gemm(cfg, args, out, err):
    hidden = int(args[args.index("--hidden") + 1]) if "--hidden" in args else 4096
    ffn = int(args[args.index("--ffn") + 1]) if "--ffn" in args else 14336
    rnd = random.Random(cfg.host.name)
    for m in (256, 512, 1024, 2048, 4096, 8192, 16384):
        flops = 2 * m * ffn * hidden
        t = (12e-6 + flops / (0.65 * 312e12)) * rnd.uniform(0.98, 1.02)
        out(f"{m} {ffn} {hidden} {t * 1e6:.2f} {flops / t / 1e12:.1f}\n")
    return 0
