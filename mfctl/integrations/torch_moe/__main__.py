"""``python -m mfctl.integrations.torch_moe``: the torch MoE job (one process, or one per rank under
torchrun: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT`` from its
environment; ``MFCTL_CONTROLLER``, ``MFCTL_HOST``, ``MFCTL_RUN_TOKEN_FILE`` from ``mfctl run``)."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from mfctl.integrations.torch_moe.job import Options, main


def parse(argv: list[str] | None = None) -> Options:
    ap = argparse.ArgumentParser(prog="python -m mfctl.integrations.torch_moe",
                                 description="a small MoE transformer trained with expert parallelism over "
                                             "torch.distributed, reporting its routing to mfctl")
    for f in dataclasses.fields(Options):
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            ap.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default)
        elif f.name == "backend":
            ap.add_argument(flag, choices=("auto", "gloo", "nccl"), default=f.default)
        else:
            kind = {"int": int, "float": float}.get(str(f.type), str)
            ap.add_argument(flag, type=kind, default=f.default,
                            help=f"default {f.default}" + ("; the welcome's when run by mfctl" if f.name in
                                 ("iterations", "seed", "phase_iterations", "micro_batches", "layers", "hidden",
                                  "bytes_per_element") else ""))
    ns = ap.parse_args(argv)
    opt = Options(**vars(ns))
    if opt.experts % 1 or opt.top_k > opt.experts or opt.d_model % opt.heads:
        ap.error("--top-k must be at most --experts, and --d-model a multiple of --heads")
    return opt


if __name__ == "__main__":
    sys.exit(main(parse()))
