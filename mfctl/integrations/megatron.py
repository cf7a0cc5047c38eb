"""The mfctl hook for a Megatron-Core MoE training job (megatron-core >=0.16,<0.17; docs/runtime-protocol.md).

What it records. Megatron-Core's ``MoEAlltoAllTokenDispatcher.preprocess(routing_map)`` receives
this rank's routing map (bool, tokens × experts, after the router's token dropping); the hook
wraps it per dispatcher instance and keeps ``routing_map.sum(0)`` — the tokens this rank sends to
every expert, which is what Megatron itself sums into ``input_splits`` (tokens per EP rank). The
dispatcher does not keep the EP × EP picture: ``num_global_tokens_per_expert`` is a local variable
of ``preprocess`` and ``num_global_tokens_per_local_expert`` only this rank's column. So at the
iteration's safe point (:meth:`MFabricHook.end_of_iteration`, called on **every** rank) one
``all_gather_object`` collects every rank's counts, its EP group (global ranks, from
``dispatcher.ep_group``) and its host; every rank then computes the same server × server matrix:
rank r's tokens for expert x go to ``ep_group_r[x // num_local_experts]`` (the dispatcher's own
contiguous expert placement), and ranks are folded onto their hosts. Tensor parallelism folds the
same way: Megatron's EP groups hold the ranks of one expert-TP rank, each TP rank dispatches its
own sequence shard, so every rank's own sends are summed; the expert-TP all-gather after the
all-to-all (inside a TP group, normally one NVLink domain) is not in the matrix. A drop-and-pad
dispatcher (``moe_pad_expert_input_to_capacity``) sends ``capacity`` tokens to every expert.

Which dispatchers: ``MoEAlltoAllTokenDispatcher`` (``moe_token_dispatcher_type="alltoall"``) and
its subclasses. Refused with :class:`UnsupportedDispatcher`: ``MoEAllGatherTokenDispatcher``
(no all-to-all: every rank all-gathers every token, the traffic does not follow the routing) and
``MoEFlexTokenDispatcher`` (DeepEP/HybridEP fused kernels on CUDA: the routing is consumed by the
kernel, there is no ``preprocess`` to read). The legacy ``MoEAlltoAllSEQTokenDispatcher`` of older
releases is refused too.

The protocol at the safe point is agreed collectively: the same ``all_gather_object`` carries
what each host's runtime client (local rank 0) has received, and every rank acts only on what
*every* connected host has received — a ``propose`` pauses all ranks at the same iteration
boundary, a ``routes`` installs the new routes on all ranks at the same boundary, a ``stop`` on
any host stops all of them. ``mfctl.runtime.client`` is the only mfctl module imported; torch is
imported when the hook is used.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from mfctl.integrations.safepoint import ControlInbox, agree
from mfctl.runtime.client import ControllerLost, RuntimeClient

SUPPORTED_RANGE = ">=0.16,<0.17"
SUPPORTED = ("MoEAlltoAllTokenDispatcher",)
REFUSED = {
    "MoEAllGatherTokenDispatcher": "it all-gathers every token to every rank (no all-to-all): the traffic does not "
                                   "follow the routing; use moe_token_dispatcher_type='alltoall'",
    "MoEFlexTokenDispatcher": "its DeepEP/HybridEP kernels (CUDA) consume the routing map inside the fused dispatch, "
                              "with no preprocess() to read; use moe_token_dispatcher_type='alltoall'",
    "MoEAlltoAllSEQTokenDispatcher": "the legacy sequence-level dispatcher of older megatron-core releases is not "
                                     f"supported (megatron-core {SUPPORTED_RANGE}: 'alltoall')",
}


class UnsupportedDispatcher(TypeError):
    """A token dispatcher the hook cannot read (the message says which and why)."""


def check_dispatcher(dispatcher: Any) -> None:
    """Raise :class:`UnsupportedDispatcher` unless ``dispatcher`` is a Megatron-Core all-to-all
    dispatcher (by class, its bases included)."""
    names = [c.__name__ for c in type(dispatcher).__mro__]
    if any(n in SUPPORTED for n in names):
        return
    for n in names:
        if n in REFUSED:
            raise UnsupportedDispatcher(f"{type(dispatcher).__name__}: not supported by the mfctl hook: {REFUSED[n]}")
    raise UnsupportedDispatcher(f"{type(dispatcher).__name__}: not a Megatron-Core MoEAlltoAllTokenDispatcher "
                                f"(megatron-core {SUPPORTED_RANGE})")


def expert_counts(routing: Any, num_experts: int) -> Any:
    """Tokens per expert (long tensor [num_experts]) from what ``preprocess`` receives: a bool
    routing map (tokens × experts, megatron-core's current API) or, as older releases passed,
    integer top-k expert indices (tokens × k; counted as their ``torch.histc(indices, min=0)`` did)."""
    import torch

    if routing.dtype == torch.bool:
        return routing.sum(dim=0).long().detach().clone()
    idx = routing.reshape(-1).long()
    return torch.bincount(idx[idx >= 0], minlength=num_experts).detach().clone()  # -1: a dropped slot


def _dist():
    """torch.distributed when a process group is up, else None (one process: no collective)."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None

    return dist if dist.is_available() and dist.is_initialized() else None


def _host(explicit: str | None) -> str:
    return explicit or os.environ.get("MFCTL_HOST") or os.environ.get("SLURMD_NODENAME") or socket.gethostname()


class MFabricHook:
    """One per training process (every rank). ``client`` is this host's runtime client (local
    rank 0 only, :meth:`RuntimeClient.from_env`), None on the other ranks. ``hidden`` and
    ``bytes_per_element`` give the bytes of one dispatched token (hidden × element size)."""

    def __init__(self, client: RuntimeClient | None, *, hidden: int, bytes_per_element: int = 2,
                 host: str | None = None, leader: bool | None = None, group: Any = None):
        self.client = client
        self.host = client.host if client is not None else _host(host)
        self.bytes_per_token = hidden * bytes_per_element
        self.group = group  # the process group of the whole job (None: the default, world)
        self._leader = leader
        self.config: dict = {}
        self.layers: dict[int, Any] = {}  # layer → dispatcher
        self.counts: dict[int, Any] = {}  # layer → tokens per expert sent by this rank, this iteration
        self.routes: dict = {}
        self.epoch = 0
        self.pending: int | None = None  # epoch proposed, paused for, routes not yet in force
        self.inbox = ControlInbox(client)  # the control messages this host's client received, by epoch
        self._said_bye = False
        self.last_traffic: dict | None = None  # what the last safe point computed (every rank)
        self.events: list[tuple[int, str, int]] = []  # (iteration, "paused"|"resumed", epoch), every rank

    @classmethod
    def from_env(cls, **kw) -> "MFabricHook":
        """The hook of a process started by ``mfctl run``: a runtime client on local rank 0
        (connected; a controller that cannot be reached leaves the job training on its own), none
        on the other ranks, and none anywhere without ``MFCTL_CONTROLLER`` (a job not under mfctl)."""
        c = RuntimeClient.from_env() if os.environ.get("MFCTL_CONTROLLER") else None
        hook = cls(c, **kw)
        if c is not None:
            try:
                hook.welcome(c.connect())
            except ControllerLost:
                hook.lost = True
        return hook

    @property
    def lost(self) -> bool:
        """The controller is lost (or this rank has no client): training goes on on the last routes."""
        return self.inbox.lost

    @lost.setter
    def lost(self, value: bool) -> None:
        self.inbox.lost = value

    def welcome(self, config: dict) -> None:
        self.config = config
        self.lost = False
        self.routes, self.epoch = config.get("routes", {}) or {}, config.get("epoch", 0) or 0

    @property
    def leader(self) -> bool:
        """The client that reports traffic: the welcome's ``leader`` host (else ``leader=``)."""
        if self.client is None:
            return False
        if self._leader is not None:
            return self._leader
        return self.config.get("leader", self.client.host) == self.client.host

    # --- recording -------------------------------------------------------------------------------
    def attach(self, dispatcher: Any, layer: int) -> None:
        """Record ``dispatcher``'s routing (MoE layer number ``layer``, the model's global numbering)
        every time Megatron calls its ``preprocess``. Raises :class:`UnsupportedDispatcher`."""
        check_dispatcher(dispatcher)
        original = dispatcher.preprocess
        num_experts = dispatcher.num_experts

        def preprocess(routing_map, *args, **kwargs):
            out = original(routing_map, *args, **kwargs)
            if getattr(dispatcher, "drop_and_pad", False) and getattr(dispatcher, "capacity", None) is not None:
                import torch

                c = torch.full((num_experts,), int(dispatcher.capacity), dtype=torch.long)
            else:
                c = expert_counts(routing_map, num_experts)
            prev = self.counts.get(layer)
            self.counts[layer] = c if prev is None else prev + c.to(prev.device)  # micro-batches add up
            return out

        dispatcher.preprocess = preprocess  # an instance attribute: dispatch_preprocess calls self.preprocess
        self.layers[layer] = dispatcher

    def _ep_ranks(self, dispatcher: Any) -> list[int]:
        d = _dist()
        if d is None or getattr(dispatcher, "ep_size", 1) == 1:
            return [d.get_rank() if d else 0]
        return list(d.get_process_group_ranks(dispatcher.ep_group))

    # --- the safe point ----------------------------------------------------------------------------
    def _payload(self) -> dict:
        counts = {layer: [int(v) for v in c.detach().cpu().tolist()] for layer, c in sorted(self.counts.items())}
        d = _dist()
        return {
            "rank": d.get_rank() if d else 0,
            "host": self.host,
            "counts": counts,
            "ep": {layer: self._ep_ranks(self.layers[layer]) for layer in counts},
            **self.inbox.vote(),  # client, propose, routes, stop (mfctl.integrations.safepoint.agree)
            "hosts": self.config.get("hosts") if self.leader else None,
        }

    def end_of_iteration(self, iteration: int, **metrics) -> bool:
        """The iteration's safe point; call it on **every** rank after the optimizer step. Gathers
        the routing, reports it (leader), answers the protocol together with every other rank.
        Returns True when the controller asked the job to stop (every rank returns True at the
        same iteration; the caller leaves its loop and calls :meth:`close`)."""
        self.inbox.drain()
        mine = self._payload()
        d = _dist()
        if d is not None:
            gathered: list = [None] * d.get_world_size(self.group)
            d.all_gather_object(gathered, mine, group=self.group)
        else:
            gathered = [mine]
        self.counts = {}
        self.last_traffic = traffic = self._traffic(gathered)
        if self.leader and traffic["matrices"]:
            self.inbox.send("traffic", iteration, traffic["matrices"], epoch=self.epoch,
                       tokens=traffic["tokens"])
        self.inbox.send("iteration", iteration, epoch=self.epoch,
                   paused=self.pending is not None, **metrics)
        return self._agree(iteration, gathered)

    def _agree(self, iteration: int, gathered: list) -> bool:
        """The same decision on every rank, from the same gathered list (:func:`mfctl.integrations.safepoint.agree`)."""
        a = agree(gathered, epoch=self.epoch, pending=self.pending)
        if a.stop:
            self.close(iteration, reason="stopped")
            return True
        if a.pause is not None:
            self.pending = a.pause  # OCS-path traffic of the changing circuits stops here, on every rank
            self.events.append((iteration, "paused", a.pause))
            self.inbox.send("paused", a.pause, iteration)
        if a.resume is not None:
            msg = self.inbox.routes.get(a.resume)
            if msg is not None:
                self.routes = msg.get("routes", {})
            self.epoch, self.pending = a.resume, None
            self.events.append((iteration, "resumed", a.resume))
            self.inbox.send("resume", a.resume, iteration)
            self.inbox.forget(a.resume)
        return False

    def _traffic(self, gathered: list) -> dict:
        """Server × server bytes per layer (index: the welcome's ``hosts``, else hosts by first
        rank), EP-rank × expert tokens per layer, and each rank's tokens per EP rank."""
        hosts = next((p["hosts"] for p in gathered if p["hosts"]), None)
        if not hosts:
            hosts = list(dict.fromkeys(p["host"] for p in sorted(gathered, key=lambda p: p["rank"])))
        index = {h: i for i, h in enumerate(hosts)}
        host_of = {p["rank"]: p["host"] for p in gathered}
        unknown = sorted({h for h in host_of.values() if h not in index})
        if unknown:
            raise ValueError(f"ranks on hosts outside the run's region: {', '.join(unknown)}")
        layers = sorted({int(layer) for p in gathered for layer in p["counts"]})
        n = len(hosts)
        matrices: list[list[list[int]]] = []
        tokens: dict[str, list[list[int]] | None] = {}
        splits: dict[int, dict[int, list[int]]] = {}  # layer → rank → tokens it sends each EP rank
        for layer in layers:
            m = [[0] * n for _ in range(n)]
            tok: list[list[int]] | None = None
            for p in gathered:
                c = p["counts"].get(layer)
                if c is None:
                    continue
                ep = p["ep"][layer]
                nle = len(c) // len(ep)
                sent = [sum(c[e * nle:(e + 1) * nle]) for e in range(len(ep))]
                splits.setdefault(layer, {})[p["rank"]] = sent
                src = index[host_of[p["rank"]]]
                for e, k in enumerate(sent):
                    m[src][index[host_of[ep[e]]]] += k * self.bytes_per_token
                if tok is None:
                    tok = [[0] * len(c) for _ in ep]
                row = tok[ep.index(p["rank"])]
                for x, k in enumerate(c):
                    row[x] += k
            matrices.append(m)
            tokens[str(layer)] = tok
        return {"hosts": hosts, "layers": layers, "matrices": matrices, "tokens": tokens, "splits": splits}

    def close(self, iterations: int, **extra) -> None:
        """Say ``bye`` (once) and close this host's connection; every rank may call it."""
        if self.client is None or self._said_bye:
            return
        self._said_bye = True
        self.inbox.send("bye", iterations=iterations, **extra)
        self.client.close()
