"""Real multi-process runs of the torch MoE job's pieces on gloo, for tests/unit/integrations/test_torch_moe.py.

``python torch_moe_ranks.py MODE WORLD PER_HOST MASTER_PORT OUT_DIR [CONTROLLER] [-- JOB ARGS]`` forks
WORLD ranks (torch imported once, then ``fork``: an import is ~2 s of CPU), ranks ``PER_HOST`` to a
host (``gpu01``, ``gpu02``, … as ``MFCTL_HOST``; ``LOCAL_RANK`` within it), each with the environment
torchrun gives (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``), and with
``MFCTL_CONTROLLER``/``MFCTL_RUN_TOKEN=tok`` when a controller is given. Modes:

- ``job``: the job itself (``mfctl.integrations.torch_moe.job.main``), ``--out OUT_DIR``: each rank
  writes ``rank<N>.json`` (its per-iteration counts, losses, what its client sent, its events);
- ``dispatch``: one MoE layer (8 experts, top-2) on seeded inputs ``x_r`` (rank r); each rank
  writes its output, the gradient of ``Σ out·w_r`` w.r.t. ``x_r`` and its local experts' gradients
  to ``dispatch<N>.pt``, for the test's one-process reference.
"""

from __future__ import annotations

import os
import sys

DISPATCH = dict(d_model=16, ffn=24, experts=8, top_k=2, tokens=40)


def dispatch_inputs(rank: int):
    import torch

    g = torch.Generator().manual_seed(500 + rank)
    d = DISPATCH["d_model"]
    return torch.randn(DISPATCH["tokens"], d, generator=g), torch.randn(DISPATCH["tokens"], d, generator=g)


def _dispatch(rank: int, world: int, out_dir: str) -> None:
    import torch
    import torch.distributed as dist

    from mfctl.integrations.torch_moe.dispatch import ExpertParallel
    from mfctl.integrations.torch_moe.model import MoEConfig, MoELayer
    from mfctl.integrations.torch_timing import Timings

    dist.init_process_group("gloo")
    cfg = MoEConfig(d_model=DISPATCH["d_model"], ffn=DISPATCH["ffn"], experts=DISPATCH["experts"], top_k=DISPATCH["top_k"])
    t = Timings(max_samples=64)
    torch.manual_seed(cfg.seed)
    layer = MoELayer(cfg, ExpertParallel(cfg.experts, timings=t), 0)
    x, w = dispatch_inputs(rank)
    x.requires_grad_(True)
    out, _ = layer(x)
    (out * w).sum().backward()
    torch.save({"out": out.detach(), "grad_x": x.grad, "w1_grad": layer.experts.w1.grad, "w2_grad": layer.experts.w2.grad,
                "counts": layer.counts, "first": layer.ep.first, "timings": t.drain()},
               os.path.join(out_dir, f"dispatch{rank}.pt"))
    dist.destroy_process_group()


def _rank(rank: int, mode: str, world: int, per_host: int, port: int, out_dir: str, controller: str,
          job_args: list[str]) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank % per_host),
                      LOCAL_WORLD_SIZE=str(per_host), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      MFCTL_HOST=f"gpu{rank // per_host + 1:02d}")
    if controller:
        os.environ.update(MFCTL_CONTROLLER=controller, MFCTL_RUN_TOKEN="tok")
    if mode == "dispatch":
        _dispatch(rank, world, out_dir)
        return
    from mfctl.integrations.torch_moe.__main__ import parse
    from mfctl.integrations.torch_moe.job import main

    rc = main(parse([*job_args, "--out", out_dir]))
    if rc:
        raise SystemExit(rc)


def main(argv: list[str]) -> None:
    import faulthandler

    import torch  # noqa: F401  imported once here, then forked
    import torch.multiprocessing as mp

    faulthandler.dump_traceback_later(170, exit=True)  # a hung collective shows where (the test kills the group)
    job_args = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    mode, world, per_host, port, out_dir = argv[0], int(argv[1]), int(argv[2]), int(argv[3]), argv[4]
    controller = argv[5] if len(argv) > 5 else ""
    mp.start_processes(_rank, args=(mode, world, per_host, port, out_dir, controller, job_args), nprocs=world,
                       join=True, start_method="fork")


if __name__ == "__main__":
    main(sys.argv[1:])
