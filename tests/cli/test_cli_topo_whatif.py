"""mfctl topo plan|eval and mfctl simulate, through the real CLI."""

import json
import subprocess

import numpy as np
import pytest

from mfctl.fabric import whatif
from support import PROTOTYPE, mfctl_cmd


def run(env, *args, check=0):
    r = subprocess.run(mfctl_cmd(*args), capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == check, (args, r.stdout[-2000:], r.stderr[-2000:])
    return r


@pytest.fixture
def tokens_json(tmp_path):
    # EP 8 x TP 4: ranks 0-1 on server 0 ... ranks 6-7 on server 3; every rank sends to
    # experts 0 and 1 (server 0) and 2, 3 (server 1) only: servers 2-3 <-> 0-1 is the hot traffic
    t = np.zeros((8, 8))
    t[:, [0, 1, 2, 3]] = 1000
    p = tmp_path / "tokens.json"
    p.write_text(json.dumps({"kind": "tokens", "tp": 4, "gpus_per_server": 8, "hidden": 4096, "matrix": t.tolist()}))
    return p


def test_topo_plan_with_inventory_lanes_and_ports(tokens_json, cli_env):
    out = json.loads(run(cli_env, "topo", "plan", tokens_json, "-i", PROTOTYPE, "--json").stdout)
    C = np.array(out["circuits"])
    assert out["servers"] == 4 and out["method"] == "exact"
    assert (C.sum(axis=1) <= 3).all() and out["objective_s"] <= out["greedy_objective_s"]
    # no traffic between servers 2 and 3 (experts 4-7 get nothing): no circuit there
    assert C[2, 3] == 0
    assert len(out["cross_connects"]) == 2 * int(C.sum() // 2)
    assert out["routes"]["gpu03->gpu04"] == {"via": "eps"}



def test_topo_plan_output_stays_readable_for_big_and_absurd_matrices(tmp_path, cli_env):
    rng = np.random.default_rng(7)
    m = rng.integers(1, 10**9, size=(40, 40)).astype(float)
    np.fill_diagonal(m, 0)
    p = tmp_path / "m40.json"
    p.write_text(json.dumps(m.tolist()))
    out = run(cli_env, "topo", "plan", p).stdout
    doc = json.loads(run(cli_env, "topo", "plan", p, "--json").stdout)
    pairs = int((np.triu(np.array(doc["circuits"])) > 0).sum())
    assert f"{pairs} server pairs with circuits among 40 servers (first 40; --json for all)" in out
    assert max(len(ln) for ln in out.splitlines()) < 200  # no 40-column matrix
    huge = np.full((4, 4), 1e300)
    np.fill_diagonal(huge, 0)
    p.write_text(json.dumps(huge.tolist()))
    line = [ln for ln in run(cli_env, "topo", "plan", p).stdout.splitlines() if ln.startswith("estimated")][0]
    assert "e+293 ms" in line and len(line) < 150
    p.write_text("[[0, 1" + "0" * 400 + ", 1], [1, 0, 1], [1, 1, 0]]")  # an integer no float can hold
    r = run(cli_env, "topo", "plan", p, check=3)
    assert "too large for a float" in r.stderr and "Traceback" not in r.stderr
    p.write_text("[[0, true], [1, 0]]")
    assert "matrix[0][1] is true, expected a number" in run(cli_env, "topo", "plan", p, check=3).stderr
    p.write_text('{"matrix": [[0, 5], ["12", 0]]}')
    assert 'matrix[1][0] is "12", expected a number' in run(cli_env, "topo", "plan", p, check=3).stderr

def test_topo_eval_and_min_change(tokens_json, tmp_path, cli_env):
    out = json.loads(run(cli_env, "topo", "eval", tokens_json, "--ports", "3", "--json").stdout)
    by = {r["topology"]: r for r in out["topologies"]}
    assert by["best"]["ratio_to_best"] == 1.0 and by["eps-only"]["ratio_to_best"] > 1.5
    assert by["best"]["objective_s"] <= by["greedy"]["objective_s"]
    cur = tmp_path / "current.csv"
    cur.write_text("0,1,1,1\n1,0,1,1\n1,1,0,1\n1,1,1,0\n")
    keep = json.loads(run(cli_env, "topo", "plan", tokens_json, "--current", cur, "--tolerance", "10", "--json").stdout)
    assert keep["method"] == "keep" and keep["changed_circuits"] == 0
    bad = tmp_path / "bad.csv"
    bad.write_text("1,2\n3\n")
    r = run(cli_env, "topo", "plan", bad, check=3)
    assert "bad.csv:2" in r.stderr


def test_simulate_shape_matches_the_paper(cli_env, tmp_path):
    res = {g: {r.fabric: r for r in whatif.simulate(whatif.Scenario(whatif.PRESETS["mixtral-8x7b"], gpus=1024, link_gbps=g))}
           for g in (100, 400)}
    for g, lo, hi in ((100, 1.2, 1.5), (400, 1.9, 2.3)):  # the paper's perf/$ bands (§7.4)
        mf, ft, so = res[g]["mfabric"], res[g]["fat-tree"], res[g]["static-optical"]
        assert 1.0 <= mf.iteration_s / ft.iteration_s < 1.30  # the paper: MixNet within 0-30 % of the fat-tree
        assert so.iteration_s > 1.15 * mf.iteration_s  # TopoOpt slower than MixNet
        assert lo <= mf.relative_perf_per_dollar <= hi, (g, mf.relative_perf_per_dollar)
    sweep = whatif.latency_sweep(whatif.Scenario(whatif.PRESETS["mixtral-8x7b"]), [1e-6, 0.025, 1.0, 10.0])
    rel = [x["relative_to_fat_tree"] for x in sweep]
    assert rel[1] - rel[0] < 0.01 and rel[3] > rel[2] > rel[1]  # flat, then worse
    png = tmp_path / "sim.png"
    out = json.loads(run(cli_env, "simulate", "--model", "qwen-moe", "--link-gbps", "100", "--plot", png, "--json").stdout)
    assert png.stat().st_size > 10_000 and {f["fabric"] for f in out["fabrics"]} == set(whatif.FABRICS)
    run(cli_env, "simulate", "--link-gbps", "300", check=2)
