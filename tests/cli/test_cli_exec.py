"""mfctl exec connects while its CLI loads (mfctl.cli.ahead, SSHPool.start_many): the command line
read ahead agrees with Typer's, a batch is used only for exactly the command it was started for,
and a batch that is cancelled, mismatched or never run leaves nothing open."""

import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from mfctl import mockctl
from mfctl.cli import ahead
from mfctl.cli.app import build
from mfctl.inventory import load_inventory
from mfctl.inventory.data import load_inventory_data
from mfctl.transport.ssh import SSHPool, SSHTarget, targets_from_inventory
from support import PROTOTYPE, mfctl_cmd, wait_until


@pytest.mark.parametrize("args, want", [
    (["-i", "inv.yaml", "all", "--", "hostname"], {"inventory": "inv.yaml", "hosts": "all"}),
    (["all", "--inventory=inv.yaml", "--fanout", "8", "--", "echo", "--json"],
     {"inventory": "inv.yaml", "hosts": "all", "fanout": "8"}),
    (["-iinv.yaml", "--json", "gpu[01-02]", "--connect-timeout=2.5", "--timeout", "9", "--", "x"],
     {"inventory": "inv.yaml", "hosts": "gpu[01-02]", "connect_timeout": "2.5", "timeout": "9"}),
    (["-i", "a.yaml", "-i", "b.yaml", "all", "--", "x"], {"inventory": "b.yaml", "hosts": "all"}),  # the last wins, as in click
    (["-i", "inv.yaml", "all", "hostname"], None),  # no `--`: the parser decides what is a command word
    (["-i", "inv.yaml", "all", "--"], None),  # no command
    (["-i", "inv.yaml", "--help", "all", "--", "x"], None),
    (["-i", "inv.yaml", "-h", "all", "--", "x"], None),
    (["-i", "inv.yaml", "--fanout-x", "3", "all", "--", "x"], None),  # an option it does not know
    (["-i", "inv.yaml", "all", "gpu01", "--", "x"], None),  # a second positional word
    (["all", "--", "x"], None),  # no inventory (and none in the environment)
    (["-i", "inv.yaml", "--", "x"], None),  # no host set
    (["-i", "inv.yaml", "all", "--timeout"], None),
])
def test_read_argv(args, want, monkeypatch):
    for v in ("MFCTL_INVENTORY", "MFCTL_FANOUT", "MFCTL_CONNECT_TIMEOUT"):
        monkeypatch.delenv(v, raising=False)
    assert ahead.read_argv(args) == want


def test_read_argv_takes_the_environment_like_the_parser(monkeypatch):
    monkeypatch.setenv("MFCTL_INVENTORY", "env.yaml")
    monkeypatch.setenv("MFCTL_FANOUT", "4")
    assert ahead.read_argv(["all", "--", "x"]) == {"inventory": "env.yaml", "hosts": "all", "fanout": "4"}
    assert ahead.read_argv(["-i", "cli.yaml", "all", "--", "x"])["inventory"] == "cli.yaml"
    monkeypatch.setenv("MFCTL_JSON", "yes")
    assert ahead.read_argv(["all", "--", "x"]) is not None


@pytest.mark.parametrize("args, env", [
    (["--fanout", "\u0664", "all", "--", "x"], {}),  # Arabic-Indic 4: int() takes it, the parser does not
    (["--timeout", "1e3", "all", "--", "x"], {}),
    (["all", "--", "x"], {"MFCTL_COMMAND_TIMEOUT": "30s"}),
    (["all", "--", "x"], {"MFCTL_FANOUT": "four"}),
    (["all", "--", "x"], {"MFCTL_JSON": "maybe"}),
])
def test_read_argv_gives_up_on_values_the_parser_refuses(args, env, monkeypatch):
    monkeypatch.setenv("MFCTL_INVENTORY", "inv.yaml")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert ahead.read_argv(args) is None


