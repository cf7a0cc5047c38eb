"""``mfctl metrics export|serve`` on a run that failed before it wrote its run row (issue 17 item 4:
``latest`` is the default, so one refused attempt broke a CI step that exports metrics)."""

import json
import socket
import subprocess
import urllib.request

from support import DATA, mfctl_cmd, wait_until


def _refused_run(mock_testbed, cli_env) -> None:
    """short.yaml asks time scale 50 of the session's mock at 100: refused before anything runs."""
    r = subprocess.run(mfctl_cmd("run", DATA / "playbooks" / "short.yaml", "-i", mock_testbed.inventory),
                       capture_output=True, text=True, env=cli_env, timeout=60)
    assert r.returncode == 3 and "time scale 100" in r.stderr


def test_export_of_a_run_refused_before_its_row_gives_the_summarys_status(mock_testbed, cli_env):
    _refused_run(mock_testbed, cli_env)
    r = subprocess.run(mfctl_cmd("metrics", "export"), capture_output=True, text=True, env=cli_env, timeout=60)
    assert r.returncode == 0, r.stderr
    (info,) = [ln for ln in r.stdout.splitlines() if ln.startswith("mfctl_run_info{")]
    assert 'playbook="short-e2e"' in info and 'status="failed"' in info
    assert "mfctl_iterations_total 0.0" in r.stdout
    r = subprocess.run(mfctl_cmd("metrics", "export", "--format", "json"), capture_output=True, text=True, env=cli_env)
    assert r.returncode == 0 and json.loads(r.stdout)["iterations"] == []


def test_serve_of_a_run_refused_before_its_row_serves_it(mock_testbed, cli_env):
    _refused_run(mock_testbed, cli_env)
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
        assert 'status="failed"' in body and "mfctl_iterations_total 0.0" in body
    finally:
        p.terminate()
        p.wait(timeout=10)
