"""Every command's --help and its exit codes against the one table (issue 17 item 19).

The commands are walked from the app object itself (:func:`mfctl.cli.app.build`), so a command
added later is checked here without a line of its own: ``-h`` exits 0 and reads cleanly (no
``<bool>``, ``{playbook}`` or ``(32)`` left by Typer, no space before punctuation), every option
says what it is for, a value of the wrong type is a usage error (exit 2) naming the option, and so
is an unknown option. Then the fixes of item 19 one by one: the table in ``mfctl --help`` and
``mfctl version --exit-codes``, a damaged run summary (exit 3 from ``runs show`` and ``runs
report``), ``metrics serve`` stopped by SIGTERM (exit 0, "stopped") and on a port in use (exit 1
naming it), a bad ``--time-scale`` (exit 2), and Ctrl-C at a confirmation (exit 130, nothing
changed)."""

import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from mfctl.cli.app import build
from mfctl.errors import EXIT_CODES, ExitCode, MfctlError, exit_codes_line
from mfctl.metrics.store import MetricsStore
from support import ROOT, mfctl_cmd, wait_until


def _walk(cmd, path=()):
    yield path, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from _walk(sub, (*path, name))


CLI = get_command(build())  # built once: each walk below runs ~200 command lines (a build is ~0.1 s)
ALL = [(path, cmd) for path, cmd in _walk(CLI)]


def _invoke(args, **kw):
    """``CliRunner().invoke`` on :data:`CLI` (the app as ``mfctl`` builds it, built once)."""
    import typer.testing

    real = typer.testing._get_command
    typer.testing._get_command = lambda app: CLI
    try:
        return CliRunner().invoke(build, list(args), **kw)
    finally:
        typer.testing._get_command = real
LEAVES = [(path, cmd) for path, cmd in ALL if not hasattr(cmd, "commands")]
_ids = lambda items: [" ".join(p) or "mfctl" for p, _ in items]  # noqa: E731


def test_the_walk_finds_every_command_of_the_app():
    names = {" ".join(p) for p, _ in ALL}
    assert {"mfctl" if not n else n for n in names} >= {"mfctl", "run", "exec", "health", "metrics serve", "runs show",
                                                        "ocs apply", "provision apply", "version", "mock up"}
    assert len(LEAVES) >= 30


