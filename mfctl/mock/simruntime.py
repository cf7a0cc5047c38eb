"""Simulated collective runtime: one process per mock host, launched over SSH.

It speaks the real runtime protocol through :class:`mfctl.runtime.client.RuntimeClient`.
Per iteration it draws every MoE layer's routing from real routing data
(:mod:`mfctl.fabric.workload`), computes the iteration time from the step-time model
(:mod:`mfctl.fabric.stepmodel`) and the circuits in force, sleeps that time divided by
the time scale, reports to the controller and prints a Megatron-style log line.
While a reconfiguration is under way (between ``prepare`` and ``commit``) its OCS-path
traffic is paused: pairs whose circuit is being changed fall back to the EPS.

Under torchrun (``--nproc-per-node N``) only local rank 0 is the runtime (one runtime client per
host); local ranks 1 … N-1 follow it and end with it (:mod:`mfctl.mock.localranks`), without
importing numpy or the step model.

One process may simulate several hosts (the mock at scale, issue 22): under the mock srun's
packing (``MFCTL_MOCK_PACK``, :mod:`mfctl.mock.slurmshim`) it runs one thread per host of its
pack, each with a connection of its own to the controller (the protocol is per host, as ever),
the others' output lines marked ``@pack RANK`` for srun to label. The hosts of a region draw the
same routing and, on the same circuits, get the same layer times: those are computed once per
process (:class:`_Shared`), so a pack of a region's 8 hosts costs about one host's CPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import zlib

from mfctl.mock import localranks
from mfctl.runtime.client import ControllerLost, RuntimeClient, local_rank, token_from_env

_out_lock = threading.Lock()


def _log(line: str) -> None:
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class _Shared:
    """What the hosts simulated in one process share: routing traces and workloads by their
    parameters, an iteration's mean tokens, and layer times by (iteration, layer, circuits) —
    the same numbers for every host of a region (a few iterations kept)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.objs: dict = {}
        self.results: dict = {}

    def get(self, key, make):
        with self.lock:
            if key not in self.objs:
                self.objs[key] = make()
            return self.objs[key]

    def memo(self, key, it: int, make):
        with self.lock:
            v = self.results.get(key)
        if v is None:
            v = make()
            with self.lock:
                self.results[key] = v
                if len(self.results) > 4096:  # drop what is two iterations old
                    for k in [k for k in self.results if k[1] < it - 2]:
                        del self.results[k]
        return v


SHARED = _Shared()


def region_seed(seed: int, region: str) -> int:
    """The data seed of a region: each region is a data-parallel replica of its own and draws its
    own micro-batches — the playbook's seed plus the region's number (``region3`` → +3; the first
    region, ``region0``, draws the playbook's seed, as a one-region run always did)."""
    digits = "".join(ch for ch in region if ch.isdigit())
    return seed + (int(digits) if digits else zlib.crc32(region.encode()) % 10007)


