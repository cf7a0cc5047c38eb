"""A real multi-process Megatron-Core job on the CPU (gloo) for tests/unit/runtime/test_megatron_hook.py.

``python megatron_worker.py SCENARIO WORLD MASTER_PORT OUT_DIR [CONTROLLER]`` spawns WORLD processes
(torch.multiprocessing), initializes megatron-core's ``parallel_state`` on gloo, builds the real
``MoEAlltoAllTokenDispatcher`` of every MoE layer and runs its ``preprocess`` on routing maps the
test can rebuild (seeded by rank, layer and iteration), with the mfctl hook attached. Each rank
writes ``OUT_DIR/rank<N>.json``.

Two calls of megatron-core 0.16 insist on CUDA, and only those are bridged (never the dispatcher):
- ``MoEAlltoAllTokenDispatcher.__init__`` creates the class-wide DtoH stream with
  ``torch.cuda.Stream()`` when the class attribute ``cuda_dtoh_stream`` is None: a placeholder is
  put in that slot first (it is only used by ``_maybe_dtoh_and_synchronize``, i.e. by
  ``dispatch_preprocess``/``token_dispatch``, which this job does not call: they are CUDA-only);
- ``preprocess`` all-gathers the token counts with ``gather_from_sequence_parallel_region``, whose
  ``_gather_along_first_dim`` (tensor_parallel/mappings.py) allocates its output on
  ``torch.cuda.current_device()``: in these processes that function answers the CPU device.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings

SCENARIOS = {
    # world, tensor-parallel size, expert-parallel size, experts, layers, tokens per rank, top-k
    "traffic": dict(tp=2, ep=2, experts=4, layers=2, tokens=12, topk=2),
    "pause": dict(tp=1, ep=4, experts=4, layers=1, tokens=8, topk=2),
}
HOSTS_PER_NODE = 2  # ranks 0,1 on gpu01; 2,3 on gpu02


def routing_map(rank: int, layer: int, iteration: int, tokens: int, experts: int, topk: int):
    """The routing map rank ``rank`` gives layer ``layer`` at ``iteration``: top-k of seeded scores."""
    import torch

    g = torch.Generator().manual_seed(1000 * rank + 100 * layer + iteration)
    scores = torch.rand(tokens, experts, generator=g)
    idx = scores.topk(topk, dim=1).indices
    return torch.zeros(tokens, experts, dtype=torch.bool).scatter_(1, idx, True)


def _run(rank: int, scenario: str, world: int, port: int, out_dir: str, controller: str) -> None:
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist

    sc = SCENARIOS[scenario]
    host = f"gpu{rank // HOSTS_PER_NODE + 1:02d}"
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_RANK=str(rank % HOSTS_PER_NODE),
                      MFCTL_HOST=host)
    if controller:
        os.environ.update(MFCTL_CONTROLLER=controller, MFCTL_RUN_TOKEN="tok")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.cuda.current_device = lambda: torch.device("cpu")  # mappings._gather_along_first_dim's buffer
    from megatron.core import parallel_state as ps
    from megatron.core.transformer.moe.moe_utils import get_default_pg_collection
    from megatron.core.transformer.moe.token_dispatcher import MoEAlltoAllTokenDispatcher
    from megatron.core.transformer.transformer_config import TransformerConfig

    from mfctl.integrations.megatron import MFabricHook

    ps.initialize_model_parallel(tensor_model_parallel_size=sc["tp"], expert_model_parallel_size=sc["ep"],
                                 create_gloo_process_groups=True)
    cfg = TransformerConfig(num_layers=sc["layers"], hidden_size=16, num_attention_heads=2, num_moe_experts=sc["experts"],
                            moe_router_topk=sc["topk"], tensor_model_parallel_size=sc["tp"],
                            expert_model_parallel_size=sc["ep"], sequence_parallel=sc["tp"] > 1,
                            use_cpu_initialization=True, moe_token_dispatcher_type="alltoall", add_bias_linear=False)
    MoEAlltoAllTokenDispatcher.cuda_dtoh_stream = object()  # the CUDA stream slot: see the module docstring
    nle = sc["experts"] // sc["ep"]
    ep_rank = ps.get_expert_model_parallel_rank()
    local = list(range(ep_rank * nle, (ep_rank + 1) * nle))
    dispatchers = [MoEAlltoAllTokenDispatcher(nle, local, cfg, pg_collection=get_default_pg_collection())
                   for _ in range(sc["layers"])]
    hook = MFabricHook.from_env(hidden=16, bytes_per_element=2)
    for layer, d in enumerate(dispatchers):
        hook.attach(d, layer)
    out: dict = {"rank": rank, "host": host, "iterations": []}
    iterations = 1 if scenario == "traffic" else 1500  # the pause test stops it
    for it in range(1, iterations + 1):
        rec: dict = {"iteration": it, "input_splits": [], "output_splits": []}
        for layer, d in enumerate(dispatchers):
            rm = routing_map(rank, layer, it, sc["tokens"], sc["experts"], sc["topk"])
            d.preprocess(rm)  # megatron-core's own, through the hook's wrapper
            rec["input_splits"].append([int(x) for x in d.input_splits.tolist()])
            rec["output_splits"].append([int(x) for x in d.output_splits.tolist()])
        stop = hook.end_of_iteration(it, seconds=0.02, tokens=sc["tokens"] * world)
        rec["traffic"] = hook.last_traffic
        out["iterations"].append(rec)
        if stop:
            break
        if scenario == "pause":
            time.sleep(0.03)
    out["events"] = hook.events
    out["epoch"], out["routes"] = hook.epoch, hook.routes
    out["ep_groups"] = [dist.get_process_group_ranks(d.ep_group) for d in dispatchers]
    hook.close(len(out["iterations"]))
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w", encoding="utf-8") as f:
        json.dump(out, f)
    dist.destroy_process_group()


def dispatcher_checks() -> dict[str, str | None]:
    """``check_dispatcher`` on megatron-core's own dispatcher classes (not constructed: they need
    process groups): class name → the UnsupportedDispatcher message, or None where it is accepted.
    Any other exception ends the job. Written by the ``traffic`` job as ``OUT_DIR/dispatchers.json``:
    the test reads it rather than importing megatron-core (~9 s of CPU) a third time in its own process."""
    from megatron.core.transformer.moe import token_dispatcher as td

    from mfctl.integrations.megatron import UnsupportedDispatcher, check_dispatcher

    out: dict[str, str | None] = {}
    for cls in (td.MoEAllGatherTokenDispatcher, td.MoEFlexTokenDispatcher, td.MoEAlltoAllTokenDispatcher):
        try:
            check_dispatcher(cls.__new__(cls))
            out[cls.__name__] = None
        except UnsupportedDispatcher as e:
            out[cls.__name__] = str(e)
    return out


def main(argv: list[str]) -> None:
    import faulthandler

    warnings.filterwarnings("ignore")
    import megatron.core.parallel_state  # noqa: F401  imported once here, then forked: a megatron import is ~9 s of CPU
    import megatron.core.transformer.moe.token_dispatcher  # noqa: F401
    import torch.multiprocessing as mp

    faulthandler.dump_traceback_later(280, exit=True)  # a hung collective shows where (the test kills the group)
    scenario, world, port, out_dir = argv[0], int(argv[1]), int(argv[2]), argv[3]
    controller = argv[4] if len(argv) > 4 else ""
    if scenario == "traffic":
        with open(os.path.join(out_dir, "dispatchers.json"), "w", encoding="utf-8") as f:
            json.dump(dispatcher_checks(), f)
    mp.start_processes(_run, args=(scenario, world, port, out_dir, controller), nprocs=world, join=True,
                       start_method="fork")


if __name__ == "__main__":
    main(sys.argv[1:])
