"""mfctl topo plan|eval in process (CliRunner): the JSON shapes, the rates they plan with, usage errors."""

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from mfctl.cli.app import build
from mfctl.fabric.planner import link_rates, objective, plan


def invoke(*args):
    return CliRunner().invoke(build(), [str(a) for a in args])


@pytest.fixture
def traffic(tmp_path):
    B = np.array([[0, 9e8, 1e8, 0], [9e8, 0, 2e8, 3e8], [1e8, 2e8, 0, 7e8], [0, 3e8, 7e8, 0]])
    p = tmp_path / "b.npy"
    np.save(p, B)
    return p, B


def test_plan_on_a_matrix_without_an_inventory(traffic):
    p, B = traffic
    r = invoke("topo", "plan", p, "--ports", "2", "--lane-gbps", "100", "--eps-gbps", "200", "--json")
    out = json.loads(r.stdout)
    assert r.exit_code == 0 and out["schema"] == "mfctl.topo.plan/v1" and (out["servers"], out["layers"]) == (4, 1)
    C = np.array(out["circuits"])
    assert out["ports"] == [2, 2, 2, 2] and (C == C.T).all() and (C.sum(axis=1) <= 2).all() and C.sum() > 0
    want = plan(B[None], np.full(4, 2), link_rates(100, 200))  # the rates of the command line, at goodput
    assert out["objective_s"] == pytest.approx(want.objective_s) and C.tolist() == want.circuits.tolist()
    assert "lanes" not in out  # no inventory: no lanes, ports or routes


