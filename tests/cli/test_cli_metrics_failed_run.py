"""``mfctl metrics export|serve`` on a run that never wrote its run row (issue 17 item 4: ``latest``
is the default, so one such run broke a CI step that exports metrics) — and, since issue 17 item 7,
a run refused before it started leaves no directory at all."""

import socket
import subprocess
import urllib.request

from mfctl.metrics.store import MetricsStore
from support import DATA, mfctl_cmd, wait_until


def _rowless_run(cli_env):
    """A run directory whose metrics.db has its tables but no run row (killed right after creating it)."""
    from pathlib import Path

    d = Path(cli_env["MFCTL_RUNS_DIR"]) / "20261201-120000-abcdef"
    MetricsStore(d / "metrics.db").close()
    (d / "journal.jsonl").write_text("")
    return d


def test_a_run_refused_before_it_started_leaves_no_directory(mock_testbed, cli_env):
    """short.yaml asks time scale 50 of the session's mock at 100: refused, nothing written."""
    from pathlib import Path

    r = subprocess.run(mfctl_cmd("run", DATA / "playbooks" / "short.yaml", "-i", mock_testbed.inventory),
                       capture_output=True, text=True, env=cli_env, timeout=60)
    assert r.returncode == 3 and "time scale 100" in r.stderr
    runs = Path(cli_env["MFCTL_RUNS_DIR"])
    assert not runs.exists() or list(runs.iterdir()) == []
    r = subprocess.run(mfctl_cmd("metrics", "export"), capture_output=True, text=True, env=cli_env, timeout=60)
    assert r.returncode == 2 and "no runs in" in r.stderr


def test_export_of_a_run_without_its_row_says_unknown(cli_env):
    _rowless_run(cli_env)
    r = subprocess.run(mfctl_cmd("metrics", "export"), capture_output=True, text=True, env=cli_env, timeout=60)
    assert r.returncode == 0, r.stderr
    (info,) = [ln for ln in r.stdout.splitlines() if ln.startswith("mfctl_run_info{")]
    assert 'run_id="20261201-120000-abcdef"' in info and 'status="unknown"' in info
    assert "mfctl_iterations_total 0.0" in r.stdout


def test_serve_of_a_run_without_its_row_serves_it(cli_env):
    _rowless_run(cli_env)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen(mfctl_cmd("metrics", "serve", "--port", port), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=cli_env)
    try:
        def scrape():
            try:
                return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
            except OSError:
                assert p.poll() is None, p.stderr.read()
                return None
        body = wait_until(scrape, timeout=30, what="the metrics endpoint")
        assert 'status="unknown"' in body and "mfctl_iterations_total 0.0" in body
    finally:
        p.terminate()
        p.wait(timeout=10)
