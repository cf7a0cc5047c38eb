"""mfctl's pytest plugin (mfctl/pytest_plugin), through pytest itself (pytester): inert where unused,
the fixtures on a mock testbed, the gate that names the test that broke the testbed, the report's
attachments (JUnit properties and system-out), the lock (a holder named; two concurrent sessions
sharing a lease through a real Redis, one waiting for the other)."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

import mfctl.health  # noqa: F401  (imported here: pytester's in-process runs put sys.modules back after each, and
import mfctl.ocs.driver  # noqa: F401  numpy, which these import, cannot be loaded twice in one process)
import mfctl.ocs.service  # noqa: F401
import mfctl.pytest_plugin.handles  # noqa: F401
import mfctl.pytest_plugin.session  # noqa: F401
from mfctl import mockctl
from mfctl.pytest_plugin import gate
from mfctl.pytest_plugin.gate import Snapshot
from support import PROTOTYPE, ROOT, wait_until

pytest_plugins = ["pytester"]


@pytest.fixture(scope="module")
def mock_inv(tmp_path_factory):
    """One mock for the module's inner sessions (each given it with --mfctl-inventory)."""
    d = tmp_path_factory.mktemp("hil-mock")
    env = {"MFCTL_STATE_DIR": str(d / "state")}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        st = mockctl.start(PROTOTYPE, d / "mock", time_scale=100)
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    yield st["inventory"]
    mockctl.stop(d / "mock")


def _xml(pytester, name="report.xml"):
    return ET.parse(pytester.path / name).getroot()


def test_the_plugin_is_inert_for_tests_that_do_not_use_it(pytester):
    pytester.makepyfile(test_plain="""
        import sys

        import pytest

        def _untouched(request):
            assert "_mfctl_gate" not in request.fixturenames  # (the gate is added to testbed tests only)
            assert not any(m in sys.modules for m in ("mfctl.pytest_plugin.session", "mfctl.mockctl", "mfctl.lock",
                                                      "mfctl.inventory"))

        def test_plain(request):
            _untouched(request)

        @pytest.fixture
        def ocs():
            return "a fixture of the suite's own"

        @pytest.mark.parametrize("hosts", ["gpu01", "gpu[01-02]"])  # parameters named as the plugin's fixtures
        def test_same_names(request, hosts, ocs):
            _untouched(request)
            assert ocs == "a fixture of the suite's own"
    """)
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    r.assert_outcomes(passed=3)
    assert "mfctl: testbed" not in r.stdout.str()
    # the options are there all the same
    r = pytester.runpytest_subprocess("--help")
    assert "--mfctl-inventory=INV" in r.stdout.str() and "--mfctl-health={off,before,around}" in r.stdout.str()


def test_fixtures_on_the_mock_and_what_the_report_carries(pytester, mock_inv):
    pytester.makepyfile(test_hil="""
        import pytest

        def test_topology_and_hosts(topology, ocs, hosts, testbed):
            before = ocs.cross_connects()
            held = topology(circuits=[("gpu01/nic0", "gpu02/nic0")])
            assert held == {1: 388, 4: 385}
            ocs.verify(held)
            assert [r.stdout.strip() for r in hosts.run_many(["hostname", "-s"], "gpu[01-02]")] == ["gpu01", "gpu02"]
            [(hs, r)] = hosts.fold(hosts.run_many(["true"]))
            assert hs == "gpu[01-04]" and r.rc == 0
            assert testbed.name.startswith("mfabric-prototype-mock-") and before == {}

        def test_the_topology_was_put_back(ocs):
            assert ocs.cross_connects() == {}

        @pytest.mark.mfctl(circuits=[("gpu03/nic0", "gpu04/nic0")], health="+dcgm,-optics", hosts="gpu03")
        def test_marker(ocs):
            assert ocs.cross_connects() == {7: 394, 10: 391}
    """)
    r = pytester.runpytest("--mfctl-inventory", mock_inv, "--mfctl-health", "off", "--junitxml=report.xml",
                           "-o", "junit_logging=system-out", "-o", "junit_family=xunit1", "-p", "no:cacheprovider")
    r.assert_outcomes(passed=3)
    assert "mfctl: testbed mfabric-prototype-mock-" in r.stdout.str()
    cases = {tc.get("name"): tc for tc in _xml(pytester).iter("testcase")}
    props = {p.get("name"): p.get("value") for p in cases["test_topology_and_hosts"].iter("property")}
    journal = json.loads(props["mfctl.ocs_journal"])  # the test's slice of the device journal: apply, then restore
    assert [r["reason"] for r in journal if r["op"] == "ocs.intent"] == ["pytest topology", "pytest topology restore"]
    assert "ocs: ENT-PATCH::1&4,388&385" in props["mfctl.commands"] and "gpu02: hostname -s" in props["mfctl.commands"]
    out = cases["test_topology_and_hosts"].find("system-out").text
    assert "---- mfctl host logs ----" in out and "---- gpu01: hostname -s (rc=0" in out
    assert "test_marker" in cases and cases["test_marker"].find("failure") is None


