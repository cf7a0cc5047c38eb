"""mfctl's pytest plugin for hardware-in-the-loop suites (docs/hil.md), installed with mfctl
(``pytest11`` entry point ``mfctl``).

Options: ``--mfctl-inventory INV`` (default: the embedded mock, started for the session and stopped
after it), ``--mfctl-lock-timeout S`` (wait this long for another holder of the testbed lock),
``--mfctl-health {off,before,around}`` (the gate around each testbed test; default around).

Fixtures: ``testbed`` (the validated inventory, locked for the session), ``mfctl_session`` (the
same with its lock and mock), ``ocs`` (the OCS: apply/verify/journal), ``hosts`` (SSH: run/run_many,
folded results), ``topology`` (a factory: circuits or a topology file on the OCS for one test,
the previous state put back afterwards, verified), ``runner`` (run a playbook, get its summary).

Marker: ``@pytest.mark.mfctl(circuits=[(LANE, LANE), ...], health="+gpu,-optics", hosts="gpu[01-02]", ocs="NAME")``.

Several OCSes: ``ocs["NAME"]`` is each one; ``ocs.apply`` & co. act on the test's OCS (the only one,
or the marker's ``ocs=``); circuits go to the OCS of their lanes; the gate and the runner read and
put back every OCS.

Inert unless used: nothing is imported, started or locked, and no fixture added, for a test that
asks for none of these fixtures and carries no ``mfctl`` marker (the plugin is in every pytest run
of an environment that has mfctl installed).
"""

from __future__ import annotations

import pytest

#: the fixtures that put a test on the testbed (and under its gate)
TESTBED_FIXTURES = frozenset({"testbed", "mfctl_session", "ocs", "hosts", "topology", "runner"})
_SESSION = pytest.StashKey[object]()  # the config's _Opener
_RECORD = pytest.StashKey[object]()  # an item's TestRecord
_OCS = pytest.StashKey[object]()  # an item's OCS handle


def pytest_addoption(parser) -> None:
    g = parser.getgroup("mfctl", "mfctl hardware-in-the-loop (docs/hil.md)")
    g.addoption("--mfctl-inventory", metavar="INV", default=None,
                help="The testbed's inventory YAML (default: start the embedded mock testbed for the session).")
    g.addoption("--mfctl-lock-timeout", metavar="S", type=float, default=0.0,
                help="Seconds to wait for another holder of the testbed lock (default 0: fail at once, naming it).")
    g.addoption("--mfctl-health", choices=("off", "before", "around"), default="around",
                help="Health gate of each testbed test: off, before (the testbed must be healthy), around (and a "
                     "test that leaves a host unhealthy or the OCS changed is marked as the one that broke it).")


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "mfctl(circuits=None, health=None, hosts=None, ocs=None): a testbed test: "
                            "circuits put on the OCS for it (pairs of lanes), the health checks that gate it (mfctl "
                            "health --checks syntax, or False for none), the hosts they run on (a host set; default "
                            "all), the test's OCS on a testbed of several (the ocs fixture's default).")
    config.stash[_SESSION] = _Opener(config)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session) -> None:
    """The testbed is let go as soon as the last test is done (before the reports are written): the
    next CI job waiting for the lock starts that much sooner."""
    pytest_unconfigure(session.config)


def pytest_unconfigure(config) -> None:
    opener = config.stash.get(_SESSION, None)
    if opener is not None:
        opener.close()


def uses_testbed(item) -> bool:
    """Whether ``item`` is a testbed test: it carries the marker, or one of its fixtures is one of this
    plugin's — not a parameter or a fixture of the test's own that happens to share the name (a
    ``@pytest.mark.parametrize("hosts", ...)`` is no testbed test)."""
    if item.get_closest_marker("mfctl") is not None:
        return True
    names = TESTBED_FIXTURES & set(getattr(item, "fixturenames", ()))
    if not names:
        return False
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    for name in names:
        d = defs.get(name)
        if d and getattr(d[-1], "func", None) is not None and getattr(d[-1].func, "__module__", "") == __name__:
            return True
    return False


