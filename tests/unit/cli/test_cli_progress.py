"""The CLI's observer: progress on stderr at a terminal only, warnings always, user text shown not obeyed."""

import io

from rich.console import Console

from mfctl.cli import common
from mfctl.cli.progress import ProgressObserver
from mfctl.errors import ExitCode
from mfctl.transport.results import HostResult


def test_nothing_is_drawn_when_disabled_but_warnings_are_said(capsys):
    with ProgressObserver(enabled=False) as obs:
        obs.phase("plan", total=2)
        obs.host_started("gpu01")
        obs.host_done("gpu01", HostResult("gpu01"))
        obs.warning("gpu02: \x1b[31mred\x1b[0m")
    out, err = capsys.readouterr()
    assert out == "" and err == "warning: gpu02: \\x1b[31mred\\x1b[0m\n"  # one line, the ESC shown


def test_a_terminal_sees_each_phase_with_hosts_done_of_hosts(monkeypatch):
    buf = io.StringIO()
    con = Console(file=buf, force_terminal=True, width=120, markup=False)
    monkeypatch.setattr(common, "err_console", lambda: con)
    obs = ProgressObserver(enabled=True)
    obs.phase("plan", total=3)
    for h in ("gpu01", "gpu02"):
        obs.host_started(h)
        obs.host_done(h, HostResult(h, exit_code=ExitCode.DRIFT))
    obs._progress.refresh()
    shown = buf.getvalue()
    obs.phase("verify", "[bold]x[/]", total=3)  # user text is never markup
    obs._progress.refresh()
    obs.close()
    assert "plan" in shown and "2/3" in shown and "gpu02" in shown
    assert "verify [bold]x[/]" in buf.getvalue() and obs._progress is None
