"""The run's controller accepts only its own workers (issue 13, item 7): a stranger's connection
— no token, a wrong one, an oversized or trickling hello, a flood of them, a second worker for
a connected host — is refused without an event (the run goes on), without memory growth, in
bounded time; and the controller binds the address the hosts reach it on."""

import json
import logging
import queue
import socket
import threading
import time
from pathlib import Path

import pytest
import yaml

from mfctl import mockctl
from mfctl.errors import OperationFailed
from mfctl.runtime import controller as controller_mod
from mfctl.runtime import job as job_mod
from mfctl.runtime import testbed as testbed_mod
from mfctl.runtime.client import ControllerLost, HelloRefused, RuntimeClient, local_rank
from mfctl.runtime.controller import Controller
from mfctl.runtime.playbook import load_playbook
from mfctl.runtime.protocol import DUPLICATE_HOST
from support import DATA

WELCOME = {"run_id": "t", "region": "r0", "hosts": ["h1", "h2"], "leader": "h1"}
TOKEN = "0123456789abcdef0123456789abcdef"
HELLO_TIMEOUT_S = getattr(controller_mod, "HELLO_TIMEOUT_S", 5.0)  # the documented limits (the old
MAX_PENDING = getattr(controller_mod, "MAX_PENDING", 16)  # controller had none: its tests fail on the behaviour)


@pytest.fixture
def ctrl():
    c = Controller(token=TOKEN, welcome=lambda h: WELCOME, expected_hosts={"h1", "h2"})
    yield c
    c.close()


def _events(ctrl, settle: float = 0.3) -> list[tuple[str, str]]:
    """(host, type) of every event queued within ``settle`` seconds."""
    out = []
    deadline = time.monotonic() + settle
    while True:
        try:
            host, msg = ctrl.events.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return out
        out.append((host, msg["type"]))


def _reply(sock: socket.socket, timeout: float = 5.0) -> dict | None:
    sock.settimeout(timeout)
    line = sock.makefile("rb").readline()
    return json.loads(line) if line else None


