"""The collective answer to the runtime protocol at a training job's safe point (docs/runtime-protocol.md,
"For framework authors"), shared by the Megatron hook (:mod:`mfctl.integrations.megatron`) and the
plain-torch MoE job (:mod:`mfctl.integrations.torch_moe`).

Each host's runtime client (local rank 0) receives ``propose``/``routes``/``stop`` at its own
moment. At the safe point every rank contributes its host's *vote* (:meth:`ControlInbox.vote`:
the highest proposed epoch and routed epoch its client has, a stop) to one collective
(``all_gather_object``), and every rank computes the same :func:`agree` from the same gathered
list: pause when every connected host has the proposal, install the routes when every connected
host has them, stop everywhere when any host was told to stop. So all ranks act at the same
iteration boundary, never on one rank's guess. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mfctl.runtime.client import ControllerLost, RuntimeClient


@dataclass(frozen=True)
class Agreement:
    """What every rank does at this safe point: ``stop`` (leave the loop), ``pause`` (an epoch
    every connected host has been proposed: OCS-path traffic of the changing circuits stops now,
    send ``paused``), ``resume`` (an epoch whose routes every connected host has: they are in
    force now, send ``resume``). ``pause`` and ``resume`` may both be set (routes that came in the
    same interval as their proposal)."""

    stop: bool = False
    pause: int | None = None
    resume: int | None = None


def agree(votes: list[dict], *, epoch: int, pending: int | None) -> Agreement:
    """The same decision on every rank from the same gathered ``votes`` (one per rank: ``client``
    — this rank holds a connected runtime client —, ``propose`` and ``routes`` — the highest epoch
    its client received, or None —, ``stop`` — a reason or None). ``epoch`` is the epoch in force,
    ``pending`` the epoch paused for (None: none). Only ranks with a client vote on
    propose/routes (the minimum over them, once none is None); a stop from any rank stops all."""
    if any(v["stop"] for v in votes):
        return Agreement(stop=True)
    clients = [v for v in votes if v["client"]]
    if not clients:
        return Agreement()

    def agreed(key: str) -> int | None:
        seen = [v[key] for v in clients]
        return None if any(s is None for s in seen) else min(seen)

    prop, rt = agreed("propose"), agreed("routes")
    return Agreement(pause=prop if prop is not None and prop > epoch and pending != prop else None,
                     resume=rt if rt is not None and rt > epoch else None)


class ControlInbox:
    """One rank's side of the protocol: its host's runtime ``client`` (None on ranks without one)
    and the control messages it has received, by epoch. A lost controller is not fatal: sends are
    dropped from then on (``lost``), training goes on on the last routes."""

    def __init__(self, client: RuntimeClient | None):
        self.client = client
        self.lost = client is None
        self.proposals: dict[int, dict] = {}  # epoch → propose message
        self.routes: dict[int, dict] = {}  # epoch → routes message
        self.stop: str | None = None

    def drain(self) -> None:
        """Take in what the client has received (never acts: :func:`agree` decides)."""
        if self.client is None or self.lost:
            return
        try:
            msgs = self.client.poll()
        except ControllerLost:
            self.lost = True
            return
        for m in msgs:
            if m.get("type") == "propose":
                self.proposals[int(m["epoch"])] = m
            elif m.get("type") == "routes":
                self.routes[int(m["epoch"])] = m
            elif m.get("type") == "stop":
                self.stop = str(m.get("reason") or "stopped")

    def send(self, call: str, *a: Any, **kw: Any) -> None:
        """``client.<call>(...)`` where this rank has a connected client; a lost connection is noted."""
        if self.client is None or self.lost:
            return
        try:
            getattr(self.client, call)(*a, **kw)
        except ControllerLost:
            self.lost = True

    def vote(self) -> dict:
        """This rank's contribution to the safe point's collective (see :func:`agree`)."""
        return {"client": self.client is not None and not self.lost,
                "propose": max(self.proposals) if self.proposals else None,
                "routes": max(self.routes) if self.routes else None, "stop": self.stop}

    def forget(self, epoch: int) -> None:
        """Drop the messages of epochs up to ``epoch`` (in force now)."""
        self.proposals = {e: m for e, m in self.proposals.items() if e > epoch}
        self.routes = {e: m for e, m in self.routes.items() if e > epoch}