def _help(path) -> str:
    r = _invoke([*path, "-h"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, (path, r.output)
    return r.stdout


# Typer's own notation, which mfctl's help does not use (mfctl.cli.common.polish)
ARTEFACTS = re.compile(r"<(bool|int|float|str|path|list\[[a-z]+\])( range)?>|\{[a-z_]+\}|\[default: \(")
SPACE_BEFORE_PUNCT = re.compile(r"\w +[.,;:!?](\s|$)")


@pytest.mark.parametrize("path, cmd", ALL, ids=_ids(ALL))
def test_help_exits_0_and_reads_cleanly(path, cmd):
    text = _help(path)
    assert text.lstrip().startswith(f"Usage: mfctl {' '.join(path)}".rstrip())
    assert not ARTEFACTS.search(text), ARTEFACTS.search(text).group()
    assert not SPACE_BEFORE_PUNCT.search(text), repr(SPACE_BEFORE_PUNCT.search(text).group())
    for p in cmd.params:
        if getattr(p, "hidden", False) or p.param_type_name not in ("option", "argument"):
            continue
        assert (p.help or "").strip(), f"mfctl {' '.join(path)}: {p.opts[0] if p.opts else p.name} has no help text"


@pytest.mark.parametrize("path, cmd", LEAVES, ids=_ids(LEAVES))
def test_an_unknown_option_and_a_value_of_the_wrong_type_are_usage_errors(path, cmd):
    r = _invoke([*path, "--no-such-option"], env={"COLUMNS": "200"})
    assert r.exit_code == ExitCode.USAGE, r.output
    assert "No such option: --no-such-option" in r.stderr
    if any(p.name == "json_out" for p in cmd.params):  # with --json: the error object on stdout too, alone
        r = _invoke([*path, "--json", "--no-such-option"], env={"COLUMNS": "200"})
        doc = json.loads(r.stdout)
        assert r.exit_code == ExitCode.USAGE and doc["schema"] == "mfctl.error/v1", r.output
        assert doc["error"] == {"type": "UsageError", "message": "No such option: --no-such-option", "exit_code": 2}
    for p in cmd.params:
        if p.param_type_name != "option" or getattr(p, "is_flag", False) or p.hidden:
            continue
        d = p.type_descriptor
        if d.annotation not in (int, float) and not d.is_choice:
            continue  # a text or path value: what is wrong with it is the command's to say
        r = _invoke([*path, p.opts[0], "bogus"], env={"COLUMNS": "200"})
        assert r.exit_code == ExitCode.USAGE, (p.opts, r.output)
        assert f"Invalid value for '{p.opts[0]}'" in r.stderr or f"Invalid value for {p.opts[0]}" in r.stderr
        if d.annotation is float:  # nan is not a number, whatever the range
            r = _invoke([*path, p.opts[0], "nan"], env={"COLUMNS": "200"})
            assert r.exit_code == ExitCode.USAGE and "nan is not a number" in r.stderr, (p.opts, r.output)


def test_help_reads_cleanly_without_rich_and_at_narrow_widths(tmp_path):
    """The same checks on click's plain formatter (TYPER_USE_RICH=0, read when Typer is imported:
    a process of its own) and on 60/80-column terminals, where wrapping could strand a '.'."""
    script = tmp_path / "walk.py"
    script.write_text(
        "import re, sys\n"
        "from typer.main import get_command\n"
        "from typer.testing import CliRunner\n"
        "from mfctl.cli.app import build\n"
        "def walk(cmd, path=()):\n"
        "    yield path\n"
        "    for n, sub in sorted(getattr(cmd, 'commands', {}).items()):\n"
        "        yield from walk(sub, (*path, n))\n"
        f"bad = re.compile({ARTEFACTS.pattern!r} + '|' + {SPACE_BEFORE_PUNCT.pattern!r})\n"
        "import typer.testing\n"
        "cli = get_command(build())\n"
        "typer.testing._get_command = lambda app: cli  # (built once)\n"
        "app = build()\n"
        "n = 0\n"
        "for width in sys.argv[1:]:\n"
        "    for path in walk(cli):\n"
        "        r = CliRunner().invoke(app, [*path, '-h'], env={'COLUMNS': width})\n"
        "        m = bad.search(r.stdout)\n"
        "        n += 1\n"
        "        if r.exit_code or m:\n"
        "            print(width, ' '.join(path), r.exit_code, repr(m.group() if m else ''))\n"
        "print('checked', n)\n")
    for rich, widths in (("0", ["60", "80"]), ("1", ["60"])):  # (rich at 200 columns: the test above)
        r = subprocess.run([mfctl_cmd()[0], str(script), *widths], capture_output=True, text=True, timeout=600,
                           env={**os.environ, "TYPER_USE_RICH": rich})
        assert r.returncode == 0 and r.stdout.startswith("checked ") \
            and int(r.stdout.split()[1]) == len(widths) * len(ALL), (rich, r.stdout, r.stderr[-2000:])


@pytest.mark.parametrize("args, said", [
    (["topo", "plan", "t.npy", "--kind", "bogus"], "--kind must be server-bytes or tokens, got 'bogus'"),
    (["topo", "plan", "t.npy", "--method", "bogus"], "--method must be one of"),
    (["simulate", "--model", "bogus"], "--model must be one of"),
    (["health", "-i", "PROTOTYPE", "--checks", "bogus"], "--checks 'bogus': unknown check 'bogus'"),
    (["health", "-i", "PROTOTYPE", "--threshold", "bogus"], "--threshold 'bogus': expected NAME=NUMBER"),
    (["bench", "nccl", "-i", "PROTOTYPE", "--max-bytes", "lots"], "--max-bytes must be a size"),
    (["mock", "up", "--sshd", "bogus"], "--sshd (MFCTL_MOCK_SSHD) must be one of"),
    (["metrics", "export", "RUN", "--format", "bogus"], "--format must be prometheus, csv or json"),
])
def test_a_text_option_the_command_checks_itself_is_a_usage_error_too(args, said, tmp_path, monkeypatch):
    """Values only the command can judge (a kind, a method, a check's name) are usage errors as
    well (``topo plan --kind`` was a ConfigError, exit 3, from the traffic loader)."""
    import numpy as np

    from support import PROTOTYPE

    monkeypatch.chdir(tmp_path)
    np.save(tmp_path / "t.npy", np.ones((4, 4)) - np.eye(4))
    MetricsStore(tmp_path / "runs" / "20261201-120000-abcdef" / "metrics.db").close()
    args = [{"PROTOTYPE": str(PROTOTYPE), "RUN": "20261201-120000-abcdef"}.get(a, a) for a in args]
    r = CliRunner().invoke(build(), args)
    assert r.exit_code == ExitCode.USAGE and said in r.stderr, r.output


def test_help_shows_types_ranges_and_defaults_as_they_are():
    text = _help(("exec",))
    assert "Usage: mfctl exec [OPTIONS] HOSTS COMMAND..." in text
    assert re.search(r"--fanout\s+INTEGER \[1<=x<=4096\]", text) and "[default: 32]" in text
    assert re.search(r"--timeout\s+FLOAT \[0.05<=x<=86400\]", text) and "[default: 30]" in text
    assert re.search(r"--json\s+Print one JSON object", text)  # a flag: no type at all
    assert "Usage: mfctl run [OPTIONS] PLAYBOOK" in _help(("run",))
    assert "Usage: mfctl metrics serve [OPTIONS] [RUN_ID]" in _help(("metrics", "serve"))
    r = CliRunner().invoke(build(), ["run"], env={"COLUMNS": "200"})
    assert r.exit_code == 2 and "Missing argument 'PLAYBOOK'" in r.stderr
    rows = dict(re.findall(r"^│ ([a-z-]+) +(\S.*?) *│$", _help(()), re.M))  # a group's commands: one sentence each
    assert rows["exec"] == ("Run COMMAND on HOSTS in parallel (each word quoted for the remote shell); identical "
                            "results are folded.")


def test_the_table_is_in_mfctl_help_and_version_exit_codes():
    assert [r.code for r in EXIT_CODES] == list(ExitCode)
    top = CliRunner().invoke(build(), ["--help"], env={"COLUMNS": "400"})
    assert top.exit_code == 0 and f"Exit codes: {exit_codes_line()}" in top.stdout
    assert "0 ok, 1 failed on a target, 2 usage, 3 invalid inventory/config/data" in exit_codes_line()
    r = CliRunner().invoke(build(), ["version", "--exit-codes", "--json"])
    rows = json.loads(r.stdout)["exit_codes"]
    assert r.exit_code == 0 and [x["code"] for x in rows] == [0, 1, 2, 3, 4, 5, 6, 130]
    assert rows[3]["name"] == "CONFIG" and "DataError" in rows[3]["raised_by"]
    r = CliRunner().invoke(build(), ["version", "--exit-codes"])
    assert re.search(r"^\s+130\s+INTERRUPTED\s+Ctrl-C", r.stdout, re.M)


def test_every_error_type_is_in_the_row_of_its_exit_code():
    import mfctl.errors as errors

    types = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, MfctlError)]
    assert len(types) >= 9
    for t in types:
        row = errors.exit_code_info(t.exit_code)
        assert t.__name__ in row.raised_by, f"{t.__name__} (exit {int(t.exit_code)}) is not in EXIT_CODES"


