"""Secrets stay secret (issue 13, item 6, the run token and the settings): the run token is in
no command line a host sees (``ps``, auditd: the mock's ``exec.log``), no error and no record
of a run, even when ``sbatch`` fails; it reaches the runtime through a 0600 file; ``mfctl
version --settings`` never prints a secret setting."""

import json
import stat
import subprocess
import threading
import time
from pathlib import Path

from test_runtime_slurm import _playbook  # one way to vary the short playbook

from mfctl.runtime.job import Job
from mfctl.runtime.playbook import load_playbook
from mfctl.runtime.render import render_slurm
from mfctl.settings import Setting
from support import DATA, live_processes, mfctl_cmd

SHORT = DATA / "playbooks" / "short.yaml"


class Watch:
    """While a job runs: every process command line with its token (there must be none) and
    the token files seen in the mock's home, with their modes."""

    def __init__(self, job: Job):
        self.job, self.argv, self.files, self.stop = job, [], {}, threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while not self.stop.is_set():
            token = getattr(self.job, "token", None)
            if token:
                self.argv += live_processes(token.encode())
                home = self.job.run_dir / "mock" / "home"
                for p in list(home.glob(".mfctl/*.token")) + list(home.glob("mfctl-runs/*.token")):
                    try:
                        self.files[str(p)] = stat.S_IMODE(p.stat().st_mode)
                    except FileNotFoundError:
                        pass
            time.sleep(0.02)

    def done(self):
        self.stop.set()
        self.thread.join()


def _records(run_dir: Path, tmp_path: Path) -> dict[str, bytes]:
    """Everything a run leaves behind that an operator, a CI log or a dashboard reads."""
    files = {name: (run_dir / name).read_bytes() for name in ("summary.json", "journal.jsonl", "metrics.db", "mfctl.log")}
    for log in (tmp_path / "mfctl.log", tmp_path / "state" / "mfctl.log"):  # MFCTL_LOG_FILE, and the state dir's
        if log.exists():
            files[str(log)] = log.read_bytes()
    files.update({str(p): p.read_bytes() for p in (run_dir / "logs").glob("*.log")})
    return files


def _exec_log(run_dir: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run_dir / "mock" / "exec.log").read_text().splitlines()]


def test_a_failed_sbatch_leaks_the_token_nowhere(tmp_path):
    """The mock cluster has one partition: sbatch refuses another, as Slurm does. The old
    error carried ``env MFCTL_RUN_TOKEN=…`` into summary.json, the journal, metrics.db, logs."""
    job = Job(load_playbook(_playbook(tmp_path, "slurm", runtime={"slurm": {"partition": "nosuch"}})),
              runs_dir=str(tmp_path / "runs"))
    watch = Watch(job)
    s = job.run()
    watch.done()
    token = job.token.encode()
    assert len(token) == 32
    assert s["exit_code"] == 1 and "Invalid partition name specified" in s["error"], s["error"]
    run = Path(s["run_dir"])
    records = _records(run, tmp_path)
    assert b"Invalid partition name specified" in records["summary.json"] + records["journal.jsonl"]
    assert [name for name, data in records.items() if token in data] == []
    assert "MFCTL_RUN_TOKEN_FILE=/" in s["error"]  # the command line names the file, not the token
    # what the hosts were given to run: no token in any command line, none in any live process
    sent = _exec_log(run)
    assert any("sbatch" in " ".join(e["argv"]) for e in sent)
    assert [e for e in sent if token.decode() in " ".join(e["argv"])] == []
    assert watch.argv == []
    # it went to a file beside the job output (written under umask 077), removed when the run ended
    path = s["error"].split("MFCTL_RUN_TOKEN_FILE=")[1].split()[0]
    assert Path(path).parent == run / "mock" / "home" / "mfctl-runs" and not Path(path).exists()
    assert any("umask 077" in " ".join(e["argv"]) and Path(path).name in " ".join(e["argv"]) for e in sent)
    assert set(watch.files.values()) <= {0o600}, watch.files