def _closed_by_peer(sock: socket.socket, within: float) -> bool:
    """True when the controller closes ``sock`` within ``within`` seconds (any reply is read)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if sock.recv(65536) == b"":
                return True
        except TimeoutError:
            return False
        except OSError:  # reset
            return True
    return False


def _vm_kb(field: str) -> int:
    for ln in Path("/proc/self/status").read_text().splitlines():
        if ln.startswith(field + ":"):
            return int(ln.split()[1])
    raise AssertionError(f"no {field} in /proc/self/status")


def test_a_hello_without_token_is_refused_without_an_event(ctrl, caplog):
    caplog.set_level(logging.WARNING, logger="mfctl.runtime.controller")
    s = socket.create_connection(ctrl.address, timeout=5)
    s.sendall(b'{"v":1,"type":"hello","host":"nosuch"}\n')
    assert _reply(s) == {"v": 1, "type": "stop", "reason": "unknown worker or bad token"}
    assert _closed_by_peer(s, 2.0)
    # a real host without its token: the worker is refused, and nothing reaches the job loop
    with pytest.raises(ControllerLost, match="refused"):
        RuntimeClient(ctrl.address_str, host="h1", token="").connect()
    assert _events(ctrl) == []  # the old controller queued ("nosuch", _disconnected): the run aborted
    assert ctrl.workers == {}
    warnings = [r.getMessage() for r in caplog.records]
    assert any("refused 127.0.0.1:" in w and "'nosuch'" in w for w in warnings), warnings


def test_a_wrong_token_for_a_real_host_is_refused_without_an_event(ctrl):
    with pytest.raises(ControllerLost, match="refused"):
        RuntimeClient(ctrl.address_str, host="h1", token=TOKEN[:-1] + "0").connect()
    with pytest.raises(ControllerLost, match="refused"):  # a non-ASCII token was a TypeError in compare_digest
        RuntimeClient(ctrl.address_str, host="h2", token="jeton-épais").connect()
    assert _events(ctrl) == []
    # the run's own worker still gets in, and only its hello is an event
    rt = RuntimeClient(ctrl.address_str, host="h1", token=TOKEN)
    assert rt.connect()["run_id"] == "t"
    assert _events(ctrl) == [("h1", "hello")]
    rt.close()


def test_the_claimed_host_name_is_sanitized_and_cut_in_the_log(ctrl, caplog):
    caplog.set_level(logging.WARNING, logger="mfctl.runtime.controller")
    s = socket.create_connection(ctrl.address, timeout=5)
    evil = "gpu01\n2024-01-01 CRITICAL forged log line \x1b[31m" + "x" * 3000
    s.sendall(json.dumps({"v": 1, "type": "hello", "host": evil}).encode() + b"\n")
    assert _reply(s)["type"] == "stop"
    (msg,) = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert "\n" not in msg and "\x1b" not in msg and "x" * 65 not in msg and "gpu01?2024-01-01?CRITICAL" in msg
    assert len(msg) < 300


def test_a_15_mib_hello_is_refused_without_being_buffered(ctrl):
    """The old controller read up to 16 MiB per line before checking anything: 40 such
    connections took a run to 700 MB. Now at most HELLO_MAX bytes (+ one read) are kept."""
    chunk = b"x" * 65536
    clear = Path("/proc/self/clear_refs")
    try:
        clear.write_text("5")  # reset VmHWM, the peak RSS, to the current RSS
        peak = "VmHWM"
    except OSError:
        peak = "VmRSS"
    before = _vm_kb(peak)
    s = socket.create_connection(ctrl.address, timeout=5)
    s.sendall(b'{"v":1,"type":"hello","host":"h1","token":"')
    sent = 0
    try:
        while sent < 15 * 2**20:
            s.sendall(chunk)  # the same 64 KiB over and over: the sender holds no 15 MiB either
            sent += len(chunk)
        s.sendall(b'"}\n')
    except OSError:
        pass  # the controller hung up mid-line: what we want
    reply = _reply(s)
    grown_kb = _vm_kb(peak) - before
    assert grown_kb < 4096, f"{peak} grew by {grown_kb} kB"  # the old controller: by 30 MB
    assert sent < 15 * 2**20, "the controller read the whole 15 MiB line"
    assert reply is not None and reply["type"] == "error" and "longer than 4096 bytes" in reply["message"], reply
    assert _events(ctrl) == []


def test_a_slowloris_hello_is_cut_off_at_the_deadline(ctrl):
    """One byte every 0.5 s never trips a per-read timeout (the old one was 10 s per read);
    the hello has HELLO_TIMEOUT_S in all."""
    s = socket.create_connection(ctrl.address, timeout=5)
    line = b'{"v":1,"type":"hello","host":"h1","token":"' + b"0" * 200
    t0 = time.monotonic()
    cut = None
    for b in line:
        try:
            s.sendall(bytes([b]))
        except OSError:
            cut = time.monotonic() - t0
            break
        if _closed_by_peer(s, 0.5):
            cut = time.monotonic() - t0
            break
        if time.monotonic() - t0 > HELLO_TIMEOUT_S + 3:
            break
    assert cut is not None, f"still connected after {time.monotonic() - t0:.1f} s"
    assert HELLO_TIMEOUT_S - 0.6 <= cut <= HELLO_TIMEOUT_S + 1.0, cut
    assert _events(ctrl) == []


def test_a_flood_of_strangers_is_capped_and_the_worker_still_gets_in(ctrl):
    """40 connections holding half a hello: only MAX_PENDING wait at once (the oldest are
    dropped at once, not after a timeout), and the run's worker is welcomed at once."""
    flood = []
    for _ in range(40):
        s = socket.create_connection(ctrl.address, timeout=5)
        s.sendall(b'{"v":1,"type":"hello","host":"h1","tok')
        flood.append(s)
    time.sleep(0.3)
    closed = [i for i, s in enumerate(flood) if _closed_by_peer(s, 0.05)]
    assert len(closed) == 40 - MAX_PENDING, closed  # the old controller kept all 40 for 10 s
    assert closed == list(range(len(closed)))  # the oldest ones
    t0 = time.monotonic()
    rt = RuntimeClient(ctrl.address_str, host="h2", token=TOKEN, connect_timeout=3)
    assert rt.connect()["leader"] == "h1"
    assert time.monotonic() - t0 < 1.0
    assert _events(ctrl) == [("h2", "hello")]
    assert sum(_closed_by_peer(s, 0.02) for s in flood[len(closed):]) == 1  # the worker's place: one more dropped
    for s in flood:
        s.close()
    rt.close()


