"""The CLI's progress display, one mechanism for every long command (``run``, ``provision``,
``bench nccl``, ``health``): a :class:`ProgressObserver` on stderr.

Three modes (:func:`progress_mode`):

* ``bar`` — stderr is a terminal: a rich progress bar per phase with done/total, elapsed time and
  ETA (rich's ``TimeRemainingColumn``: the speed so far over what is left), and the current host
  or step; lines said meanwhile (a step, a warning) print above the bar, which goes at the end.
* ``lines`` — stderr is not a terminal (a CI log, a pipe): plain lines, one per phase and per step,
  and the count done at most once every ``MFCTL_PROGRESS_INTERVAL`` seconds (and at the end of
  the phase): ``apply 3/8 (38%), 12 s elapsed, ETA 20 s`` — a log gets a bounded number of lines,
  never a bar redrawn a hundred times.
* ``off`` — nothing but the warnings.

Progress never goes to stdout: with ``--json`` stdout holds the one object only.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING

from mfctl.observer import NullObserver

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

MODES = ("bar", "lines", "off")


def progress_mode(enabled: bool | None = None) -> str:
    """``off`` when ``enabled`` is False, ``bar`` when True; None: ``bar`` when stderr is a
    terminal, else ``lines``."""
    if enabled is None:
        return "bar" if sys.stderr.isatty() else "lines"
    return "bar" if enabled else "off"


def duration(seconds: float) -> str:
    """``45 s``, ``3 min 05 s``, ``2 h 04 min`` (a plain line's elapsed time and ETA)."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def eta_s(done: float, total: float, elapsed_s: float) -> float | None:
    """Seconds left at the speed so far (``elapsed / done`` per unit), None before the first unit."""
    if done <= 0 or total <= 0:
        return None
    return max(0.0, elapsed_s / done * (total - done))


class ProgressObserver(NullObserver):
    """Shows each phase with its units done of the units in it (``apply  3/8  0:00:12  ETA 0:00:20
    gpu05``): hosts (:meth:`host_done`), a host's steps (:meth:`step`: a host 2 steps into 4 counts
    half done, so the ETA moves with the steps) or any count (:meth:`advance`).

    ``enabled``: see :func:`progress_mode` (``mode`` names one outright); ``interval_s``: the
    least time between two count lines in ``lines`` mode (default ``MFCTL_PROGRESS_INTERVAL``);
    ``warnings``: say warnings (one line each, in every mode)."""

    def __init__(self, *, enabled: bool | None = None, warnings: bool = True, mode: str | None = None,
                 interval_s: float | None = None):
        from mfctl import settings

        self.mode = mode or progress_mode(enabled)
        if self.mode not in MODES:
            raise ValueError(f"progress mode {self.mode!r} is not one of {MODES}")
        self.enabled = self.mode == "bar"
        self.show_warnings = warnings
        self.interval_s = settings.get_float("progress_interval") if interval_s is None else interval_s
        self._lock = threading.RLock()
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._console = None
        self._name, self._done = "", 0.0
        self._total: float | None = None
        self._parts: dict[str, float] = {}  # a host's share done, 0..1 (its steps)
        self._t0 = self._last = time.monotonic()

    def __enter__(self) -> "ProgressObserver":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._progress is not None:
                self._progress.stop()
                self._progress = self._task = None

    # ---- what is shown -------------------------------------------------------------------------

    def con(self):
        """The stderr console (the bar's, once it is drawn: a line printed there goes above it)."""
        if self._progress is not None:
            return self._progress.console
        if self._console is None:
            from mfctl.cli.common import err_console

            self._console = err_console()
        return self._console

    def say(self, text) -> None:
        """One line (a str, shown as it is, or a rich Text) on stderr, in ``bar`` and ``lines`` mode."""
        if self.mode == "off":
            return
        with self._lock:
            self.con().print(text, highlight=False, markup=False, soft_wrap=True)

    def phase(self, name: str, detail: str = "", total: int | None = None) -> None:
        self.begin(name, total, detail)

    def begin(self, name: str, total: float | None, detail: str = "", *, announce: bool = True) -> None:
        """A new phase ``name`` (``detail`` for people) of ``total`` units (None: not known): a new
        bar, or (``lines``, ``announce``) its line; its count lines start with ``name``."""
        from mfctl.cli.plain import visible

        label = visible(f"{name} {detail}".strip())
        with self._lock:
            self._name, self._total, self._done, self._parts = visible(name), total, 0.0, {}
            self._t0 = self._last = time.monotonic()
            if self.mode == "lines" and announce:
                self.say(label + (f" (0/{total:g})" if total else ""))
            if self.mode != "bar":
                return
            if self._progress is None:
                from rich import progress as rp

                # markup=False: a phase's detail and a host name are shown as they are, never read as styles
                self._progress = rp.Progress(rp.TextColumn("{task.description}", markup=False), rp.BarColumn(),
                                             rp.MofNCompleteColumn(), rp.TimeElapsedColumn(), rp.TextColumn("ETA"),
                                             rp.TimeRemainingColumn(), rp.TextColumn("{task.fields[host]}", markup=False),
                                             console=self.con(), transient=True)
                self._progress.start()
            self._task = self._progress.add_task(label, total=total, host="")

    def host_done(self, host: str, result) -> None:
        with self._lock:
            self._parts[host] = 1.0
            self._update(sum(self._parts.values()), host)

    def step(self, host: str, index: int, total: int, text: str) -> None:
        """``host`` starts its step ``index`` of ``total`` (1-based): its line (``gpu01 [2/5] text``)
        in ``bar`` and ``lines`` mode, and the phase's count moves by the host's steps done."""
        from mfctl.cli.common import markup

        with self._lock:
            self.say(markup("[dim]{} [{}/{}] {}[/]", host, index, total, text))
            self._parts[host] = max(self._parts.get(host, 0.0), (index - 1) / max(total, 1))
            self._update(sum(self._parts.values()), host, line=False)

    def advance(self, done: float, total: float | None = None, info: str = "") -> None:
        """The phase has ``done`` units done (of ``total``, when it changed); ``info`` beside it."""
        with self._lock:
            if total is not None:
                self._total = total
                if self._progress is not None and self._task is not None:
                    self._progress.update(self._task, total=total)
            self._update(done, info)

    def _update(self, done: float, info: str, line: bool = True) -> None:
        from mfctl.cli.plain import visible

        self._done = done
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=done, host=visible(info))
            return
        if self.mode != "lines" or not line:
            return
        now = time.monotonic()
        last = self._total is not None and done >= self._total
        if not last and now - self._last < self.interval_s:
            return
        self._last = now
        self.say(self.count_line(done, info, now))

    def count_line(self, done: float, info: str = "", now: float | None = None) -> str:
        """``apply 3/8 (38%), 12 s elapsed, ETA 20 s  gpu05`` (``lines`` mode)."""
        from mfctl.cli.plain import visible

        elapsed = (time.monotonic() if now is None else now) - self._t0
        total = self._total
        text = f"{self._name} {int(done)}" + (f"/{total:g} ({100 * done / total:.0f}%)" if total else "")  # (whole units)
        text += f", {duration(elapsed)} elapsed"
        left = eta_s(done, total or 0, elapsed)
        if left is not None and total and done < total:
            text += f", ETA {duration(left)}"
        return text + (f"  {visible(info)}" if info else "")

    def warning(self, message: str) -> None:
        if not self.show_warnings:
            return
        if self._progress is not None:
            from mfctl.cli.common import markup

            self.say(markup("[yellow]warning:[/] {}", message))  # above the bar, not through it
            return
        from mfctl.cli.plain import print_error

        print_error(message, "warning")
