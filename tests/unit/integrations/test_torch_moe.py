"""The torch MoE job (mfctl/integrations/torch_moe): it learns, its expert-parallel dispatch/combine
over real gloo all-to-alls equals a one-process reference, and what it reports to a real controller
is its router's real assignments, agreed on by every rank at one iteration boundary.

Multi-process runs fork their ranks from tests/helpers/torch_moe_ranks.py. Skipped (with the reason)
where torch is missing.
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

from mfctl.integrations.safepoint import agree
from mfctl.integrations.torch_moe.traffic import bytes_on_fabric, fold

ROOT = Path(__file__).resolve().parents[3]
HELPER = ROOT / "tests" / "helpers" / "torch_moe_ranks.py"
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed (pip install torch==2.13.0, .ci/run)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ranks(mode: str, world: int, per_host: int, out: Path, controller: str = "", job_args=()) -> subprocess.Popen:
    argv = [sys.executable, str(HELPER), mode, str(world), str(per_host), str(_free_port()), str(out)]
    argv += ([controller] if controller else []) + (["--", *job_args] if job_args else [])
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _finish(p: subprocess.Popen, timeout: float = 150) -> str:
    try:
        text, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        text, _ = p.communicate()
        pytest.fail(f"the ranks did not finish: {text[-3000:]}")
    assert p.returncode == 0, text[-3000:]
    return text


# --- pure parts --------------------------------------------------------------------------------------
def test_fold_puts_each_ranks_tokens_on_its_experts_server():
    """4 EP ranks on 2 hosts, 8 experts (2 per rank: experts 0-3 on gpu01's ranks 0,1)."""
    counts = {0: {0: [1, 2, 3, 4, 5, 6, 7, 8]}, 1: {0: [0] * 8}, 2: {0: [10, 0, 0, 0, 0, 0, 0, 1]}, 3: {0: [0] * 7 + [2]}}
    host_of = {0: "gpu01", 1: "gpu01", 2: "gpu02", 3: "gpu02"}
    mats, tokens = fold(counts, host_of, ["gpu01", "gpu02"], bytes_per_token=8192, micro_batches=2)
    assert mats == [[[(1 + 2 + 3 + 4) * 4096, (5 + 6 + 7 + 8) * 4096], [10 * 4096, 3 * 4096]]]
    assert tokens["0"][0] == [0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4] and tokens["0"][3][7] == 1
    inter, ocs = bytes_on_fabric(mats, [[0, 1], [1, 0]], micro_batches=2)
    assert inter == ocs == (26 + 10) * 4096 * 4 * 2  # 4 all-to-alls per layer and micro-batch, all on the circuit
    assert bytes_on_fabric(mats, [[0, 0], [0, 0]], 2) == (inter, 0.0)
    with pytest.raises(ValueError, match="outside the run's region: gpu09"):
        fold(counts, {**host_of, 3: "gpu09"}, ["gpu01", "gpu02"], bytes_per_token=1)


def test_agreement_waits_for_every_connected_host_and_any_stop_stops_all():
    v = lambda c, p=None, r=None, s=None: {"client": c, "propose": p, "routes": r, "stop": s}  # noqa: E731
    assert agree([v(True, 1), v(False), v(True)], epoch=0, pending=None).pause is None  # gpu02's client has none yet
    a = agree([v(True, 1), v(False), v(True, 2)], epoch=0, pending=None)
    assert (a.pause, a.resume, a.stop) == (1, None, False)  # the lowest epoch every client has
    assert agree([v(True, 1), v(True, 1)], epoch=0, pending=1).pause is None  # already paused for it
    assert agree([v(True, 1, 1), v(True, 1, 1)], epoch=0, pending=1).resume == 1
    assert agree([v(True, 1, 1), v(False, s="stopped")], epoch=0, pending=1).stop


@needs_torch
def test_the_optimizer_makes_torchs_adamw_update():
    import torch

    from mfctl.integrations.torch_moe.model import Adam

    torch.manual_seed(0)
    a = [torch.nn.Parameter(torch.randn(5, 3))]
    b = [torch.nn.Parameter(a[0].detach().clone())]
    mine, theirs = Adam(a, lr=0.01), torch.optim.AdamW(b, lr=0.01)
    for _ in range(6):
        g = torch.randn(5, 3)
        a[0].grad, b[0].grad = g.clone(), g.clone()
        mine.step()
        theirs.step()
    assert torch.allclose(a[0], b[0], atol=1e-6) and not torch.equal(a[0], torch.randn(5, 3))


@needs_torch
def test_the_model_learns_the_real_texts_in_one_process():
    """60 iterations, one process (the same code with W = 1): the loss falls from ~ln 256 well below."""
    import math

    import torch

    from mfctl.integrations.torch_moe.data import Batches, texts
    from mfctl.integrations.torch_moe.dispatch import ExpertParallel
    from mfctl.integrations.torch_moe.model import Adam, MoEConfig, TinyMoE

    assert set(texts()) == {"prose", "code", "numbers"} and texts()["prose"].startswith(b"\n")  # the ASF text
    torch.set_num_threads(1)
    cfg = MoEConfig()
    model = TinyMoE(cfg, ExpertParallel(cfg.experts))
    opt = Adam(model.parameters(), lr=3e-3)
    data = Batches(batch=8, seq_len=cfg.seq_len, phase_iterations=20)
    probe = Batches(batch=8, seq_len=cfg.seq_len, seed=99).get(0, 1)  # a fixed batch, never trained on

    def routing_of_probe() -> list[int]:
        with torch.no_grad():
            model(*probe)
        return model.take_counts()[1]  # layer 1's tokens per expert

    before = routing_of_probe()
    losses = []
    for it in range(1, 61):
        x, y = data.get(0, it)
        loss, lm = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(lm.detach()))
        assert sum(model.take_counts()[0]) == 8 * cfg.seq_len * cfg.top_k  # every token's k slots counted
    after = routing_of_probe()
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert first > math.log(256) - 0.5 and last < first - 1.5, (first, last)
    # the same tokens go to other experts once the router has learned: over a tenth of the slots moved
    moved = sum(abs(a - b) for a, b in zip(before, after)) / 2
    assert moved > 0.1 * sum(before), (before, after)


