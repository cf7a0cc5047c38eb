"""Submit, follow and cancel a training job through Slurm, over SSH to a submit host.

The flow (``runtime.launcher: slurm``):

1. the run token is written to a new 0600 file beside the job's output (on the shared
   filesystem; :func:`~mfctl.runtime.launcher.write_token`, the token on stdin), then
   ``sbatch --parsable`` runs on the submit host with the rendered script on stdin and the
   file's path as ``MFCTL_RUN_TOKEN_FILE`` in the submitting environment → the job id. The
   token itself is in no command line, script, environment or error message;
2. ``squeue -h -j ID -o %T`` every ``poll_s`` for the state, ``sacct -n -P -X -j ID -o
   State,ExitCode`` once the job has left the queue;
3. the job's output file (``srun --label``: every line starts with the task id) is followed
   with ``tail -F`` in a :class:`~mfctl.runtime.launcher.SessionLauncher` session (the raw output in
   ``logs/slurm-<ID>.log``) and split per host into ``logs/<host>.log``; each line is passed
   to ``on_line(host, line)`` (``"slurm"`` for the batch script's own lines);
4. :meth:`SlurmLaunch.stop` waits ``grace_s`` for the job to end by itself (the controller
   has said ``stop``), then ``scancel``\\ s it and waits until Slurm reports it ended.

:class:`SlurmLaunch` implements the :class:`~mfctl.runtime.launcher.Launcher` protocol:
``start`` renders and submits the script (kept as ``sbatch.sh`` in the run directory),
``wait_running`` waits while the job is queued (``runtime.slurm.queue_timeout_s``), ``workers``
(host → :class:`~mfctl.runtime.launcher.Worker`, all done when the job ends, with its exit code),
``stop(grace_s)``.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path

from mfctl.errors import MfctlError, OperationFailed, ParseError
from mfctl.runtime.launcher import SessionLauncher, Worker, remove_token_files, write_token
from mfctl.runtime.render import TOKEN_FILE_ENV, redact, render_slurm, slurm_output
from mfctl.transport.ssh import SSHPool

log = logging.getLogger(__name__)

#: Slurm job states that mean the job is over (squeue/sacct ``%T``/``State``).
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"}
QUEUED = {"PENDING", "CONFIGURING", "REQUEUED", "RESIZING", "SUSPENDED", "REQUEUE_HOLD", "REQUEUE_FED"}


def parse_sbatch(text: str) -> int:
    """The job id from ``sbatch --parsable`` (``ID`` or ``ID;CLUSTER``) or plain ``sbatch``
    (``Submitted batch job ID``). Raises ParseError."""
    for ln in text.splitlines():
        m = re.fullmatch(r"\s*(?:Submitted batch job )?(\d+)(?:;[\w.-]+)?\s*", ln)
        if m:
            return int(m.group(1))
    raise ParseError("sbatch", 1, "a job id ('1234', '1234;cluster' or 'Submitted batch job 1234')", text.strip()[:120])


def parse_squeue_state(text: str) -> str | None:
    """The state from ``squeue -h -j ID -o %T``; None when the job is no longer listed."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return None
    st = lines[0].split()[0]
    if not re.fullmatch(r"[A-Z_]+", st):
        raise ParseError("squeue", 1, "a job state such as RUNNING", lines[0][:120])
    return st


def parse_sacct(text: str) -> tuple[str, int, int]:
    """``(state, exit_code, signal)`` from ``sacct -n -P -X -j ID -o State,ExitCode``
    (e.g. ``CANCELLED by 1000|0:15``). Raises ParseError."""
    for n, ln in enumerate(text.splitlines(), 1):
        if not ln.strip():
            continue
        m = re.fullmatch(r"([A-Z_]+)(?: by \d+)?\+?\|(\d+):(\d+)", ln.strip())
        if not m:
            raise ParseError("sacct", n, "'STATE|EXIT:SIGNAL' (sacct -n -P -X -o State,ExitCode)", ln[:120])
        return m.group(1), int(m.group(2)), int(m.group(3))
    raise ParseError("sacct", 1, "one accounting line for the job", "(nothing)")


