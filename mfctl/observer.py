"""The one observer protocol: what run, health, provision and exec tell whoever watches them.

Services never print (DESIGN §3); they call an :class:`Observer`. The CLI gives a rich progress
display on a terminal (:mod:`mfctl.cli.progress`), tests a :class:`RecordingObserver`. A run's
observer (:class:`mfctl.runtime.job.Observer`) adds iterations, reconfigurations and log lines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from mfctl.transport.results import HostResult


class Observer(Protocol):
    """What a long operation tells whoever watches it (the CLI's progress display, a log, a test).

    Called from worker threads: implementations must be thread-safe. They never raise into the
    operation (their errors are their own)."""

    def phase(self, name: str, detail: str = "", total: int | None = None) -> None:
        """A new phase begins (``"health"``, ``"plan"``, ``"apply"``…); ``detail`` for people;
        ``total``: hosts or steps in it, when known."""

    def host_started(self, host: str) -> None: ...

    def host_done(self, host: str, result: "HostResult") -> None: ...

    def warning(self, message: str) -> None: ...


class NullObserver:
    """Watches nothing."""

    def phase(self, name: str, detail: str = "", total: int | None = None) -> None:
        pass

    def host_started(self, host: str) -> None:
        pass

    def host_done(self, host: str, result: "HostResult") -> None:
        pass

    def warning(self, message: str) -> None:
        pass


class RecordingObserver(NullObserver):
    """Keeps every event as a tuple, in order (for tests and ``--json`` summaries)."""

    def __init__(self) -> None:
        import threading

        self.events: list[tuple] = []
        self._lock = threading.Lock()

    def phase(self, name: str, detail: str = "", total: int | None = None) -> None:
        with self._lock:
            self.events.append(("phase", name, total))

    def host_started(self, host: str) -> None:
        with self._lock:
            self.events.append(("host_started", host))

    def host_done(self, host: str, result: "HostResult") -> None:
        with self._lock:
            self.events.append(("host_done", host, int(result.exit_code)))

    def warning(self, message: str) -> None:
        with self._lock:
            self.events.append(("warning", message))