def test_a_second_worker_for_a_connected_host_is_refused_and_the_first_stays(ctrl, caplog):
    caplog.set_level(logging.WARNING, logger="mfctl.runtime.controller")
    first = RuntimeClient(ctrl.address_str, host="h1", token=TOKEN)
    first.connect()
    second = RuntimeClient(ctrl.address_str, host="h1", token=TOKEN)
    with pytest.raises(HelloRefused) as refused:
        second.connect()
    why = ("protocol error: a runtime for h1 is already connected (one runtime client per host: torchrun's local "
           "rank 0); the first connection stays")
    assert refused.value.code == DUPLICATE_HOST == "duplicate-host"
    assert refused.value.reply == {"v": 1, "type": "error", "code": "duplicate-host", "message": why}
    where = f"{ctrl.address[0]}:{ctrl.address[1]}"
    assert str(refused.value) == f"controller {where} refused the hello for h1: {why} (duplicate-host)"
    assert isinstance(refused.value, ControllerLost)  # a runtime that handles a lost controller handles this
    assert ctrl.send("h1", {"type": "stop", "reason": "still you"})
    assert first.poll(timeout=5) == [{"v": 1, "type": "stop", "reason": "still you"}]
    assert _events(ctrl) == [("h1", "hello")]  # the old controller swapped the worker silently
    warnings = [r.getMessage() for r in caplog.records if "already connected" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith("controller: refused 127.0.0.1:")
    assert warnings[0].endswith(" (hello for host 'h1'): protocol error (duplicate-host): a runtime for h1 is already "
                                "connected (one runtime client per host: torchrun's local rank 0); the first connection stays")
    first.close()


def test_seven_more_local_ranks_saying_hello_are_refused_one_by_one(ctrl, caplog):
    """What real torchrun with nproc_per_node 8 did to the old contract: every local rank of a
    host said hello as the host. Each extra one is refused; one hello event, one worker."""
    caplog.set_level(logging.WARNING, logger="mfctl.runtime.controller")
    clients = [RuntimeClient(ctrl.address_str, host="h2", token=TOKEN) for _ in range(8)]
    clients[0].connect()
    codes = []
    for c in clients[1:]:
        with pytest.raises(HelloRefused) as refused:
            c.connect()
        codes.append(refused.value.code)
    assert codes == ["duplicate-host"] * 7
    assert list(ctrl.workers) == ["h2"] and _events(ctrl) == [("h2", "hello")]
    assert sum("duplicate-host" in r.getMessage() for r in caplog.records) == 7
    clients[0].close()


@pytest.mark.parametrize(("env", "rank", "client"), [
    ({}, 0, True),
    ({"LOCAL_RANK": "0"}, 0, True),
    ({"LOCAL_RANK": "3"}, 3, False),  # torchrun's other local ranks train without a client
    ({"LOCAL_RANK": "0", "SLURM_LOCALID": "0"}, 0, True),  # srun torchrun: torchrun's LOCAL_RANK counts
    ({"LOCAL_RANK": "5", "SLURM_LOCALID": "0"}, 5, False),
    ({"SLURM_LOCALID": "1"}, 1, False),  # srun --ntasks-per-node 8 without torchrun
])
def test_one_runtime_client_per_host_local_rank_0(env, rank, client):
    base = {"MFCTL_CONTROLLER": "127.0.0.1:7000", "SLURMD_NODENAME": "gpu02", "MFCTL_RUN_TOKEN": TOKEN}
    assert local_rank(env) == rank
    rt = RuntimeClient.from_env(base | env)
    assert (rt is not None) == client
    if rt is not None:
        assert (rt.host, rt.addr, rt.token) == ("gpu02", ("127.0.0.1", 7000), TOKEN)


def test_a_malformed_local_rank_is_an_error_not_rank_0():
    with pytest.raises(ValueError, match=r"LOCAL_RANK='1 ': expected a non-negative integer"):
        RuntimeClient.from_env({"MFCTL_CONTROLLER": "127.0.0.1:7000", "MFCTL_HOST": "h1", "LOCAL_RANK": "1 "})


def test_the_run_binds_the_controller_on_the_address_the_hosts_reach(tmp_path, monkeypatch):
    """Not the mock: the playbook's own mock is off, the hosts are a hand-started mock's (on
    127.0.0.1). The old job bound 0.0.0.0 (every interface) and advertised gethostname()'s."""
    mock = mockctl.start(DATA.parents[1] / "inventory" / "mfabric-prototype.yaml", tmp_path / "mock", time_scale=50)
    seen = {}

    class Recording(Controller):
        def __init__(self, **kw):
            super().__init__(**kw)
            seen["listen"], seen["bound"] = kw["listen"], self.sock.getsockname()[0]
            self.close()
            raise OperationFailed("stopped after the controller was bound (test)")

    monkeypatch.setattr(job_mod, "Controller", Recording)
    doc = yaml.safe_load((DATA / "playbooks" / "short.yaml").read_text())
    doc["inventory"] = mock["inventory"]
    doc["mock"] = {"enabled": False}
    doc["runtime"] = {"health_interval_s": 0}
    pb = tmp_path / "pb.yaml"
    pb.write_text(yaml.safe_dump(doc))
    try:
        s = job_mod.Job(load_playbook(pb), runs_dir=str(tmp_path / "runs"), skip_health=True).run()
    finally:
        mockctl.stop(tmp_path / "mock")
    assert "stopped after the controller was bound" in (s["error"] or ""), s["error"]
    assert seen["listen"][0] == "127.0.0.1" and seen["bound"] == "127.0.0.1", seen
    assert testbed_mod.advertised_ip("127.0.0.1") == "127.0.0.1"
    assert testbed_mod.advertised_ip("localhost") == "127.0.0.1"


def test_a_busy_flood_does_not_grow_threads_without_bound(ctrl):
    """200 connections opened as fast as possible, never a hello: the threads serving them
    stay near MAX_PENDING (the old controller kept 200 for 10 s each)."""
    before = threading.active_count()
    socks = [socket.create_connection(ctrl.address, timeout=5) for _ in range(200)]
    time.sleep(0.5)
    grown = threading.active_count() - before
    assert grown <= MAX_PENDING + 2, grown
    for s in socks:
        s.close()
