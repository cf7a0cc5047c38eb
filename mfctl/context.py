"""One invocation's handles on the testbed, built once from the settings (``mfctl.settings``).

Every command and service that needs SSH to the hosts, the OCS or the link rates takes them from a
:class:`Context` instead of reading the settings itself::

    ctx = Context.from_settings(inventory)
    with ctx.pool() as pool: ...
    with ctx.ocs() as drv: ...        # an unconnected OCSDriver; ctx.open_ocs(purpose=...) connects and locks
    rates = ctx.link_rates()          # bytes/s per direction, RoCEv2 goodput
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mfctl.fabric.planner import LinkRates
    from mfctl.inventory.models import Inventory
    from mfctl.ocs.driver import OCSDriver
    from mfctl.transport.ssh import SSHPool


@dataclass
class Context:
    """Settings-derived handles for one inventory. Timeouts in s; ``fanout`` hosts at once."""

    inventory: "Inventory"
    connect_timeout: float = 10.0
    command_timeout: float = 30.0
    fanout: int = 32

    @classmethod
    def from_settings(cls, inventory: "Inventory", **overrides: Any) -> "Context":
        """A context whose timeouts and fan-out come from the ``MFCTL_*`` settings (a value given
        in ``overrides``, e.g. a command-line option, wins). Raises UsageError (exit 2) for a
        setting out of its limits."""
        from mfctl import settings

        vals: dict[str, Any] = {"connect_timeout": settings.get_float("connect_timeout"),
                                "command_timeout": settings.get_float("command_timeout"),
                                "fanout": settings.get_int("fanout")}
        vals.update({k: v for k, v in overrides.items() if v is not None})
        return cls(inventory, **vals)

    def pool(self, *, command_timeout: float | None = None) -> "SSHPool":
        """A pool of SSH sessions to every host of the inventory."""
        from mfctl.transport.ssh import SSHPool, targets_from_inventory

        return SSHPool(targets_from_inventory(self.inventory), connect_timeout=self.connect_timeout,
                       command_timeout=command_timeout or self.command_timeout, fanout=self.fanout)

    def ocs(self, *, command_timeout: float | None = None, name: str | None = None) -> "OCSDriver":
        """An unconnected driver for the inventory's OCS ``name`` (None: the only one; ``with
        ctx.ocs() as drv`` connects it)."""
        from mfctl.ocs.driver import driver_from_inventory

        return driver_from_inventory(self.inventory, connect_timeout=self.connect_timeout,
                                     command_timeout=command_timeout or self.command_timeout, ocs=name)

    def open_ocs(self, *, purpose: str | None = None, journals=(), command_timeout: float | None = None,
                 ocs: str | None = None) -> "OCSDriver":
        """A connected driver for the OCS named ``ocs`` (None: the only one) with the device
        journal (and, with ``purpose``, the device lock): :func:`mfctl.ocs.driver.open_ocs`."""
        from mfctl.ocs.driver import open_ocs

        return open_ocs(self.inventory, purpose=purpose, journals=journals, connect_timeout=self.connect_timeout,
                        command_timeout=command_timeout or self.command_timeout, ocs=ocs)

    def link_rates(self, host: str | None = None) -> "LinkRates":
        """Circuit (one OCS lane) and EPS (a server's EPS NICs together) rates of ``host`` (default:
        the first), bytes/s per direction at RoCEv2 goodput: :func:`mfctl.fabric.planner.link_rates`."""
        from mfctl.fabric.planner import link_rates

        h0 = self.inventory.host(host) if host else self.inventory.hosts[0]
        lanes = h0.ocs_lanes()
        return link_rates(lanes[0][0].lane_rate_gbps if lanes else 0.0, sum(n.speed_gbps for n in h0.eps_nics()))