class SlurmLaunch:
    """One batch job: submit, follow its output and state, cancel. Every SSH call is bounded
    by the pool's timeouts; state polls happen in a background thread."""

    def __init__(self, pool: SSHPool, submit_host: str, hosts: list[str], log_dir: Path, *, on_line=None,
                 poll_s: float = 1.0, journal=None, observer=None):
        self.pool, self.submit_host, self.hosts = pool, submit_host, list(hosts)
        self.observer = observer  # phase("launch"/"stop", …): the job's state for whoever watches
        self.pb = self.inv = None  # (for_run: what start renders)
        self.run_dir: Path = log_dir.parent
        self.run_id = ""
        self.queue_timeout_s = 600.0
        self.output = ""
        self._shown: list[tuple[str, str]] = []  # the queue states already said
        self.log_dir, self.on_line, self.poll_s, self.journal = log_dir, on_line, poll_s, journal
        self.workers = {h: Worker(h, [], log_dir / f"{h}.log") for h in self.hosts}
        self.job_id: int | None = None
        self.state: str | None = None
        self.reason = ""
        self.exit_code: int | None = None
        self._ended = threading.Event()
        self._follower: SessionLauncher | None = None
        self._tail: Worker | None = None  # the tail -F session
        self._host_logs: dict = {}  # host → open per-host log file
        self.token_files: dict[str, str] = {}  # submit host → the run token's file
        self._t_submit = time.monotonic()

    @classmethod
    def for_run(cls, pb, inv, pool: SSHPool, run_dir: Path, run_id: str, *, journal, observer, on_line=None) -> "SlurmLaunch":
        """The launcher of a run of ``pb`` on ``inv`` (submit host: ``runtime.slurm.submit_host``,
        else the first host)."""
        hosts = [h.name for h in inv.hosts]
        sl = pb.runtime.slurm
        self = cls(pool, sl.submit_host or hosts[0], hosts, run_dir / "logs", on_line=on_line, journal=journal,
                   observer=observer)
        self.pb, self.inv, self.run_dir, self.run_id = pb, inv, run_dir, run_id
        self.queue_timeout_s = sl.queue_timeout_s
        return self

    def _phase(self, name: str, detail: str) -> None:
        if self.observer is not None:
            self.observer.phase(name, detail)

    def start(self, controller: str, token: str) -> None:
        """Render the batch script for ``controller``, keep it as ``sbatch.sh`` and submit it."""
        script = render_slurm(self.pb, self.inv, controller, "<from-environment>", self.run_id)
        (self.run_dir / "sbatch.sh").write_text(script)
        job_id = self.submit(script, slurm_output(self.pb, self.run_id), token)
        self._phase("launch", f"submitted Slurm job {job_id} on {self.submit_host}; waiting for it to start")

    # --- submit -----------------------------------------------------------------------------
    def submit(self, script: str, output: str, token: str) -> int:
        """Submit ``script``; ``output`` is the job's output file (relative to the submit
        host's working directory). Raises UnreachableError / OperationFailed / ParseError, the
        token redacted from the message."""
        try:
            path = self.token_files[self.submit_host] = write_token(self.pool, self.submit_host,
                                                                     output.rpartition("/")[0] or ".", token)
            argv = ["env", f"{TOKEN_FILE_ENV}={path}", "sbatch", "--parsable", f"--output={output}"]
            out = self.pool.run_checked(self.submit_host, argv, stdin=script.encode())
            self.job_id = parse_sbatch(out)
        except MfctlError as e:
            e.args = (redact(str(e), token),)
            for w in self.workers.values():  # nothing runs: stop() need not wait for them
                w.error = "the Slurm job was not submitted"
                w.done.set()
            raise
        self.output = output.replace("%j", str(self.job_id))
        if self.journal:
            self.journal.append("runtime.slurm.submitted", job_id=self.job_id, host=self.submit_host, output=self.output)
        self._follow()
        threading.Thread(target=self._poll, daemon=True, name=f"slurm-{self.job_id}").start()
        return self.job_id

    def wait_running(self, timeout_s: float | None = None, on_wait=None) -> None:
        """Block until the job runs (or already ended). Raises OperationFailed after
        ``timeout_s`` (default ``queue_timeout_s``) in the queue (the job is then cancelled by
        :meth:`stop`). Each new state (and reason) while queued is a ``launch`` phase."""
        timeout_s = self.queue_timeout_s if timeout_s is None else timeout_s
        on_wait = on_wait or self._on_wait
        self._shown = []
        deadline = time.monotonic() + timeout_s
        while self.state is None or self.state in QUEUED:
            if self._ended.is_set():
                return
            if time.monotonic() > deadline:
                raise OperationFailed(f"Slurm job {self.job_id} still {self.state or 'unknown'} after {timeout_s:g} s "
                                      f"in the queue{f' ({self.reason})' if self.reason else ''}")
            if on_wait:
                on_wait(self.state, self.reason)
            time.sleep(0.2)

    def _on_wait(self, state, reason) -> None:
        if state and (state, reason) not in self._shown:
            self._shown.append((state, reason))
            self._phase("launch", f"Slurm job {self.job_id} {state or 'submitted'}{f' ({reason})' if reason else ''}")

    # --- state ------------------------------------------------------------------------------
    def _query(self) -> str | None:
        r = self.pool.run(self.submit_host, ["squeue", "-h", "-j", str(self.job_id), "-o", "%T %r"])
        queued = None
        if r.ok:
            queued = parse_squeue_state(r.stdout)
            if queued is not None and queued not in TERMINAL:
                self.reason = r.stdout.split(None, 1)[1].strip() if len(r.stdout.split()) > 1 else ""
                return queued
        elif r.error:
            return self.state  # the submit host is unreachable for now: keep the last state
        # gone from the queue (or listed as ended until MinJobAge): the exit code is in accounting
        acct = self.pool.run(self.submit_host, ["sacct", "-n", "-P", "-X", "-j", str(self.job_id), "-o", "State,ExitCode"])
        if acct.ok and acct.stdout.strip():
            st, code, sig = parse_sacct(acct.stdout)
            if st in TERMINAL:
                self.exit_code = code if not sig else 128 + sig
            return st
        return queued or self.state

    def _poll(self) -> None:
        while not self._ended.is_set():
            try:
                st = self._query()
            except ParseError as e:
                log.warning("Slurm job %s: %s", self.job_id, e)
                st = self.state
            if st != self.state:
                log.info("Slurm job %s: %s -> %s", self.job_id, self.state or "submitted", st)
                if self.journal:
                    self.journal.append("runtime.slurm.state", job_id=self.job_id, state=st, exit_code=self.exit_code)
            self.state = st
            if st in TERMINAL:
                self._ended.set()
                break
            self._ended.wait(self.poll_s)
        self._drain_log()
        for w in self.workers.values():
            w.rc = self.exit_code
            if self.state != "COMPLETED":
                w.error = f"Slurm job {self.job_id} {self.state}"
            w.done.set()

    # --- logs -------------------------------------------------------------------------------
    def _follow(self) -> None:
        """``tail -F`` the job's output in a session of its own (a :class:`SessionLauncher` worker: the
        raw labelled output lands in ``logs/slurm-<job>.log``), split by task label."""
        self._follower = SessionLauncher(self.pool, self.log_dir, on_line=self._demux)
        self._tail = self._follower.start(self.submit_host, ["tail", "-n", "+1", "-F", self.output],
                                          name=f"slurm-{self.job_id}")
        if self._tail.error:  # no log view is not fatal: the job still runs
            log.warning("cannot follow %s: %s", self.output, self._tail.error)

    def _demux(self, _submit_host: str, line: str) -> None:
        m = re.match(r"\s*(\d+): ?(.*)$", line)
        host = self.hosts[int(m.group(1))] if m and int(m.group(1)) < len(self.hosts) else None
        if host is None and line.startswith("tail: "):
            return  # tail's own notes ("has appeared; following new file")
        if host is not None:
            if host not in self._host_logs:
                self._host_logs[host] = open(self.workers[host].log_path, "ab")
            f = self._host_logs[host]
            if f.closed:  # the follower outlived the drain: nothing more is kept
                return
            f.write(m.group(2).encode() + b"\n")
            f.flush()
        if self.on_line:
            self.on_line(host or "slurm", m.group(2) if host else line)

    def _drain_log(self, quiet_s: float = 0.3, limit_s: float = 3.0) -> None:
        """The job is over: follow its output until it has been quiet for ``quiet_s`` (at most
        ``limit_s``), then hang up ``tail -F``, which never ends by itself."""
        t_end = time.monotonic() + limit_s
        while self._tail is not None and not self._tail.done.is_set() and time.monotonic() < t_end:
            if time.monotonic() - max(self._tail.last_data, self._t_submit) > quiet_s:
                break
            time.sleep(0.05)
        if self._follower is not None:
            self._follower.stop(timeout=2.0)
        for f in self._host_logs.values():
            f.close()

    # --- stop -------------------------------------------------------------------------------
    def cancel(self) -> None:
        """``scancel`` the job (no-op when it has ended)."""
        if self.job_id is None or self._ended.is_set():
            return
        r = self.pool.run(self.submit_host, ["scancel", str(self.job_id)])
        if self.journal:
            self.journal.append("runtime.slurm.cancel", job_id=self.job_id, rc=r.rc, error=r.error or r.stderr.strip() or None)

    def stop(self, grace_s: float = 3.0, timeout: float = 30.0) -> None:
        """Let the job end by itself for ``grace_s``, then cancel it and wait (``timeout``)
        until Slurm reports it over; then stop following its output. ``grace_s`` 0 (a failed or
        interrupted run) cancels at once, and says so."""
        if self.job_id is not None and grace_s <= 0 and not self.ended:
            self._phase("stop", f"cancelling Slurm job {self.job_id} (scancel)")
        if self.job_id is not None:
            if not self._ended.wait(grace_s):
                self.cancel()
                if not self._ended.wait(timeout):
                    self.pool.run(self.submit_host, ["scancel", "--signal=KILL", str(self.job_id)])
                    log.warning("Slurm job %s did not end within %g s of scancel", self.job_id, timeout)
                    self._ended.wait(5.0)
        for w in self.workers.values():
            w.done.wait(2.0)
        self._drain_log(quiet_s=0.0, limit_s=0.0)  # a no-op when the poller has already drained it
        remove_token_files(self.pool, self.token_files)
        self.token_files = {}

    @property
    def ended(self) -> bool:
        """Slurm has reported the job over (COMPLETED, FAILED, CANCELLED, TIMEOUT, ...)."""
        return self._ended.is_set()

    def describe(self) -> str:
        return f"Slurm job {self.job_id} on {self.submit_host}" + (f" ({self.state})" if self.state else "")