def test_docs_say_what_the_table_says():
    doc = (ROOT / "docs" / "exit-codes.md").read_text()
    for r in EXIT_CODES:
        assert re.search(rf"^\| {int(r.code)} \| `{r.code.name}` \|", doc, re.M), r.code
        for t in r.raised_by:
            assert f"`{t}`" in doc, t


# --- the fixes, command by command ---

def _run_with_damaged_summary(runs: Path) -> Path:
    d = runs / "20261201-120000-abcdef"
    MetricsStore(d / "metrics.db").close()
    (d / "summary.json").write_text('{"schema": "mfctl.run/v1", "run_id": ')  # cut short
    return d


@pytest.mark.parametrize("args", [("runs", "show", "latest"), ("runs", "report"),
                                  ("runs", "show", "20261201-120000-abcdef", "--json")])
def test_a_damaged_run_summary_is_a_data_error_everywhere(args, tmp_path, monkeypatch):
    d = _run_with_damaged_summary(tmp_path / "runs")
    r = CliRunner().invoke(build(), list(args))
    assert r.exit_code == ExitCode.CONFIG == 3, r.output
    if "--json" in args:
        err = json.loads(r.stdout)["error"]
        assert err["type"] == "DataError" and err["problems"][0]["path"] == str(d / "summary.json")
    else:
        assert f"error: {d / 'summary.json'}: not a readable run summary" in r.stderr