def test_exec_and_the_reading_ahead_are_built_from_one_declaration():
    """exec's Typer options and read_argv's grammar both come from ahead.OPTIONS (flags) and the
    settings (variable, type, limits): the parser's options, variables and ranges are exactly those."""
    from typer.main import get_command

    from mfctl.settings import SETTINGS

    exec_cmd = get_command(build("exec")).commands["exec"]
    params = {p.name: p for p in exec_cmd.params if p.param_type_name == "option" and p.name != "help"}
    assert set(params) == set(ahead.OPTIONS)
    valued, flags = ahead._grammar()
    assert {o for p in params.values() for o in p.opts} == set(valued) | flags
    for name, (setting, words) in ahead.OPTIONS.items():
        s, p = SETTINGS[setting], params[name]
        assert (tuple(sorted(p.opts)), p.envvar) == (tuple(sorted(words)), s.env)
        assert p.is_flag == (s.type is bool) and all(valued.get(w) == name for w in words if not p.is_flag)
        if s.type is int:
            assert (p.min, p.max) == (s.min, s.max)
        elif s.type is float:  # checked by a callback (nan: "not a number"): mfctl.cli.common.option
            assert p.callback.limits == (s.min, s.max)
    assert {p.name for p in exec_cmd.params if p.param_type_name == "argument"} == {"hosts", "command"}


def test_read_argv_gives_up_where_the_settings_limits_end(monkeypatch):
    from mfctl.settings import SETTINGS

    monkeypatch.setenv("MFCTL_INVENTORY", "inv.yaml")
    top = int(SETTINGS["fanout"].max)
    assert ahead.read_argv(["--fanout", str(top), "all", "--", "x"])["fanout"] == str(top)
    assert ahead.read_argv(["--fanout", str(top + 1), "all", "--", "x"]) is None
    assert ahead.read_argv(["--fanout", "0", "all", "--", "x"]) is None
    low = SETTINGS["connect_timeout"].min
    assert ahead.read_argv(["--connect-timeout", f"{low:g}", "all", "--", "x"]) is not None
    assert ahead.read_argv(["--timeout", "86401", "all", "--", "x"]) is None


@pytest.fixture
def mock_inv(mock_testbed, monkeypatch):
    """The session's mock (these tests only run read-only commands on it)."""
    monkeypatch.setenv("MFCTL_FANOUT", "2")
    yield mock_testbed.inventory
    ahead.cancel()


def _exec_in_process(args, capsys, start=True):
    """``mfctl exec ARGS`` in this process, as mfctl.cli.main runs it; returns (exit code, stdout, taken?)."""
    taken = {}
    real_take = ahead.take

    def spy(key):
        batch = real_take(key)
        taken["batch"] = batch
        return batch

    ahead.take, code = spy, None
    try:
        if start:
            ahead.start(args)
        build("exec")(["exec", *args])
    except SystemExit as e:
        code = e.code
    finally:
        ahead.take = real_take
        ahead.cancel()
    return code, capsys.readouterr().out, taken.get("batch") is not None


@pytest.mark.parametrize("form", [
    lambda inv: ["-i", inv, "all", "--", "hostname"],
    lambda inv: ["all", "--json", f"--inventory={inv}", "--fanout=2", "--", "hostname"],
    lambda inv: [f"-i{inv}", "@region0", "--connect-timeout", "5", "--", "hostname"],
    lambda inv: ["-i", os.path.relpath(inv), "gpu[01-04]!gpu02", "--timeout", "20", "--", "hostname"],
])
def test_every_form_the_parser_accepts_uses_the_connections_made_ahead(mock_inv, capsys, form):
    code, out, taken = _exec_in_process(form(mock_inv), capsys)
    assert code == 0 and taken
    assert "gpu01" in out and "gpu03" in out


def test_a_batch_for_another_command_is_not_used_and_the_result_is_the_same(mock_inv, capsys):
    ahead.start(["-i", mock_inv, "gpu01", "--", "hostname"])  # e.g. the command line was read wrongly
    pending = ahead._pending[1]
    code, out, taken = _exec_in_process(["-i", mock_inv, "gpu02", "--", "hostname"], capsys, start=False)
    assert pending._cancelled and not pending.pool._exec  # cancelled, its session closed
    assert code == 0 and not taken and out.split() == ["----", "gpu02", "(rc=0)", "----", "gpu02"]


