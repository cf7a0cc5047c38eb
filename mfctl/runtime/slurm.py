"""Submit, follow and cancel a training job through Slurm, over SSH to a submit host.

The flow (``runtime.launcher: slurm``):

1. the run token is written to a new 0600 file beside the job's output (on the shared
   filesystem; :func:`~mfctl.runtime.launcher.write_token`, the token on stdin), then
   ``sbatch --parsable`` runs on the submit host with the rendered script on stdin and the
   file's path as ``MFCTL_RUN_TOKEN_FILE`` in the submitting environment → the job id. The
   token itself is in no command line, script, environment or error message;
2. ``scontrol -o show job ID`` every ``poll_s`` for ``JobState``, ``Reason``, ``ExitCode`` and
   ``NodeList`` — the controller keeps a finished job for ``MinJobAge`` (300 s by default), with or
   without accounting; ``squeue`` drops it at once and ``sacct`` exits 1 where accounting is
   disabled. Only when the controller no longer knows the job is ``sacct -n -P -X -j ID -o
   State,ExitCode`` asked; when neither knows it, the job is over with state ``UNKNOWN``;
3. the job's output file (``srun --label``: every line starts with the task id) is followed
   with ``tail -F`` in a :class:`~mfctl.runtime.launcher.SessionLauncher` session (the raw output in
   ``logs/slurm-<ID>.log``) and split per host into ``logs/<host>.log``. A task id is mapped to
   the node Slurm ran it on — each task's first line says ``mfctl-task: ID NODE`` (its
   ``SLURM_PROCID`` and ``SLURMD_NODENAME``, :func:`~mfctl.runtime.render.render_slurm`), else
   the job's ``NodeList`` in Slurm's order — never by the inventory's order. Each line is passed
   to ``on_line(host, line)`` (``"slurm"`` for the batch script's own lines); srun's
   ``srun: error: NODE: task I: …`` lines are kept as that host's worker error;
4. :meth:`SlurmLaunch.stop` waits ``grace_s`` (at least :data:`END_GRACE_S`) for the job to end
   by itself (the controller has said ``stop``), then ``scancel``\\ s it and waits until Slurm
   reports it ended.

:class:`SlurmLaunch` implements the :class:`~mfctl.runtime.launcher.Launcher` protocol:
``start`` renders and submits the script (kept as ``sbatch.sh`` in the run directory),
``wait_running`` waits while the job is queued (``runtime.slurm.queue_timeout_s``), ``workers``
(host → :class:`~mfctl.runtime.launcher.Worker`, all done when the job ends, with its exit code),
``stop(grace_s)``.

The submit host is a GPU host of the inventory or one of its ``login_hosts`` (a login node
that is not a GPU server: the launcher opens an SSH pool of its own to it). A job that ends
other than COMPLETED names its state in every worker's error (:func:`describe_end`: TIMEOUT,
CANCELLED, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED, …).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path

from ClusterShell.NodeSet import NodeSet, NodeSetParseError

from mfctl.errors import MfctlError, OperationFailed, ParseError
from mfctl.runtime.launcher import SessionLauncher, Worker, remove_token_files, write_token
from mfctl.runtime.render import TASK_MARK, TOKEN_FILE_ENV, redact, render_slurm, slurm_output
from mfctl.transport.ssh import SSHPool, targets_from_data

log = logging.getLogger(__name__)

#: Slurm job states that mean the job is over (squeue/sacct ``%T``/``State``).
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"}
QUEUED = {"PENDING", "CONFIGURING", "REQUEUED", "RESIZING", "SUSPENDED", "REQUEUE_HOLD", "REQUEUE_FED"}
#: the state of a job neither the controller (past MinJobAge) nor accounting knows any more
UNKNOWN = "UNKNOWN"
#: wall seconds a job that was told to stop is given to end by itself at least: torchrun's exit
#: barrier and shutdown took 2.2 s on 4 nodes here (real torch 2.13 under srun), then Slurm's
#: epilog and one state poll follow
END_GRACE_S = 8.0
#: what an end state means (Slurm's job_state_codes man page, squeue(1) "JOB STATE CODES")
END_MEANING = {
    "FAILED": "a task or the batch script exited non-zero",
    "CANCELLED": "cancelled (scancel, by mfctl or an operator)",
    "TIMEOUT": "killed at its time limit",
    "NODE_FAIL": "a node of the job failed",
    "OUT_OF_MEMORY": "a task ran out of memory",
    "PREEMPTED": "preempted by another job",
    "BOOT_FAIL": "a node failed to boot",
    "DEADLINE": "not run by its deadline",
    "REVOKED": "revoked (federation)",
    "SPECIAL_EXIT": "held after a special exit",
    UNKNOWN: "no longer known to the controller (MinJobAge) and accounting is not available",
}


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


def parse_scontrol_job(text: str) -> dict[str, str]:
    """``Key=value`` fields of ``scontrol -o show job ID`` (one line; a value ends where the next
    `` Key=`` starts, so values with spaces survive). Raises ParseError without ``JobState``."""
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    fields = dict(re.findall(r"(?:^|\s)([A-Za-z][\w/:]*)=(.*?)(?=\s[A-Za-z][\w/:]*=|\s*$)", line.strip()))
    if not re.fullmatch(r"[A-Z_]+", fields.get("JobState", "")):
        raise ParseError("scontrol", 1, "'JobId=… JobState=STATE …' (scontrol -o show job ID)", line[:120])
    return fields


def parse_exit_code(text: str) -> tuple[int, int]:
    """``(exit_code, signal)`` of Slurm's ``EXIT:SIGNAL`` (``ExitCode=0:15``). Raises ParseError."""
    m = re.fullmatch(r"(\d+):(\d+)", text.strip())
    if not m:
        raise ParseError("scontrol", 1, "ExitCode=EXIT:SIGNAL", text[:40])
    return int(m.group(1)), int(m.group(2))