def run(args, log=_log) -> int:
    # imported here: torchrun's other local ranks only follow local rank 0 (mfctl.mock.localranks)
    import numpy as np

    from mfctl.fabric.planner import LinkRates
    from mfctl.fabric.stepmodel import StepSpec, grad_allreduce_exposed_s, grad_sync_bytes, layer_time
    from mfctl.fabric.traffic import expert_to_rank, load_routing, rank_matrix, rank_to_server, server_matrix
    from mfctl.fabric.workload import Workload

    rt = RuntimeClient(args.controller, host=args.host, token=args.token)
    cfg = rt.connect()
    m, par, tr = cfg["model"], cfg["parallelism"], cfg["training"]
    for k in ("pipeline_degree", "bp_pipeline_degree", "grad_partitions"):
        if getattr(args, k, None):
            tr[k] = getattr(args, k)
    hosts: list[str] = cfg["hosts"]
    leader = cfg["leader"] == args.host
    _log = log  # noqa: N806 (this host's output)
    doms = tuple(tr.get("domains") or ())
    trace = SHARED.get(("trace", m["routing"], doms), lambda: load_routing(m["routing"], tr.get("domains")))
    ep, tp = par["ep"], par["tp"]
    spec = StepSpec(hidden=m["hidden"], ffn_hidden=m["ffn_hidden"], gated=m.get("gated", True),
                    bytes_per_element=m.get("bytes_per_element", 2), ep=ep, tp=tp,
                    gpus_per_server=cfg["gpus_per_server"], tokens_per_rank=tr["seq_len"] * tr["micro_batch"],
                    pipeline_degree=tr.get("pipeline_degree", 0), bp_pipeline_degree=tr.get("bp_pipeline_degree", 0))
    rates = LinkRates(circuit_Bps=cfg["rates"]["circuit_Bps"], eps_Bps=cfg["rates"]["eps_Bps"])
    seed = region_seed(tr.get("seed", 1), cfg.get("region", ""))
    wkey = ("workload", m["routing"], doms, ep, m["layers"], spec.tokens_per_rank, tr["micro_batches"],
            seed, tr.get("domain_concentration", 0.3), tr.get("phase_iterations", 10))
    wl = SHARED.get(wkey, lambda: Workload(trace, ep=ep, layers=m["layers"], tokens_per_rank=spec.tokens_per_rank,
                                           micro_batches=tr["micro_batches"], seed=seed,
                                           concentration=tr.get("domain_concentration", 0.3),
                                           phase_iterations=tr.get("phase_iterations", 10)))
    skey = (wkey, tp, cfg["gpus_per_server"], spec.pipeline_degree, spec.bp_pipeline_degree, rates.circuit_Bps,
            str(rates.eps_Bps))
    er = expert_to_rank(trace.num_experts, ep)
    rs = rank_to_server(ep, tp, cfg["gpus_per_server"])
    n = len(hosts)
    circuits = np.array(cfg["circuits"], dtype=int)
    epoch = cfg["epoch"]
    pending_epoch: int | None = None
    scale = float(cfg["time_scale"])
    iters = int(cfg["iterations"])
    crash_at = cfg.get("crash_at_iteration")
    world = n * cfg["gpus_per_server"]
    dp = world // tp
    tokens_per_iter = dp * tr["seq_len"] * tr["micro_batch"] * tr["micro_batches"]
    # the gradient all-reduce over the EPS at the end of backward: only its exposed part counts
    grad_s = grad_allreduce_exposed_s(grad_sync_bytes(spec, m["layers"], trace.num_experts, world),
                                      int(tr.get("grad_partitions", 8)), n, cfg["gpus_per_server"], rates.eps_Bps)
    _log(f"> mfctl simulated runtime on {args.host}: {m['name']} EP={ep} TP={tp} DP={dp}, {world} GPUs, "
         f"routing {trace.model} ({trace.num_experts} experts, top-{trace.top_k}), time scale {scale:g}x")
    lost = False

    def safe(fn, *a, **kw):
        """After the controller is lost, training goes on: messages are dropped."""
        nonlocal lost
        if lost:
            return
        try:
            fn(*a, **kw)
        except ControllerLost as e:
            lost = True
            _log(f"> controller lost ({e}); training continues on the last topology"
                 + (" with the changing circuits on the EPS" if pending_epoch is not None else ""))

    t_start = time.monotonic()
    wall_target = time.monotonic()  # deadline pacing: compute time is not added to the sleep
    paused_circuits = circuits
    mb = tr["micro_batches"]
    for it in range(1, iters + 1):
        if crash_at and it == crash_at:
            _log(f"> simulated worker crash at iteration {it}")
            os._exit(17)
        mean = SHARED.memo((skey, it, "mean"), it, lambda it=it: wl.tokens(it).mean(axis=0))  # [layer, rank, expert]
        if leader:
            B = server_matrix(rank_matrix(mean, er, ep), rs, n, spec.bytes_per_token)
            trace_layers = {str(t): np.round(mean[t], 2).tolist() for t in trace.layers if t < m["layers"]}
            safe(rt.traffic, it, np.round(B, 1).tolist(), epoch=epoch, tokens=trace_layers)
        secs = a2a = comp = inter = ocs = 0.0
        paused_any = False
        # safe points between MoE layers: control messages take effect at the next layer
        for layer in range(m["layers"]):
            try:
                msgs = [] if lost else rt.poll()
            except ControllerLost as e:
                msgs, lost = [], True
                _log(f"> controller lost ({e}); training continues on the last topology"
                     + (" with the changing circuits on the EPS" if pending_epoch is not None else ""))
            for msg in msgs:
                t = msg["type"]
                if t == "propose":
                    pending_epoch = msg["epoch"]
                    keep = np.array(msg.get("keep_circuits", np.zeros((n, n))), dtype=int)
                    paused_circuits = np.minimum(circuits, keep)  # changed circuits go dark; EPS never pauses
                    safe(rt.paused, pending_epoch, it)
                elif t == "applied":
                    pass  # the OCS holds the new cross-connects; links are coming up
                elif t == "routes":
                    circuits = np.array(msg["circuits"], dtype=int)
                    epoch = msg["epoch"]
                    pending_epoch = None
                    safe(rt.resume, epoch, it)
                elif t == "stop":
                    _log(f"> stop requested by controller: {msg.get('reason', '')}")
                    safe(rt.bye, iterations=it - 1, reason="stopped")
                    return 0
                elif t == "error":
                    _log(f"> controller error: {msg.get('message')}")
            C = paused_circuits if pending_epoch is not None else circuits
            paused_any |= pending_epoch is not None
            lt = SHARED.memo((skey, it, layer, C.tobytes()), it,
                             lambda C=C, x=mean[layer]: layer_time(x, C, er, rs, spec, rates))
            secs += lt.total_s * mb
            a2a += 4 * lt.a2a_s * mb
            comp += (3 * lt.dense_fwd_s + 3 * lt.expert_fwd_s) * mb
            inter += lt.inter_bytes * mb
            ocs += lt.ocs_bytes * mb
            wall_target += lt.total_s * mb / scale
            delay = wall_target - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        secs += grad_s
        wall_target += grad_s / scale
        delay = wall_target - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        safe(rt.iteration, it, seconds=secs, tokens=tokens_per_iter, epoch=epoch, paused=paused_any,
                     a2a_s=a2a, compute_s=comp, inter_bytes=inter, ocs_bytes=ocs)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        _log(f" [{stamp}] iteration {it:8d}/{iters:8d} | consumed samples: {it * dp * tr['micro_batch'] * mb:12d} "
             f"| elapsed time per iteration (ms): {secs * 1000:.1f} | tokens per second: {tokens_per_iter / secs:.1f} "
             f"| all-to-all time (ms): {a2a * 1000:.1f} | epoch: {epoch} | number of skipped iterations:   0 |")
    safe(rt.bye, iterations=iters, wall_s=round(time.monotonic() - t_start, 3))
    # wait for the controller to acknowledge by closing, so no message is lost
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not rt.lost.is_set():
        time.sleep(0.02)
    return 0


