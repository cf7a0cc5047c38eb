"""End to end: the main job on the mock testbed, through the real CLI and the real wires."""

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from mfctl import mockctl
from mfctl.lock import TestbedLock as HeldLock
from mfctl.runtime.job import Job
from mfctl.runtime.playbook import load_playbook
from support import DATA, live_processes, mfctl_cmd, wait_until

SHORT = DATA / "playbooks" / "short.yaml"


def _simruntimes() -> list[str]:
    """Simulated-runtime processes still alive on this machine (= on any mock host)."""
    return live_processes(b"mfctl.mock.simruntime")


def _no_runtime_left(timeout=10.0) -> bool:
    deadline = time.monotonic() + timeout
    while _simruntimes() and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _simruntimes()


def _variant(tmp_path, **changes) -> Path:
    doc = yaml.safe_load(SHORT.read_text())
    for k, v in changes.items():
        doc.setdefault(k, {}).update(v) if isinstance(v, dict) else doc.__setitem__(k, v)
    doc["inventory"] = str((SHORT.parent / doc["inventory"]).resolve())
    p = tmp_path / "pb.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_main_job_end_to_end_via_cli(tmp_path, cli_env):
    # as in the quick start: relative runs dir ("runs" under the working directory)
    cli_env.pop("MFCTL_RUNS_DIR")
    cli_env["MFCTL_STATE_DIR"] = "state"
    # time scale 15, not the short playbook's 50: over OpenSSH mock hosts a host's health sample (17
    # commands, each through sshd, bash and the relay) takes ~1.8 s of wall time beside the run's
    # processes on 2 cores, and at 50 the run trains for ~1.5 s: no sample finished before its end
    pb = _variant(tmp_path, mock={"time_scale": 15})
    t0 = time.monotonic()
    r = subprocess.run(mfctl_cmd("run", pb, "--json"), capture_output=True, text=True, env=cli_env, timeout=120,
                       cwd=tmp_path)
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads(r.stdout)
    assert s["status"] == "ok" and s["iterations"] == 12 == s["iterations_planned"]
    assert len(s["reconfigurations"]) >= 1
    rc = s["reconfigurations"][0]
    assert rc["t_switch_ms"] > 30 and rc["t_linkup_ms"] > 4000 and rc["t_runtime_ms"] > 0
    assert rc["objective_after_s"] < rc["objective_before_s"]
    # the OCS state read back equals the last plan: every circuit's two cross-connects, nothing else
    ocs = s["ocs"]
    assert ocs["matches_last_plan"] is True
    planned = sorted([i, o] for c in ocs["circuits"]["region0"] for i, o in c["cross_connects"])
    assert planned == ocs["cross_connects"]
    # tokens/s agrees with the batch and the iteration times: DP 8 x 4096 tokens x 8 micro-batches
    tokens_per_iter = 8 * 4096 * 1 * 8
    assert s["tokens"] == 12 * tokens_per_iter
    run_dir = Path(s["run_dir"])
    assert run_dir.parent == tmp_path / "runs"
    db = sqlite3.connect(run_dir / "metrics.db")
    (n_rows,) = db.execute("SELECT COUNT(*) FROM iterations").fetchone()
    assert n_rows == 12 * 4  # every host reports every iteration
    (sum_s,) = db.execute("SELECT SUM(seconds) FROM iterations WHERE host='gpu01'").fetchone()
    assert s["tokens_per_s"] == pytest.approx(12 * tokens_per_iter / sum_s, rel=1e-3)
    assert db.execute("SELECT COUNT(*) FROM reconfigurations").fetchone()[0] == len(s["reconfigurations"])
    assert db.execute("SELECT status FROM run").fetchone()[0] == "ok"
    # health was sampled during the run (every 20 testbed seconds) besides the preflight sweep
    assert db.execute("SELECT COUNT(*) FROM health").fetchone()[0] > 4
    idx = sqlite3.connect(tmp_path / "runs" / "index.sqlite")
    assert idx.execute("SELECT status, iterations FROM runs WHERE run_id=?", (s["run_id"],)).fetchone() == ("ok", 12)
    assert 0 < s["ep_share_on_circuits"] <= 1
    # the journal has intent, commands and verification for every OCS change
    ops = [json.loads(ln)["op"] for ln in (run_dir / "journal.jsonl").read_text().splitlines()]
    assert ops.count("ocs.intent") == ops.count("ocs.verify") == 1 + len(s["reconfigurations"])
    assert (run_dir / "logs" / "gpu01.log").read_text().count("iteration ") >= 12
    # the mock was stopped with the run
    assert not (run_dir / "mock" / "status.json").exists()
    assert wall < 60
    # metrics export: Prometheus text (base units, _total counters, _info), CSV, JSON
    from prometheus_client.parser import text_string_to_metric_families

    r = subprocess.run(mfctl_cmd("metrics", "export", "latest"), capture_output=True, text=True, env=cli_env, cwd=tmp_path)
    fams = {f.name: f for f in text_string_to_metric_families(r.stdout)}
    assert r.returncode == 0 and fams["mfctl_iterations"].samples[0].value == 12
    assert fams["mfctl_tokens"].samples[0].value == s["tokens"] and "mfctl_run_info" in fams
    assert fams["mfctl_reconfigurations"].samples[0].value == len(s["reconfigurations"])
    r = subprocess.run(mfctl_cmd("metrics", "export", s["run_id"], "--format", "csv"), capture_output=True, text=True,
                       env=cli_env, cwd=tmp_path)
    assert r.stdout.splitlines()[0].startswith("iteration,host,seconds") and len(r.stdout.splitlines()) == 1 + 48
    # runs list: the run in the table and in JSON; a runs directory named on the command line that is not there is an error
    r = subprocess.run(mfctl_cmd("runs", "list", "--json"), capture_output=True, text=True, env=cli_env, cwd=tmp_path)
    assert [(x["run_id"], x["status"], x["iterations"]) for x in json.loads(r.stdout)["runs"]] == [(s["run_id"], "ok", 12)]
    r = subprocess.run(mfctl_cmd("runs", "list", "--runs-dir", "nosuchdir"), capture_output=True, text=True, env=cli_env,
                       cwd=tmp_path)
    assert r.returncode == 2 and "no runs directory nosuchdir" in r.stderr
    r = subprocess.run(mfctl_cmd("runs", "list"), capture_output=True, text=True, env={**cli_env, "MFCTL_RUNS_DIR": "none-yet"},
                       cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "" and f"no runs in {tmp_path / 'none-yet'}" in r.stderr


def test_worker_crash_stops_everything_and_exits_1(tmp_path):
    pb = load_playbook(_variant(tmp_path, mock={"crash_host": "gpu03", "crash_at_iteration": 5}))
    s = Job(pb, runs_dir=str(tmp_path / "runs")).run()
    assert s["exit_code"] == 1 and s["status"] == "failed" and "gpu03" in s["error"]
    recs = [json.loads(ln) for ln in (Path(s["run_dir"]) / "journal.jsonl").read_text().splitlines()]
    final = [r for r in recs if r["op"] == "ocs.final"]
    assert final and final[-1]["matches_plan"] is True  # the OCS is consistent with the journal
    stopped = [r for r in recs if r["op"] == "runtime.stopped"][0]["workers"]
    assert all(w["rc"] is not None or w["error"] for w in stopped.values())
    assert s["inventory"].startswith("mfabric-prototype-mock-")  # a mock instance of its own
    with HeldLock(s["inventory"], "test"):  # released
        pass
    assert mockctl.status(Path(s["run_dir"]) / "mock") is None
    assert _no_runtime_left()


def test_the_preflight_sweep_is_mfctl_healths(tmp_path):
    """A fault only the operator's sweep sees (an XID in the kernel log, the GPU still answering)
    stops the run before anything starts, as `mfctl health` would flag it."""
    mock = mockctl.start(DATA.parent.parent / "inventory" / "mfabric-prototype.yaml", tmp_path / "mock", time_scale=50,
                         inject=["gpu02:gpu4=xid48", "gpu04:gpu0=nvlink-down:3"])
    try:
        pb = load_playbook(_variant(tmp_path, mock={"enabled": False}))
        s = Job(pb, inventory_override=mock["inventory"], runs_dir=str(tmp_path / "runs")).run()
        assert s["exit_code"] == 1 and "gpu02: GPU 4: XID 48 (double-bit ECC error)" in s["error"] and s["iterations"] == 0
        db = sqlite3.connect(Path(s["run_dir"]) / "metrics.db")
        codes = {c for (f,) in db.execute("SELECT findings_json FROM health") for c in [x["code"] for x in json.loads(f)]}
        assert {"gpu.xid", "gpu.nvlink_inactive"} <= codes
        # the failed run, as people and Prometheus see it afterwards
        env = {**os.environ, "MFCTL_RUNS_DIR": str(tmp_path / "runs")}
        r = subprocess.run(mfctl_cmd("runs", "show", "latest"), capture_output=True, text=True, env=env)
        assert r.returncode == 0 and s["run_id"] in r.stdout and "XID 48" in r.stdout
        r = subprocess.run(mfctl_cmd("metrics", "export", "latest", "--format", "prometheus"), capture_output=True,
                           text=True, env=env)
        assert "mfctl_iterations_total 0.0" in r.stdout and "mfctl_iteration_seconds" not in r.stdout  # no last one
        assert f'inventory="{s["inventory"]}"' in r.stdout and s["inventory"].startswith("mfabric-prototype-mock-")
        # "latest" is one run for every command, also beside a newer run that is still going (no summary yet)
        newer = tmp_path / "runs" / "29991231-235959-000000"
        newer.mkdir()
        (newer / "metrics.db").write_bytes((Path(s["run_dir"]) / "metrics.db").read_bytes())
        from mfctl.runtime import rundir

        rundir.write_pid(newer)  # this process writes it: running
        r = subprocess.run(mfctl_cmd("runs", "report", "latest"), capture_output=True, text=True, env=env)
        assert r.returncode == 0 and s["run_id"] in r.stdout  # one sweep, no reconfiguration: still a report
        assert 'id="health"' in Path(r.stdout.strip()).read_text()
    finally:
        mockctl.stop(tmp_path / "mock")


def test_a_run_takes_health_thresholds(tmp_path, cli_env):
    """An XID from 23 h ago (a GPU reset since, say) stops the run under the default window of a day;
    --threshold xid_window_s=3600 makes it history."""
    mock = mockctl.start(DATA.parent.parent / "inventory" / "mfabric-prototype.yaml", tmp_path / "mock", time_scale=50,
                         inject=["gpu03:gpu1=xid74:23h"])
    try:
        pb = load_playbook(SHORT)  # (its mock's time scale, 50: -i uses the running mock instead of starting one)
        s = Job(pb, inventory_override=mock["inventory"], runs_dir=str(tmp_path / "runs")).run()
        assert s["exit_code"] == 1 and "XID 74" in s["error"]
        s = Job(pb, inventory_override=mock["inventory"], runs_dir=str(tmp_path / "runs"),
                health_limits={"xid_window_s": 3600}).run()
        assert s["exit_code"] == 0 and s["health"]["ok"] == 3
    finally:
        mockctl.stop(tmp_path / "mock")
    r = subprocess.run(mfctl_cmd("run", SHORT, "--threshold", "xid_window_s=0"), capture_output=True, text=True, env=cli_env)
    assert r.returncode == 2 and "xid_window_s=0: expected a duration above 0 s" in r.stderr


def test_lock_held_exits_5(tmp_path):
    """A testbed (here a hand-started mock) that another run holds is refused; so is its OCS, held
    under the device's identity whatever inventory reaches it."""
    from mfctl.inventory import load_inventory
    from mfctl.lock import DeviceLock
    from mfctl.ocs.identity import known_identity

    mock = mockctl.start(DATA.parent.parent / "inventory" / "mfabric-prototype.yaml", tmp_path / "mock", time_scale=50)
    try:
        pb = load_playbook(SHORT)
        inv = load_inventory(mock["inventory"])
        with HeldLock(inv.name, "someone else"):
            s = Job(pb, inventory_override=mock["inventory"], runs_dir=str(tmp_path / "runs")).run()
        assert s["exit_code"] == 5 and "locked" in s["error"]
        assert s["run_dir"] == "" and list((tmp_path / "runs").iterdir()) == []  # refused before it started: no run
        with DeviceLock(known_identity(inv).key, "someone else's ocs apply"):
            s = Job(pb, inventory_override=mock["inventory"], runs_dir=str(tmp_path / "runs")).run()
        assert s["exit_code"] == 5 and "someone else's ocs apply" in s["error"] and s["iterations"] == 0
        assert (Path(s["run_dir"]) / "summary.json").is_file()  # it held the testbed lock: a run that failed
    finally:
        mockctl.stop(tmp_path / "mock")


def test_ctrl_c_exits_130_and_cleans_up(tmp_path, cli_env):
    pb = _variant(tmp_path, training={"iterations": 200})
    p = subprocess.Popen(mfctl_cmd("run", pb, "--json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env)
    runs = Path(cli_env["MFCTL_RUNS_DIR"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until training is under way
        logs = list(runs.glob("*/logs/gpu01.log"))
        if logs and logs[0].read_text().count("iteration ") >= 3:
            break
        time.sleep(0.1)
    wait_until(lambda: len(live_processes(b"mfctl.mock.simruntime")) == 4, timeout=30,
               what="the leftover scan to see this run's 4 runtimes")  # ...
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err[-2000:]
    s = json.loads(out)
    assert s["status"] == "interrupted" and 1 <= s["iterations"] < 200
    run_dir = Path(s["run_dir"])
    assert mockctl.status(run_dir / "mock") is None
    recs = [json.loads(ln) for ln in (run_dir / "journal.jsonl").read_text().splitlines()]
    assert [r for r in recs if r["op"] == "ocs.final"][-1]["matches_plan"] is True
    assert _no_runtime_left()  # cancellation leaves no process on any mock host


def test_bad_playbook_exit_3(tmp_path, cli_env):
    p = tmp_path / "pb.yaml"
    p.write_text(SHORT.read_text().replace("parallelism: {ep: 8, tp: 4}", "parallelism: {ep: 8, tp: 4, pp: 2}"))
    r = subprocess.run(mfctl_cmd("run", p), capture_output=True, text=True, env=cli_env)
    assert r.returncode == 3 and "unknown key 'pp'" in r.stderr and "pb.yaml:" in r.stderr


def test_playbook_that_does_not_fit_the_testbed_fails_before_starting(tmp_path, cli_env):
    p = _variant(tmp_path, parallelism={"ep": 6, "tp": 4})
    r = subprocess.run(mfctl_cmd("run", p), capture_output=True, text=True, env=cli_env, cwd=tmp_path)
    assert r.returncode == 3 and r.stderr.startswith("error: ") and "EP 6 x TP 4 = 24 GPUs" in r.stderr
    assert not (tmp_path / "runs").exists() and not Path(cli_env["MFCTL_RUNS_DIR"]).exists()


def test_html_report_opens_in_a_headless_browser(tmp_path, cli_env):
    import re
    import shutil

    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("no headless browser installed (.ci/run installs Debian's chromium)")
    # a negative required gain forces the reconfigurations the report's phase, circuit and heatmap plots show
    # (whether one pays off depends on measured times: on a loaded machine a run may make none)
    pb = _variant(tmp_path, policy={"min_gain_s": -1000.0, "min_improvement": 0.0})
    r = subprocess.run(mfctl_cmd("run", pb, "--json"), capture_output=True, text=True, env=cli_env, timeout=120)
    s = json.loads(r.stdout)
    assert s["exit_code"] == 0, s.get("error")
    r = subprocess.run(mfctl_cmd("runs", "report", s["run_id"]), capture_output=True, text=True, env=cli_env)
    report = Path(r.stdout.strip())
    assert r.returncode == 0 and report.exists() and report.stat().st_size > 50_000
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                          "--disable-background-networking", "--disable-component-update", "--disable-sync",
                          f"--user-data-dir={tmp_path / 'chrome'}", "--dump-dom", report.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    ids = set(re.findall(r'<figure id="([a-z-]+)"', dom))
    # the phase, circuit and heatmap plots are a reconfiguration's (on a loaded machine a run may make none)
    assert ids == {"iteration-time", "prediction", "health"} | ({"phases", "circuits", "heatmap"} if s["reconfigurations"]
                                                                 else set())
    assert f'data-images-loaded="{len(ids)}"' in dom  # every PNG decoded by the browser


def test_a_hand_started_mock_with_another_time_scale_is_refused(tmp_path, cli_env, monkeypatch):
    from support import PROTOTYPE

    monkeypatch.setenv("MFCTL_STATE_DIR", cli_env["MFCTL_STATE_DIR"])
    st = mockctl.start(PROTOTYPE, tmp_path / "mock", time_scale=1)
    try:
        r = subprocess.run(mfctl_cmd("run", SHORT, "-i", st["inventory"]), capture_output=True, text=True, env=cli_env)
        assert r.returncode == 3 and "time scale 1 but the playbook says 50" in r.stderr
    finally:
        mockctl.stop(tmp_path / "mock")


def test_a_run_killed_with_9_does_not_leave_its_mock_behind(tmp_path, cli_env):
    """``kill -9`` of ``mfctl run`` mid-training: the run's own mock notices its owner is gone
    (within ~0.5 s) and stops, with its hosts' sshds and the runtimes on them."""
    pb = _variant(tmp_path, training={"iterations": 200})
    p = subprocess.Popen(mfctl_cmd("run", pb, "--json"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=cli_env)
    runs = Path(cli_env["MFCTL_RUNS_DIR"])
    wait_until(lambda: any(lg.read_text().count("iteration ") >= 2 for lg in runs.glob("*/logs/gpu01.log")),
               timeout=60, what="training under way")
    mock_dir = next(runs.glob("*/mock"))
    st = mockctl.status(mock_dir)
    assert st is not None
    wait_until(lambda: len(live_processes(b"mfctl.mock.simruntime")) == 4, timeout=30, what="4 runtimes")
    listed = lambda: json.loads(subprocess.run(mfctl_cmd("runs", "list", "--json"), capture_output=True, text=True,  # noqa: E731
                                               env=cli_env, timeout=60).stdout)["runs"]
    assert [r["status"] for r in listed()] == ["running"]  # no summary.json yet, its mfctl run alive
    p.kill()
    p.wait(timeout=10)
    wait_until(lambda: mockctl.status(mock_dir) is None and not _pid_alive(st["pid"]), timeout=30, what="the mock to stop")
    assert _no_runtime_left()
    # (sshd overwrites its environment with its title: its command line names the mock's directory)
    wait_until(lambda: not [d for d in Path("/proc").glob("[0-9]*/cmdline") if _reads(d, str(mock_dir).encode())],
               timeout=10, what="the mock's sshds to stop")
    # issue 17 item 6: the run without its summary.json is listed, shown, reported and exported
    (run,) = listed()
    assert run["status"] == "crashed" and run["iterations"] >= 2 and run["playbook"] == load_playbook(pb).name
    shown = subprocess.run(mfctl_cmd("runs", "show", "latest", "--json"), capture_output=True, text=True, env=cli_env)
    s = json.loads(shown.stdout)
    assert shown.returncode == 0 and s["status"] == "crashed" and s["run_id"] == run["run_id"]
    assert s["error"] == "the run ended without writing summary.json (killed or crashed); figures recovered from metrics.db"
    assert s["iterations"] == run["iterations"] and s["tokens_per_s"] > 0
    assert s["iterations_planned"] == 200 and s["wall_train_s"] is None  # what is known, not a made-up 0
    assert s["inventory"].startswith("mfabric-prototype-mock-")  # by name, as a finished run's
    text = subprocess.run(mfctl_cmd("runs", "show", run["run_id"]), capture_output=True, text=True, env=cli_env).stdout
    assert "crashed" in text and "killed or crashed" in " ".join(text.split())
    rep = subprocess.run(mfctl_cmd("runs", "report"), capture_output=True, text=True, env=cli_env, timeout=120)
    assert rep.returncode == 0 and Path(rep.stdout.strip()).read_text().count("crashed") >= 1, rep.stderr
    exp = subprocess.run(mfctl_cmd("metrics", "export"), capture_output=True, text=True, env=cli_env, timeout=60)
    assert exp.returncode == 0 and f"mfctl_iterations_total {float(run['iterations'])}" in exp.stdout


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _reads(p: Path, needle: bytes) -> bool:
    try:
        return needle in p.read_bytes()
    except OSError:
        return False
