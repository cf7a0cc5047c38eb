"""The torch MoE job's options and their command line, apart from the job so that ``mfctl run`` can
check a playbook's ``runtime.script_args`` before anything starts (importing neither torch nor the job).

``python -m mfctl.integrations.torch_moe --help`` lists them; :func:`parse` reads a command line,
:func:`check` says what is wrong with one (the argparse message, or a value out of its range).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass

PROG = "python -m mfctl.integrations.torch_moe"

#: what the welcome of ``mfctl run`` overrides (the playbook's training and model sections say them)
FROM_WELCOME = ("iterations", "seed", "phase_iterations", "micro_batches", "layers", "hidden", "bytes_per_element")


@dataclass
class Options:
    """The job's own settings (command line); the welcome overrides ``iterations``, ``seed``,
    ``phase_iterations``, ``micro_batches``, ``layers``, ``hidden`` and ``bytes_per_element``."""

    iterations: int = 40
    layers: int = 2
    d_model: int = 32
    heads: int = 4
    experts: int = 8
    top_k: int = 2
    ffn: int = 64
    seq_len: int = 64
    batch: int = 16  # sequences per rank and micro-batch
    micro_batches: int = 1
    lr: float = 3e-3
    aux_loss: float = 0.01
    seed: int = 1
    phase_iterations: int = 10
    hidden: int = 4096  # bytes per reported token = hidden × bytes_per_element (traffic.py)
    bytes_per_element: int = 2
    backend: str = "auto"  # gloo on CPU, nccl with CUDA
    threads: int = 1
    dist_timeout_s: float = 120.0
    log_routing: bool = True
    sync_timings: bool = True  # Timings(sync_peers=): an untimed barrier before each timed all-to-all
    # FSMoE's choices, as mfctl run passes them to a training script (docs/runtime-protocol.md):
    grad_partitions: int = 1  # the dense gradients' all-reduce in this many parts
    pipeline_degree: int = 0  # accepted; this job's dispatch is not pipelined (degree 1), said at start
    bp_pipeline_degree: int = 0
    out: str | None = None  # a JSON record of this rank (tests)



class OptionsError(ValueError):
    """A command line the job cannot run: argparse's message, or a value out of range."""


class _Parser(argparse.ArgumentParser):
    """Errors raise :class:`OptionsError`; so does ``--help`` where no help may be printed (``help_ok`` False:
    checking a playbook's arguments, where argparse would print the usage and exit 0)."""

    help_ok = True

    def error(self, message: str):  # raise, do not print and exit: the caller decides
        raise OptionsError(message)

    def print_help(self, file=None):
        if not self.help_ok:
            raise OptionsError("--help (-h) is not an option of a run: it prints the job's options and exits (run "
                               f"{PROG} --help to see them)")
        super().print_help(file)


def parser(*, help_ok: bool = True) -> argparse.ArgumentParser:
    """The job's argument parser (its ``error`` raises :class:`OptionsError`; with ``help_ok`` False, so
    does ``--help``)."""
    ap = _Parser(prog=PROG, description="a small MoE transformer trained with expert parallelism over "
                                        "torch.distributed, reporting its routing to mfctl")
    ap.help_ok = help_ok
    for f in dataclasses.fields(Options):
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            ap.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default)
        elif f.name == "backend":
            ap.add_argument(flag, choices=("auto", "gloo", "nccl"), default=f.default)
        else:
            kind = {"int": int, "float": float}.get(str(f.type), str)
            ap.add_argument(flag, type=kind, default=f.default,
                            help=f"default {f.default}" + ("; the welcome's when run by mfctl" if f.name in FROM_WELCOME
                                                           else ""))
    return ap


#: options that must be at least 1 (sizes and counts), and those that must be above 0
AT_LEAST_1 = ("iterations", "layers", "d_model", "heads", "experts", "top_k", "ffn", "seq_len", "batch", "micro_batches",
              "phase_iterations", "hidden", "bytes_per_element", "threads", "grad_partitions")
ABOVE_0 = ("lr", "dist_timeout_s")


def parse(argv: list[str], *, help_ok: bool = False) -> Options:
    """``argv`` as the job reads it. Raises :class:`OptionsError` naming the option and what it must be
    (``--help`` too, unless ``help_ok``: then argparse prints the options and exits 0)."""
    opt = Options(**vars(parser(help_ok=help_ok).parse_args(argv)))
    for f in dataclasses.fields(Options):
        v = getattr(opt, f.name)
        if isinstance(v, float) and not math.isfinite(v):
            raise OptionsError(f"--{f.name.replace('_', '-')} must be a finite number, not {v}")
    for name in AT_LEAST_1:
        if getattr(opt, name) < 1:
            raise OptionsError(f"--{name.replace('_', '-')} must be at least 1, not {getattr(opt, name)}")
    for name in ABOVE_0:
        if not getattr(opt, name) > 0:
            raise OptionsError(f"--{name.replace('_', '-')} must be above 0, not {getattr(opt, name)}")
    if opt.aux_loss < 0:
        raise OptionsError(f"--aux-loss must be at least 0, not {opt.aux_loss}")
    if opt.top_k > opt.experts:
        raise OptionsError(f"--top-k ({opt.top_k}) must be at most --experts ({opt.experts})")
    if opt.d_model % opt.heads:
        raise OptionsError(f"--d-model ({opt.d_model}) must be a multiple of --heads ({opt.heads})")
    return opt


def check(argv: list[str]) -> str | None:
    """What is wrong with ``argv`` for the job, or None."""
    try:
        parse(argv)
    except OptionsError as e:
        return str(e)
    return None
