"""What the fixtures hand a test: the OCS (:class:`OCS`), the hosts (:class:`Hosts`), the topology
factory (:class:`Topology`) and the playbook runner (:class:`Runner`). Each records what it sent in
the test's :class:`~mfctl.pytest_plugin.record.TestRecord`."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from mfctl.pytest_plugin.record import TestRecord


class OCS:
    """One OCS of the session's testbed (``name``: its inventory name; None: the only one): its driver
    (:func:`mfctl.ocs.driver.open_ocs`) opened on first use for this test with the device lock and
    the device journal, closed when the test ends."""

    def __init__(self, session, record: TestRecord, purpose: str, name: str | None = None):
        self.session, self.record, self.purpose, self.name = session, record, purpose, name
        self._drv = None

    @property
    def several(self) -> bool:
        return len(self.session.inventory.ocses) > 1

    @property
    def driver(self):
        """The connected :class:`mfctl.ocs.driver.OCSDriver` (device lock held)."""
        if self._drv is None:
            self._drv = self.session.context().open_ocs(purpose=self.purpose, ocs=self.name)
            self.record.start_journal(self._drv.device_journal.path)
        return self._drv

    @property
    def ports(self):
        """The :class:`mfctl.ocs.service.PortMap` of this OCS (its ports ↔ the lanes of its regions)."""
        from mfctl.ocs.service import PortMap

        return PortMap.from_inventory(self.session.inventory, self.name)

    def cross_connects(self) -> dict[int, int]:
        """Every cross-connect, confirmed (two reads that agree): ``{input: output}``."""
        return self.driver.cross_connects()

    def apply(self, desired: dict[int, int], *, reason: str = "") -> object:
        """Make the OCS hold exactly ``desired`` (only what differs changes; read back, journalled):
        the :class:`mfctl.ocs.driver.ApplyResult`. Raises OperationFailed when it does not verify."""
        res = self.driver.apply(desired, reason=reason or self.purpose)
        self.record.ocs_commands(res.commands, self.name if self.several else None)
        return res

    def verify(self, desired: dict[int, int]) -> None:
        """Assert the OCS holds exactly ``desired``, naming what differs by lane."""
        now = self.cross_connects()
        if now != desired:
            what = f"the OCS {self.name}" if self.several else "the OCS"
            raise AssertionError(f"{what} differs from what was expected: " + describe_change(self.ports, desired, now))

    def journal(self) -> list[dict]:
        """The device journal's records written during this test (of every OCS the test opened)."""
        self.driver  # noqa: B018 (opened: the journal's slice starts at the test's beginning)
        return self.record.journal_slice()

    def close(self) -> None:
        if self._drv is not None:
            drv, self._drv = self._drv, None
            drv.close()