def test_no_connection_ahead_for_accept_new_or_an_inventory_that_does_not_load(mock_inv, tmp_path):
    doc = Path(mock_inv).read_text()  # (absolute paths: it works from anywhere)
    relaxed = tmp_path / "relaxed.yaml"
    relaxed.write_text(doc.replace("host_key_policy: strict", "host_key_policy: accept-new"))
    ahead.start(["-i", str(relaxed), "all", "--", "hostname"])
    assert ahead._pending is None  # it would write known_hosts before the parser has accepted the line
    for bad in (tmp_path / "missing.yaml", PROTOTYPE.parent / "nosuch.yaml"):
        ahead.start(["-i", str(bad), "all", "--", "x"])
        assert ahead._pending is None
    ahead.start(["-i", mock_inv, "gpu99", "--", "x"])  # unknown host: the parser's run says so
    assert ahead._pending is None


def test_a_line_the_parser_refuses_closes_what_was_opened(mock_inv, monkeypatch, capsys):
    # should the reading ahead ever accept a line that the parser refuses, main() still cancels the batch
    from mfctl.cli import main as cli_main

    started = []
    real = SSHPool.start_many
    monkeypatch.setattr(SSHPool, "start_many", lambda self, *a, **k: started.append(real(self, *a, **k)) or started[-1])
    monkeypatch.setattr(ahead, "read_argv", lambda args: {"inventory": mock_inv, "hosts": "all"})
    monkeypatch.setattr("sys.argv", ["mfctl", "exec", "-i", mock_inv, "--bogus", "all", "--", "hostname"])
    with pytest.raises(SystemExit) as e:
        cli_main.main()
    assert e.value.code == 2 and "--bogus" in capsys.readouterr().err
    assert len(started) == 1 and started[0]._cancelled and not started[0].pool._exec and ahead._pending is None


def test_exec_through_the_console_script_path(mock_inv, cli_env):
    r = subprocess.run(mfctl_cmd("exec", "-i", mock_inv, "--json", "all", "--", "hostname"),
                       capture_output=True, text=True, env=dict(cli_env, MFCTL_FANOUT="2"), timeout=60)
    assert r.returncode == 0 and r.stdout.count('"rc": 0') == 4 + 4  # per host, and per folded group


class _CountingServer:
    """A TCP server on 127.0.0.1 that counts connections and closes each at once (not SSH)."""

    hold = False  # keep each connection open without a word (a hung sshd) instead of closing it

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted, self.held = 0, []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self.held.append(c) if self.hold else c.close()


def test_a_connection_that_fails_ahead_is_reported_once_not_tried_again(tmp_path):
    srv = _CountingServer()
    target = SSHTarget(name="h1", address="127.0.0.1", port=srv.port, user="ops", agent=False,
                       known_hosts=str(tmp_path / "kh"))
    pool = SSHPool([target], connect_timeout=2)
    batch = pool.start_many(["h1"], close=True)
    wait_until(lambda: srv.accepted == 1, what="the worker's connection")  # it has tried by now
    res = batch.run(lambda h: ["true"])
    assert srv.accepted == 1 and res[0].error and "closed the connection" in res[0].error
    assert pool.run_many(["h1"], lambda h: ["true"])[0].error == res[0].error  # same words without a batch
    assert srv.accepted == 2
    srv.sock.close()


def test_batch_cancel_and_wait_limit(mock_inv):
    inv = load_inventory(mock_inv)
    names = [h.name for h in inv.hosts]
    with SSHPool(targets_from_inventory(inv), fanout=2) as pool:
        b = pool.start_many(names, close=True)
        b.cancel()
        for t in b._workers.threads:
            t.join(5)
        assert not pool._exec and not pool._failed and not any(t.is_alive() for t in b._workers.threads)
        with pytest.raises(RuntimeError):
            b.run(lambda h: ["hostname"])
        # never run in time: the first hosts' sessions are closed after the wait limit, and a late run
        # connects them again
        from mfctl.transport.ssh import Batch

        late = Batch(pool, names, close=True, wait_limit_s=0.3)
        for t in late._workers.threads:
            t.join(5)  # the workers end after the wait limit: no thread, no session left
        assert not pool._exec and not any(t.is_alive() for t in late._workers.threads)
        res = late.run(lambda h: ["hostname"])
        assert [r.stdout.strip() for r in res] == names and all(r.ok for r in res)