def _packed() -> bool:
    from mfctl.mock.slurmshim import pack_tasks

    return len(pack_tasks()) > 1


def run_pack(args) -> int:
    """Simulate every host of this process's pack (``MFCTL_MOCK_PACK_TASKS``), one thread each;
    the first host's output as usual, the others' as ``@pack RANK`` lines (their task mark
    first, as their own ``sh -c`` would print it). The worst exit code."""
    from mfctl.mock.slurmshim import PACK_MARK, pack_tasks
    from mfctl.runtime.render import TASK_MARK

    tasks = pack_tasks()
    rcs: dict[str, int] = {}

    def one(rank: int, node: str, first: bool) -> None:
        log = _log if first else (lambda line, r=rank: _log(f"{PACK_MARK.decode()}{r} {line}"))
        if not first:
            log(f"{TASK_MARK} {rank} {node}")
        a = argparse.Namespace(**{**vars(args), "host": node})
        try:
            rcs[node] = run(a, log=log)
        except ControllerLost as e:
            log(f"mfctl-simrt: {e}")
            rcs[node] = 3
        except Exception as e:  # one host's simulation broke: that host fails, as its process would
            log(f"mfctl-simrt: {type(e).__name__}: {e}")
            rcs[node] = 1

    threads = [threading.Thread(target=one, args=(r, n, i == 0), daemon=True, name=f"simrt-{n}")
               for i, (r, n) in enumerate(tasks)]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.5)
    return max(rcs.values(), default=1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="mfctl-simrt", description="mfctl simulated collective runtime")
    env_host = os.environ.get("MFCTL_HOST") or os.environ.get("SLURMD_NODENAME")
    ap.add_argument("--controller", default=os.environ.get("MFCTL_CONTROLLER"),
                    help="HOST:PORT of the mfctl controller (default: $MFCTL_CONTROLLER)")
    ap.add_argument("--host", default=env_host, help="inventory name of this host (default: $MFCTL_HOST, "
                    "else $SLURMD_NODENAME)")
    ap.add_argument("--token", default=None, help="the run token (tests only: an argument is visible in ps; "
                    "default: $MFCTL_RUN_TOKEN, else the file $MFCTL_RUN_TOKEN_FILE)")
    ap.add_argument("--pipeline-degree", type=int, choices=(1, 2, 4, 8), help="forward pipeline degree "
                    "(as a training script takes it; default: the controller's)")
    ap.add_argument("--bp-pipeline-degree", type=int, choices=(1, 2, 4, 8), help="backward pipeline degree")
    ap.add_argument("--grad-partitions", type=int, choices=(1, 2, 4, 8, 16), help="gradient all-reduce partitions")
    args = ap.parse_args(argv)
    if args.token is None:
        args.token = token_from_env()
    if not args.controller or not args.host:
        ap.error("--controller and --host are required (or MFCTL_CONTROLLER and MFCTL_HOST in the environment)")
    try:
        rank = local_rank()
    except ValueError as e:
        ap.error(str(e))
    try:
        if rank != 0:  # one runtime client per host: the other local ranks follow local rank 0
            return localranks.follow(label=f" (local rank {rank})")
        leader = localranks.Leader() if os.environ.get("LOCAL_WORLD_SIZE", "1") not in ("", "0", "1") else None
    except KeyboardInterrupt:
        return 130
    except OSError as e:  # the local-rank socket: the followers then end on their own connect timeout
        print(f"mfctl-simrt: cannot serve the other local ranks: {e}", file=sys.stderr, flush=True)
        leader = None
    rc = 1
    try:
        rc = run_pack(args) if _packed() else run(args)
    except ControllerLost as e:
        print(f"mfctl-simrt: {e}", file=sys.stderr, flush=True)
        rc = 3
    except KeyboardInterrupt:
        rc = 130
    finally:
        if leader is not None:
            leader.done(rc)
    return rc


if __name__ == "__main__":
    sys.exit(main())
