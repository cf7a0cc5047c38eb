"""A hook that connects a Megatron-Core MoE training job to the mfctl controller.

It wraps each MoE layer's all-to-all token dispatcher so that, after routing, the layer's
``num_global_tokens_per_expert`` (EP ranks × experts, already all-gathered by Megatron) is
recorded; at the end of every iteration the job's leader reports all layers to the
controller, and every rank answers the reconfiguration protocol at that safe point:
``propose`` → stop sending on the changing circuits → ``paused``; ``routes`` → install
the new route table → ``resume``. If the controller goes away, training continues on the
last routes (the electrical switch carries whatever has no circuit).

Usage inside a Megatron training script (``mfctl run`` sets MFCTL_CONTROLLER,
MFCTL_RUN_TOKEN_FILE — a 0600 file holding the run token — and MFCTL_HOST)::

    from examples.megatron_hook import MFabricHook
    hook = MFabricHook.from_env(hidden=args.hidden_size, bytes_per_element=2, leader=rank == 0)
    if hook is not None:  # local rank 0 of each host (under Slurm the host is $SLURMD_NODENAME)
        for layer_no, layer in enumerate(moe_layers):
            hook.attach(layer.token_dispatcher, layer_no)
    ...
    for iteration in ...:
        train_step(...)
        if hook is not None:
            hook.end_of_iteration(iteration, seconds=elapsed, tokens=global_batch_tokens)

Only ``mfctl.runtime.client`` (standard library) is imported: no mfctl dependencies leak
into the training environment.
"""

from __future__ import annotations

from mfctl.runtime.client import ControllerLost, RuntimeClient


def _to_list(x):
    """A torch tensor, numpy array or nested list → nested Python lists of numbers."""
    if hasattr(x, "detach"):
        x = x.detach().cpu()
    if hasattr(x, "tolist"):
        return x.tolist()
    return [list(r) for r in x]


class MFabricHook:
    def __init__(self, client: RuntimeClient, *, leader: bool, hidden: int, bytes_per_element: int = 2):
        self.client, self.leader = client, leader
        self.bytes_per_token = hidden * bytes_per_element
        self.tokens: dict[int, list] = {}  # layer → EP ranks × experts token counts, this iteration
        self.routes: dict = {}
        self.epoch = 0
        self.pending: int | None = None
        self.lost = False
        self.config = None

    @classmethod
    def from_env(cls, **kw) -> "MFabricHook | None":
        """The hook of a process started by ``mfctl run`` (SSH or Slurm); None in torchrun's
        local ranks other than 0 — one runtime client per host."""
        c = RuntimeClient.from_env()
        if c is None:
            return None
        hook = cls(c, **kw)
        hook.config = c.connect()
        hook.routes, hook.epoch = hook.config.get("routes", {}), hook.config.get("epoch", 0)
        return hook

    def attach(self, dispatcher, layer: int) -> None:
        """Wrap ``dispatcher.preprocess`` (Megatron-Core ``MoEAlltoAllTokenDispatcher``)."""
        original = dispatcher.preprocess

        def preprocess(*args, **kwargs):
            out = original(*args, **kwargs)
            counts = getattr(dispatcher, "num_global_tokens_per_expert", None)
            if counts is not None:
                self.tokens[layer] = _to_list(counts)
            return out

        dispatcher.preprocess = preprocess

    def _send(self, fn, *a, **kw) -> None:
        if self.lost:
            return
        try:
            fn(*a, **kw)
        except ControllerLost:
            self.lost = True  # keep training on the last routes

    def end_of_iteration(self, iteration: int, **metrics) -> None:
        """Report, then serve the protocol at this safe point."""
        if self.leader and self.tokens:
            self._send(self.client.traffic, iteration, [], epoch=self.epoch,
                       tokens={str(l): t for l, t in sorted(self.tokens.items())})
        self._send(self.client.iteration, iteration, epoch=self.epoch, paused=self.pending is not None, **metrics)
        self.tokens = {}
        if self.client.lost.is_set():
            self.lost = True
        if self.lost:
            return
        try:
            msgs = self.client.poll()
        except ControllerLost:
            self.lost = True
            return
        for msg in msgs:
            if msg["type"] == "propose":
                self.pending = msg["epoch"]  # the custom all-to-all stops using circuits that change
                self._send(self.client.paused, msg["epoch"], iteration)
            elif msg["type"] == "routes":
                self.routes, self.epoch, self.pending = msg["routes"], msg["epoch"], None
                self._send(self.client.resume, msg["epoch"], iteration)
            elif msg["type"] == "stop":
                self._send(self.client.bye, iterations=iteration, reason="stopped")
                raise SystemExit(0)

    def close(self, iterations: int) -> None:
        self._send(self.client.bye, iterations=iterations)
        self.client.close()