@needs_torch
@pytest.mark.timeout(200)
def test_dispatch_and_combine_over_gloo_equal_a_one_process_reference(tmp_path):
    """4 ranks, 8 experts (2 per rank), top-2: each rank's output, input gradient and its experts'
    gradients equal Σ_k gate·expert(x) computed in one process with every expert (the gradients of
    an expert sum every rank's tokens: they came back through the combine all-to-all's backward)."""
    import torch
    import torch.nn.functional as F

    _finish(_ranks("dispatch", 4, 2, tmp_path))
    sys.path.insert(0, str(HELPER.parent))
    try:
        from torch_moe_ranks import DISPATCH, dispatch_inputs
    finally:
        sys.path.remove(str(HELPER.parent))
    from mfctl.integrations.torch_moe.dispatch import ExpertParallel
    from mfctl.integrations.torch_moe.model import MoEConfig, MoELayer

    cfg = MoEConfig(d_model=DISPATCH["d_model"], ffn=DISPATCH["ffn"], experts=DISPATCH["experts"], top_k=DISPATCH["top_k"])
    torch.manual_seed(cfg.seed)
    ref = MoELayer(cfg, ExpertParallel(cfg.experts), 0)  # one process: all 8 experts
    w1, w2 = (p.detach().clone().requires_grad_(True) for p in (ref.experts.w1, ref.experts.w2))
    got = [torch.load(tmp_path / f"dispatch{r}.pt") for r in range(4)]
    for r in range(4):
        x, w = dispatch_inputs(r)
        x.requires_grad_(True)
        idx, gates, _ = ref.router(x)
        out = torch.zeros_like(x)
        for e in range(cfg.experts):
            out = out + (gates * (idx == e)).sum(1, keepdim=True) * (F.gelu(x @ w1[e]) @ w2[e])
        (out * w).sum().backward()
        assert torch.allclose(got[r]["out"], out.detach(), atol=1e-5)
        assert torch.allclose(got[r]["grad_x"], x.grad, atol=1e-5)
        assert got[r]["counts"].tolist() == torch.bincount(idx.reshape(-1), minlength=8).tolist()
    for r in range(4):
        f = got[r]["first"]
        assert f == 2 * r
        assert torch.allclose(got[r]["w1_grad"], w1.grad[f:f + 2], atol=1e-5)
        assert torch.allclose(got[r]["w2_grad"], w2.grad[f:f + 2], atol=1e-5)
        tasks = [s["task"] for s in got[r]["timings"]]
        # the count exchange, dispatch, combine, and the two backward all-to-alls; 2 GEMMs per local expert
        assert tasks.count("alltoall") == 5 and tasks.count("gemm") == 4
        a2a = [s for s in got[r]["timings"] if s["task"] == "alltoall"]
        assert a2a[0]["n"] == 8 * 8  # 8 int64 counts
        assert a2a[1]["n"] == DISPATCH["tokens"] * 2 * DISPATCH["d_model"] * 4  # every (token, expert) slot, float32


