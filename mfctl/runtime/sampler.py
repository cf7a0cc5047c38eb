"""Health sampling during a run: ``mfctl health``'s sweep, host by host, on SSH sessions of its own.

A host's SSH session runs one command at a time, so the sampler never shares the run's
sessions: a sample whose ``nvidia-smi`` hangs would otherwise hold the session that the
reconfiguration's link polls need. Each host is swept by its own thread, one sweep at a
time (a host still busy with its last sweep is skipped, not queued); a command that does not
answer within ``command_timeout_s`` is a ``health.sample_timeout`` finding for that host
(warning), stored with the sample — never a failed run.

At the run's end a sweep under way is given a moment (``stop(finish_s)``) to finish and be
stored: on a loaded machine one host's sweep over OpenSSH takes seconds, and abandoning every
sweep at the end would drop each sample of a short run. What is still running then is abandoned.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from mfctl.runtime.health_gate import health
from mfctl.transport.ssh import CommandResult

log = logging.getLogger(__name__)

SAMPLE_TIMEOUT = "health.sample_timeout"


class _Recorder:
    """The sampler's pool as :func:`mfctl.health.sweep` sees it: every command
    passes through, the ones that timed out are noted per host."""

    def __init__(self, pool):
        self._pool = pool
        self._lock = threading.Lock()
        self.timeouts: dict[str, list] = {}  # host → [CommandResult], since the host's last take()
        self.abort = threading.Event()  # set: commands under way are abandoned (~50 ms), none is started
        self.aborted = "interrupted: the command was abandoned"

    def __getattr__(self, name):
        return getattr(self._pool, name)

    def _note(self, r) -> None:
        if r.error and r.error.startswith("timeout"):
            with self._lock:
                self.timeouts.setdefault(r.host, []).append(r)

    def run(self, host, argv, **kw):
        if self.abort.is_set():
            # not even sent: the pool would make a new SSH session (its last one dropped with the
            # abandoned command) only to refuse the command on it
            return CommandResult(host=host, argv=[str(a) for a in argv], error=self.aborted)
        r = self._pool.run(host, argv, abort=self.abort, **kw)
        self._note(r)
        return r

    def run_many(self, hosts, argv_for, **kw):
        # the sampler sweeps one host per thread: its "many" is one host, run here (with the abort event)
        return [self.run(h, argv_for(h), timeout=kw.get("timeout")) for h in hosts]

    def take(self, host: str) -> list:
        with self._lock:
            return self.timeouts.pop(host, [])


class HealthSampler:
    """Sweep every host's health every ``interval_s`` wall seconds over ``pool`` (an SSH pool
    for the sampler alone, its ``command_timeout`` the per-command limit in seconds).
    ``store(host, status, findings)`` keeps each host's sample; ``on_timeout(host, finding)`` is
    told of each hung command. ``limits`` and ``baseline`` are :func:`mfctl.health.sweep`'s."""

    def __init__(self, pool, inv, *, interval_s: float, store: Callable[[str, str, list], None],
                 on_timeout: Callable[[str, health.Finding], None] | None = None,
                 limits: dict[str, float] | None = None, baseline: dict | None = None):
        self.pool = _Recorder(pool)
        self.inv = inv
        self.interval_s = interval_s
        self.store, self.on_timeout = store, on_timeout
        self.limits, self.baseline = limits or {}, baseline
        self._stopping = threading.Event()  # set: no sweep is started
        self._stop = threading.Event()  # set: no sample is stored
        self._busy: dict[str, threading.Thread] = {}
        self._store_lock = threading.Lock()  # no sample is stored after stop()
        self._loop: threading.Thread | None = None
        self.samples = 0  # host sweeps stored
        self.findings: list[health.Finding] = []  # the sample timeouts

    def start(self) -> "HealthSampler":
        self._loop = threading.Thread(target=self._run, daemon=True, name="health-sampler")
        self._loop.start()
        return self

    def _run(self) -> None:
        while not self._stopping.wait(self.interval_s):
            for h in self.inv.hosts:
                if self._stopping.is_set():
                    return
                t = self._busy.get(h.name)
                if t is not None and t.is_alive():
                    continue  # its last sweep is still waiting for a command: not another one behind it
                t = self._busy[h.name] = threading.Thread(target=self._sweep, args=(h.name,), daemon=True,
                                                          name=f"health-sample-{h.name}")
                t.start()

    def _sweep(self, host: str) -> None:
        try:
            # the same checks as the pre-flight, so that the run's health history is one series
            # (NIC counters judged against the history as it was at the start; none saved)
            res = health.sweep(self.pool, self.inv, [host], limits=self.limits, baseline=self.baseline).targets
        except Exception as e:  # sampling must never take the run down; the error is logged
            log.warning("health sampling on %s failed: %s", host, e)
            return
        hung = self.pool.take(host)
        for hh in res:
            if hung and hh.host == host:
                # a timed-out query is this finding, not a failed GPU/NIC query: the tool did not answer
                hh.findings = [f for f in hh.findings
                               if not (f.code.endswith(".query_failed") and str(f.message).startswith("timeout"))]
                for r in hung:
                    prog = r.argv[0] if r.argv else "?"
                    f = health.Finding(host, "warning", "health",
                                       f"health sample: {_short(r.argv)} did not answer within "
                                       f"{self.pool.command_timeout:g} s (hung?)", SAMPLE_TIMEOUT, component=prog,
                                       value=round(r.elapsed_s, 3), limit=self.pool.command_timeout, unit="s")
                    hh.findings.append(f)
                    self.findings.append(f)
                    if self.on_timeout and not self._stop.is_set():
                        self.on_timeout(host, f)
            with self._store_lock:
                if self._stop.is_set():
                    return
                self.store(hh.host, hh.worst, [f.to_dict() for f in hh.findings])
                self.samples += 1

    def stop(self, finish_s: float = 2.0, wait_s: float = 1.0) -> None:
        """Stop sampling: no sweep starts once this is called; the sweeps under way have
        ``finish_s`` s to finish, and each one that does is stored (0: none is waited for). Then
        no sample is stored any more: the sweeps still under way are abandoned (their commands end
        within ~50 ms, closing the pool ends the rest), waited for at most ``wait_s`` s more."""
        self._stopping.set()
        deadline = time.monotonic() + finish_s
        if self._loop is not None:
            self._loop.join(max(0.0, deadline - time.monotonic()) + wait_s)  # (it only starts threads)
        for t in list(self._busy.values()):
            t.join(max(0.0, deadline - time.monotonic()))
        with self._store_lock:
            self._stop.set()
        self.pool.abort.set()
        deadline = time.monotonic() + wait_s
        self.pool.close()
        for t in list(self._busy.values()):
            t.join(max(0.0, deadline - time.monotonic()))


def warn_once_per_tool(warn: Callable[[str], None]) -> Callable[[str, "health.Finding"], None]:
    """An ``on_timeout`` for a run: ``warn(message)`` once per host and tool that hung."""
    warned: set[tuple[str, str]] = set()

    def on_timeout(host: str, f) -> None:
        if (host, f.component) not in warned:
            warned.add((host, f.component))
            warn(f"{host}: {f.message}; recorded as {f.code}, training unaffected")

    return on_timeout


def _short(argv: list[str], width: int = 48) -> str:
    text = " ".join(argv)
    return text if len(text) <= width else text[: width - 3] + "..."