class _Opener:
    """The session's :class:`~mfctl.pytest_plugin.session.HILSession`, opened on first use."""

    def __init__(self, config):
        self.config, self.session = config, None
        self.error: str | None = None  # why the testbed could not be had (said to every test asking for it)

    def get(self):
        if self.error is not None:  # one refusal (lock held, mock would not start) fails every test the same way
            pytest.fail(self.error, pytrace=False)
        if self.session is None:
            from mfctl.errors import MfctlError
            from mfctl.pytest_plugin.session import HILSession

            opt = self.config.getoption
            try:
                self.session = HILSession.open(opt("mfctl_inventory"), lock_timeout=opt("mfctl_lock_timeout"),
                                               purpose=f"pytest {' '.join(self.config.invocation_params.args)[:200]}")
            except MfctlError as e:  # its message says all (the lock's holder, …): no traceback through the plugin
                self.error = f"mfctl testbed: {e}"
                pytest.fail(self.error, pytrace=False)
            self._say(self.session.describe())
        return self.session

    def _say(self, text: str) -> None:
        """One line on pytest's terminal, outside the test's captured output."""
        import contextlib

        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is None or self.config.getoption("verbose") < 0:
            return
        cap = self.config.pluginmanager.get_plugin("capturemanager")
        with cap.global_and_fixture_disabled() if cap is not None else contextlib.nullcontext():
            tr.ensure_newline()
            tr.write_line(text)

    def close(self) -> None:
        if self.session is not None:
            s, self.session = self.session, None
            s.close()


def _record(item):
    from mfctl.pytest_plugin.record import TestRecord

    rec = item.stash.get(_RECORD, None)
    if rec is None:
        rec = item.stash[_RECORD] = TestRecord()
    return rec


def _ocs_handle(item, session):
    """The test's :class:`~mfctl.pytest_plugin.handles.OCSes` (its default: the marker's ``ocs``, or
    the only OCS)."""
    from mfctl.errors import MfctlError
    from mfctl.pytest_plugin.handles import OCSes

    h = item.stash.get(_OCS, None)
    if h is None:
        marker = item.get_closest_marker("mfctl")
        try:
            h = OCSes(session, _record(item), purpose=f"pytest {item.nodeid}"[:200],
                      default=marker.kwargs.get("ocs") if marker is not None else None)
        except MfctlError as e:  # the marker names an OCS the testbed does not have
            pytest.fail(f"mfctl: @pytest.mark.mfctl(ocs=...): {e}", pytrace=False)
        item.stash[_OCS] = h
    return h


# --- fixtures -------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def mfctl_session(request):
    """The session's testbed (:class:`mfctl.pytest_plugin.session.HILSession`): inventory, lock, mock."""
    return request.config.stash[_SESSION].get()


@pytest.fixture(scope="session")
def testbed(mfctl_session):
    """The validated inventory (:class:`mfctl.inventory.models.Inventory`), locked for the session."""
    return mfctl_session.inventory


@pytest.fixture
def ocs(request, mfctl_session):
    """The OCS (:class:`mfctl.pytest_plugin.handles.OCSes`): ``apply``, ``verify``, ``cross_connects``,
    ``journal`` (this test's records), ``driver`` of the test's OCS (the only one, or the marker's
    ``ocs=``); ``ocs["NAME"]`` each OCS of a testbed of several. Each device lock is held from first use
    to the test's end."""
    h = _ocs_handle(request.node, mfctl_session)
    yield h
    h.close()


@pytest.fixture
def hosts(request, mfctl_session):
    """The hosts over the session's SSH pool (:class:`mfctl.pytest_plugin.handles.Hosts`): ``run``,
    ``run_many``, ``fold``; every command and its output in the test's report."""
    from mfctl.pytest_plugin.handles import Hosts

    return Hosts(mfctl_session.pool(), mfctl_session.inventory, _record(request.node))