class OCSes:
    """What the ``ocs`` fixture gives: every OCS of the testbed by name — ``ocs["ocs-b"]`` (an
    :class:`OCS`), ``ocs.names``, ``for name in ocs``, ``len(ocs)``, :meth:`cross_connects_all` —
    and the test's own OCS through the same methods as one :class:`OCS` (``ocs.apply(...)``,
    ``ocs.cross_connects()``, ``ocs.verify(...)``, ``ocs.ports``, ``ocs.driver``, ``ocs.journal()``):
    the only one, or the one the test's marker names (``@pytest.mark.mfctl(ocs="ocs-b")``). On a
    testbed of several OCSes a test that names none and calls those gets a UsageError naming them."""

    def __init__(self, session, record: TestRecord, purpose: str, default: str | None = None):
        from mfctl.errors import UsageError

        self.session, self.record, self.purpose = session, record, purpose
        inv = session.inventory
        self.names: list[str] = [o.name for o in inv.ocses]
        if default is not None and default not in self.names:
            raise UsageError(f"no OCS {default!r} in inventory {inv.name} (it has {', '.join(self.names)})")
        self.default = default if default is not None else (self.names[0] if len(self.names) == 1 else None)
        self._handles: dict[str, OCS] = {}

    def __getitem__(self, name: str) -> OCS:
        if name not in self.names:
            raise KeyError(f"no OCS {name!r} on this testbed (it has {', '.join(self.names)})")
        h = self._handles.get(name)
        if h is None:
            # the only OCS keeps name None (as every single-OCS path of mfctl: journal records unchanged)
            h = self._handles[name] = OCS(self.session, self.record, self.purpose,
                                         name if len(self.names) > 1 else None)
        return h

    def __iter__(self):
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def one_name(self) -> str:
        """The name of the test's own OCS: the only one, or the one the marker names (UsageError:
        several and none named)."""
        if self.default is None:
            from mfctl.errors import UsageError

            raise UsageError(f"the testbed has {len(self.names)} OCSes ({', '.join(self.names)}): use ocs[NAME], or "
                             "name the test's OCS with @pytest.mark.mfctl(ocs=NAME)")
        return self.default

    @property
    def one(self) -> OCS:
        """The test's own OCS (:meth:`one_name`)."""
        return self[self.one_name()]

    # the test's own OCS, as one OCS handle
    @property
    def name(self) -> str | None:
        return self.one.name

    @property
    def driver(self):
        return self.one.driver

    @property
    def ports(self):
        return self.one.ports

    def cross_connects(self) -> dict[int, int]:
        return self.one.cross_connects()

    def apply(self, desired: dict[int, int], *, reason: str = "") -> object:
        return self.one.apply(desired, reason=reason)

    def verify(self, desired: dict[int, int]) -> None:
        self.one.verify(desired)

    def journal(self) -> list[dict]:
        """The device journals' records written during this test (every OCS it opened; the test's own
        OCS opened at least)."""
        if self.default is not None:
            self.one.driver  # noqa: B018
        return self.record.journal_slice()

    def cross_connects_all(self) -> dict[str, dict[int, int]]:
        """Every OCS's cross-connects, read in parallel: ``{name: {input: output}}``."""
        return _each(self.names, lambda n: self[n].cross_connects())

    def apply_all(self, desired: dict[str, dict[int, int]], *, reason: str = "") -> None:
        """Put each OCS named in ``desired`` to exactly its cross-connects (in parallel), verified."""
        def one(n: str) -> None:
            self[n].apply(desired[n], reason=reason)
            self[n].verify(desired[n])

        _each(list(desired), one)

    def circuit_ocs(self, a: str, b: str) -> str:
        """The OCS whose regions hold both lanes of the circuit ``a``–``b`` (UsageError: none, or two switches)."""
        from mfctl.errors import UsageError
        from mfctl.ocs.service import PortMap

        inv = self.session.inventory
        if len(self.names) == 1:
            return self.names[0]
        on = {}
        for n in self.names:
            pm = PortMap.from_inventory(inv, n)
            for ref in (a, b):
                try:
                    pm.lane(ref)
                except UsageError:
                    continue
                on[ref] = n
        if a not in on or b not in on:
            raise UsageError(f"no optical lane {(b if a in on else a)!r} on any OCS of inventory {inv.name}")
        if on[a] != on[b]:
            raise UsageError(f"circuit {a} - {b}: {a} is on OCS {on[a]}, {b} on OCS {on[b]}: a circuit joins two ports "
                             "of one switch")
        return on[a]

    def close(self) -> None:
        for h in self._handles.values():
            h.close()


