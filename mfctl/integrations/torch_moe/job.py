"""The training loop of the torch MoE job and its side of the runtime protocol, on every rank.

Per iteration: ``micro_batches`` forward/backward passes (each MoE layer dispatches over the
expert-parallel ranks, :mod:`~mfctl.integrations.torch_moe.dispatch`), the dense gradients summed
over the ranks, an AdamW step. Then the **safe point**, reached by every rank: one
``all_gather_object`` carries every rank's token counts, loss, times, timings samples and its
host's vote (:class:`~mfctl.integrations.safepoint.ControlInbox`); then

- the leader host's client sends ``traffic`` (:func:`~mfctl.integrations.torch_moe.traffic.fold`),
- every host's client sends ``iteration`` with ``timings`` (its ranks' all-to-all and GEMM samples),
- every rank applies the same :func:`~mfctl.integrations.safepoint.agree`: ``paused``, ``resume``
  (the new circuits and routes), or a stop — all at this iteration boundary.

Times. ``seconds`` is the iteration's measured wall time (the slowest rank's, from the first
forward to the optimizer step; the safe point itself is not in it) times the welcome's
``time_scale``: testbed seconds are wall seconds × time scale for the job as for every time the
controller measures itself, so the reconfiguration's phases (the mock's link-up is 5.67 testbed s)
and the job's iterations stay on one clock. ``playbooks/moe-torch-mock.yaml`` runs at time scale 1,
where that is the plain wall clock. ``a2a_s`` is the host's largest per-rank sum of measured
all-to-all seconds (× time scale), ``compute_s`` the rest of ``seconds``. With ``--sync-timings``
(the default) each timed all-to-all follows an untimed barrier of the EP group, so its seconds are
the exchange's, not the wait for a peer that is late (the routing's uneven expert loads, a busy
core); that wait is in ``seconds``, outside ``a2a_s``.

What a pause does here. The job's all-to-alls go over gloo on the mock's loopback, not over the
mock's optical lanes, so a pause changes no packet: it changes the accounting — while an epoch is
pending, ``ocs_bytes`` counts only the circuits that survive (``keep_circuits``), and after
``resume`` the new circuits in force — exactly what the simulated runtime reports.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta

from mfctl.integrations.safepoint import ControlInbox, agree
from mfctl.integrations.torch_moe.options import Options
from mfctl.integrations.torch_moe.traffic import bytes_on_fabric, fold
from mfctl.runtime.client import ControllerLost, RuntimeClient


def _log(line: str) -> None:
    print(line, flush=True)


@dataclass
class Fabric:
    """This host's view of the fabric: epoch, circuits and routes in force, the epoch paused for."""

    epoch: int = 0
    circuits: list = field(default_factory=list)
    routes: dict = field(default_factory=dict)
    pending: int | None = None
    paused_circuits: list = field(default_factory=list)

    def in_use(self) -> list:
        return self.paused_circuits if self.pending is not None else self.circuits


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    return int(raw) if raw.isdigit() else default