def test_a_test_that_leaves_the_ocs_changed_is_named_as_the_one_that_broke_it(pytester, mock_inv):
    pytester.makepyfile(test_breaks="""
        import pytest

        pytestmark = pytest.mark.mfctl(health="links")  # (a quick sweep: the OCS is what changes here)

        def test_leaves_a_circuit(ocs):
            ocs.apply({1: 388})

        def test_after_it(ocs):
            assert ocs.cross_connects() == {1: 388}  # (finds it, leaves it: changed nothing)
    """)
    r = pytester.runpytest("--mfctl-inventory", mock_inv, "--junitxml=report.xml", "-p", "no:cacheprovider")
    r.assert_outcomes(passed=2, errors=1)
    msg = ("mfctl: this test broke the testbed: the OCS differs from what the test found: 0 cross-connect(s) removed, "
           "1 added: + 1->388 (gpu01/nic0.0 tx -> gpu02/nic0.0 rx)")
    assert msg in r.stdout.str()
    err = _xml(pytester).find(".//testcase[@name='test_leaves_a_circuit']/error")
    assert msg in err.get("message")
    assert "test_after_it" not in err.get("message")
    # --mfctl-health off: no gate, and a test may change what it found (here: back to no cross-connect)
    pytester.makepyfile(test_breaks="""
        def test_clears_the_ocs(ocs):
            ocs.apply({})
    """)
    pytester.runpytest("--mfctl-inventory", mock_inv, "--mfctl-health", "off", "-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_new_critical_findings_and_ocs_changes_are_named():
    from mfctl.inventory import load_inventory
    from mfctl.ocs.service import PortMap

    pm = PortMap.from_inventory(load_inventory(PROTOTYPE))
    before = Snapshot({("gpu01", "gpu.xid", "gpu0"): "GPU 0 XID 79"}, {1: 388}, ["gpu01", "gpu02"], ["gpu", "xid"])
    after = Snapshot({("gpu01", "gpu.xid", "gpu0"): "GPU 0 XID 79", ("gpu02", "nic.eps_link_down", "nic3"):
                      "EPS link ens4f0np0 (nic3) is DOWN"}, {2: 388}, ["gpu01", "gpu02"], ["gpu", "xid"])
    assert gate.changes(before, after, pm) == [
        "gpu02 is unhealthy: EPS link ens4f0np0 (nic3) is DOWN (nic.eps_link_down)",
        "the OCS differs from what the test found: 1 cross-connect(s) removed, 1 added: - 1->388 (gpu01/nic0.0 tx -> "
        "gpu02/nic0.0 rx); + 2->388 (gpu01/nic1.0 tx -> gpu02/nic0.0 rx)"]
    assert gate.changes(before, before, pm) == []
    assert gate.unhealthy(before) == "gpu01: GPU 0 XID 79"
    assert gate.select("+dcgm,-optics") == ["gpu", "links", "xid", "nvlink", "rdma", "gids", "speed", "counters", "roce",
                                           "dcgm"]
    assert gate.select(["xid", "nvlink"]) == ["xid", "nvlink"]


def test_a_held_testbed_lock_is_named_and_waited_for(pytester, mock_inv):
    from mfctl.inventory import load_inventory
    from mfctl.lock import testbed_lock

    pytester.makepyfile(test_locked="""
        def test_one(testbed):
            pass

        def test_two(testbed):
            pass
    """)
    with testbed_lock(load_inventory(mock_inv), "another CI job", reason="nightly"):
        t0 = time.monotonic()
        r = pytester.runpytest("--mfctl-inventory", mock_inv, "--mfctl-lock-timeout", "0.3", "-p", "no:cacheprovider")
        waited = time.monotonic() - t0
    r.assert_outcomes(errors=2)  # refused once, the same way for each test
    assert "mfctl testbed: testbed 'mfabric-prototype-mock-" in r.stdout.str() and "is locked by pid" in r.stdout.str()
    assert "for 'another CI job'" in r.stdout.str() and waited >= 0.3
    assert "Traceback" not in r.stdout.str() and "mfctl/pytest_plugin" not in r.stdout.str()  # the message alone
    pytester.runpytest("--mfctl-inventory", mock_inv, "--mfctl-health", "off",
                       "-p", "no:cacheprovider").assert_outcomes(passed=2)  # released


def test_with_no_inventory_the_session_starts_and_stops_its_own_mock(pytester):
    pytester.makepyfile(test_default="""
        def test_mock(mfctl_session, hosts):
            assert mfctl_session.is_mock and mfctl_session.time_scale == 100
            r = hosts.run("gpu01", ["nvidia-smi", "-L"])
            assert r.ok and r.stdout.count("GPU ") == 8
            print("MOCKPID", mfctl_session.mock["pid"])
    """)
    r = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider", "--mfctl-health", "off")
    r.assert_outcomes(passed=1)
    pid = int(next(ln.split()[1] for ln in r.stdout.lines if ln.startswith("MOCKPID")))

    def gone():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")  # (a zombie: stopped)

    wait_until(gone, timeout=15, what=f"the session's mock (pid {pid}) to stop")


# --- two pytest sessions sharing one testbed through a real Redis ------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis_url(tmp_path):
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed (Debian package redis-server): no shared lease to test")
    try:
        import mfctl.lock.redis_backend  # noqa: F401
    except ImportError:
        pytest.skip("this mfctl has no Redis backend for the testbed lock (mfctl.lock.redis_backend)")
    port = _free_port()
    p = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                          "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            p.kill()
            raise AssertionError("redis-server did not answer PING within 10 s")
        time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0"
    p.terminate()
    p.wait(10)


def test_two_sessions_share_the_testbed_through_a_redis_lease(tmp_path, mock_inv, redis_url):
    """Two CI jobs on one testbed: the second waits for the first's lease, then runs; their OCS work
    never interleaves. Each session writes when each test started and ended (wall clock)."""
    doc = yaml.safe_load(Path(mock_inv).read_text())
    doc["lock"] = {"backend": "redis", "url": redis_url, "ttl_s": 10}
    inv = Path(mock_inv).with_name("inventory-redis.yaml")  # beside the mock's own (its relative key paths)
    inv.write_text(yaml.safe_dump(doc))
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_job.py").write_text(
        "import json, os, time\n"
        "import pytest\n"
        "@pytest.mark.mfctl(health='links')\n"
        "def test_hold_the_ocs(topology, mfctl_session):\n"
        "    t0 = time.time()\n"
        "    topology(circuits=[('gpu01/nic0', 'gpu02/nic0')])\n"
        "    time.sleep(1.0)\n"
        "    with open(os.environ['HIL_LOG'], 'a') as f:\n"
        "        f.write(json.dumps({'job': os.environ['HIL_JOB'], 'start': t0, 'end': time.time(),\n"
        "                            'locked': mfctl_session.acquired_ts}) + '\\n')\n")
    log = tmp_path / "log.jsonl"
    env = {**os.environ, "HIL_LOG": str(log)}
    cmd = [sys.executable, "-m", "pytest", str(suite), "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p",
           "no:rerunfailures", "--rootdir", str(suite), "--mfctl-inventory", str(inv), "--mfctl-lock-timeout", "60",
           "--mfctl-health", "before"]
    procs = [subprocess.Popen(cmd, env={**env, "HIL_JOB": j}, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for j in ("a", "b")]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    runs = sorted((json.loads(ln) for ln in log.read_text().splitlines()), key=lambda r: r["start"])
    assert len(runs) == 2 and runs[0]["end"] <= runs[1]["start"], runs  # one after the other, never both
    handover = runs[1]["locked"] - runs[0]["end"]  # the first job's last test done -> the second job holds the lease
    print(f"handover between the two sessions: {handover:.3f} s from the first's last test to the second's lease; "
          f"{runs[1]['start'] - runs[0]['end']:.3f} s to the second's first test (its health gate between)")
    # the waiter polls every 50 ms: the rest is the first session's teardown (its topology put back, the
    # lease released) — 0.13 s on a quiet machine, a few seconds on a loaded one
    assert 0 < handover < 60


def test_a_test_that_leaves_a_host_unhealthy_is_named_and_the_next_one_is_told(pytester, tmp_path, monkeypatch):
    """nvidia-smi on gpu02 hangs at its 2nd call (the gate's sweep after the first test), on gpu03 at its
    1st (the sweep before the second test): the first test broke gpu02, the second found gpu03 unhealthy."""
    monkeypatch.setenv("MFCTL_COMMAND_TIMEOUT", "1")
    st = mockctl.start(PROTOTYPE, tmp_path / "mock", time_scale=100,
                       inject=["gpu02:nvidia-smi=hang:2", "gpu03:nvidia-smi=hang:1"])
    try:
        pytester.makepyfile(test_gpus="""
            import pytest

            @pytest.mark.mfctl(health="gpu", hosts="gpu02")
            def test_first(hosts):
                pass

            @pytest.mark.mfctl(health="gpu", hosts="gpu03")
            def test_second(hosts):
                pass
        """)
        r = pytester.runpytest("--mfctl-inventory", st["inventory"], "-p", "no:cacheprovider")
    finally:
        mockctl.stop(tmp_path / "mock")
    r.assert_outcomes(passed=1, errors=2)  # the first passed, then broke the testbed at teardown; the second errs at setup
    out = r.stdout.str()
    # (a host whose every command hung is one that cannot be reached: the sweep's ssh.unreachable)
    assert ("mfctl: this test broke the testbed: gpu02 is unhealthy: timeout: command did not finish within 1 s "
            "(ssh.unreachable)") in out
    assert "mfctl: the testbed was unhealthy before this test (left so by " in out
    assert "test_gpus.py::test_first): gpu03: timeout: command did not finish within 1 s" in out
