"""What a run needs from the testbed it runs on, and nothing of how a mock works.

A :class:`Testbed` gives the job the inventory to use (starting something first if it must),
its time scale (testbed seconds per wall second: 1 on hardware), the address the controller
listens on, the extra fields of each host's ``welcome`` and its own checks. :class:`Hardware` is
the real testbed; the mock's is :class:`mfctl.mockctl.MockTestbed` (the client side of the mock:
it starts the mock process, reads its ``status.json`` — it never imports :mod:`mfctl.mock`).

:func:`testbed_for` is the one place that chooses between them (by the playbook's
``mock.enabled``); a caller with another testbed (a hardware-in-the-loop plugin) passes its own
to :class:`mfctl.runtime.job.Job`.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from mfctl.errors import UnreachableError

if TYPE_CHECKING:
    from mfctl.observer import Observer
    from mfctl.runtime.playbook import Playbook


class Testbed(Protocol):
    time_scale: float  #: testbed seconds per wall second

    def start(self, run_dir: Path, observer: "Observer") -> str:
        """The inventory file to run on, after starting what must be started (state under
        ``run_dir``). Raises ConfigError / OperationFailed."""

    def check(self, inv) -> None:
        """Refuse an inventory this testbed cannot run the playbook on (ConfigError)."""

    def stop(self) -> None:
        """Stop what :meth:`start` started (no-op otherwise)."""

    def controller_listen(self, inv) -> str:
        """The address the run's controller binds: the one the hosts reach it on."""

    def welcome_fields(self, host: str) -> dict:
        """Fields of ``host``'s ``welcome`` beyond the runtime protocol's own."""


class Hardware:
    """The real testbed: the playbook's inventory (or ``inventory_override``), time scale 1."""

    time_scale = 1.0

    def __init__(self, pb: "Playbook", inventory_override: str | None = None):
        self.inventory = inventory_override or str(pb.inventory_path())

    def start(self, run_dir: Path, observer: "Observer") -> str:
        return self.inventory

    def check(self, inv) -> None:
        pass

    def stop(self) -> None:
        pass

    def controller_listen(self, inv) -> str:
        return advertised_ip(inv.hosts[0].ssh.address)

    def welcome_fields(self, host: str) -> dict:
        return {}  # (no faults are injected into a real runtime)


def testbed_for(pb: "Playbook", inventory_override: str | None = None) -> Testbed:
    """The mock (``mock.enabled``: one of its own, or the hand-started one ``inventory_override``
    names) or the hardware the playbook names."""
    if pb.mock.enabled:
        from mfctl.mockctl import MockTestbed  # (the client side of the mock; never mfctl.mock)

        return MockTestbed(pb, inventory_override)
    return Hardware(pb, inventory_override)


def advertised_ip(peer: str) -> str:
    """This machine's address towards ``peer`` (a host's SSH address): the source address the
    kernel picks for it (a UDP connect sends nothing), which the controller binds and the
    hosts are given. Raises UnreachableError when there is no route to ``peer``."""
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(peer, 9, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(sockaddr)
            return s.getsockname()[0]
    except OSError as e:
        raise UnreachableError(f"no route from this machine to {peer} for the runtime controller: {e}") from None