def run(opt: Options) -> int:
    # the hello first, before torch is imported (~2.5 s of CPU): the controller waits 30 s wall for every host's
    client = RuntimeClient.from_env() if os.environ.get("MFCTL_CONTROLLER") else None
    inbox = ControlInbox(client)
    welcome: dict = {}
    if client is not None:
        try:
            welcome = client.connect()
        except ControllerLost as e:
            inbox.lost = True
            _log(f"> controller not reached ({e}); training on without it")
    import torch
    import torch.distributed as dist

    from mfctl.integrations.torch_moe.data import Batches
    from mfctl.integrations.torch_moe.dispatch import ExpertParallel
    from mfctl.integrations.torch_moe.model import Adam, MoEConfig, TinyMoE, average_dense_grads
    from mfctl.integrations.torch_timing import Timings

    torch.set_num_threads(max(1, opt.threads))
    rank, world, lrank = _env_int("RANK", 0), _env_int("WORLD_SIZE", 1), _env_int("LOCAL_RANK", 0)
    host = os.environ.get("MFCTL_HOST") or os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    cuda = torch.cuda.is_available() and opt.backend in ("auto", "nccl")
    backend = opt.backend if opt.backend != "auto" else ("nccl" if cuda else "gloo")
    if cuda:  # NCCL where GPUs exist: the tensors live on this rank's GPU
        torch.cuda.set_device(lrank)
    device = torch.device("cuda", lrank) if cuda else torch.device("cpu")
    if world > 1:
        dist.init_process_group(backend, timeout=timedelta(seconds=opt.dist_timeout_s))
    shared = [welcome if rank == 0 else None]  # the run's figures, from global rank 0's welcome
    if world > 1:
        dist.broadcast_object_list(shared, src=0)
    w0 = shared[0] or {}
    tr, md = w0.get("training") or {}, w0.get("model") or {}
    iters = int(w0.get("iterations", opt.iterations))
    mb = int(tr.get("micro_batches", opt.micro_batches))
    scale = float(w0.get("time_scale", 1.0))
    bpt = int(md.get("hidden", opt.hidden)) * int(md.get("bytes_per_element", opt.bytes_per_element))
    cfg = MoEConfig(d_model=opt.d_model, heads=opt.heads, layers=int(md.get("layers", opt.layers)), experts=opt.experts,
                    top_k=opt.top_k, ffn=opt.ffn, seq_len=opt.seq_len, aux_loss=opt.aux_loss,
                    seed=int(tr.get("seed", opt.seed)))
    hosts: list[str] = welcome.get("hosts") or []
    leader = bool(welcome) and welcome.get("leader") == host
    fab = Fabric(epoch=int(welcome.get("epoch", 0) or 0), circuits=welcome.get("circuits") or [],
                 routes=welcome.get("routes") or {})
    # every call of an iteration kept (the sums below are exact): 5 all-to-alls and 2 GEMMs per local expert
    calls = mb * cfg.layers * (5 + 2 * (cfg.experts // max(world, 1)))
    timings = Timings(max_samples=max(64, calls), seed=rank, sync_peers=opt.sync_timings and world > 1)
    ep = ExpertParallel(cfg.experts, timings=timings)
    model = TinyMoE(cfg, ep).to(device)
    optim = Adam(model.parameters(), lr=opt.lr)
    data = Batches(batch=opt.batch, seq_len=cfg.seq_len, seed=cfg.seed,
                   phase_iterations=int(tr.get("phase_iterations", opt.phase_iterations)))
    tokens_per_iter = world * mb * opt.batch * cfg.seq_len
    if lrank == 0:
        _log(f"> mfctl torch MoE job on {host}: {world} EP ranks ({backend}), {cfg.layers} MoE layers x {cfg.experts} "
             f"experts top-{cfg.top_k}, d_model {cfg.d_model}, {opt.batch}x{cfg.seq_len} tokens per rank and "
             f"micro-batch x {mb}; traffic reported at {bpt} B/token, time scale {scale:g}x")
    if lrank == 0 and max(opt.pipeline_degree, opt.bp_pipeline_degree) > 1:
        _log(f"> pipeline degree {opt.pipeline_degree}/{opt.bp_pipeline_degree} asked: this job does not pipeline "
             "its dispatch (it runs degree 1)")
    record: dict = {"rank": rank, "host": host, "iterations": [], "events": []}
    t_start = time.monotonic()
    it = 0
    for it in range(1, iters + 1):
        t0 = time.perf_counter()
        lm_sum = 0.0
        for micro in range(mb):
            x, y = (t.to(device) for t in data.get(rank, it, micro))
            loss, lm = model(x, y)
            (loss / (world * mb)).backward()
            lm_sum += float(lm.detach())
        average_dense_grads(model, partitions=opt.grad_partitions)
        optim.step()
        optim.zero_grad()
        dt = time.perf_counter() - t0
        samples = timings.drain()
        inbox.drain()
        mine = {"rank": rank, "host": host, "counts": model.take_counts(), "lm": lm_sum / mb, "dt": dt,
                "a2a": sum(s["seconds"] for s in samples if s["task"] == "alltoall"), "timings": samples,
                **inbox.vote()}
        every: list = [None] * world
        if world > 1:
            dist.all_gather_object(every, mine)
        else:
            every = [mine]
        secs = max(p["dt"] for p in every) * scale
        lm_mean = sum(p["lm"] for p in every) / len(every)
        a2a = max(p["a2a"] for p in every if p["host"] == host) * scale
        counts = {p["rank"]: p["counts"] for p in every}
        host_of = {p["rank"]: p["host"] for p in every}
        if leader and opt.log_routing:
            _log("> routing " + json.dumps({"iteration": it, "counts": [counts[r] for r in range(world)]},
                                           separators=(",", ":")))
        sent: dict = {}
        if inbox.client is not None and not inbox.lost and hosts:
            mats, tok = fold(counts, host_of, hosts, bytes_per_token=bpt, micro_batches=mb)
            inter, on_ocs = bytes_on_fabric(mats, fab.in_use(), mb)
            if leader:
                inbox.send("traffic", it, mats, epoch=fab.epoch, tokens=tok)
            sent = dict(seconds=secs, tokens=tokens_per_iter, epoch=fab.epoch, paused=fab.pending is not None,
                        a2a_s=a2a, compute_s=max(0.0, secs - a2a), inter_bytes=inter, ocs_bytes=on_ocs,
                        lm_loss=lm_mean, timings=[s for p in every if p["host"] == host for s in p["timings"]])
            inbox.send("iteration", it, **sent)
        record["iterations"].append({"iteration": it, "lm": mine["lm"], "counts": mine["counts"], "dt": dt,
                                     "lm_mean": lm_mean, "sent": {k: v for k, v in sent.items() if k != "timings"},
                                     "timings": len(samples)})
        if lrank == 0:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            _log(f" [{stamp}] iteration {it:8d}/{iters:8d} | consumed samples: {it * world * mb * opt.batch:12d} | "
                 f"consumed tokens: {it * tokens_per_iter:12d} | global batch size: {world * mb * opt.batch:5d} | "
                 f"elapsed time per iteration (ms): {secs * 1000:.1f} | tokens per second: {tokens_per_iter / secs:.1f} | "
                 f"lm loss: {lm_mean:.6E} | all-to-all time (ms): {a2a * 1000:.1f} | epoch: {fab.epoch} | "
                 "number of skipped iterations:   0 | number of nan iterations:   0 |")
        a = agree(every, epoch=fab.epoch, pending=fab.pending)
        if a.stop:
            if lrank == 0:
                _log(f"> stop requested by controller at iteration {it}: {inbox.stop or 'another host'}")
            record["events"].append([it, "stopped", fab.epoch])
            break
        if a.pause is not None:
            prop = inbox.proposals.get(a.pause) or {}
            keep = prop.get("keep_circuits")
            fab.pending = a.pause
            fab.paused_circuits = ([[min(c, k) for c, k in zip(cr, kr)] for cr, kr in zip(fab.circuits, keep)]
                                   if keep and fab.circuits else [])
            record["events"].append([it, "paused", a.pause])
            inbox.send("paused", a.pause, it)
        if a.resume is not None:
            msg = inbox.routes.get(a.resume) or {}
            fab.circuits = msg.get("circuits", fab.circuits)
            fab.routes = msg.get("routes", fab.routes)
            fab.epoch, fab.pending = a.resume, None
            record["events"].append([it, "resumed", a.resume])
            inbox.send("resume", a.resume, it)
            inbox.forget(a.resume)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    record.update(epoch=fab.epoch, routes=fab.routes, wall_s=round(time.monotonic() - t_start, 3),
                  cpu_s=round(ru.ru_utime + ru.ru_stime, 3))
    if lrank == 0:
        _log(f"> done: {it} iterations in {record['wall_s']:.1f} s wall, {record['cpu_s']:.1f} s CPU (this rank, "
             "its start included)")
    inbox.send("bye", iterations=it, wall_s=record["wall_s"], cpu_s=record["cpu_s"])
    if inbox.client is not None:  # wait for the controller to acknowledge by closing: nothing is lost
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not inbox.client.lost.is_set() and not inbox.lost:
            time.sleep(0.02)
        inbox.client.close()
    if opt.out:
        with open(os.path.join(opt.out, f"rank{rank}.json"), "w", encoding="utf-8") as f:
            json.dump(record, f)
    if world > 1:
        dist.destroy_process_group()
    return 0


def main(opt: Options) -> int:
    try:
        return run(opt)
    except KeyboardInterrupt:
        return 130
    except ControllerLost as e:
        print(f"mfctl torch MoE job: {e}", file=sys.stderr, flush=True)
        return 3
