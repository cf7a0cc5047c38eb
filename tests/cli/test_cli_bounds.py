"""Bounded everything (issue 13, item 9): a host's output is capped per stream and the cap is
marked; YAML/JSON files are refused when too large, recursive or exploding; user-supplied text is
printed as it is (never read as rich markup) and escaped in the HTML report."""

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import paramiko
import pytest
import yaml

from mfctl.errors import ConfigError, OperationFailed
from mfctl.mock.sshd import MockSSHServer
from mfctl.transport.ssh import SSHPool, SSHTarget
from support import DATA, PROTOTYPE, mfctl_cmd

MiB = 1 << 20


#: forks and execs argv[2:], waits for it and writes "RC MAXRSS_KIB" to the file argv[1]. Linux carries the
#: pre-exec address space's high-water mark into a process's ru_maxrss, and a child forked from the pytest
#: worker starts with the worker's RSS (hundreds of MB once a module imported torch): measured through this
#: small launcher, the peak is the command's own
_LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, ru = os.wait4(pid, 0)
open(sys.argv[1], "w").write(f"{os.waitstatus_to_exitcode(status)} {ru.ru_maxrss}")
"""


def _peak_rss_mb(argv, env, stdout_path: Path, timeout: float = 120) -> tuple[int, float]:
    """Run argv with stdout to a file; its exit code and its own peak RSS (MB: wait4's rusage of
    that command alone, forked from a small launcher: not this test process's, nor the mock's)."""
    report = stdout_path.with_suffix(".rusage")
    with open(stdout_path, "wb") as out:
        subprocess.run([sys.executable, "-c", _LAUNCHER, str(report), *map(str, argv)], stdout=out,
                       stderr=subprocess.PIPE, env=env, timeout=timeout, check=True)
    rc, kib = report.read_text().split()
    return int(rc), int(kib) / 1024  # (Linux: KiB)


# --- (a) host output -----------------------------------------------------------------------------

def test_output_is_capped_per_stream_drained_to_the_real_exit_status_and_marked(tmp_path):
    hk, ck = paramiko.ECDSAKey.generate(bits=256), paramiko.ECDSAKey.generate(bits=256)
    kf = tmp_path / "id"
    ck.write_private_key_file(str(kf))

    def on_exec(cmd, chan):  # both RC: 4 MiB on each stream, interleaved, then exit RC
        argv = shlex.split(cmd)
        if argv[0] == "both":
            for _ in range(64):
                chan.sendall_stderr(b"e" * 65536)
                chan.sendall(b"o" * 65536)
            return int(argv[1])
        return 127

    srv = MockSSHServer("h", hk, users={"ops"}, authorized_keys=[ck], on_exec=on_exec)
    kh = tmp_path / "kh"
    kh.write_text(f"[127.0.0.1]:{srv.port} {hk.get_name()} {hk.get_base64()}\n")
    t = SSHTarget(name="h", address="127.0.0.1", port=srv.port, user="ops", key_file=str(kf), agent=False,
                  known_hosts=str(kh))
    try:
        with SSHPool([t], command_timeout=20, max_output_bytes=MiB) as pool:
            r = pool.run("h", ["both", "3"])
            assert (r.rc, r.error) == (3, None)  # drained to its end: the command's own exit status
            assert (len(r.stdout), len(r.stderr)) == (MiB, MiB) and set(r.stdout) == {"o"} and set(r.stderr) == {"e"}
            assert (r.stdout_dropped, r.stderr_dropped, r.truncated) == (3 * MiB, 3 * MiB, True)
            d = r.to_dict()
            assert (d["truncated"], d["stdout_dropped_bytes"], d["stderr_dropped_bytes"]) == (True, 3 * MiB, 3 * MiB)
            with pytest.raises(OperationFailed, match="output longer than 1048576 bytes.*MFCTL_MAX_OUTPUT_BYTES"):
                pool.run_checked("h", ["both", "0"])
        with SSHPool([t], command_timeout=20, max_output_bytes=4 * MiB) as pool:  # exactly the cap: all of it
            r = pool.run("h", ["both", "0"])
            assert (len(r.stdout), r.stdout_dropped, r.truncated) == (4 * MiB, 0, False)
    finally:
        srv.close()


@pytest.fixture
def mock_inv(mock_testbed, cli_env, monkeypatch):
    """The session's mock (these tests only read from it)."""
    monkeypatch.setenv("MFCTL_STATE_DIR", cli_env["MFCTL_STATE_DIR"])
    return mock_testbed.inventory


