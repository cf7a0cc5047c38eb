"""mfctl version (--settings) and the CLI's per-invocation state, in process (typer's CliRunner)."""

import json

from typer.testing import CliRunner

from mfctl import __version__, settings
from mfctl.cli import plain
from mfctl.cli.app import SECRET_SHOWN, build


def invoke(*args, **kw):
    return CliRunner().invoke(build(), [str(a) for a in args], **kw)


def test_version_and_every_declared_setting_with_its_type_and_limits(monkeypatch):
    from mfctl.fabric import search

    r = invoke("version", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout) == {"schema": "mfctl.version/v1", "version": __version__,
                                                         "planner_search": search.kernel()}
    monkeypatch.setenv("MFCTL_PLANNER_KERNEL", "numpy")
    assert json.loads(invoke("version", "--json").stdout)["planner_search"] == "numpy"
    assert invoke("version").stdout == f"mfctl {__version__} (circuit planner's search: numpy)\n"
    monkeypatch.setenv("MFCTL_PLANNER_KERNEL", "cuda")
    assert json.loads(invoke("version", "--json").stdout)["planner_search"] == \
        "invalid: MFCTL_PLANNER_KERNEL='cuda': one of auto, compiled, numpy"
    monkeypatch.delenv("MFCTL_PLANNER_KERNEL")
    monkeypatch.setenv("MFCTL_FANOUT", "8")
    rows = json.loads(invoke("version", "--settings", "--json").stdout)["settings"]
    assert [x["name"] for x in rows] == list(settings.SETTINGS)
    fan = next(x for x in rows if x["name"] == "fanout")
    assert fan == {"name": "fanout", "env": "MFCTL_FANOUT", "default": "32", "value": "8",
                   "help": settings.SETTINGS["fanout"].help, "secret": False, "set": True, "type": "int", "min": 1, "max": 4096}
    text = invoke("version", "--settings").stdout
    (line,) = [ln for ln in text.splitlines() if "MFCTL_FANOUT" in ln]
    assert line.split()[1] == "8" and line.endswith("(from 1 to 4096).")


def test_a_secret_setting_is_never_shown(monkeypatch):
    pw = "pa55-w0rd-never-shown"
    monkeypatch.setenv("MFCTL_OCS_PASSWORD", pw)
    text, js = invoke("version", "--settings"), invoke("version", "--settings", "--json")
    assert pw not in text.stdout + text.stderr + js.stdout + js.stderr
    (row,) = [x for x in json.loads(js.stdout)["settings"] if x["name"] == "ocs_password"]
    assert row["value"] == SECRET_SHOWN and row["secret"] and row["set"]
    (line,) = [ln for ln in text.stdout.splitlines() if "MFCTL_OCS_PASSWORD" in ln]
    assert f"{SECRET_SHOWN} (set)" in line


def test_the_ocs_password_setting_is_the_inventorys_default_password_variable(monkeypatch):
    from mfctl.inventory.models import OCS

    ocs = OCS(name="o", size={"inputs": 8, "outputs": 8}, transports=[{"kind": "tcp", "address": "127.0.0.1", "port": 1}])
    assert ocs.password_env == settings.SETTINGS["ocs_password"].env == "MFCTL_OCS_PASSWORD"
    monkeypatch.setenv("MFCTL_OCS_PASSWORD", "tl1-pw")
    assert ocs.password() == "tl1-pw" == settings.get("ocs_password")


def _interrupting(monkeypatch):
    import mfctl.inventory

    def ctrl_c(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(mfctl.inventory, "load_inventory", ctrl_c)


def test_each_invocation_reports_its_own_interrupt(monkeypatch):
    """Two Ctrl-C'd commands in one process each say so (one JSON error object each): the
    'reported' and 'emitted' state belongs to an invocation, not to the process."""
    from support import PROTOTYPE

    _interrupting(monkeypatch)
    for _ in range(2):
        r = invoke("inventory", "show", PROTOTYPE, "--json")
        assert r.exit_code == 130
        assert json.loads(r.stdout)["error"] == {"type": "Interrupted", "message": "interrupted (Ctrl-C)", "exit_code": 130}
        assert r.stderr.endswith("mfctl: interrupted\n")
        assert plain.current().interrupt_reported and plain.current().json_emitted


def test_a_json_result_already_out_gets_no_second_object_on_interrupt(capsys):
    r = invoke("simulate", "--gpus", "128", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["schema"] == "mfctl.simulate/v1"
    assert plain.current().json_emitted and plain.current().command_started
    capsys.readouterr()
    plain.report_interrupt(True)  # Ctrl-C after this invocation's result: said on stderr only
    out, err = capsys.readouterr()
    assert out == "" and err.endswith("mfctl: interrupted\n") and plain.current().interrupt_reported
    r = invoke("simulate", "--gpus", "128", "--json")  # the next invocation starts clean
    assert r.exit_code == 0 and not plain.current().interrupt_reported


def test_dash_dash_version_and_dash_v_print_the_version_and_exit_0():
    for flag in ("--version", "-V"):
        r = invoke(flag)
        assert (r.exit_code, r.stdout) == (0, f"mfctl {__version__}\n")
    r = invoke("--version", "run", "nonexistent.yaml")  # eager: nothing else runs
    assert (r.exit_code, r.stdout) == (0, f"mfctl {__version__}\n")


def test_make_clean_keeps_the_run_history_and_distclean_deletes_it(tmp_path):
    """``make -n`` (print, do not run) on the project's Makefile: clean never names runs/."""
    import shutil
    import subprocess

    import pytest

    from support import ROOT

    if not shutil.which("make"):
        pytest.skip("make is not installed (Debian: apt-get install make)")
    clean = subprocess.run(["make", "-n", "-C", str(ROOT), "clean"], capture_output=True, text=True, check=True).stdout
    dist = subprocess.run(["make", "-n", "-C", str(ROOT), "distclean"], capture_output=True, text=True, check=True).stdout
    assert "rm -rf .venv" in clean and " runs" not in clean
    assert "rm -rf runs" in dist and "rm -rf .venv" in dist
