"""SSHPool.map and Results: per-host outcomes and the exit code of DESIGN §9, in one place."""

import threading

import pytest

from mfctl.errors import ConfigError, ExitCode, OperationFailed, UnreachableError
from mfctl.observer import RecordingObserver
from mfctl.transport.results import HostResult, Results
from mfctl.transport.ssh import CommandResult, SSHPool


def outcome(host):
    if host.startswith("down"):
        raise UnreachableError(f"{host}: cannot connect to 127.0.0.1:1: Connection refused")
    if host.startswith("bad"):
        raise OperationFailed(f"{host}: mlxconfig: exit 3")
    return host.upper()


def test_map_keeps_host_order_values_and_errors():
    obs = RecordingObserver()
    r = SSHPool([], fanout=3).map(["a", "down1", "bad1", "b"], outcome, observer=obs, phase="probe")
    assert r.hosts == ["a", "down1", "bad1", "b"]
    assert r.values() == ["A", None, None, "B"]
    assert (r.ok, r.failed, r.unreachable) == (["a", "b"], ["bad1"], ["down1"])
    assert r[1].error == "cannot connect to 127.0.0.1:1: Connection refused"  # the host is .host, not in the text
    assert r[2].error == "mlxconfig: exit 3"
    assert obs.events[0] == ("phase", "probe", 4)
    assert sorted(e for e in obs.events if e[0] == "host_done") == sorted(
        [("host_done", "a", 0), ("host_done", "down1", 4), ("host_done", "bad1", 1), ("host_done", "b", 0)])


def test_map_respects_fanout():
    running, peak, lock = [0], [0], threading.Lock()
    gate = threading.Event()

    def slow(host):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        gate.wait(0.05)
        with lock:
            running[0] -= 1
        return host

    SSHPool([], fanout=2).map([f"h{i}" for i in range(8)], slow)
    assert peak[0] == 2


def test_a_bug_in_the_per_host_function_is_raised_not_hidden():
    def buggy(host):
        raise KeyError(host)

    with pytest.raises(KeyError):
        SSHPool([], fanout=2).map(["a", "b"], buggy)


@pytest.mark.parametrize("codes,any_,all_", [
    ([], 0, 0),
    ([0, 0], 0, 0),
    ([0, 1], 1, 1),
    ([0, 4], 4, 1),       # health: a sweep that reached a host has a verdict; one lost host is critical
    ([4, 4], 4, 4),
    ([1, 4, 6], 4, 1),
    ([0, 6], 6, 6),       # drift
    ([6, 1], 1, 1),       # failure outranks drift
    ([3, 0], 3, 3),
])
def test_exit_code_is_the_worst_outcome(codes, any_, all_):
    r = Results([HostResult(f"h{i}", exit_code=ExitCode(c)) for i, c in enumerate(codes)])
    assert r.exit_code() == any_
    assert r.exit_code(unreachable="all") == all_


def test_command_results_carry_their_outcome():
    cmds = [CommandResult("a", ["true"], rc=0), CommandResult("b", ["false"], rc=1),
            CommandResult("c", ["x"], error="timeout: command did not finish within 1 s")]
    r = Results.of(cmds)
    assert [x.exit_code for x in r] == [ExitCode.OK, ExitCode.FAILED, ExitCode.UNREACHABLE]
    assert r.exit_code() == ExitCode.UNREACHABLE and r.failed == ["b"] and r.unreachable == ["c"]
    assert r.value_of("b") is cmds[1]


def test_config_error_of_one_host_is_that_hosts_outcome():
    def f(h):
        raise ConfigError("lane syntax")
    assert SSHPool([], fanout=1).map(["x"], f).exit_code() == ExitCode.CONFIG


def test_a_bug_stops_new_hosts_and_is_raised_after_those_under_way():
    started, finished, second = [], [], threading.Event()

    def f(h):
        started.append(h)
        if h == "h0":
            second.wait(5)  # the bug comes while h1 is under way
            raise KeyError(h)
        second.set()
        threading.Event().wait(0.2)
        finished.append(h)
        return h

    with pytest.raises(KeyError):
        SSHPool([], fanout=2).map([f"h{i}" for i in range(10)], f)
    assert sorted(started) == ["h0", "h1"]  # no third host began
    assert finished == ["h1"]  # the host under way ended before the bug was raised


def test_ctrl_c_raises_at_once_and_starts_no_new_host():
    import os
    import signal
    import time

    started = []

    def slow(h):
        started.append(h)
        threading.Event().wait(1.5)
        return h

    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
    t = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        SSHPool([], fanout=2).map([f"h{i}" for i in range(8)], slow)
    assert time.monotonic() - t < 1.0
    time.sleep(1.6)  # the two under way end; none after them begins
    assert len(started) == 2
