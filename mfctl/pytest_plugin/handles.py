"""What the fixtures hand a test: the OCS (:class:`OCS`), the hosts (:class:`Hosts`), the topology
factory (:class:`Topology`) and the playbook runner (:class:`Runner`). Each records what it sent in
the test's :class:`~mfctl.pytest_plugin.record.TestRecord`."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from mfctl.pytest_plugin.record import TestRecord


class OCS:
    """The session testbed's OCS driver (:func:`mfctl.ocs.driver.open_ocs`), opened on first use for
    this test with the device lock and the device journal, closed when the test ends."""

    def __init__(self, session, record: TestRecord, purpose: str):
        self.session, self.record, self.purpose = session, record, purpose
        self._drv = None

    @property
    def driver(self):
        """The connected :class:`mfctl.ocs.driver.OCSDriver` (device lock held)."""
        if self._drv is None:
            self._drv = self.session.context().open_ocs(purpose=self.purpose)
            self.record.start_journal(self._drv.device_journal.path)
        return self._drv

    @property
    def ports(self):
        """The inventory's :class:`mfctl.ocs.service.PortMap` (lanes ↔ OCS ports)."""
        from mfctl.ocs.service import PortMap

        return PortMap.from_inventory(self.session.inventory)

    def cross_connects(self) -> dict[int, int]:
        """Every cross-connect, confirmed (two reads that agree): ``{input: output}``."""
        return self.driver.cross_connects()

    def apply(self, desired: dict[int, int], *, reason: str = "") -> object:
        """Make the OCS hold exactly ``desired`` (only what differs changes; read back, journalled):
        the :class:`mfctl.ocs.driver.ApplyResult`. Raises OperationFailed when it does not verify."""
        res = self.driver.apply(desired, reason=reason or self.purpose)
        self.record.ocs_commands(res.commands)
        return res

    def verify(self, desired: dict[int, int]) -> None:
        """Assert the OCS holds exactly ``desired``, naming what differs by lane."""
        now = self.cross_connects()
        if now != desired:
            raise AssertionError("the OCS differs from what was expected: " + describe_change(self.ports, desired, now))

    def journal(self) -> list[dict]:
        """The device journal's records written during this test."""
        self.driver  # noqa: B018 (opened: the journal's slice starts at the test's beginning)
        return self.record.journal_slice()

    def close(self) -> None:
        if self._drv is not None:
            drv, self._drv = self._drv, None
            drv.close()


def describe_change(pm, before: dict[int, int], after: dict[int, int]) -> str:
    """What differs between two OCS states, each cross-connect named by its lanes."""
    gone = {i: o for i, o in before.items() if after.get(i) != o}
    new = {i: o for i, o in after.items() if before.get(i) != o}
    part = [f"{'-' if k == 'removed' else '+'} {i}->{o} ({pm.name(i)} -> {pm.name(o)})"
            for k, m in (("removed", gone), ("added", new)) for i, o in sorted(m.items())]
    head = f"{len(gone)} cross-connect(s) removed, {len(new)} added"
    return head + (": " + "; ".join(part[:12]) + (f"; ... {len(part) - 12} more" if len(part) > 12 else "") if part else "")


class Hosts:
    """The session testbed's hosts over one SSH pool: :meth:`run`, :meth:`run_many` and folded
    results (:meth:`fold`, as ``mfctl exec`` prints them). Every command and its output goes into the
    test's report."""

    def __init__(self, pool, inventory, record: TestRecord):
        self.pool, self.inventory, self.record = pool, inventory, record
        self.names = [h.name for h in inventory.hosts]

    def select(self, spec: str) -> list[str]:
        """The hosts a host set names (``all``, ``gpu[01-02]``, ``@region0``)."""
        from mfctl.inventory.hostsets import select_hosts

        inv = self.inventory
        return select_hosts(spec, [h.name for h in inv.hosts], {r.name: r.hosts for r in inv.regions})

    def run(self, host: str, argv: Sequence[str], *, timeout: float | None = None):
        """One command on one host: its :class:`mfctl.transport.ssh.CommandResult` (never raises for
        a remote failure)."""
        r = self.pool.run(host, list(argv), timeout=timeout)
        self.record.host_command(r)
        return r

    def run_many(self, argv: Sequence[str], hosts: str | Sequence[str] = "all", *, timeout: float | None = None) -> list:
        """The same command on many hosts in parallel (a host set or names; default all): results in host order."""
        names = self.select(hosts) if isinstance(hosts, str) else list(hosts)
        res = self.pool.run_many(names, lambda h: list(argv), timeout=timeout)
        for r in res:
            self.record.host_command(r)
        return res

    @staticmethod
    def fold(results: list) -> list[tuple[str, object]]:
        """Identical results folded: ``[(host set, result)]`` (``gpu[01-04]``), as ``mfctl exec`` shows them."""
        from mfctl.cli.fold import fold

        return fold(results, lambda r: r.host, lambda r: (r.rc, r.stdout, r.stderr, r.error_shared))