def test_a_damaged_metrics_database_is_a_data_error(tmp_path):
    d = tmp_path / "runs" / "20261201-120000-abcdef"
    d.mkdir(parents=True)
    (d / "metrics.db").write_bytes(b"not sqlite at all" * 100)
    for args in (("runs", "report"), ("metrics", "export")):
        r = CliRunner().invoke(build(), list(args))
        assert r.exit_code == 3 and f"{d / 'metrics.db'}: not a readable metrics database" in r.stderr, r.output


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("blocked", [False, True], ids=["", "sigterm-blocked-by-the-parent"])
def test_metrics_serve_stops_cleanly_on_sigterm(blocked, cli_env, tmp_path):
    """A clean stop, as systemd counts one: exit 0 (a handler's exit 143 is a failure to systemd
    unless SuccessExitStatus=143 says otherwise: systemd.service(5)) — also when it was started with
    SIGTERM blocked (a mask is inherited through exec: a parent's blocked thread, a supervisor's)."""
    d = Path(cli_env["MFCTL_RUNS_DIR"]) / "20261201-120000-abcdef"
    MetricsStore(d / "metrics.db").close()
    port = _free_port()
    block = (lambda: signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])) if blocked else None
    p = subprocess.Popen(mfctl_cmd("metrics", "serve", "--port", port), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=cli_env, preexec_fn=block)
    try:
        assert "serving 20261201-120000-abcdef on http://127.0.0.1:" in p.stdout.readline()
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # listening
        p.send_signal(signal.SIGTERM)
        try:
            out, err = p.communicate(timeout=90)  # (seconds alone; a suite on 2 cores can stretch it)
        except subprocess.TimeoutExpired:
            try:  # what the process made of its signals (blocked, ignored, caught), and this one's
                sig = [ln for ln in Path(f"/proc/{p.pid}/status").read_text().splitlines() if ln.startswith("Sig")]
                sig += [ln for ln in Path("/proc/self/status").read_text().splitlines() if ln.startswith("Sig")]
            except OSError:
                sig = []
            p.kill()
            raise AssertionError(f"no exit 90 s after SIGTERM; {sig}; stderr: {p.communicate()[1][-2000:]}") from None
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    assert f"mfctl: stopped serving 20261201-120000-abcdef on 127.0.0.1:{port} (SIGTERM)" in err
    assert "Traceback" not in err