def describe_end(job_id: int | None, state: str | None, reason: str = "", time_limit: str = "") -> str:
    """``Slurm job 12 TIMEOUT: killed at its time limit (00:01:00)``, for a worker's error."""
    what = END_MEANING.get(state or "", "")
    if state == "TIMEOUT" and time_limit:
        what += f" ({time_limit})"
    if reason and reason not in ("None", "(null)") and state not in ("TIMEOUT", "CANCELLED"):
        what += f"; reason {reason}"
    return f"Slurm job {job_id} {state or 'ended'}" + (f": {what}" if what else "")


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
        self.time_limit = ""  # as the controller says it (TimeLimit=00:01:00)
        self.nodes: list[str] = []  # the job's nodes in Slurm's order (NodeList), once it has them
        self.task_hosts: dict[int, str] = {}  # srun task id → the node it ran on (its mfctl-task line)
        self.task_errors: dict[str, str] = {}  # node → srun's error line about its task
        self._own_pool: SSHPool | None = None  # to a login host that is not a GPU host
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
        submit = sl.submit_host or hosts[0]
        own = None
        if submit not in hosts and submit in {lh.name for lh in getattr(inv, "login_hosts", [])}:
            own = login_pool(inv, submit, pool)
        self = cls(own or pool, submit, hosts, run_dir / "logs", on_line=on_line, journal=journal, observer=observer)
        self._own_pool = own
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
        """The job's state now: the controller's (``scontrol -o show job``), else accounting's."""
        r = self.pool.run(self.submit_host, ["scontrol", "-o", "show", "job", str(self.job_id)])
        if r.error:
            return self.state  # the submit host is unreachable for now: keep the last state
        if r.ok and r.stdout.strip():
            f = parse_scontrol_job(r.stdout)
            st = f["JobState"]
            self.reason = f.get("Reason", "")
            self.time_limit = f.get("TimeLimit", self.time_limit)
            nl = f.get("NodeList", "")
            if nl and nl != "(null)" and not self.nodes:
                try:
                    self.nodes = list(NodeSet(nl))
                except NodeSetParseError:
                    log.warning("Slurm job %s: cannot read NodeList=%s", self.job_id, nl)
            if st in TERMINAL and "ExitCode" in f:
                code, sig = parse_exit_code(f["ExitCode"])
                self.exit_code = code if not sig else 128 + sig
            return st
        # the controller does not know the job (any more): MinJobAge has passed; ask accounting
        acct = self.pool.run(self.submit_host, ["sacct", "-n", "-P", "-X", "-j", str(self.job_id), "-o", "State,ExitCode"])
        if acct.ok and acct.stdout.strip():
            st, code, sig = parse_sacct(acct.stdout)
            if st in TERMINAL:
                self.exit_code = code if not sig else 128 + sig
            return st
        if "Invalid job id" in r.stderr:
            return UNKNOWN
        log.warning("Slurm job %s: scontrol show job said %s", self.job_id, (r.stderr or r.stdout).strip()[:200])
        return self.state

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
            if st in TERMINAL or st == UNKNOWN:
                self._ended.set()
                break
            self._ended.wait(self.poll_s)
        self._drain_log()
        end = describe_end(self.job_id, self.state, self.reason, self.time_limit)
        for w in self.workers.values():
            w.rc = self.exit_code
            if self.state != "COMPLETED":
                task = self.task_errors.get(w.host)
                w.error = f"{end}{f'; {task}' if task else ''}"
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

    def host_of_task(self, task: int) -> str | None:
        """The inventory host that ran srun task ``task``: what the task said (``mfctl-task``),
        else the job's ``NodeList`` in Slurm's order; None for a node outside the inventory."""
        host = self.task_hosts.get(task)
        if host is None and task < len(self.nodes):
            host = self.nodes[task]
        return host if host in self.workers else None

    def _demux(self, _submit_host: str, line: str) -> None:
        m = re.match(r"\s*(\d+): ?(.*)$", line)
        if m:
            mark = re.fullmatch(rf"{TASK_MARK} (\d+) (\S+)", m.group(2).strip())
            if mark and int(mark.group(1)) == int(m.group(1)):
                self.task_hosts[int(m.group(1))] = mark.group(2)
        host = self.host_of_task(int(m.group(1))) if m else None
        text = m.group(2) if m else line  # the task's own line, without its label
        if host is None and line.startswith("tail: "):
            return  # tail's own notes ("has appeared; following new file")
        err = re.match(r"srun: error: (\S+): tasks? ([\d,-]+): (.+)$", line)
        if err and err.group(1) in self.workers:
            self.task_errors.setdefault(err.group(1), f"srun: task {err.group(2)} on {err.group(1)}: {err.group(3)}")
        if host is not None:
            if host not in self._host_logs:
                self._host_logs[host] = open(self.workers[host].log_path, "ab")
            f = self._host_logs[host]
            if f.closed:  # the follower outlived the drain: nothing more is kept
                return
            f.write(text.encode() + b"\n")
            f.flush()
        if self.on_line:
            self.on_line(host or "slurm", text if host else line)

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
        """Let the job end by itself for ``grace_s`` (at least :data:`END_GRACE_S`), then cancel
        it and wait (``timeout``) until Slurm reports it over; then stop following its output.
        ``grace_s`` 0 (a failed or interrupted run) cancels at once, and says so."""
        if self.job_id is not None and grace_s <= 0 and not self.ended:
            self._phase("stop", f"cancelling Slurm job {self.job_id} (scancel)")
        if self.job_id is not None:
            if not self._ended.wait(max(grace_s, END_GRACE_S) if grace_s > 0 else 0):
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
        if self._own_pool is not None:
            self._own_pool.close()

    @property
    def ended(self) -> bool:
        """Slurm has reported the job over (COMPLETED, FAILED, CANCELLED, TIMEOUT, ...)."""
        return self._ended.is_set()

    def end_reason(self) -> str | None:
        """How the job ended when not COMPLETED (:func:`describe_end`), None while it runs."""
        if not self.ended or self.state == "COMPLETED":
            return None
        return describe_end(self.job_id, self.state, self.reason, self.time_limit)

    def describe(self) -> str:
        return f"Slurm job {self.job_id} on {self.submit_host}" + (f" ({self.state})" if self.state else "")


def login_pool(inv, name: str, like: SSHPool) -> SSHPool:
    """An SSH pool to the inventory's login host ``name`` (the inventory's known_hosts and host
    key policy, ``like``'s timeouts): the GPU hosts' pool has no target for it."""
    doc = inv.model_dump(mode="json", include={"ssh": True, "login_hosts": {"__all__": {"name", "ssh"}}})
    doc["hosts"] = [h for h in doc.pop("login_hosts") if h["name"] == name]
    return SSHPool(targets_from_data(doc, inv.base_dir), connect_timeout=like.connect_timeout,
                   command_timeout=like.command_timeout)