class Topology:
    """``topology(circuits=[("gpu01/nic0", "gpu02/nic0")])`` or ``topology("examples/topology.yaml")`` (a
    topology file as ``mfctl ocs apply`` takes it) or ``topology(cross_connects={1: 400})``: put that on
    the OCS for this test (verified), and put back what it held before when the test ends (verified)."""

    def __init__(self, ocs: OCS):
        self.ocs = ocs
        self.before: dict[int, int] | None = None

    def desired(self, name: str | Path | None = None, *, circuits: Sequence[Sequence[str]] = (),
                cross_connects: dict[int, int] | None = None, replace: bool = True) -> dict[int, int]:
        from mfctl.ocs.service import cross_connects_for, load_topology_file

        pm = self.ocs.ports
        want: dict[int, int] = {}
        if name is not None:
            want.update(load_topology_file(pm, name))
        for a, b in circuits:
            want.update(cross_connects_for(pm, a, b))
        want.update(cross_connects or {})
        if replace:
            return want
        return {**self.ocs.cross_connects(), **want}

    def __call__(self, name: str | Path | None = None, *, circuits: Sequence[Sequence[str]] = (),
                 cross_connects: dict[int, int] | None = None, replace: bool = True) -> dict[int, int]:
        """Apply and verify; returns what the OCS now holds. ``replace`` (default): exactly this
        topology; False: these on top of what is there."""
        if self.before is None:
            self.before = self.ocs.cross_connects()
        want = self.desired(name, circuits=circuits, cross_connects=cross_connects, replace=replace)
        self.ocs.apply(want, reason="pytest topology")
        self.ocs.verify(want)
        return want

    def restore(self) -> None:
        """Put back what the OCS held before the first call (verified)."""
        if self.before is None:
            return
        before, self.before = self.before, None
        self.ocs.apply(before, reason="pytest topology restore")
        self.ocs.verify(before)


class Runner:
    """``runner("playbooks/x.yaml", iterations=4)``: run a playbook on the session's testbed (in this
    process, the session's lock lent to it) and return its summary (``mfctl.run.summary/v1`` with
    ``exit_code``). On the session's mock, the playbook runs at the mock's time scale. A run leaves
    its last topology on the OCS: with ``restore`` (default) what the OCS held before is put back
    after it (verified), so that the test leaves the testbed as it found it."""

    def __init__(self, session, record: TestRecord, runs_dir: Path, ocs: OCS):
        self.session, self.record, self.runs_dir, self.ocs = session, record, runs_dir, ocs
        self.summaries: list[dict] = []

    def __call__(self, playbook: str | Path, *, iterations: int | None = None, skip_health: bool = False,
                 restore: bool = True) -> dict:
        from mfctl.pytest_plugin import lease
        from mfctl.runtime.job import Job
        from mfctl.runtime.playbook import load_playbook
        from mfctl.runtime.testbed import Hardware, Testbed

        testbed: Testbed
        pb = load_playbook(playbook)
        if iterations is not None:
            pb.training.iterations = int(iterations)
        if self.session.is_mock:
            from mfctl.mockctl import MockTestbed

            pb.mock.time_scale = self.session.time_scale
            testbed = MockTestbed(pb, self.session.inventory_path)
        else:
            testbed = Hardware(pb, self.session.inventory_path)
        before = self.ocs.cross_connects() if restore else None  # (its journal slice starts here)
        self.ocs.close()  # the run takes the device lock itself
        job = Job(pb, inventory_override=self.session.inventory_path, runs_dir=str(self.runs_dir),
                  skip_health=skip_health, testbed=testbed)
        try:
            with lease.lent(self.session.lock):
                summary = job.run()
        finally:
            if before is not None:
                self.ocs.apply(before, reason=f"pytest: back to the state before run {pb.name}")
                self.ocs.verify(before)
        self.summaries.append(summary)
        self.record.commands.append(f"run: {pb.name} ({summary.get('run_id')}): {summary.get('status')}")
        journal = Path(summary.get("run_dir") or "") / "journal.jsonl"
        if summary.get("run_dir") and journal.exists():
            self.record.notes.append(f"run {summary.get('run_id')}: {summary.get('status')}, run directory "
                                     f"{summary.get('run_dir')}")
        return summary
