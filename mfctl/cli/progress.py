"""The CLI's observer: a rich progress bar on stderr while hosts are worked on (a terminal only).

With ``--json``, or when stderr is not a terminal (CI logs, pipes), it shows nothing: progress is
for people, and a CI log wants the result, not a bar redrawn a hundred times. Warnings go to
stderr either way (one line each).
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING

from mfctl.observer import NullObserver

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


class ProgressObserver(NullObserver):
    """Shows each phase with the hosts done of the hosts in it (``health  17/32  gpu05``)."""

    def __init__(self, *, enabled: bool | None = None, warnings: bool = True):
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.show_warnings = warnings
        self._lock = threading.Lock()
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> "ProgressObserver":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._progress is not None:
                self._progress.stop()
                self._progress = self._task = None

    def phase(self, name: str, detail: str = "", total: int | None = None) -> None:
        if not self.enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from mfctl.cli.common import err_console
        from mfctl.cli.plain import visible

        with self._lock:
            if self._progress is None:
                # markup=False: a phase's detail and a host name are shown as they are, never read as styles
                self._progress = Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                                          MofNCompleteColumn(), TimeElapsedColumn(),
                                          TextColumn("{task.fields[host]}", markup=False),
                                          console=err_console(), transient=True)
                self._progress.start()
            label = visible(f"{name} {detail}".strip())
            self._task = self._progress.add_task(label, total=total, host="")

    def host_done(self, host: str, result) -> None:
        with self._lock:
            if self._progress is not None and self._task is not None:
                from mfctl.cli.plain import visible

                self._progress.update(self._task, advance=1, host=visible(host))

    def warning(self, message: str) -> None:
        if self.show_warnings:
            from mfctl.cli.plain import print_error

            print_error(message, "warning")