def test_exec_of_a_huge_output_stays_small_in_memory_and_says_it_truncated(mock_inv, cli_env, tmp_path):
    """48 MiB from a host with a 64 KiB cap: before the cap, ``mfctl exec --json`` grew to ~1.2 GB
    (200 MiB took 5.2 GB); with it, the process stays near its ~45 MB baseline while it runs."""
    env = {**cli_env, "MFCTL_MAX_OUTPUT_BYTES": "65536"}
    rc, peak = _peak_rss_mb(mfctl_cmd("exec", "--json", "-i", mock_inv, "gpu01", "--", "head", "-c", "48M", "/dev/zero"),
                            env, tmp_path / "out.json")
    assert tmp_path.joinpath("out.json").stat().st_size < 2 * MiB
    out = json.loads(tmp_path.joinpath("out.json").read_text())
    assert rc == 0 and peak < 150, (rc, peak)
    (res,) = out["results"]
    assert (res["rc"], len(res["stdout"]), res["truncated"], res["stdout_dropped_bytes"]) == (0, 65536, True, 48 * MiB - 65536)
    assert out["folded"][0]["truncated"] is True and out["folded"][0]["stdout_dropped_bytes"] == 48 * MiB - 65536
    # the human view: the hosts' output, then the mark (hosts truncated alike fold together)
    r = subprocess.run(mfctl_cmd("exec", "-i", mock_inv, "gpu[01-02]", "--", "head", "-c", "100000", "/dev/zero"),
                       capture_output=True, env=env, timeout=60)
    lines = r.stdout.split(b"\n")
    assert r.returncode == 0 and lines[0] == b"---- gpu[01-02] (rc=0) ----" and lines[1] == bytes(65536)
    assert lines[2] == (b"[output truncated after 65536 bytes: 34464 more bytes of stdout dropped "
                        b"(MFCTL_MAX_OUTPUT_BYTES)]")
    r = subprocess.run(mfctl_cmd("exec", "-i", mock_inv, "gpu01", "--", "true"), capture_output=True, text=True,
                       env={**cli_env, "MFCTL_MAX_OUTPUT_BYTES": "lots"}, timeout=60)
    assert r.returncode == 2 and "MFCTL_MAX_OUTPUT_BYTES='lots': expected a number from 1 to" in r.stderr
    r = subprocess.run(mfctl_cmd("version", "--settings", "--json"), capture_output=True, text=True, env=cli_env)
    assert "MFCTL_MAX_OUTPUT_BYTES" in r.stdout and "4194304" in r.stdout


# --- (b) configuration files ---------------------------------------------------------------------