def test_metrics_serve_on_a_port_in_use_names_the_address(tmp_path):
    d = tmp_path / "runs" / "20261201-120000-abcdef"
    MetricsStore(d / "metrics.db").close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = CliRunner().invoke(build(), ["metrics", "serve", "--port", str(port)])
    assert r.exit_code == ExitCode.FAILED, r.output
    assert f"error: cannot listen on 127.0.0.1:{port}: address already in use" in r.stderr
    r = CliRunner().invoke(build(), ["metrics", "serve", "--address", "no such host.invalid"])
    assert r.exit_code == ExitCode.USAGE and "--address 'no such host.invalid': not an address" in r.stderr


@pytest.mark.parametrize("bad, said", [("nan", "nan is not a number"), ("-1", "-1 is out of range"),
                                       ("0", "0 is out of range")])
def test_a_bad_mock_time_scale_is_a_usage_error(bad, said, tmp_path):
    r = CliRunner().invoke(build(), ["mock", "up", "--state-dir", str(tmp_path / "mock"), "--time-scale", bad])
    assert r.exit_code == ExitCode.USAGE and said in r.stderr, r.output
    assert not (tmp_path / "mock").exists()


def _read_until(fd: int, needle: bytes, timeout: float) -> bytes:
    import select

    buf, end = b"", time.monotonic() + timeout
    while needle not in buf:
        left = end - time.monotonic()
        assert left > 0, f"no {needle!r} in {buf[-2000:]!r}"
        if select.select([fd], [], [], left)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            buf += chunk
    return buf


def test_ctrl_c_at_a_confirmation_is_an_interrupt_and_changes_nothing(mock_testbed, cli_env):
    """At a terminal, ``ocs connect`` asks before it changes the OCS; Ctrl-C there exits 130 with
    mfctl's own message (click said "Aborted!" and exited 1) and the OCS is as it was."""
    import pty

    inv = mock_testbed.inventory
    before = json.loads(subprocess.run(mfctl_cmd("ocs", "show", "-i", inv, "--json"), capture_output=True, text=True,
                                       env=cli_env, timeout=60, check=True).stdout)
    pid, fd = pty.fork()
    if pid == 0:  # the child: mfctl at a terminal (stdin, stdout and stderr the pty)
        try:
            os.execve(mfctl_cmd()[0], [*mfctl_cmd("ocs", "connect", "gpu01/nic0", "gpu02/nic0", "-i", inv)],
                      {**cli_env, "COLUMNS": "200"})
        finally:
            os._exit(127)
    try:
        _read_until(fd, b"[y/N]", timeout=60)
        os.write(fd, b"\x03")  # the terminal's Ctrl-C: SIGINT to mfctl
        out = re.sub(r"\x1b\[[0-9;]*m", "", _read_until(fd, b"nothing was changed", timeout=30).decode(errors="replace"))
        _, status = os.waitpid(pid, 0)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == ExitCode.INTERRUPTED == 130
    assert "mfctl: interrupted at the confirmation: nothing was changed" in out and "Aborted" not in out
    after = wait_until(lambda: json.loads(subprocess.run(mfctl_cmd("ocs", "show", "-i", inv, "--json"),
                                                         capture_output=True, text=True, env=cli_env,
                                                         timeout=60).stdout or "null"), what="ocs show")
    assert after["cross_connects"] == before["cross_connects"]


def test_the_cli_exits_with_the_table_s_codes_never_a_literal_number():
    """Every exit of the CLI layer goes through ExitCode (a typed error, typer.Exit(ExitCode.X)),
    so the table is the whole story: no typer.Exit(1) or sys.exit(130) written as a number."""
    literal = re.compile(r"\b(?:typer\.Exit|Exit|sys\.exit|SystemExit)\(\s*\d")
    found = [f"{p.name}:{n}: {line.strip()}" for p in sorted((ROOT / "mfctl" / "cli").glob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1) if literal.search(line)]
    assert found == []