def _expect(ctrl, seen: list, host: str, kind: str, timeout: float = 120) -> dict:
    for h, m in seen:
        if h == host and m["type"] == kind and not m.get("_taken"):
            m["_taken"] = True
            return m
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            h, m = ctrl.events.get(timeout=0.5)
        except Exception:
            continue
        seen.append((h, m))
        if h == host and m["type"] == kind:
            m["_taken"] = True
            return m
    pytest.fail(f"no {kind} from {host} in {timeout} s: {[(h, m['type']) for h, m in seen[-10:]]}")


@needs_torch
@pytest.mark.timeout(240)
def test_the_job_reports_its_routers_real_counts_and_pauses_all_ranks_at_one_boundary(tmp_path):
    """4 ranks on 2 hosts (2 per host), a client on each host's local rank 0, a real controller: every
    traffic message is the fold of the counts each rank's router really made (each rank's own record),
    every iteration carries timings, and a propose that reaches gpu01 well before gpu02 pauses all
    four ranks at one boundary, after gpu02 has it; routes → resume at one boundary; stop → all end."""
    from mfctl.runtime.controller import Controller

    circuits = [[0, 1], [1, 0]]
    welcome = {"epoch": 0, "routes": {"0->1": {"via": "ocs", "lanes": [["eth1", "eth1"]]}}, "hosts": ["gpu01", "gpu02"],
               "leader": "gpu01", "circuits": circuits, "iterations": 400, "time_scale": 1.0,
               "model": {"hidden": 4096, "bytes_per_element": 2, "layers": 2},
               "training": {"seed": 3, "phase_iterations": 4, "micro_batches": 1}}
    ctrl = Controller(token="tok", welcome=lambda h: dict(welcome), expected_hosts={"gpu01", "gpu02"})
    seen: list = []
    p = _ranks("job", 4, 2, tmp_path, ctrl.address_str, ["--batch", "4", "--seq-len", "32"])
    try:
        _expect(ctrl, seen, "gpu01", "hello")
        _expect(ctrl, seen, "gpu02", "hello")
        first = _expect(ctrl, seen, "gpu01", "iteration")
        assert first["timings"] and {s["task"] for s in first["timings"]} == {"alltoall", "gemm"}
        ctrl.send("gpu01", {"type": "propose", "epoch": 1, "circuits": [[0, 0], [0, 0]], "keep_circuits": [[0, 0], [0, 0]]})
        sent_at = _expect(ctrl, seen, "gpu01", "iteration")["iteration"]
        while (g2 := _expect(ctrl, seen, "gpu02", "iteration"))["iteration"] < sent_at + 3:
            pass
        ctrl.send("gpu02", {"type": "propose", "epoch": 1, "circuits": [[0, 0], [0, 0]], "keep_circuits": [[0, 0], [0, 0]]})
        p1, p2 = _expect(ctrl, seen, "gpu01", "paused"), _expect(ctrl, seen, "gpu02", "paused")
        assert p1["iteration"] == p2["iteration"] > g2["iteration"]
        routes = {"0->1": {"via": "eps"}}
        ctrl.send("gpu02", {"type": "routes", "epoch": 1, "circuits": [[0, 0], [0, 0]], "routes": routes})
        time.sleep(0.3)
        ctrl.send("gpu01", {"type": "routes", "epoch": 1, "circuits": [[0, 0], [0, 0]], "routes": routes})
        r1, r2 = _expect(ctrl, seen, "gpu01", "resume"), _expect(ctrl, seen, "gpu02", "resume")
        assert r1["iteration"] == r2["iteration"] > p1["iteration"]
        ctrl.send("gpu02", {"type": "stop", "reason": "test over"})
        bye = _expect(ctrl, seen, "gpu01", "bye")
        _finish(p)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
        ctrl.close()
    recs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    assert len({len(r["iterations"]) for r in recs}) == 1 and bye["iterations"] == len(recs[0]["iterations"])
    assert all(r["events"] == recs[0]["events"] for r in recs)  # ranks without a client followed the same boundaries
    assert recs[0]["events"][:2] == [[p1["iteration"], "paused", 1], [r1["iteration"], "resumed", 1]]
    assert recs[0]["routes"] == recs[2]["routes"] == routes  # the clients installed the new routes
    assert [r["epoch"] for r in recs] == [1, 1, 1, 1]
    host = {0: 0, 1: 0, 2: 1, 3: 1}
    traffic = {m["iteration"]: m for h, m in seen if m["type"] == "traffic"}
    assert all(h == "gpu01" for h, m in seen if m["type"] == "traffic")  # the leader alone
    for it, m in traffic.items():
        for layer in range(2):
            want = [[0.0, 0.0], [0.0, 0.0]]
            for r in range(4):
                c = recs[r]["iterations"][it - 1]["counts"][str(layer)]
                assert sum(c) == 4 * 32 * 2  # this rank's 128 tokens, top-2
                for e, k in enumerate(c):
                    want[host[r]][host[e // 2]] += k * 8192
                assert m["tokens"][str(layer)][r] == c
            assert m["matrices"][layer] == want, (it, layer)
    its = {m["iteration"]: m for h, m in seen if h == "gpu01" and m["type"] == "iteration"}
    before, during = its[p1["iteration"] - 1], its[p1["iteration"] + 1]
    assert before["ocs_bytes"] == before["inter_bytes"] > 0 and not before["paused"]  # the circuit carries gpu01↔gpu02
    assert during["paused"] and during["ocs_bytes"] == 0 < during["inter_bytes"]  # kept circuits: none
    losses = [r["lm_mean"] for r in recs[0]["iterations"]]
    assert sum(losses[-3:]) < sum(losses[:3])


@needs_torch
def test_the_megatron_lines_import_as_a_run(tmp_path):
    """The job's stdout (one process, 4 iterations) is a Megatron log to mfctl runs import-log."""
    from mfctl.hosts.trainlog import parse_train_log

    env = {k: v for k, v in os.environ.items() if not k.startswith("MFCTL_CONTROLLER")}
    r = subprocess.run([sys.executable, "-m", "mfctl.integrations.torch_moe", "--iterations", "4", "--batch", "2",
                        "--seq-len", "16"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    log = parse_train_log(r.stdout)
    assert [x.iteration for x in log.iterations] == [1, 2, 3, 4] and log.iterations[0].total == 4
    assert all(x.elapsed_ms and x.elapsed_ms > 0 and x.lm_loss and x.lm_loss > 1 for x in log.iterations)
    assert log.iterations[-1].consumed_samples == 4 * 2 and log.iterations[-1].consumed_tokens == 4 * 2 * 16
    assert log.iterations[-1].global_batch == 2
    (tmp_path / "job.log").write_text(r.stdout)
    out = subprocess.run([sys.executable, "-m", "mfctl", "runs", "import-log", str(tmp_path / "job.log"), "--json",
                          "--runs-dir", str(tmp_path / "runs")], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "MFCTL_STATE_DIR": str(tmp_path / "state")})
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert doc["iterations"] == 4 and doc["tokens"] == 4 * 2 * 16, doc
    secs = [x.elapsed_ms / 1000 for x in log.iterations]
    assert doc["iteration_time_s"]["max"] == pytest.approx(max(secs), abs=1e-4)