def _validate(path, env):
    return subprocess.run(mfctl_cmd("inventory", "validate", path), capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.usefixtures("yaml_loader")
def test_recursive_and_exploding_yaml_are_config_errors_naming_file_and_line(tmp_path, cli_env):
    rec = tmp_path / "rec.yaml"
    rec.write_text("name: x\nhosts:\n  - &h {name: a, nics: [*h]}\n")
    r = _validate(rec, cli_env)
    assert r.returncode == 3 and "Traceback" not in r.stderr
    assert f"{rec}:3: hosts[0].nics[0]: a YAML alias refers to a list or mapping that contains it" in r.stderr
    laughs = tmp_path / "laughs.yaml"
    laughs.write_text('a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
        f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")))
    t0 = time.monotonic()
    r = _validate(laughs, cli_env)
    # (the file's line 6, f: the first whose aliases take the expansion past 200,000 nodes)
    assert r.returncode == 3 and f"{laughs}:6: document too large: its YAML aliases expand to more than 200000 " \
        "nodes" in r.stderr, r.stderr
    assert time.monotonic() - t0 < 30  # expanded, it would take minutes and GBs
    # every loader goes through the same code: topology files (ocs apply), playbooks, recipes
    from mfctl.inventory.loader import load_yaml_with_lines
    from mfctl.provision.models import load_spec
    from mfctl.runtime.playbook import load_playbook

    top = tmp_path / "top.yaml"
    top.write_text("cross_connects: &x [[1, 17], *x]\n")
    for load in (load_yaml_with_lines, load_playbook, load_spec):
        with pytest.raises(ConfigError, match=r"top\.yaml:1: cross_connects\[1\]: a YAML alias refers"):
            load(top)
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 500 + "]" * 500 + "\n")
    with pytest.raises(ConfigError, match="deep.yaml:1: nested more than 100 levels deep"):
        load_yaml_with_lines(deep)
    key = tmp_path / "key.yaml"
    key.write_text("a: &k [1, 2]\nb: {*k : 1}\n")
    with pytest.raises(ConfigError, match="key.yaml:2: b: a key must be a plain value, not a sequence"):
        load_yaml_with_lines(key)


def test_the_32768_gpu_inventory_validates_its_own_nodes_are_not_bounded_only_aliases_are(tmp_path, cli_env):
    """Issue 22: inventory/gen_scale.py's 32,768-GPU inventory (4,096 hosts, 32 OCSes: ~4 MB, ~280,000
    YAML nodes) was refused by a bound of 200,000 nodes on every file. The file's own nodes are
    bounded by the 16 MiB size cap; only what aliases add is counted (the billion laughs above)."""
    import importlib.util

    from support import ROOT

    spec = importlib.util.spec_from_file_location("gen_scale", ROOT / "inventory" / "gen_scale.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    import gc

    doc = gen.inventory(4096, 8, 32, "mfabric-32768")
    inv = tmp_path / "mfabric-32768.yaml"
    gc.disable()  # (~1.5 million tracked objects made by the dump: the collector's passes over them cost 1/3 of it)
    try:
        text = yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False,
                         default_flow_style=None, width=140)
    finally:
        gc.enable()
    inv.write_text(text)
    assert 3 << 20 < inv.stat().st_size < 16 << 20
    r = subprocess.run(mfctl_cmd("inventory", "validate", inv, "--json"), capture_output=True, text=True,
                       env=cli_env, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["valid"] is True and out["hosts"] == 4096 and out["gpus"] == 32768, out
    assert len({h["ssh"]["address"] for h in doc["hosts"]}) == 4096  # (every host an address of its own)
    assert out["ocs"] == "32 x Polatis Series 7000 384x384" and len(out["regions"]) == 512


@pytest.mark.usefixtures("yaml_loader")
def test_a_huge_file_is_refused_before_it_is_read(tmp_path, cli_env):
    big = tmp_path / "big.yaml"
    with open(big, "wb") as f:
        f.truncate(300 * MiB)  # sparse: no disk, but reading it costs 300 MB (and its parse much more)
    rc, peak = _peak_rss_mb(mfctl_cmd("inventory", "validate", big), cli_env, tmp_path / "out")
    # ~35-125 MB with its imports; it used to peak at ~650 MB (1.8 GB for a real 300 MB YAML)
    assert rc == 3 and peak < 200, (rc, peak)
    r = _validate(big, cli_env)
    assert f"{big}: file too large (314572800 bytes; a configuration file may have at most 16 MiB)" in r.stderr
    from mfctl.fabric.matrixio import _load_array
    from mfctl.inventory.files import read_config

    with pytest.raises(ConfigError, match="more than 16777216 bytes"):
        read_config("/dev/zero")  # no size to go by: the read stops one byte past the limit
    csv = tmp_path / "big.csv"
    os.link(big, csv)
    with pytest.raises(ConfigError, match="file too large"):
        _load_array(csv)  # traffic matrices too
    js = tmp_path / "deep.json"
    js.write_text('{"matrix": ' + "[" * 100000 + "]" * 100000 + "}")
    with pytest.raises(ConfigError, match="deep.json: not a matrix: arrays nested too deeply"):
        _load_array(js)


# --- (c) user text is printed as it is -----------------------------------------------------------

def test_markup_fills_mfctls_templates_with_plain_text():
    from mfctl.cli.common import markup

    for v in ["[/x]", "[bold]x", "a\\", "C:\\dir\\", "\\[/x]", "[/data/ckpt/iter_0000100]", ":smile:", ""]:
        t = markup("[cyan]{:>8}[/] <{}>{x!r}", v, v, x=v)
        assert t.plain == f"{v:>8} <{v}>{v!r}"
        assert [(s.start, s.end, s.style) for s in t.spans] == [(0, len(f"{v:>8}"), "cyan")]


def test_a_run_whose_names_and_log_lines_look_like_markup_prints_them_as_they_are(tmp_path, cli_env):
    name = "[/x] [bold]x <script>alert(1)</script>"
    doc = yaml.safe_load((DATA / "playbooks" / "short.yaml").read_text())
    doc["name"] = name
    doc["model"]["name"] = "[/data/ckpt/iter_0000100]"  # in the runtime's first log line, on every host
    doc["training"]["iterations"] = 4
    doc["inventory"] = str(PROTOTYPE)
    pb = tmp_path / "pb.yaml"
    pb.write_text(yaml.safe_dump(doc))
    r = subprocess.run(mfctl_cmd("run", pb, "--logs"), capture_output=True, text=True, env=cli_env, timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert f"— {name} on " in r.stdout and ": ok" in r.stdout
    for h in ("gpu01", "gpu02", "gpu03", "gpu04"):  # every host's log thread lived to print its lines
        assert f"[{h}] > mfctl simulated runtime on {h}: [/data/ckpt/iter_0000100] EP=8" in r.stderr
        assert f"[{h}]  [" in r.stderr and "iteration        4/       4" in r.stderr
    ls = subprocess.run(mfctl_cmd("runs", "list"), capture_output=True, text=True, env=cli_env, timeout=60)
    assert ls.returncode == 0 and f"│ {name} │ ok " in ls.stdout
    show = subprocess.run(mfctl_cmd("runs", "show", "latest"), capture_output=True, text=True, env=cli_env, timeout=60)
    assert show.returncode == 0 and f"— {name} on " in show.stdout
    rep = subprocess.run(mfctl_cmd("runs", "report", "latest"), capture_output=True, text=True, env=cli_env, timeout=120)
    html = Path(rep.stdout.strip().splitlines()[-1]).read_text()
    assert rep.returncode == 0 and "<script>alert" not in html
    assert "<td>[/x] [bold]x &lt;script&gt;alert(1)&lt;/script&gt;</td>" in html


def test_control_characters_from_users_never_reach_the_terminal(capsys):
    """An ESC sequence in a name (a playbook, a host's log line) is shown, not obeyed: in plain
    prints, table cells, mfctl's own markup templates and one-line errors."""
    from rich.table import Table

    from mfctl.cli.common import markup, out_console, print_error

    evil = "run\x1b]0;pwned\x07\x1b[2J\x9b31m"
    con = out_console()
    t = Table("playbook")
    t.add_row(evil)
    con.print(t)
    con.print(evil)
    con.print(markup("[bold]{}[/]", evil))
    print_error(evil)
    out, err = capsys.readouterr()
    for text in (out, err):
        assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text
    assert out.count("run\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m") == 3 and "\\x1b]0;pwned" in err
