"""mfctl simulate in process (CliRunner): fabrics compared, usage errors."""

import json

import pytest
from typer.testing import CliRunner

from mfctl.cli.app import build


def invoke(*args):
    return CliRunner().invoke(build(), [str(a) for a in args])


def test_simulate_compares_fabrics_against_the_fat_tree():
    from mfctl.fabric import whatif

    r = invoke("simulate", "--gpus", "128", "--fabric", "mfabric", "--json")
    out = json.loads(r.stdout)
    assert r.exit_code == 0 and out["schema"] == "mfctl.simulate/v1" and out["gpus"] == 128
    fabrics = {f["fabric"]: f for f in out["fabrics"]}
    assert list(fabrics) == ["fat-tree", "mfabric"]  # the reference is always there, first
    assert fabrics["fat-tree"]["relative_perf_per_dollar"] == pytest.approx(1.0)
    sc = whatif.Scenario(whatif.PRESETS["mixtral-8x7b"], gpus=128, link_gbps=400, alpha=6, reconfig_latency_s=0.025,
                         micro_batches=8)
    want = {r.fabric: r.iteration_s for r in whatif.simulate(sc, ["fat-tree", "mfabric"])}
    assert {k: v["iteration_s"] for k, v in fabrics.items()} == pytest.approx(want)


@pytest.mark.parametrize("args, says", [
    (["--model", "gpt-5"], "--model must be one of"),
    (["--link-gbps", "300"], "--link-gbps must be one of"),
    (["--fabric", "torus"], "unknown fabric 'torus'"),
    (["--plot", "out.txt"], "--plot needs a .png"),
    (["--gpus", "64"], "--gpus must be a multiple of 128 for mixtral-8x7b (EP 8 x TP 4 x PP 4"),
    (["--gpus", "8"], "got 8"),
    (["--model", "qwen-moe", "--gpus", "96"], "--gpus must be a multiple of 128 for qwen-moe"),
    (["--model", "llama-moe", "--gpus", "96"], "--gpus must be a multiple of 64 for llama-moe (EP 16 x TP 1 x PP 4"),
])
def test_usage_errors_exit_2_with_one_json_error(args, says):
    r = invoke("simulate", *args, "--json")
    err = json.loads(r.stdout)["error"]
    assert r.exit_code == 2 and err["type"] == "UsageError" and says in err["message"]
    assert invoke("simulate", *args).stderr.startswith("error: ")


def test_the_gpus_help_names_every_models_multiple():
    from mfctl.fabric import whatif

    text = " ".join(invoke("simulate", "--help").stdout.replace("│", " ").split())  # (the help's lines, unwrapped)
    for name, p in whatif.PRESETS.items():
        assert f"{name} {p.ep * p.tp * p.pp}" in text


@pytest.mark.parametrize("cmd, value, says", [
    (["simulate", "--reconfig-latency-ms"], "nan", "nan is not a number"),
    (["simulate", "--reconfig-latency-ms"], "inf", "inf is not a number"),
    (["simulate", "--reconfig-latency-ms"], "-1", "-1 is out of range (min 0)"),
    (["topo", "plan", "x.npy", "--tolerance"], "nan", "nan is not a number"),
    (["ocs", "alarms", "-i", "x.yaml", "--wait"], "nan", "nan is not a number"),
    (["ocs", "alarms", "-i", "x.yaml", "--wait"], "3601", "3601 is out of range (min 0 max 3600)"),
])
def test_a_float_option_given_nan_says_not_a_number_and_exits_2(cmd, value, says):
    r = invoke(*cmd, value)
    assert r.exit_code == 2 and says in " ".join(r.stderr.split()), r.stderr


def test_reproduce_paper_prints_ours_vs_the_paper_and_writes_the_figure(tmp_path):
    png = tmp_path / "fig12.png"
    r = invoke("simulate", "--reproduce-paper", "--plot", png, "--json")
    out = json.loads(r.stdout)
    assert r.exit_code == 0 and out["schema"] == "mfctl.simulate.reproduce/v1" and out["plot"] == str(png)
    assert png.stat().st_size > 10_000
    assert out["summary"]["all"]["cells"] == 32 and out["summary"]["all"]["mean_error"] < 0.15
    assert out["orderings"]["topoopt_slower_than_mixnet"] and out["orderings"]["mixnet_within_0_30pct_of_fat_tree"]
    cell = {(c["model"], c["gbps"], c["fabric"]): c for c in out["cells"]}
    c = cell[("mixtral-8x7b", 400, "fat-tree")]
    assert c["paper"] == pytest.approx(1.030224) and c["ours"] == pytest.approx(1.03, abs=0.05)
    assert cell[("qwen-moe", 800, "topoopt")]["paper"] is None  # 200/800G: ours only
    text = invoke("simulate", "--reproduce-paper")
    lines = text.stdout
    assert text.exit_code == 0 and "normalized iteration time" in lines
    assert "all: mean error" in lines and "topoopt_slower_than_mixnet held" in lines
    assert "MixNet / fat-tree by reconfiguration latency" in lines


def test_reproduce_paper_refuses_a_plot_that_is_not_a_png():
    r = invoke("simulate", "--reproduce-paper", "--plot", "fig.txt", "--json")
    assert r.exit_code == 2 and "--plot needs a .png" in json.loads(r.stdout)["error"]["message"]


@pytest.mark.parametrize("args, says", [
    # 10**9 GPUs ran for minutes past 9 GB of memory (the step model's time grows with the EP groups)
    (["--gpus", "1000000000"], "Invalid value for '--gpus': Input should be less than or equal to 131072"),
    (["--gpus", "131200"], "Invalid value for '--gpus': Input should be less than or equal to 131072"),
    (["--micro-batches", "4097"], "Invalid value for '--micro-batches': Input should be less than or equal to 4096"),
])
def test_simulate_sizes_are_bounded_exit_2_naming_the_bound(args, says):
    import time

    t = time.monotonic()
    r = invoke("simulate", *args, "--json")
    assert r.exit_code == 2 and json.loads(r.stdout)["error"]["message"] == says
    assert time.monotonic() - t < 5  # refused at once, nothing simulated


def test_the_cli_bounds_are_the_models_and_the_model_refuses_past_them():
    import typer.main

    from mfctl.fabric import whatif

    opts = {p.name: p for p in typer.main.get_command(build()).commands["simulate"].params}
    assert (opts["gpus"].max, opts["micro_batches"].max) == (whatif.MAX_GPUS, whatif.MAX_MICRO_BATCHES)
    sc = whatif.Scenario(whatif.PRESETS["mixtral-8x7b"], gpus=whatif.MAX_GPUS + 128)
    with pytest.raises(ValueError, match="GPUs must be 8 to 131072, got 131200"):
        whatif.simulate(sc)
    with pytest.raises(ValueError, match="micro-batches must be 1 to 4096, got 4097"):
        whatif.simulate(whatif.Scenario(whatif.PRESETS["mixtral-8x7b"], gpus=128, micro_batches=4097))
