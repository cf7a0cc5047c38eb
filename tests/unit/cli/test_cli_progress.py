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


def test_plain_lines_say_each_phase_and_step_and_the_count_at_a_bounded_rate(capsys, monkeypatch):
    from mfctl.cli import progress

    clock = [1000.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    obs = ProgressObserver(mode="lines", interval_s=5)
    obs.phase("apply", total=4)
    for h in ("gpu01", "gpu02", "gpu03", "gpu04"):
        obs.step(h, 1, 2, "nic: firmware on nic0")
        clock[0] += 1
        obs.host_done(h, HostResult(h))  # 1 s apart: one count line in 5 s, and the last
    clock[0] += 1
    obs.phase("verify", "re-read", total=2)
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == ["apply (0/4)", "gpu01 [1/2] nic: firmware on nic0", "gpu02 [1/2] nic: firmware on nic0",
                                "gpu03 [1/2] nic: firmware on nic0", "gpu04 [1/2] nic: firmware on nic0",
                                "apply 4/4 (100%), 4 s elapsed  gpu04", "verify re-read (0/2)"]
    clock[0] += 100
    obs.host_done("gpu01", HostResult("gpu01"))  # 100 s in: a line, with the ETA at that speed
    assert capsys.readouterr().err == "verify 1/2 (50%), 1 min 40 s elapsed, ETA 1 min 40 s  gpu01\n"


def test_a_host_s_steps_move_the_count_and_the_eta():
    obs = ProgressObserver(mode="off")
    obs.phase("apply", total=2)
    obs.step("gpu01", 3, 4, "x")  # gpu01 starts its 3rd of 4 steps: half done
    obs.step("gpu02", 1, 4, "x")
    assert obs._done == 0.5
    obs.host_done("gpu02", HostResult("gpu02"))
    assert obs._done == 1.5 and obs.count_line(obs._done, now=obs._t0 + 30) == "apply 1/2 (75%), 30 s elapsed, ETA 10 s"


def test_durations_and_etas():
    from mfctl.cli.progress import duration, eta_s, progress_mode

    assert [duration(s) for s in (0.4, 59, 61, 3599, 7440)] == ["0 s", "59 s", "1 min 01 s", "59 min 59 s", "2 h 04 min"]
    assert eta_s(0, 10, 5) is None and eta_s(5, 10, 5) == 5 and eta_s(10, 10, 99) == 0
    assert progress_mode(False) == "off" and progress_mode(True) == "bar"
    assert progress_mode(None) == "lines"  # pytest's stderr is no terminal


def test_the_run_s_training_count_is_bounded_in_plain_lines(capsys, monkeypatch):
    from mfctl.cli.run import _observer

    monkeypatch.setenv("MFCTL_PROGRESS_INTERVAL", "3600")
    obs = _observer(False, 300)
    obs.phase("train", "training 300 iterations", total=300)
    for i in range(1, 301):
        obs.iteration(i, 300, {"seconds": 0.5, "epoch": i // 100, "paused": False})
    obs.warning("gpu02: [bold]slow[/]")
    obs.close()
    err = capsys.readouterr().err.splitlines()
    assert err[0].split() == ["train", "training", "300", "iterations"]
    assert err[1].startswith("training 300/300 (100%), ") and err[1].endswith("0.50 s/it (testbed time)  epoch 3")
    assert err[2:] == ["warning: gpu02: [bold]slow[/]"] and len(err) == 3  # (was a line every 10 iterations: 30)
    monkeypatch.setenv("MFCTL_PROGRESS_INTERVAL", "0")
    obs = _observer(False, 20)
    obs.phase("train", "training 20 iterations", total=20)
    for i in range(1, 21):
        obs.iteration(i, 20, {"seconds": 0.5, "epoch": 0})
    assert len(capsys.readouterr().err.splitlines()) == 21


def test_the_run_s_bar_at_a_terminal(monkeypatch):
    from mfctl.cli.run import _observer

    buf = io.StringIO()
    con = Console(file=buf, force_terminal=True, width=160, markup=False)
    monkeypatch.setattr(common, "err_console", lambda: con)
    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    obs = _observer(False, 100)
    obs.phase("train", "training 100 iterations", total=100)
    for i in range(1, 41):
        obs.iteration(i, 100, {"seconds": 0.25, "epoch": 1, "paused": i == 40})
    obs._progress.refresh()
    obs.close()
    shown = buf.getvalue()
    assert "training 100 iterations" in shown and "40/100" in shown and "ETA" in shown
    assert "0.25 s/it (testbed time)  epoch 1  (reconfiguring)" in shown and "━" in shown


def test_iterations_before_the_train_phase_count_as_training(capsys, monkeypatch):
    from mfctl.cli.run import _observer

    monkeypatch.setenv("MFCTL_PROGRESS_INTERVAL", "0")
    obs = _observer(False, 12)
    obs.iteration(1, 12, {"seconds": 8.5, "epoch": 0})  # (a runtime's first iteration, before the loop's phase)
    obs.phase("train", "training 12 iterations")
    obs.iteration(2, 12, {"seconds": 8.5, "epoch": 0})
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("training 1/12 (8%), 0 s elapsed") and err[1].split() == ["train", "training", "12",
                                                                                      "iterations"]
    assert err[2].startswith("training 2/12 (17%), ")
