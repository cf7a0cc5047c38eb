"""The mfctl hook on megatron-core's real MoEAlltoAllTokenDispatcher, in real multi-process jobs on gloo.

The jobs are tests/helpers/megatron_worker.py (its docstring: the two megatron-core calls that insist
on CUDA and how they are bridged). Skipped with the reason where torch or megatron-core is missing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
WORKER = ROOT / "tests" / "helpers" / "megatron_worker.py"

needs_megatron = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("megatron") is None
    or importlib.util.find_spec("megatron.core") is None,
    reason="torch 2.13.0 and megatron-core (pip install -e '.[megatron]', .ci/run) are not installed")


def _worker_module():
    spec = importlib.util.spec_from_file_location("megatron_worker", WORKER)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(scenario: str, out: Path, controller: str = "") -> subprocess.Popen:
    argv = [sys.executable, str(WORKER), scenario, "4", str(_free_port()), str(out)] + ([controller] if controller else [])
    # its own session: the forked ranks are killed with it (os.killpg) when a test gives up
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _kill(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.communicate()


def _finish(p: subprocess.Popen, timeout: float = 240) -> str:
    try:
        text, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        text, _ = p.communicate()
        pytest.fail(f"the megatron job did not finish: {text[-3000:]}")
    assert p.returncode == 0, text[-3000:]
    return text


def _ranks(out: Path) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(4)]


@pytest.fixture(scope="module")
def traffic_job(tmp_path_factory) -> Path:
    """The ``traffic`` job, run once for the module (two tests read what it wrote: the ranks' files
    and ``dispatchers.json``); its output directory. One megatron-core import fewer than a job per
    test and an import in this process (~9 s of CPU each; tests/conftest.py keeps a module with a
    module-scoped fixture on one xdist worker)."""
    out = tmp_path_factory.mktemp("megatron-traffic")
    _finish(_start("traffic", out))
    return out


@needs_megatron
@pytest.mark.timeout(300)
def test_the_hook_records_megatrons_routing_as_a_server_matrix_with_tp_and_local_experts(traffic_job):
    """TP=2 × EP=2 on 4 ranks (2 per host), 4 experts (2 local per EP rank), 2 MoE layers."""
    w = _worker_module()
    sc = w.SCENARIOS["traffic"]
    ranks = _ranks(traffic_job)
    # megatron-core's own EP groups under TP=2: the ranks of one expert-TP rank
    assert [r["ep_groups"][0] for r in ranks] == [[0, 2], [1, 3], [0, 2], [1, 3]]
    host = {0: 0, 1: 0, 2: 1, 3: 1}
    bpt = 16 * 2  # hidden 16 × 2 bytes
    for layer in range(sc["layers"]):
        maps = {r: w.routing_map(r, layer, 1, sc["tokens"], sc["experts"], sc["topk"]) for r in range(4)}
        want = [[0, 0], [0, 0]]
        tokens = [[0] * sc["experts"] for _ in range(2)]
        for r, rm in maps.items():
            ep = ranks[r]["ep_groups"][layer]
            per_expert = rm.sum(dim=0).tolist()
            for x, k in enumerate(per_expert):
                want[host[r]][host[ep[x // 2]]] += k * bpt
                tokens[ep.index(r)][x] += k
            # megatron's own input_splits (tokens this rank sends each EP rank) = the hook's row
            assert ranks[r]["iterations"][0]["input_splits"][layer] == [sum(per_expert[0:2]), sum(per_expert[2:4])]
        for r in range(4):
            t = ranks[r]["iterations"][0]["traffic"]
            assert t["hosts"] == ["gpu01", "gpu02"]
            assert t["matrices"][layer] == want, (layer, r)  # every rank computed the same matrix
            assert t["tokens"][str(layer)] == tokens
            assert t["splits"][str(layer)][str(r)] == ranks[r]["iterations"][0]["input_splits"][layer]
            # megatron's output_splits (tokens rank r receives from each EP rank) = the senders' entries
            ep = ranks[r]["ep_groups"][layer]
            mine = ep.index(r)
            recv = [int(maps[s].sum(dim=0)[mine * 2:(mine + 1) * 2].sum()) for s in ep]
            assert ranks[r]["iterations"][0]["output_splits"][layer] == recv
        assert sum(map(sum, want)) == 4 * sc["tokens"] * sc["topk"] * bpt  # every (token, expert) pair once


def _expect(ctrl, host: str, kind: str, timeout: float = 60) -> dict:
    """The next ``kind`` message from ``host`` (also one already read while waiting for another)."""
    for i, (h, msg) in enumerate(ctrl.seen):
        if i not in ctrl.taken and h == host and msg["type"] == kind:
            ctrl.taken.add(i)
            return msg
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            h, msg = ctrl.events.get(timeout=0.5)
        except Exception:
            continue
        ctrl.seen.append((h, msg))
        if h == host and msg["type"] == kind:
            ctrl.taken.add(len(ctrl.seen) - 1)
            return msg
    pytest.fail(f"no {kind} from {host} in {timeout} s: {[(h, m['type']) for h, m in ctrl.seen[-10:]]}")


def _last_iteration(ctrl, host: str, at_least: int = 0, timeout: float = 60) -> int:
    """The highest ``iteration`` ``host`` has reported, once it is at least ``at_least``."""
    deadline = time.monotonic() + timeout
    while True:
        while not ctrl.events.empty():
            ctrl.seen.append(ctrl.events.get())
        its = [m["iteration"] for h, m in ctrl.seen if h == host and m["type"] == "iteration"]
        if its and max(its) >= at_least:
            return max(its)
        if time.monotonic() > deadline:
            pytest.fail(f"{host} did not reach iteration {at_least} in {timeout} s")
        time.sleep(0.02)


@needs_megatron
@pytest.mark.timeout(300)
def test_every_rank_pauses_and_resumes_at_the_same_iteration_boundary(tmp_path):
    """4 ranks on 2 hosts (EP=4), a client on each host's local rank 0, a real controller: the
    propose reaches gpu01 3+ iterations before gpu02, yet all 4 ranks pause at one boundary, after gpu02 has it."""
    from mfctl.runtime.controller import Controller

    welcome = {"epoch": 0, "routes": {"0->1": {"via": "eps"}}, "hosts": ["gpu01", "gpu02"], "leader": "gpu01"}
    ctrl = Controller(token="tok", welcome=lambda h: dict(welcome), expected_hosts={"gpu01", "gpu02"})
    ctrl.seen, ctrl.taken = [], set()
    p = _start("pause", tmp_path, ctrl.address_str)
    try:
        _expect(ctrl, "gpu01", "hello", timeout=200)  # a megatron import takes ~9 s of CPU, minutes on a loaded CI box
        traffic = _expect(ctrl, "gpu01", "traffic")
        assert len(traffic["matrices"]) == 1 and len(traffic["matrices"][0]) == 2
        assert sum(map(sum, traffic["matrices"][0])) == 4 * 8 * 2 * 32  # 4 ranks × 8 tokens × top-2 × 32 B
        ctrl.send("gpu01", {"type": "propose", "epoch": 1, "circuits": []})
        sent_at = _last_iteration(ctrl, "gpu01")
        gpu02_before = _last_iteration(ctrl, "gpu02", at_least=sent_at + 4)  # gpu01 holds it alone for 3+ boundaries
        ctrl.send("gpu02", {"type": "propose", "epoch": 1, "circuits": []})
        p1, p2 = _expect(ctrl, "gpu01", "paused"), _expect(ctrl, "gpu02", "paused")
        # gpu02's iteration gpu02_before was reported after its safe point: no rank paused before gpu02 had the propose
        assert p1["iteration"] == p2["iteration"] > gpu02_before >= sent_at + 4
        routes = {"0->1": {"via": "ocs", "lanes": [["eth1", "eth1"]]}}
        ctrl.send("gpu02", {"type": "routes", "epoch": 1, "circuits": [], "routes": routes})
        time.sleep(0.4)
        ctrl.send("gpu01", {"type": "routes", "epoch": 1, "circuits": [], "routes": routes})
        r1, r2 = _expect(ctrl, "gpu01", "resume"), _expect(ctrl, "gpu02", "resume")
        assert r1["iteration"] == r2["iteration"] > p1["iteration"]
        ctrl.send("gpu02", {"type": "stop", "reason": "test over"})
        _expect(ctrl, "gpu01", "bye")
        _finish(p)
    finally:
        if p.poll() is None:
            _kill(p)
        ctrl.close()
    ranks = _ranks(tmp_path)
    events = [r["events"] for r in ranks]
    assert events[0] == [[p1["iteration"], "paused", 1], [r1["iteration"], "resumed", 1]]
    assert all(e == events[0] for e in events)  # ranks 1 and 3 have no client and follow the same boundary
    assert len({len(r["iterations"]) for r in ranks}) == 1  # every rank stopped at the same iteration
    assert ranks[0]["routes"] == routes and ranks[2]["routes"] == routes and ranks[0]["epoch"] == 1


def test_the_hook_refuses_dispatchers_it_cannot_read():
    from mfctl.integrations.megatron import UnsupportedDispatcher, check_dispatcher

    class MoEAllGatherTokenDispatcher:  # named as megatron-core's classes: refused by class name
        pass

    class MoEFlexTokenDispatcher:
        pass

    with pytest.raises(UnsupportedDispatcher, match="all-gathers every token"):
        check_dispatcher(MoEAllGatherTokenDispatcher())
    with pytest.raises(UnsupportedDispatcher, match="DeepEP/HybridEP"):
        check_dispatcher(MoEFlexTokenDispatcher())
    with pytest.raises(UnsupportedDispatcher, match="not a Megatron-Core MoEAlltoAllTokenDispatcher"):
        check_dispatcher(object())


@needs_megatron
@pytest.mark.timeout(300)
def test_megatron_cores_own_dispatcher_classes_are_told_apart(traffic_job):
    """check_dispatcher on the real classes (not constructed: they need process groups), in the
    traffic job's process (megatron_worker.dispatcher_checks): refused with the reason, or accepted."""
    got = json.loads((traffic_job / "dispatchers.json").read_text())
    assert sorted(got) == ["MoEAllGatherTokenDispatcher", "MoEAlltoAllTokenDispatcher", "MoEFlexTokenDispatcher"]
    assert "all-gathers" in (got["MoEAllGatherTokenDispatcher"] or "")  # (None: accepted)
    assert "DeepEP" in (got["MoEFlexTokenDispatcher"] or "")
    assert got["MoEAlltoAllTokenDispatcher"] is None