def test_inventory_data_is_the_validated_inventory_from_cache_or_file(tmp_path):
    from mfctl.inventory import cache

    inv = tmp_path / "inv.yaml"
    inv.write_text(PROTOTYPE.read_text().replace("known_hosts: ~/.ssh/known_hosts", "known_hosts: kh/known_hosts").replace(
        "user: mfabric, agent: true}", "user: mfabric, agent: false, key_file: keys/id}", 1))
    first = load_inventory_data(inv)  # a miss: parsed, validated and stored
    assert cache.entry(inv.read_bytes()) is not None
    assert load_inventory_data(inv) == first == load_inventory(inv).model_dump(mode="json")
    # the targets come out the same either way; relative paths are the inventory's folder's
    from mfctl.transport.ssh import targets_from_data

    model_targets = targets_from_inventory(load_inventory(inv))
    assert targets_from_data(first, inv.parent) == model_targets
    assert model_targets[0].known_hosts == str(tmp_path / "kh" / "known_hosts")
    assert model_targets[0].key_file == str(tmp_path / "keys" / "id") and not model_targets[0].agent
    assert model_targets[1].key_file is None and model_targets[1].agent
    # a home that does not exist is the host's own failure later (a named key file it cannot read), not a crash here
    odd = dict(first, hosts=[dict(first["hosts"][0], ssh=dict(first["hosts"][0]["ssh"], key_file="~nosuchuser99/id"))])
    assert targets_from_data(odd, inv.parent)[0].key_file == str(tmp_path / "~nosuchuser99" / "id")


class _SilentServer(_CountingServer):
    """Accepts TCP connections and never says a word (a hung sshd)."""

    hold = True


def test_cancel_does_not_wait_for_a_handshake_under_way(tmp_path):
    srv = _SilentServer()
    target = SSHTarget(name="h1", address="127.0.0.1", port=srv.port, user="ops", agent=False,
                       known_hosts=str(tmp_path / "kh"))
    pool = SSHPool([target], connect_timeout=3)
    b = pool.start_many(["h1"])
    time.sleep(0.2)
    t = time.monotonic()
    b.cancel()
    assert time.monotonic() - t < 0.5
    b._workers.threads[0].join(10)  # the worker ends when its handshake times out, and keeps nothing
    assert not b._workers.threads[0].is_alive() and not pool._exec and not pool._failed
    srv.sock.close()


@pytest.fixture
def echo_server(tmp_path):
    """One mock sshd that many host names point at; it records the commands it runs."""
    import paramiko

    from mfctl.mock.sshd import MockSSHServer

    hk, ck = paramiko.ECDSAKey.generate(bits=256), paramiko.ECDSAKey.generate(bits=256)
    ck.write_private_key_file(str(tmp_path / "id"))
    seen = []

    def on_exec(cmd, chan):
        seen.append(cmd)
        time.sleep(float(cmd.split()[1]) if cmd.startswith("sleep ") else 0.2)
        return 0

    srv = MockSSHServer("h", hk, users={"ops"}, authorized_keys=[ck], on_exec=on_exec)
    (tmp_path / "kh").write_text(f"[127.0.0.1]:{srv.port} {hk.get_name()} {hk.get_base64()}\n")
    targets = [SSHTarget(name=f"h{i:02d}", address="127.0.0.1", port=srv.port, user="ops", key_file=str(tmp_path / "id"),
                         agent=False, known_hosts=str(tmp_path / "kh")) for i in range(20)]
    yield targets, seen
    srv.close()


def test_a_failure_in_on_done_stops_the_rollout(echo_server):
    targets, seen = echo_server

    def boom(r):
        raise ValueError(f"stop at {r.host}")

    with SSHPool(targets, fanout=2) as pool, pytest.raises(ValueError, match="stop at"):
        pool.run_many([t.name for t in targets], lambda h: ["true"], on_done=boom)
    assert 1 <= len(seen) <= 3  # the commands under way end; no other host gets it