def test_plan_with_the_prototype_maps_lanes_and_cross_connects(traffic):
    from mfctl.context import Context
    from mfctl.inventory import load_inventory
    from support import PROTOTYPE

    p, B = traffic
    r = invoke("topo", "plan", p, "-i", PROTOTYPE, "--json")
    out = json.loads(r.stdout)
    assert r.exit_code == 0, r.stderr
    inv = load_inventory(PROTOTYPE)
    assert out["ports"] == [3, 3, 3, 3]
    want = plan(B[None], np.full(4, 3), Context(inv).link_rates())
    assert out["objective_s"] == pytest.approx(want.objective_s)
    assert len(out["lanes"]) == int(np.array(out["circuits"]).sum() // 2) and len(out["cross_connects"]) == 2 * len(out["lanes"])
    assert {h for c in out["lanes"] for h in (c["a"].split("/")[0], c["b"].split("/")[0])} <= {h.name for h in inv.hosts}


def test_eval_ranks_topologies_by_estimated_all_to_all_time(traffic):
    p, B = traffic
    r = invoke("topo", "eval", p, "--ports", "2", "--json")
    rows = {x["topology"]: x for x in json.loads(r.stdout)["topologies"]}
    assert r.exit_code == 0 and set(rows) == {"greedy", "best", "eps-only", "uniform"}
    assert min(x["ratio_to_best"] for x in rows.values()) == 1.0 and rows["eps-only"]["circuit_count"] == 0
    assert rows["best"]["objective_s"] <= rows["greedy"]["objective_s"] < rows["eps-only"]["objective_s"]
    eps = objective(B[None], np.zeros((4, 4), int), link_rates(100, 100))[0]
    assert rows["eps-only"]["objective_s"] == pytest.approx(eps)


def test_usage_and_config_errors(traffic, tmp_path):
    from support import PROTOTYPE

    p, _ = traffic
    r = invoke("topo", "plan", p, "--method", "guess", "--json")
    assert r.exit_code == 2 and json.loads(r.stdout)["error"]["type"] == "UsageError" and "--method" in r.stderr + r.stdout
    assert invoke("topo", "plan", p, "--ports", "0").exit_code == 2  # below the option's minimum
    three = tmp_path / "c.npy"
    np.save(three, np.ones((3, 3)))
    r = invoke("topo", "plan", three, "-i", PROTOTYPE, "--json")
    assert r.exit_code == 3 and "3 servers" in json.loads(r.stdout)["error"]["message"]
    r = invoke("topo", "plan", p, "-i", PROTOTYPE, "--region", "nowhere", "--json")
    assert r.exit_code == 3 and "no region 'nowhere'" in json.loads(r.stdout)["error"]["message"]


@pytest.mark.parametrize("name, content, says", [
    ("s.npy", np.array([["a", "b"], ["c", "d"]]), "s.npy: a NumPy array of <U1 (text), expected real numbers"),
    ("c.npy", np.array([[1 + 2j, 0], [0, 1]]), "c.npy: a NumPy array of complex128 (complex numbers), expected real numbers"),
    ("r.json", [[1, 2], [3]], "r.json: matrix is not a rectangular array of numbers: matrix[1] has 1 values, matrix[0] 2"),
    ("m.json", [[1, [2]], [3, 4]], "matrix is not a rectangular array of numbers: matrix[0] mixes numbers and lists"),
])
def test_a_matrix_file_of_the_wrong_kind_is_named_exit_3_without_numpys_words(name, content, says, tmp_path):
    """issue 17 item 5: an array of strings was a traceback, a complex one numpy's raw ComplexWarning,
    ragged JSON numpy's "inhomogeneous shape"."""
    p = tmp_path / name
    np.save(p, content) if name.endswith(".npy") else p.write_text(json.dumps(content))
    r = invoke("topo", "plan", p)
    msg = " ".join(r.stderr.split())
    assert r.exit_code == 3 and says in msg and "Traceback" not in msg and "Warning" not in msg, msg
    assert "inhomogeneous" not in msg and "np.str_" not in msg


def test_bad_ocs_arguments_are_refused_before_the_ocs_is_reached(tmp_path, monkeypatch):
    """The prototype inventory's OCS is at 192.0.2.50: any attempt to reach it would fail the test
    (the driver's open is replaced by one that raises), so each refusal is the argument's own."""
    from mfctl import context
    from support import PROTOTYPE

    def no_ocs(*a, **k):
        raise AssertionError("the OCS was reached")

    monkeypatch.setattr(context.Context, "open_ocs", no_ocs)
    for port in ("²", "٣", "１"):
        r = invoke("ocs", "connect", port, "400", "-i", PROTOTYPE, "--dry-run")
        assert r.exit_code == 2 and f"'{port}' is neither an OCS port number nor a lane" in r.stderr
    r = invoke("ocs", "disconnect", "gpu09/nic0", "-i", PROTOTYPE, "--dry-run")
    assert r.exit_code == 2 and "gpu09" in r.stderr
    bad = tmp_path / "t.yaml"
    bad.write_text("cross_connects:\n  - [1, 999]\n")
    r = invoke("ocs", "apply", bad, "-i", PROTOTYPE, "--dry-run")
    assert r.exit_code == 3 and "t.yaml:2" in r.stderr and "not an output port" in r.stderr


def test_one_topology_format_from_plan_through_eval_to_apply(mock_testbed, cli_env, tmp_path):
    """issue 17 item 16: ``topo plan -i --json`` goes into ``ocs apply`` (its cross-connects) and
    ``topo eval -t``; the sample file ``ocs apply`` takes goes into ``topo eval -t`` too."""
    import subprocess

    from support import ROOT, mfctl_cmd

    inv = mock_testbed.inventory
    m = np.array([[0, 5, 1, 2], [5, 0, 2, 1], [1, 2, 0, 5], [2, 1, 5, 0]]) * 1e9
    np.save(tmp_path / "t.npy", m)
    run = lambda *a: subprocess.run(mfctl_cmd(*a), capture_output=True, text=True, env=cli_env, timeout=60)  # noqa: E731
    r = run("topo", "plan", tmp_path / "t.npy", "-i", inv, "--json")
    plan_doc = json.loads(r.stdout)
    (tmp_path / "plan.json").write_text(r.stdout)
    r = run("ocs", "apply", tmp_path / "plan.json", "-i", inv, "--dry-run", "--json")
    assert r.returncode == 6, r.stderr  # it would change the (empty) OCS: exactly the plan's cross-connects
    assert sorted(json.loads(r.stdout)["diff"]["add"]) == sorted(plan_doc["cross_connects"])
    sample = ROOT / "examples" / "topology-prototype.yaml"
    assert run("ocs", "apply", sample, "-i", inv, "--dry-run").returncode == 6
    r = run("topo", "eval", tmp_path / "t.npy", "-i", inv, "-t", sample, "-t", tmp_path / "plan.json", "-t", "best", "--json")
    rows = {Path(t["topology"]).name: t for t in json.loads(r.stdout)["topologies"]}
    assert rows["topology-prototype.yaml"]["circuit_count"] == 6 and rows["plan.json"]["circuit_count"] == 6
    assert rows["plan.json"]["objective_s"] == rows["best"]["objective_s"] == plan_doc["objective_s"]
    assert rows["topology-prototype.yaml"]["circuits"] == [[0, 1, 1, 1], [1, 0, 1, 1], [1, 1, 0, 1], [1, 1, 1, 0]]
    r = run("topo", "eval", tmp_path / "t.npy", "-t", sample)
    assert r.returncode == 2 and "give the inventory (-i)" in r.stderr
    # a plan made for another inventory (its ports are that one's lanes) is refused, by apply and by eval
    other = tmp_path / "other.json"
    other.write_text(json.dumps(plan_doc | {"inventory": "mfabric-breakout"}))
    for cmd in (("ocs", "apply", other, "-i", inv, "--dry-run"), ("topo", "eval", tmp_path / "t.npy", "-i", inv, "-t", other)):
        r = run(*cmd)
        assert r.returncode == 3
        assert "this plan was made for inventory 'mfabric-breakout', not 'mfabric-prototype-mock-" in r.stderr


def test_a_bad_planner_kernel_setting_is_a_configuration_error(tmp_path, monkeypatch):
    """8 servers x 6 lanes: too many topologies to enumerate, so the local search runs and reads the setting."""
    B = np.random.default_rng(4).gamma(0.5, 1e9, size=(8, 8))
    np.fill_diagonal(B, 0)
    np.save(tmp_path / "b.npy", B)
    monkeypatch.setenv("MFCTL_PLANNER_KERNEL", "gpu")
    r = invoke("topo", "plan", tmp_path / "b.npy", "--ports", "6", "--json")
    assert r.exit_code == 3 and json.loads(r.stdout)["error"]["message"] == \
        "MFCTL_PLANNER_KERNEL='gpu': one of auto, compiled, numpy"
    monkeypatch.setenv("MFCTL_PLANNER_KERNEL", "numpy")  # the fallback plans the same circuits
    numpy_plan = json.loads(invoke("topo", "plan", tmp_path / "b.npy", "--ports", "6", "--json").stdout)
    monkeypatch.setenv("MFCTL_PLANNER_KERNEL", "auto")
    auto_plan = json.loads(invoke("topo", "plan", tmp_path / "b.npy", "--ports", "6", "--json").stdout)
    assert numpy_plan["circuits"] == auto_plan["circuits"] and numpy_plan["method"] == "local"


def test_plan_with_several_ocses_names_the_regions_ocs_and_apply_refuses_another(traffic, tmp_path):
    """Issue 22: a region's plan is in its OCS's port numbers (ports repeat from switch to switch): the
    plan names its region and OCS, topo eval reads such a plan on that OCS, and ocs apply of it with
    the other switch is refused naming the file and line (before any switch is reached)."""
    from support import ROOT

    two = ROOT / "inventory" / "mfabric-2ocs.yaml"
    p, B = traffic
    r = invoke("topo", "plan", p, "-i", two, "--region", "region1", "--json")
    assert r.exit_code == 0, r.stdout
    out = json.loads(r.stdout)
    assert (out["inventory"], out["region"], out["ocs"]) == ("mfabric-2ocs", "region1", "ocs-b")
    assert {c["a"].split("/")[0] for c in out["lanes"]} <= {"gpu05", "gpu06", "gpu07", "gpu08"}
    assert all(1 <= i <= 12 and 193 <= o <= 204 for i, o in out["cross_connects"])
    saved = tmp_path / "plan.json"
    saved.write_text(r.stdout)
    r = invoke("topo", "eval", p, "-i", two, "--region", "region1", "-t", saved, "-t", "best", "--json")
    assert r.exit_code == 0, r.stdout
    rows = {x["topology"]: x for x in json.loads(r.stdout)["topologies"]}
    assert rows[str(saved)]["circuits"] == out["circuits"] and rows[str(saved)]["objective_s"] == \
        pytest.approx(out["objective_s"])
    line = next(i for i, ln in enumerate(saved.read_text().splitlines(), 1) if ln.strip().startswith('"ocs"'))
    r = invoke("ocs", "apply", saved, "-i", two, "--ocs", "ocs-a", "--dry-run", "--json")
    err = json.loads(r.stdout)["error"]
    assert r.exit_code == 3 and err["message"] == (f"{saved}:{line}: this plan was made for region 'region1' on OCS "
                                                   "'ocs-b', not OCS 'ocs-a': apply it with --ocs ocs-b"), err