def _each(names: list[str], fn) -> dict:
    """``{name: fn(name)}``, in parallel when there are several."""
    if len(names) <= 1:
        return {n: fn(n) for n in names}
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(8, len(names)), thread_name_prefix="pytest-ocs") as ex:
        return dict(zip(names, ex.map(fn, names)))


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
    the OCS for this test (verified), and put back what it held before when the test ends (verified).

    Several OCSes: each circuit goes to the OCS whose regions hold its lanes; a file or
    ``cross_connects`` to the test's OCS (``ocs=NAME``, else the marker's, else the only one).
    ``ocs=NAME`` puts the circuits on that OCS too. Every OCS changed is put back."""

    def __init__(self, ocs: OCSes):
        self.ocs = ocs
        self.before: dict[str, dict[int, int]] = {}  # each OCS changed: what it held before the first change

    def desired(self, name: str | Path | None = None, *, circuits: Sequence[Sequence[str]] = (),
                cross_connects: dict[int, int] | None = None, replace: bool = True,
                ocs: str | None = None) -> dict[str, dict[int, int]]:
        """What each OCS concerned should hold: ``{ocs name: {input: output}}``."""
        from mfctl.ocs.service import cross_connects_for, load_topology_file

        want: dict[str, dict[int, int]] = {}
        if name is not None or cross_connects or ocs is not None:
            target = ocs if ocs is not None else self.ocs.one_name()
            want[target] = {}
        for a, b in circuits:
            n = ocs if ocs is not None else self.ocs.circuit_ocs(a, b)
            want.setdefault(n, {}).update(cross_connects_for(self.ocs[n].ports, a, b))
        if name is not None or cross_connects:
            t = want[target]
            if name is not None:
                t.update(load_topology_file(self.ocs[target].ports, name))
            t.update(cross_connects or {})
        if not replace:
            want = {n: {**self.ocs[n].cross_connects(), **w} for n, w in want.items()}
        return want

    def __call__(self, name: str | Path | None = None, *, circuits: Sequence[Sequence[str]] = (),
                 cross_connects: dict[int, int] | None = None, replace: bool = True,
                 ocs: str | None = None) -> dict[int, int] | dict[str, dict[int, int]]:
        """Apply and verify; returns what the OCS now holds (``{name: cross-connects}`` when the
        circuits went to several OCSes). ``replace`` (default): exactly this topology on each OCS
        concerned; False: these on top of what is there."""
        want = self.desired(name, circuits=circuits, cross_connects=cross_connects, replace=replace, ocs=ocs)
        for n in want:
            if n not in self.before:
                self.before[n] = self.ocs[n].cross_connects()
        for n, w in want.items():
            self.ocs[n].apply(w, reason="pytest topology")
            self.ocs[n].verify(w)
        return next(iter(want.values())) if len(want) == 1 else want

    def restore(self) -> None:
        """Put back what each OCS changed held before the first call (verified)."""
        before, self.before = self.before, {}
        for n, b in before.items():
            self.ocs[n].apply(b, reason="pytest topology restore")
            self.ocs[n].verify(b)


class Runner:
    """``runner("playbooks/x.yaml", iterations=4)``: run a playbook on the session's testbed (in this
    process, the session's lock lent to it) and return its summary (``mfctl.run.summary/v1`` with
    ``exit_code``). On the session's mock, the playbook runs at the mock's time scale. A run leaves
    its last topology on the OCS: with ``restore`` (default) what every OCS held before is put back
    after it (verified), so that the test leaves the testbed as it found it."""

    def __init__(self, session, record: TestRecord, runs_dir: Path, ocs: OCSes):
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
        before = self.ocs.cross_connects_all() if restore else None  # every OCS (their journal slices start here)
        self.ocs.close()  # the run takes the device locks itself
        job = Job(pb, inventory_override=self.session.inventory_path, runs_dir=str(self.runs_dir),
                  skip_health=skip_health, testbed=testbed)
        try:
            with lease.lent(self.session.lock):
                summary = job.run()
        finally:
            if before is not None:
                self.ocs.apply_all(before, reason=f"pytest: back to the state before run {pb.name}")
        self.summaries.append(summary)
        self.record.commands.append(f"run: {pb.name} ({summary.get('run_id')}): {summary.get('status')}")
        journal = Path(summary.get("run_dir") or "") / "journal.jsonl"
        if summary.get("run_dir") and journal.exists():
            self.record.notes.append(f"run {summary.get('run_id')}: {summary.get('status')}, run directory "
                                     f"{summary.get('run_dir')}")
        return summary