def test_a_run_passes_the_token_in_a_file_never_on_a_command_line(tmp_path):
    """torchrun over SSH: each host gets ``MFCTL_RUN_TOKEN_FILE`` (a 0600 file written from the
    command's stdin), the runtimes authenticate with it, and the files are gone afterwards."""
    job = Job(load_playbook(_playbook(tmp_path, "ssh")), runs_dir=str(tmp_path / "runs"))
    watch = Watch(job)
    s = job.run()
    watch.done()
    assert s["exit_code"] == 0, s["error"]
    token = job.token
    run = Path(s["run_dir"])
    sent = [" ".join(e["argv"]) for e in _exec_log(run)]
    launches = [c for c in sent if "torchrun" in c]
    assert len(launches) == 4 and all("MFCTL_RUN_TOKEN_FILE=/" in c and "MFCTL_RUN_TOKEN=" not in c for c in launches)
    assert sum("umask 077" in c and "cat >" in c for c in sent) == 4
    assert [c for c in sent if token in c] == [] and watch.argv == []
    assert [name for name, data in _records(run, tmp_path).items() if token.encode() in data] == []
    assert len(watch.files) == 4 and set(watch.files.values()) == {0o600}
    assert stat.S_IMODE((run / "mock" / "home" / ".mfctl").stat().st_mode) == 0o700
    assert not any(Path(p).exists() for p in watch.files)


def test_the_launch_shown_and_the_errors_built_carry_a_placeholder():
    from mfctl.runtime.render import redact, split_token

    argv, token = split_token(["env", "A=1", "MFCTL_RUN_TOKEN=s3cr3t-token", "torchrun", "x"])
    assert argv == ["env", "A=1", "torchrun", "x"] and token == "s3cr3t-token"
    assert redact("gpu01: env MFCTL_RUN_TOKEN=s3cr3t-token sbatch: exit 1", "s3cr3t-token", "") == \
        "gpu01: env MFCTL_RUN_TOKEN=<redacted> sbatch: exit 1"
    from mfctl.inventory import load_inventory

    pb = load_playbook(SHORT)
    script = render_slurm(pb, load_inventory(pb.inventory_path()), "127.0.0.1:1", "s3cr3t-token", "r1")
    assert "s3cr3t-token" not in script
    assert 'export MFCTL_RUN_TOKEN_FILE="${MFCTL_RUN_TOKEN_FILE:?set by mfctl}"' in script
    assert "MFCTL_RUN_TOKEN=" not in script


def test_version_settings_never_print_a_secret(cli_env):
    pw = "pa55-w0rd-never-shown"
    env = dict(cli_env, MFCTL_OCS_PASSWORD=pw)
    text = subprocess.run(mfctl_cmd("version", "--settings"), env=env, capture_output=True, text=True, check=True)
    js = subprocess.run(mfctl_cmd("version", "--settings", "--json"), env=env, capture_output=True, text=True, check=True)
    assert pw not in text.stdout + text.stderr + js.stdout + js.stderr
    (line,) = [ln for ln in text.stdout.splitlines() if "MFCTL_OCS_PASSWORD" in ln]
    assert "******** (set)" in line
    (row,) = [r for r in json.loads(js.stdout)["settings"] if r["name"] == "ocs_password"]
    assert row["value"] == "********" and row["secret"] is True and row["set"] is True
    state = next(r for r in json.loads(js.stdout)["settings"] if r["name"] == "state_dir")
    assert state["value"] == env["MFCTL_STATE_DIR"] and state["secret"] is False  # the rest is shown as it is
    env.pop("MFCTL_OCS_PASSWORD")
    unset = subprocess.run(mfctl_cmd("version", "--settings"), env=env, capture_output=True, text=True, check=True)
    (line,) = [ln for ln in unset.stdout.splitlines() if "MFCTL_OCS_PASSWORD" in ln]
    assert "(not set)" in line and "********" not in line


def test_a_secret_is_known_by_its_declaration_or_its_name():
    assert Setting("ocs_password", "", "").is_secret
    assert Setting("run_token", "", "").is_secret and Setting("api_key", "", "").is_secret
    assert Setting("client_secret", "", "").is_secret and Setting("opaque", "", "", secret=True).is_secret
    assert not Setting("host_key_policy", "", "").is_secret and not Setting("key_file", "", "").is_secret
    assert not Setting("state_dir", "", "").is_secret
