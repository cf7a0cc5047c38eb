"""profile and bench nccl take the one host selector (--hosts, as provision, firmware, health and exec);
progress on stderr: a bar with its ETA at a terminal, plain bounded lines otherwise, stdout the
--json object alone (issue 17 items 15 and 18)."""

import json
import os
import pty
import re
import select
import subprocess
import time

import pytest

from mfctl import mockctl
from support import PROTOTYPE, ROOT, mfctl_cmd

SPEC = ROOT / "playbooks" / "provision.yaml"


def _run(env, *args, timeout=120):
    return subprocess.run(mfctl_cmd(*args), capture_output=True, text=True, env=env, timeout=timeout,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("hosts, msg", [
    ("gpu09", "error: unknown host(s) gpu09; the inventory has gpu[01-04]\n"),
    ("gpu[1-2]", "error: unknown host(s) gpu[1-2] (did you mean gpu[01-02]? names are matched exactly, zero padding "
                 "included); the inventory has gpu[01-04]\n"),
    ("", "error: --hosts is empty (leave it out for all hosts)\n"),
    ("@region9", "error: unknown group @region9 in host set '@region9'; the groups are the inventory's regions: "
                 "@region0\n"),
    ("gpu01!gpu01", "error: host set 'gpu01!gpu01' names no host\n"),
])
def test_one_selector_one_error_in_profile_bench_and_provision(hosts, msg, cli_env):
    for cmd in (["profile", "-i", PROTOTYPE], ["bench", "nccl", "-i", PROTOTYPE],
                ["provision", "plan", SPEC, "-i", PROTOTYPE]):
        r = _run(cli_env, *cmd, "--hosts", hosts)
        assert (r.returncode, r.stderr) == (2, msg), cmd  # before any host is reached (the prototype's are not)


def test_the_hosts_option_reads_the_same_everywhere():
    import typer

    from mfctl.cli.app import build

    root = typer.main.get_command(build())

    def param(*path, name="hosts"):
        cmd = root
        for p in path:
            cmd = cmd.commands[p]
        return next((x for x in cmd.params if x.name == name), None)

    bench = param("bench", "nccl")
    assert bench.opts == ["--hosts"] and "gpu[01-04]!gpu02" in bench.help and "@region0" in bench.help
    assert bench.help == param("provision", "apply").help == param("firmware", "check").help == param("health").help
    assert bench.help.endswith("; default all.")
    prof = param("profile")
    assert prof.opts == ["--hosts"] and prof.help.startswith(bench.help.split(";")[0] + "; default: the inventory's first")
    assert param("profile", name="host").hidden is True


def test_bench_nccl_on_a_host_set_with_progress_lines_on_stderr_and_json_alone_on_stdout(mock_testbed, cli_env):
    inv = mock_testbed.inventory
    r = _run(cli_env | {"MFCTL_PROGRESS_INTERVAL": "0"}, "bench", "nccl", "-i", inv, "--hosts", "gpu[01-04]!gpu02",
             "--max-bytes", "64M", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # the object and nothing else
    assert doc["hosts"] == ["gpu01", "gpu03", "gpu04"] and doc["host"] == "gpu01" and len(doc["rows"]) == 7
    lines = r.stderr.splitlines()
    assert lines[0] == "preflight every host answers and shows its GPUs (0/3)"
    assert [ln.split(",")[0] for ln in lines[1:4]] == ["preflight 1/3 (33%)", "preflight 2/3 (67%)",
                                                         "preflight 3/3 (100%)"]
    assert lines[4] == "nccl-tests alltoall_perf 1M..64M (7 sizes) from gpu01 on 3 host(s) (0/1)"
    assert lines[5].startswith("nccl-tests 1/1 (100%), ") and " elapsed  gpu01" in lines[5] and len(lines) == 6
    r = _run(cli_env, "bench", "nccl", "-i", inv, "--hosts", "@region0", "--max-bytes", "4M", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["hosts"] == ["gpu01", "gpu02", "gpu03", "gpu04"]
    # the default interval (5 s): a quick phase says its start and its end, not every host
    assert [ln.split(",")[0] for ln in r.stderr.splitlines() if ln.startswith("preflight ")][1:] == \
        ["preflight 4/4 (100%)"]


def test_profile_on_a_host_set_and_the_old_host_option(mock_testbed, cli_env):
    inv = mock_testbed.inventory
    r = _run(cli_env, "profile", "-i", inv, "--hosts", "gpu[02-03]", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["hosts"] == ["gpu02", "gpu03"] and doc["host"] == "gpu[02-03]" and sorted(doc["per_host"]) == doc["hosts"]
    assert [f["task"] for f in doc["fits"]] == ["alltoall", "all_reduce", "gemm"]
    for i, f in enumerate(doc["fits"]):  # each task's slowest host's fit
        assert f["rate_per_s"] == min(doc["per_host"][h][i]["rate_per_s"] for h in doc["hosts"])
        assert f["host"] in doc["hosts"]
    steps = [ln for ln in r.stderr.splitlines() if re.match(r"gpu\d+ \[\d/3\] ", ln)]
    assert sorted(steps) == sorted(f"{h} [{i}/3] {w}" for h in ("gpu02", "gpu03") for i, w in
                                   [(1, "alltoall_perf 64K..1G"), (2, "all_reduce_perf 64K..1G"),
                                    (3, "GEMM sweep (hidden 4096, ffn 14336)")])
    r = _run(cli_env, "profile", "-i", inv, "--host", "gpu02", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["hosts"] == ["gpu02"]
    assert r.stderr.startswith("warning: --host is deprecated: use --hosts (a host set, as every command takes)\n")
    r = _run(cli_env, "profile", "-i", inv, "--host", "gpu02", "--hosts", "gpu01")
    assert (r.returncode, r.stderr) == (2, "error: --host is the old name of --hosts: give one of them\n")
    r = _run(cli_env, "profile", "-i", inv, "--json")  # default: the first host, as before
    assert json.loads(r.stdout)["hosts"] == ["gpu01"]


def _stderr_at_a_terminal(env, args, timeout=120):
    """Run mfctl with stderr on a pty (stdout a pipe): (rc, stdout, what the terminal got)."""
    m, s = pty.openpty()
    p = subprocess.Popen(mfctl_cmd(*args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=s, env=env,
                         close_fds=True)
    os.close(s)
    got, end = b"", time.monotonic() + timeout
    while time.monotonic() < end:
        r, _, _ = select.select([m], [], [], 0.1)
        if r:
            try:
                got += os.read(m, 65536)
            except OSError:
                break
        elif p.poll() is not None:
            break
    out = p.stdout.read().decode()
    p.wait(timeout=10)
    os.close(m)
    return p.returncode, out, re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", got.decode(errors="replace"))  # (styles)


def test_at_a_terminal_a_bar_with_an_eta_and_still_json_alone_on_stdout(mock_testbed, cli_env):
    rc, out, term = _stderr_at_a_terminal(cli_env, ["profile", "-i", mock_testbed.inventory, "--hosts", "all",
                                                    "--json"])
    assert rc == 0 and json.loads(out)["hosts"] == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert "profile 3 sweeps on each of gpu[01-04]" in term and "━" in term and "ETA" in term, term
    assert "0/4" in term and "gpu03 [2/3] all_reduce_perf 64K..1G" in term
    assert "profile 4/4 (100%)" not in term  # (that is the plain lines' form)
    rc, out, term = _stderr_at_a_terminal(cli_env, ["bench", "nccl", "-i", mock_testbed.inventory, "--max-bytes",
                                                    "4M"])
    assert rc == 0 and "peak bus bandwidth" in out and "\x1b[" not in out  # the table on stdout, unstyled in a pipe
    assert "preflight every host answers and shows its GPUs" in term and "nccl-tests alltoall_perf 1M..4M" in term
    assert "ETA" in term


def test_provision_apply_steps_and_counts_on_stderr_json_alone_on_stdout(tmp_path, cli_env):
    st = mockctl.start(PROTOTYPE, tmp_path / "mock", time_scale=100, factory=True)
    try:
        r = _run(cli_env | {"MFCTL_PROGRESS_INTERVAL": "3600"}, "provision", "apply", SPEC, "-i", st["inventory"],
                 "--hosts", "gpu[01-02]", "--yes", "--json", timeout=300)
    finally:
        mockctl.stop(tmp_path / "mock")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == "mfctl.provision.apply/v1" and [h["host"] for h in doc["hosts"]] == ["gpu01", "gpu02"]
    lines = r.stderr.splitlines()
    assert lines[0] == "apply (0/2)" and any(ln.startswith("gpu01 [1/") for ln in lines)
    n = {h["host"]: len(h["applied"]) for h in doc["hosts"]}
    assert sum(1 for ln in lines if ln.startswith("gpu02 [")) >= n["gpu02"] > 5  # one line per step
    counts = [ln for ln in lines if ln.startswith("apply ") and "(0/2)" not in ln]
    assert len(counts) == 1 and counts[0].startswith("apply 2/2 (100%), ")  # at most one per hour, and the end
    assert "verify (0/2)" in lines and any(ln.startswith("verify 2/2 (100%)") for ln in lines)