def test_ctrl_c_stops_the_rollout_at_once(echo_server):
    import signal

    targets, seen = echo_server
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()  # a real signal, as a terminal sends
    t = time.monotonic()
    with SSHPool(targets, fanout=2) as pool, pytest.raises(KeyboardInterrupt):
        pool.run_many([t.name for t in targets], lambda h: ["true"])
    assert time.monotonic() - t < 1.5
    n = len(seen)
    time.sleep(0.6)
    assert n < 20 and len(seen) <= n + 2  # at most the commands already under way


def test_the_console_script_runs_exec(mock_inv, cli_env):
    import shutil
    import sys

    script = shutil.which("mfctl", path=os.path.dirname(sys.executable))
    if script is None:
        pytest.skip("mfctl is not installed as a console script in this interpreter's environment")
    r = subprocess.run([script, "exec", "-i", mock_inv, "gpu[01-02]", "--", "hostname"], capture_output=True, text=True,
                       env=cli_env, timeout=60)
    assert r.returncode == 0 and r.stdout.split() == ["----", "gpu01", "(rc=0)", "----", "gpu01",
                                                       "----", "gpu02", "(rc=0)", "----", "gpu02"]


def test_ctrl_c_on_exec_exits_130_at_once(tmp_path, cli_env):
    import signal

    inv = mockctl.start(PROTOTYPE, tmp_path / "mock", time_scale=1)["inventory"]  # real time: sleep 30 takes 30 s
    try:
        p = subprocess.Popen(mfctl_cmd("exec", "-i", inv, "all", "--", "sleep", "30.5"), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=cli_env)
        time.sleep(1.5)
        t = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
        assert p.returncode == 130 and "interrupted" in err and time.monotonic() - t < 3
    finally:
        mockctl.stop(tmp_path / "mock")


def test_hosts_down_the_same_way_fold_into_one_line(tmp_path, cli_env):
    inv = mockctl.start(PROTOTYPE, tmp_path / "mock", time_scale=100,
                        inject=["gpu01:ssh=refuse", "gpu02:ssh=refuse", "gpu04:ssh=refuse"])["inventory"]
    try:
        r = subprocess.run(mfctl_cmd("exec", "-i", inv, "all", "--", "hostname"), capture_output=True, text=True,
                           env=cli_env, timeout=60)
        lines = r.stdout.splitlines()
        assert r.returncode == 4 and lines[0].startswith("---- gpu[01-02,04] (error: SSH to <address>:<port> failed: ")
        assert lines[1:] == ["---- gpu03 (rc=0) ----", "gpu03"]
        r = subprocess.run(mfctl_cmd("exec", "-i", inv, "--json", "gpu01", "--", "hostname"), capture_output=True,
                           text=True, env=cli_env, timeout=60)
        doc = json.loads(r.stdout)  # one host: its own address, in the message and as data
        [res], [folded] = doc["results"], doc["folded"]
        assert res["endpoint"].startswith("127.0.0.1:") and res["endpoint"] in res["error"] == folded["error"]
        r = subprocess.run(mfctl_cmd("health", "-i", inv, "--json", "--no-ocs"), capture_output=True, text=True,
                           env=cli_env, timeout=60)
        down = [f for t in json.loads(r.stdout)["targets"] for f in t["findings"] if f["code"] == "ssh.unreachable"]
        assert len(down) == 3 and all(f["value"] in f["message"] and f["value"].startswith("127.0.0.1:") for f in down)
        r = subprocess.run(mfctl_cmd("health", "-i", inv, "--no-ocs"), capture_output=True, text=True, env=cli_env,
                           timeout=60)  # the table folds them, without their addresses
        row = next(ln for ln in r.stdout.splitlines() if "gpu[01-02,04]" in ln)
        assert "SSH to <address>:<port> failed" in row and "127.0.0.1" not in r.stdout
        r = subprocess.run(mfctl_cmd("health", "-i", inv, "--no-ocs", "--hosts", "gpu01"), capture_output=True,
                           text=True, env=cli_env, timeout=60)  # one host: its own address
        assert "SSH to 127.0.0.1:" in r.stdout
    finally:
        mockctl.stop(tmp_path / "mock")


