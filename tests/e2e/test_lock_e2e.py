"""``mfctl run`` holding a Redis lease through a partition: the lock server stops answering
(SIGSTOP) mid-run; the run notices it cannot renew, stops before its lease ends and exits 5 saying
why, its mock, runtimes and records finished as after a Ctrl-C (docs/locks.md)."""

import json
import subprocess
import time
from pathlib import Path

import yaml
from peers_redis import start_redis

from mfctl import mockctl
from support import DATA, PROTOTYPE, live_processes, mfctl_cmd, wait_until


def test_a_run_whose_lease_cannot_be_renewed_stops_and_exits_5(tmp_path, cli_env):
    srv = start_redis(tmp_path)
    try:
        inv = yaml.safe_load(PROTOTYPE.read_text())
        inv["lock"] = {"backend": "redis", "url": srv.url, "ttl_s": 3, "timeout_s": 0.5}
        (tmp_path / "inv.yaml").write_text(yaml.safe_dump(inv))
        pb = yaml.safe_load((DATA / "playbooks" / "short.yaml").read_text())
        pb["inventory"] = str(tmp_path / "inv.yaml")
        pb["training"]["iterations"] = 300
        (tmp_path / "pb.yaml").write_text(yaml.safe_dump(pb))
        p = subprocess.Popen(mfctl_cmd("run", tmp_path / "pb.yaml", "--json"), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=cli_env)
        runs = Path(cli_env["MFCTL_RUNS_DIR"])
        wait_until(lambda: any(f.read_text().count("iteration ") >= 2 for f in runs.glob("*/logs/gpu01.log")), timeout=90,
                   what="training under way")
        held = srv.client().keys("mfctl:testbed:*")
        assert len(held) == 3, held  # the lock, its holder record and the last holder's
        srv.pause()
        paused = time.monotonic()
        out, err = p.communicate(timeout=90)
        srv.resume()
        s = json.loads(out)
        assert p.returncode == 5 and s["status"] == "failed" and s["exit_code"] == 5, err[-3000:]
        assert s["error"].startswith("stopped: testbed '") and "cannot renew the lease at redis://127.0.0.1:" in s["error"]
        assert 1 <= s["iterations"] < 300
        print(f"run stopped {time.monotonic() - paused:.1f} s after the lock server stopped answering (lease 3 s), "
              f"teardown included")
        run_dir = Path(s["run_dir"])
        assert mockctl.status(run_dir / "mock") is None
        recs = [json.loads(ln) for ln in (run_dir / "journal.jsonl").read_text().splitlines()]
        assert recs[-1]["op"] == "run.end" and recs[-1]["exit_code"] == 5
        wait_until(lambda: not live_processes(b"mfctl.mock.simruntime"), timeout=15, what="no runtime left")
    finally:
        srv.stop()
