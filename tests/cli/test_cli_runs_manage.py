"""mfctl runs: import-log is idempotent, a copied runs dir shows where it is now, runs delete and
runs prune (confirmation, --yes, --json, never a running run) — issue 17 item 21."""

import json
import os
import pty
import re
import select
import shutil
import signal
import sqlite3
import subprocess
import time

import pytest

from mfctl.procs import start_ticks
from support import DATA, mfctl_cmd

LOG = DATA / "train-logs" / "megatron-core-moe-64e-top1-ep4-8gpu.txt"


def _run(env, *args, timeout=60):
    return subprocess.run(mfctl_cmd(*args), capture_output=True, text=True, env=env, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def _runs(d):
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def test_importing_the_same_log_twice_is_one_run_unless_forced(tmp_path, cli_env):
    runs = tmp_path / "runs"
    first = _run(cli_env, "runs", "import-log", LOG, "--json")
    rid = json.loads(first.stdout)["run_id"]
    assert first.returncode == 0 and json.loads(first.stdout)["already_imported"] is False
    again = _run(cli_env, "runs", "import-log", LOG)
    assert again.returncode == 0 and _runs(runs) == [rid]
    assert f"note: {LOG} was imported before (same content) as run {rid}: nothing written (--force imports it " \
           "again as a new run)" in again.stderr
    assert f"run directory: {runs / rid}" in again.stdout
    doc = json.loads(_run(cli_env, "runs", "import-log", LOG, "--json").stdout)
    assert doc["run_id"] == rid and doc["already_imported"] is True
    # a copy under another name is the same content: the same run
    copy = tmp_path / "copy.log"
    shutil.copy(LOG, copy)
    assert json.loads(_run(cli_env, "runs", "import-log", copy, "--json").stdout)["run_id"] == rid
    # another --seq-len gives other token counts (the log has no 'consumed tokens'): another run
    other = json.loads(_run(cli_env, "runs", "import-log", LOG, "--seq-len", "2048", "--json").stdout)
    assert other["run_id"] != rid and other["already_imported"] is False
    forced = _run(cli_env, "runs", "import-log", LOG, "--force", "--json")
    assert forced.returncode == 0 and json.loads(forced.stdout)["run_id"] not in (rid, other["run_id"])
    assert len(_runs(runs)) == 3
    # the same log through Windows or an editor (CRLF, a trailing blank line) is the same log
    crlf = tmp_path / "crlf.log"
    crlf.write_bytes(LOG.read_bytes().replace(b"\n", b"\r\n") + b"\r\n")
    assert json.loads(_run(cli_env, "runs", "import-log", crlf, "--json").stdout)["run_id"] == rid
    changed = tmp_path / "changed.log"
    changed.write_text(LOG.read_text().replace("iteration", "iteration ", 1))
    assert json.loads(_run(cli_env, "runs", "import-log", changed, "--json").stdout)["already_imported"] is False
    assert len(_runs(runs)) == 4


def _import(env):
    return json.loads(_run(env, "runs", "import-log", LOG, "--json").stdout)["run_id"]


def test_a_copied_runs_dir_shows_where_the_run_is_now(tmp_path, cli_env):
    rid = _import(cli_env)
    crashed = tmp_path / "runs" / "20260101-000000-abcdef"  # a run killed before its summary: metrics.db only
    crashed.mkdir()
    shutil.copy(tmp_path / "runs" / rid / "metrics.db", crashed / "metrics.db")
    moved = tmp_path / "elsewhere" / "runs"
    shutil.copytree(tmp_path / "runs", moved)
    shutil.rmtree(tmp_path / "runs")
    r = _run(cli_env, "runs", "show", rid, "--runs-dir", moved)
    assert r.returncode == 0 and f"run directory: {moved / rid}\n" in r.stdout and str(tmp_path / "runs") + "/" \
        not in r.stdout
    assert json.loads(_run(cli_env, "runs", "show", rid, "--runs-dir", moved, "--json").stdout)["run_dir"] == \
        str(moved / rid)
    r = _run(cli_env, "runs", "show", crashed.name, "--runs-dir", moved, "--json")
    assert json.loads(r.stdout)["run_dir"] == str(moved / crashed.name)


def _fake_runs(tmp_path, env):
    """Run dirs made from one imported run: ids with chosen start times and statuses, one crashed
    (metrics.db, no summary), one running (a live process in its pid file)."""
    runs = tmp_path / "runs"
    src = runs / _import(env)
    made = {}
    for rid, status in [("20200101-000000-old0k1", "ok"), ("20200102-000000-oldfa1", "failed"),
                        ("20200103-000000-oldcr1", "crashed"), ("20200104-000000-oldru1", "running"),
                        (time.strftime("%Y%m%d-%H%M%S-new0k1"), "ok")]:
        d = runs / rid
        shutil.copytree(src, d)
        s = json.loads((d / "summary.json").read_text())
        (d / "summary.json").write_text(json.dumps(s | {"run_id": rid, "status": status, "source_sha256": None}))
        if status in ("crashed", "running"):
            (d / "summary.json").unlink()
        made[rid] = d
    shutil.rmtree(src)
    return runs, made


@pytest.fixture
def live_writer():
    p = subprocess.Popen(["sleep", "300"])
    yield p
    p.kill()
    p.wait()


def _mark_running(d, p):
    (d / "mfctl.pid").write_text(f"{p.pid} {start_ticks(p.pid)}\n")


def test_delete_asks_refuses_unknown_and_running_runs_and_deletes_with_yes(tmp_path, cli_env, live_writer):
    runs, made = _fake_runs(tmp_path, cli_env)
    running = next(d for d in made.values() if d.name.endswith("ru1"))
    _mark_running(running, live_writer)
    before = _runs(runs)
    r = _run(cli_env, "runs", "delete", "20200101-000000-old0k1", "nope")
    assert r.returncode == 2 and "error: no run 'nope' in " in r.stderr and "nothing was deleted" in r.stderr
    r = _run(cli_env, "runs", "delete", "20200101-000000-old0k1", running.name, "--yes")
    assert r.returncode == 1 and f"run(s) {running.name} still running" in r.stderr
    r = _run(cli_env, "runs", "delete", "20200101-000000-old0k1")  # no terminal, no --yes
    assert r.returncode == 2 and "confirm with --yes when not at a terminal" in r.stderr
    r = _run(cli_env, "runs", "delete", "../runs", "--yes")
    assert r.returncode == 2 and _runs(runs) == before
    r = _run(cli_env, "runs", "delete", "20200101-000000-old0k1", "20200102-000000-oldfa1", "--yes", "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["schema"] == "mfctl.runs.delete/v1" and r.stderr == ""
    assert doc["deleted"] == ["20200101-000000-old0k1", "20200102-000000-oldfa1"] and doc["failed"] == []
    assert _runs(runs) == [x for x in before if x not in doc["deleted"]]
    r = _run(cli_env, "runs", "delete", "20200103-000000-oldcr1", "--yes")
    assert r.returncode == 0 and f"deleted 1 run(s) from {runs}" in r.stdout


def test_prune_by_age_status_and_count_never_a_running_run(tmp_path, cli_env, live_writer):
    runs, made = _fake_runs(tmp_path, cli_env)
    _mark_running(made["20200104-000000-oldru1"], live_writer)
    r = _run(cli_env, "runs", "prune", "--yes")
    assert r.returncode == 2 and "say what to prune: --keep N, --older-than DAYS and/or --status STATUS" in r.stderr
    assert _run(cli_env, "runs", "prune", "--status", "running", "--yes").returncode == 2
    r = _run(cli_env, "runs", "prune", "--status", "crashd", "--yes")
    assert r.returncode == 2 and "--status 'crashd' is not one of ok, failed, interrupted, crashed, unknown" in r.stderr
    r = _run(cli_env, "runs", "prune", "--status", "crashed", "--status", "failed", "--dry-run", "--json")
    doc = json.loads(r.stdout)
    assert doc["dry_run"] is True and doc["deleted"] == [] and len(_runs(runs)) == 5
    assert [x["run_id"] for x in doc["would_delete"]] == ["20200102-000000-oldfa1", "20200103-000000-oldcr1"]
    assert [x["status"] for x in doc["would_delete"]] == ["failed", "crashed"]
    r = _run(cli_env, "runs", "prune", "--status", "crashed", "--yes", "--json")
    assert json.loads(r.stdout)["deleted"] == ["20200103-000000-oldcr1"]
    # older than a day: the 2020 runs; the running one is kept, and said so
    r = _run(cli_env, "runs", "prune", "--older-than", "1", "--yes")
    assert r.returncode == 0 and "note: kept 1 running run(s) (a running run is never deleted): " \
                                 "20200104-000000-oldru1" in r.stderr
    assert "deleted 2 run(s)" in r.stdout
    assert _runs(runs) == ["20200104-000000-oldru1", [x for x in made if x.endswith("new0k1")][0]]
    # --keep 0: every run but the running one
    doc = json.loads(_run(cli_env, "runs", "prune", "--keep", "0", "--yes", "--json").stdout)
    assert doc["kept_running"] == ["20200104-000000-oldru1"] and len(doc["deleted"]) == 1
    assert _runs(runs) == ["20200104-000000-oldru1"]
    doc = json.loads(_run(cli_env, "runs", "prune", "--keep", "0", "--yes", "--json").stdout)
    assert doc["deleted"] == [] and doc["would_delete"] == []


def test_prune_keep_n_keeps_the_newest(tmp_path, cli_env):
    runs, made = _fake_runs(tmp_path, cli_env)
    doc = json.loads(_run(cli_env, "runs", "prune", "--keep", "2", "--dry-run", "--json").stdout)
    # the 2020-01-04 run is no longer running (no pid file): it is the second newest
    assert [x["run_id"] for x in doc["would_delete"]] == ["20200101-000000-old0k1", "20200102-000000-oldfa1",
                                                           "20200103-000000-oldcr1"]


def _at_terminal(env, args, answer: bytes, timeout=60):
    """Run mfctl with its stdin and stderr on a pty, answer the prompt with ``answer``; (rc, what it wrote)."""
    m, s = pty.openpty()
    p = subprocess.Popen(mfctl_cmd(*args), stdin=s, stdout=subprocess.PIPE, stderr=s, env=env, close_fds=True,
                         start_new_session=True)
    os.close(s)
    out, sent, end = b"", False, time.monotonic() + timeout
    while time.monotonic() < end:
        r, _, _ = select.select([m], [], [], 0.1)
        if r:
            try:
                chunk = os.read(m, 4096)
            except OSError:
                break
            out += chunk
        if not sent and b"[y/N]" in out:
            if answer == b"\x03":
                os.killpg(p.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
            else:
                os.write(m, answer)
            sent = True
        if p.poll() is not None and not r:
            break
    p.wait(timeout=10)
    os.close(m)
    text = out.decode(errors="replace") + p.stdout.read().decode()
    return p.returncode, re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)  # (a terminal's styles)


@pytest.mark.parametrize("answer, rc, said", [(b"n\r", 1, "aborted: not confirmed: nothing was changed"),
                                              (b"\r", 1, "aborted: not confirmed: nothing was changed"),
                                              (b"\x03", 130, "interrupted at the confirmation: nothing was changed")])
def test_no_or_ctrl_c_at_the_prompt_deletes_nothing(tmp_path, cli_env, answer, rc, said):
    runs, made = _fake_runs(tmp_path, cli_env)
    before = _runs(runs)
    code, text = _at_terminal(cli_env, ["runs", "prune", "--older-than", "1"], answer)
    assert "delete 4 run(s) from " in text and _runs(runs) == before, text
    assert code == rc and said in text, text


def test_yes_at_the_prompt_deletes(tmp_path, cli_env):
    runs, made = _fake_runs(tmp_path, cli_env)
    code, text = _at_terminal(cli_env, ["runs", "delete", "20200101-000000-old0k1"], b"y\r")
    assert code == 0 and "deleted 1 run(s)" in text and "20200101-000000-old0k1" not in _runs(runs), text


def test_a_run_that_comes_alive_before_its_deletion_is_kept(tmp_path, cli_env, live_writer):
    from mfctl.errors import OperationFailed
    from mfctl.runtime import prune

    runs, made = _fake_runs(tmp_path, cli_env)
    [e] = prune.named(runs, ["20200101-000000-old0k1"])
    _mark_running(made[e.run_id], live_writer)  # started writing after it was chosen
    with pytest.raises(OperationFailed, match="run 20200101-000000-old0k1 is running: not deleted"):
        prune.delete(runs, e)
    assert (runs / e.run_id / "metrics.db").is_file()
    con = sqlite3.connect(runs / e.run_id / "metrics.db")
    assert con.execute("SELECT COUNT(*) FROM iterations").fetchone()[0] == 15
    con.close()