def test_ctrl_c_in_one_batch_leaves_another_on_the_same_pool_alone(echo_server):
    import signal

    targets, seen = echo_server
    names = [t.name for t in targets]
    other = {}
    with SSHPool(targets, fanout=2) as pool:
        t = threading.Thread(target=lambda: other.setdefault("res", pool.run_many(names[10:14], lambda h: ["true"])))
        t.start()
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        with pytest.raises(KeyboardInterrupt):
            pool.run_many(names[:10], lambda h: ["sleep", "5"])
        t.join(10)
        assert [r.ok for r in other["res"]] == [True] * 4  # (a health sampler beside a stopped exec, say)
        assert pool.run("h19", ["true"]).ok  # and the pool still works


def test_a_command_not_begun_when_the_abort_comes_is_not_started(echo_server):
    targets, seen = echo_server
    abort = threading.Event()
    abort.set()
    with SSHPool(targets) as pool:
        r = pool.run("h00", ["echo", "x"], abort=abort)
    assert r.error == "interrupted: the command was abandoned" and seen == []


def test_closing_the_pool_under_a_running_command_is_prompt_and_safe(echo_server):
    targets, seen = echo_server
    pool = SSHPool(targets)
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("r", pool.run("h00", ["sleep", "5"])))
    t.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    pool.close()  # waits ≤ 2 s for the command, then shuts the socket under it
    t.join(5)
    assert time.monotonic() - t0 < 3 and not t.is_alive()
    assert box["r"].error and box["r"].error.startswith("SSH error")  # a result, not an exception in the thread


@pytest.mark.parametrize("argv, started, out", [
    (["mfctl", "exec", "-i", "x", "--json", "all", "--", "sleep", "9"], False, "json"),  # Ctrl-C while Typer loads
    (["mfctl", "exec", "-i", "x", "all", "--", "echo", "--json"], False, ""),  # (the command's --json is not mfctl's)
    (["mfctl", "run", "pb.yaml", "--json"], True, None),  # the command said it already (mfctl run: its summary)
])
def test_an_interrupt_before_any_command_ran_is_still_reported(argv, started, out, monkeypatch, capsys):
    from mfctl.cli import app, plain
    from mfctl.cli import main as cli_main

    def typer_like():  # what Typer does with a KeyboardInterrupt while it parses: exit 130, silently
        if started:
            plain.begin(command=True)  # what handle_errors does
        raise SystemExit(130)

    plain.begin(command=True).interrupt_reported = True  # an earlier invocation in this process: main() starts anew
    monkeypatch.setattr(app, "build", lambda only=None: typer_like)
    monkeypatch.setattr(ahead, "start", lambda args: None)
    monkeypatch.setattr("sys.argv", argv)
    with pytest.raises(SystemExit) as e:
        cli_main.main()
    o, err = capsys.readouterr()
    assert e.value.code == 130
    if out is None:
        assert (o, err) == ("", "")
    else:
        assert err.endswith("mfctl: interrupted\n")
        assert (json.loads(o)["error"]["exit_code"] == 130) if out == "json" else o == ""


def test_a_key_file_that_cannot_be_used_is_the_inventorys_error_exit_3_not_unreachable(mock_inv, cli_env, tmp_path):
    """gpu02's inventory entry names a key file that does not exist: exec exits 3 (the inventory is
    to fix), naming host and file; the other hosts run; nothing reached gpu02's sshd."""
    import yaml

    doc = yaml.safe_load(Path(mock_inv).read_text())
    doc["hosts"][1]["ssh"]["key_file"] = str(tmp_path / "no-such-key")
    inv = tmp_path / "inventory.yaml"
    inv.write_text(yaml.safe_dump(doc))
    r = subprocess.run(mfctl_cmd("exec", "-i", inv, "--json", "all", "--", "hostname"),
                       capture_output=True, text=True, env=cli_env, timeout=60)
    out = json.loads(r.stdout)
    assert r.returncode == 3, r.stderr
    bad = [h for h in out["results"] if h["error"]]
    assert [h["host"] for h in bad] == ["gpu02"] and f"cannot load SSH key {tmp_path / 'no-such-key'}" in bad[0]["error"]
    assert sorted(h["host"] for h in out["results"] if h["rc"] == 0) == ["gpu01", "gpu03", "gpu04"]
    assert out["exit_code"] == 3
