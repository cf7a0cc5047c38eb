"""Options built from the settings' declarations (mfctl.cli.common.option): variable, default,
limits and help come from one place."""

import json

import typer
from typer.testing import CliRunner

from mfctl.cli.app import build
from mfctl.cli.common import option


def _app(**kw):
    app = typer.Typer()

    @app.command()
    def f(fanout: int = option("fanout", "--fanout", **kw), timeout: float = option("command_timeout", "--timeout")):
        typer.echo(json.dumps([fanout, timeout]))

    return app


def test_an_option_takes_default_variable_and_limits_from_its_setting(monkeypatch):
    run = CliRunner().invoke
    assert json.loads(run(_app(), []).stdout) == [32, 30.0]
    assert json.loads(run(_app(), ["--fanout", "7", "--timeout", "0.5"]).stdout) == [7, 0.5]
    monkeypatch.setenv("MFCTL_FANOUT", "9")
    assert json.loads(run(_app(), []).stdout) == [9, 30.0]
    assert json.loads(run(_app(), ["--fanout", "3"]).stdout) == [3, 30.0]  # the command line wins
    for bad in (["--fanout", "0"], ["--fanout", "4097"], ["--timeout", "0.01"], ["--timeout", "86401"]):
        r = run(_app(), bad)
        assert r.exit_code == 2, bad
    monkeypatch.setenv("MFCTL_FANOUT", "5000")
    r = run(_app(), [])
    assert r.exit_code == 2 and "MFCTL_FANOUT" in r.stderr


def test_a_none_default_leaves_it_to_the_setting_and_help_shows_the_declared_one(monkeypatch):
    run = CliRunner().invoke
    assert json.loads(run(_app(default=None), []).stdout) == [None, 30.0]
    monkeypatch.setenv("COLUMNS", "200")
    h = run(_app(default=None), ["--help"]).stdout
    assert "MFCTL_FANOUT" in h and "MFCTL_COMMAND_TIMEOUT" in h and "1<=x<=4096" in h and "(32)" in h


def test_the_inventory_option_reads_its_variable(monkeypatch, tmp_path):
    r = CliRunner().invoke(build(), ["ocs", "show"])
    assert r.exit_code == 2 and "MFCTL_INVENTORY" in r.stderr
    monkeypatch.setenv("MFCTL_INVENTORY", str(tmp_path / "none.yaml"))
    monkeypatch.setenv("MFCTL_JSON", "yes")
    r = CliRunner().invoke(build(), ["ocs", "show"])
    assert r.exit_code == 3 and json.loads(r.stdout)["error"]["type"] == "ConfigError"
    assert str(tmp_path / "none.yaml") in json.loads(r.stdout)["error"]["message"]


def test_a_bad_mock_sshd_from_the_flag_or_its_variable_is_a_usage_error_before_anything_starts(cli_env, tmp_path):
    import subprocess

    from support import mfctl_cmd

    r = subprocess.run(mfctl_cmd("mock", "up", "--state-dir", tmp_path / "m", "--sshd", "bogus"),
                       capture_output=True, text=True, env=cli_env, timeout=60)
    assert r.returncode == 2 and "--sshd (MFCTL_MOCK_SSHD) must be one of auto, openssh, paramiko, got 'bogus'" in r.stderr
    r = subprocess.run(mfctl_cmd("mock", "up", "--state-dir", tmp_path / "m"), capture_output=True, text=True,
                       env={**cli_env, "MFCTL_MOCK_SSHD": "bogus"}, timeout=60)
    assert r.returncode == 2 and "MFCTL_MOCK_SSHD" in r.stderr and not (tmp_path / "m" / "status.json").exists()