@pytest.fixture
def topology(request, mfctl_session):
    """``topology(circuits=[("gpu01/nic0", "gpu02/nic0")])`` / ``topology("file.yaml")``: on the OCS for this
    test (verified); what the OCS held before is put back when the test ends (verified)."""
    from mfctl.pytest_plugin.handles import Topology

    t = Topology(_ocs_handle(request.node, mfctl_session))
    yield t
    try:
        t.restore()
    finally:
        t.ocs.close()


@pytest.fixture
def runner(request, mfctl_session, tmp_path):
    """``runner(PLAYBOOK, iterations=None, skip_health=False, restore=True) -> summary``: run a playbook on the
    session's testbed (``mfctl.run.summary/v1`` with ``exit_code``), then put back what the OCS held
    (``restore``); run directories under the test's tmp_path."""
    from mfctl.pytest_plugin.handles import Runner

    item = request.node
    return Runner(mfctl_session, _record(item), tmp_path / "runs", _ocs_handle(item, mfctl_session))


def pytest_collection_modifyitems(items) -> None:
    """Put the gate first among the fixtures of every testbed test (set up first, torn down last:
    after the test's own topology is put back), and of no other test: an autouse fixture would cost
    every test of every suite in the environment its setup."""
    for item in items:
        names = getattr(item, "fixturenames", None)
        if isinstance(names, list) and uses_testbed(item) and "_mfctl_gate" not in names:
            names.insert(0, "_mfctl_gate")


@pytest.fixture
def _mfctl_gate(request):
    """The health gate of a testbed test (:mod:`mfctl.pytest_plugin.gate`)."""
    yield from _gate(request, request.node)


def _gate(request, item):
    from mfctl.pytest_plugin import gate
    from mfctl.pytest_plugin.handles import Topology

    session = request.getfixturevalue("mfctl_session")
    mode = request.config.getoption("mfctl_health")
    marker = item.get_closest_marker("mfctl")
    kw = dict(marker.kwargs) if marker is not None else {}
    checks = [] if mode == "off" or kw.get("health") is False else gate.select(kw.get("health"))
    names = _hosts(session, kw.get("hosts"))
    rec = _record(item)
    before = None
    if mode != "off":
        before = gate.take(session, checks, names, ocs=mode == "around")
        bad = gate.unhealthy(before)
        if bad:
            by = f" (left so by {session.broken_by})" if session.broken_by else ""
            rec.attach(item)
            pytest.fail(f"mfctl: the testbed was unhealthy before this test{by}: {bad}", pytrace=False)
    topo = None
    if kw.get("circuits"):
        topo = Topology(_ocs_handle(item, session))
        topo(circuits=kw["circuits"], ocs=kw.get("ocs"))
    try:
        yield
    finally:
        try:
            if topo is not None:
                topo.restore()
            h = item.stash.get(_OCS, None)
            if h is not None:
                h.close()
            problems = []
            if mode == "around" and before is not None:
                after = gate.take(session, checks, names, ocs=True)
                from mfctl.ocs.service import PortMap

                inv = session.inventory
                ports = (PortMap.from_inventory(inv) if len(inv.ocses) == 1 else
                         {o.name: PortMap.from_inventory(inv, o.name) for o in inv.ocses})
                problems = gate.changes(before, after, ports)
        finally:
            rec.attach(item)
        if problems:
            session.broken_by = item.nodeid
            item.user_properties.append(("mfctl.broke_testbed", "; ".join(problems)))
            pytest.fail("mfctl: this test broke the testbed: " + "; ".join(problems), pytrace=False)


def _hosts(session, spec) -> list[str]:
    from mfctl.inventory.hostsets import select_hosts

    inv = session.inventory
    names = [h.name for h in inv.hosts]
    if not spec:
        return names
    if not isinstance(spec, str):
        spec = ",".join(spec)
    return select_hosts(spec, names, {r.name: r.hosts for r in inv.regions})
