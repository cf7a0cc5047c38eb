"""The run's OCS at its two ends: the initial topology, and the final read-back against the last
plan (the reconfigurations in between are :mod:`mfctl.runtime.reconfig`'s).

:class:`RunOCS` works on an open driver (connected, with the device lock and the run's journal:
:meth:`mfctl.context.Context.open_ocs`) and the run's :class:`~mfctl.runtime.summary.RunRecord`,
whose ``last_plan`` is what the OCS holds. Link-up times are testbed ms (wall × ``scale``).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable

from mfctl.errors import MfctlError, OperationFailed
from mfctl.fabric import mapping
from mfctl.runtime.plan import RunPlan, initial_cross_connects
from mfctl.runtime.reconfig import LinkPoller
from mfctl.runtime.summary import RunRecord
from mfctl.signals import DeferSignals


class RunOCS:
    """``driver`` (an open :class:`mfctl.ocs.driver.OCSDriver`, or several by OCS name: each
    region's lanes on its own, :attr:`RegionState.ocs <mfctl.runtime.plan.RegionState.ocs>`),
    ``journal`` (the run's :class:`~mfctl.ocs.journal.Journal`), ``warn(message)`` a warning of
    the run. With several OCSes each one is set, read back and checked on its own, against
    ``record.last_plans[name]``."""

    def __init__(self, driver, plan: RunPlan, record: RunRecord, *, journal, warn: Callable[[str], None], scale: float):
        self.drivers: dict[str, Any] = dict(driver) if isinstance(driver, dict) else {}
        self.driver: Any = driver if not isinstance(driver, dict) else None  # the only OCS's
        self.plan, self.record = plan, record
        self.journal, self.warn, self.scale = journal, warn, scale

    def set_initial(self, links: LinkPoller, observer) -> None:
        """The playbook's initial topology (:func:`~mfctl.runtime.plan.initial_cross_connects`)
        applied (signals held), read back, its lanes polled up; each region routes over the
        circuits whose lanes came up."""
        if self.drivers:
            return self._set_initial_each(links, observer)
        pb, drv, rec = self.plan.playbook, self.driver, self.record
        current = drv.cross_connects()
        self.journal.append("ocs.state", endpoint=drv.endpoint, cross_connects=sorted(current.items()))
        desired = initial_cross_connects(self.plan, current)
        observer.phase("ocs", f"initial topology ({pb.topology.initial}) via {drv.endpoint}")
        with DeferSignals():
            res = drv.apply(desired, reason="initial topology")
        regions = self.plan.regions.values()
        rec.initial_apply, rec.ocs_endpoint = res.to_dict(), drv.endpoint
        rec.initial_circuits = {r.name: mapping.circuit_matrix(r.circuits, r.hosts).tolist() for r in regions}
        t = time.monotonic()
        lw = links.wait([c for r in regions for c in r.circuits])
        rec.initial_linkup_ms = (lw.up_at - t) * 1000 * self.scale
        if lw.down:
            self.warn(f"initial circuits with lanes still down after {pb.runtime.linkup_timeout_s:g} s: {', '.join(lw.down)}")
        for reg in regions:
            reg.route_up(set(lw.down))
        rec.last_plan = dict(res.readback)

    def _set_initial_each(self, links: LinkPoller, observer) -> None:
        """:meth:`set_initial` with several OCSes: each one's regions planned on its own state and
        applied on it (one after the other), then every lane polled up at once."""
        pb, rec = self.plan.playbook, self.record
        rec.initial_apply, endpoints = {}, []
        for name, drv in self.drivers.items():
            current = drv.cross_connects()
            self.journal.append("ocs.state", ocs=name, endpoint=drv.endpoint,
                                cross_connects=sorted(current.items()))
            desired = initial_cross_connects(self.plan, current, name)
            observer.phase("ocs", f"initial topology ({pb.topology.initial}) on {name} via {drv.endpoint}")
            with DeferSignals():
                res = drv.apply(desired, reason="initial topology")
            rec.initial_apply[name] = res.to_dict()
            rec.last_plans[name] = dict(res.readback)
            endpoints.append(f"{name} {drv.endpoint}")
        rec.ocs_endpoint = "; ".join(endpoints)
        regions = self.plan.regions.values()
        rec.initial_circuits = {r.name: mapping.circuit_matrix(r.circuits, r.hosts).tolist() for r in regions}
        t = time.monotonic()
        lw = links.wait([c for r in regions for c in r.circuits])
        rec.initial_linkup_ms = (lw.up_at - t) * 1000 * self.scale
        if lw.down:
            self.warn(f"initial circuits with lanes still down after {pb.runtime.linkup_timeout_s:g} s: {', '.join(lw.down)}")
        for reg in regions:
            reg.route_up(set(lw.down))

    def final_check(self, inventory: str) -> None:
        """Read the OCS back at the end; OperationFailed when it is not the last plan (a warning
        when the last plan is unknown since a failed reconfiguration). ``inventory`` is named in
        the advice."""
        if self.drivers:
            return self._final_check_each(inventory)
        rec = self.record
        rb = rec.final_readback = self.driver.cross_connects()
        rec.final_matches = rb == rec.last_plan
        self.journal.append("ocs.final", readback=sorted(rb.items()), matches_plan=rec.final_matches)
        if rec.last_plan is None:  # unknown since a failed reconfiguration (said then): what it holds now
            self.warn(f"the OCS could not be read back after a failed reconfiguration; at the end it holds "
                      f"{len(rb)} cross-connects: check with `mfctl ocs show -i {inventory}`")
            return
        if not rec.final_matches:
            raise OperationFailed("final OCS read-back does not match the last plan")

    def _final_check_each(self, inventory: str) -> None:
        """:meth:`final_check` of every OCS: each read back against its own last plan."""
        rec, differ = self.record, []
        for name, drv in self.drivers.items():
            rb = drv.cross_connects()
            last = rec.last_plans.get(name)
            rec.final_by_ocs[name] = {"endpoint": drv.endpoint, "cross_connects": sorted([i, o] for i, o in rb.items()),
                                      "matches_last_plan": rb == last}
            self.journal.append("ocs.final", ocs=name, readback=sorted(rb.items()), matches_plan=rb == last)
            if last is None:
                self.warn(f"OCS {name} could not be read back after a failed reconfiguration; at the end it holds "
                          f"{len(rb)} cross-connects: check with `mfctl ocs show -i {inventory} --ocs {name}`")
            elif rb != last:
                differ.append(name)
        rec.final_readback = {}  # (read: the summary's by_ocs has each one's)
        rec.final_matches = not differ and all(rec.last_plans.get(n) is not None for n in self.drivers)
        if differ:
            raise OperationFailed(f"final OCS read-back does not match the last plan on {', '.join(differ)}")

    def close(self) -> None:
        """Teardown: journal what the OCS holds (unless the final check did), close the driver
        (the device lock goes with it). Never raises for the OCS's or the journal's errors."""
        for name, drv in self.drivers.items():
            with contextlib.suppress(MfctlError, OSError):
                if name not in self.record.final_by_ocs:
                    rb = drv.cross_connects()
                    self.journal.append("ocs.final", ocs=name, readback=sorted(rb.items()),
                                        matches_plan=rb == self.record.last_plans.get(name))
            with contextlib.suppress(MfctlError, OSError):
                drv.close()
        if self.drivers:
            return
        with contextlib.suppress(MfctlError, OSError):
            if self.record.final_readback is None:
                rb = self.driver.cross_connects()
                self.journal.append("ocs.final", readback=sorted(rb.items()), matches_plan=rb == self.record.last_plan)
            self.driver.close()