def test_one_process_speaks_the_protocol_and_outlives_its_controller():
    """Without torch.distributed (one process) the safe point is the process's own: propose →
    paused, routes → resume (routes installed), stop → True after bye; a lost controller is not fatal."""
    from mfctl.integrations.megatron import MFabricHook
    from mfctl.runtime.client import RuntimeClient
    from mfctl.runtime.controller import Controller

    ctrl = Controller(token="t", welcome=lambda h: {"epoch": 0, "routes": {"a->b": {"via": "eps"}}, "leader": "h1"},
                      expected_hosts={"h1"})
    try:
        c = RuntimeClient(ctrl.address_str, host="h1", token="t")
        hook = MFabricHook(c, hidden=4096)
        hook.welcome(c.connect())
        assert hook.leader and hook.routes == {"a->b": {"via": "eps"}}
        assert hook.end_of_iteration(1, seconds=1.5, tokens=1024) is False
        kinds = [ctrl.events.get(timeout=5)[1] for _ in range(2)]
        assert [k["type"] for k in kinds] == ["hello", "iteration"] and kinds[1]["paused"] is False
        ctrl.send("h1", {"type": "propose", "epoch": 1})
        time.sleep(0.2)
        hook.end_of_iteration(2, seconds=1.4)
        got = [ctrl.events.get(timeout=5)[1] for _ in range(2)]
        assert [(m["type"], m["iteration"]) for m in got] == [("iteration", 2), ("paused", 2)] and hook.pending == 1
        ctrl.send("h1", {"type": "routes", "epoch": 1, "routes": {"a->b": {"via": "ocs", "lanes": [["x", "y"]]}}})
        time.sleep(0.2)
        hook.end_of_iteration(3, seconds=1.4)
        got = [ctrl.events.get(timeout=5)[1] for _ in range(2)]
        assert got[0]["paused"] is True and (got[1]["type"], got[1]["epoch"], got[1]["iteration"]) == ("resume", 1, 3)
        assert hook.epoch == 1 and hook.pending is None and hook.routes["a->b"]["via"] == "ocs"
        assert hook.events == [(2, "paused", 1), (3, "resumed", 1)]
        ctrl.send("h1", {"type": "stop", "reason": "done"})
        time.sleep(0.2)
        assert hook.end_of_iteration(4, seconds=1.0) is True
        got = [ctrl.events.get(timeout=5)[1] for _ in range(2)]
        assert got[1]["type"] == "bye" and got[1]["iterations"] == 4
    finally:
        ctrl.close()
    ctrl2 = Controller(token="t", welcome=lambda h: {"epoch": 0}, expected_hosts={"h2"})
    c2 = RuntimeClient(ctrl2.address_str, host="h2", token="t")
    hook2 = MFabricHook(c2, hidden=8)
    hook2.welcome(c2.connect())
    ctrl2.close()
    deadline = time.monotonic() + 10
    while not c2.lost.is_set() and time.monotonic() < deadline:  # the client notices the closed socket
        time.sleep(0.02)
    assert hook2.end_of_iteration(5, seconds=1.0) is False and hook2.lost  # training goes on, nothing raised
