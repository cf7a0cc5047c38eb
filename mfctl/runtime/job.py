"""The main job: a reconfigurable MoE training run (DESIGN §4, §6), in phases.

:class:`Job` runs them in order, each resource registered for teardown as it is acquired:

1. testbed (:mod:`mfctl.runtime.testbed`: the hardware, or a mock started for the run) and
   :func:`~mfctl.runtime.plan.plan_run` (pure: trace, rates, ranks, regions; a bad fit is exit 3);
2. the testbed lock, SSH pools; the health gate (:mod:`mfctl.runtime.health_gate`);
3. the OCS: device lock, initial topology applied, read back, links polled up;
4. the controller and the launcher (:mod:`mfctl.runtime.launcher`), every worker's hello;
5. training: per-layer traffic in → prediction → policy (:mod:`mfctl.runtime.policy`) →
   reconfiguration (:mod:`mfctl.runtime.reconfig`) → metrics;
6. the final OCS read-back against the last plan; teardown (signals held) and the records:
   journal, metrics, :class:`~mfctl.runtime.summary.RunSummary`.

Progress goes to an :class:`Observer`. Times: OCS switching is wall-clock (the emulator models
the physical time in real time); link-up, drain/resume and iteration times are *testbed* time —
wall time multiplied by the testbed's time scale (1 on hardware).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from pathlib import Path

from mfctl import settings
from mfctl.context import Context
from mfctl.errors import ExitCode, MfctlError
from mfctl.inventory import load_inventory
from mfctl.lock import testbed_lock
from mfctl.metrics.store import MetricsStore, index_run
from mfctl.observer import NullObserver
from mfctl.ocs.journal import Journal
from mfctl.runtime import health_gate, rundir
from mfctl.runtime.controller import Controller
from mfctl.runtime.launcher import Launcher, launcher_for
from mfctl.runtime.plan import RunPlan, plan_run
from mfctl.runtime.playbook import Playbook, load_playbook
from mfctl.runtime.reconfig import LinkPoller, Reconfiguration, recovery_hint
from mfctl.runtime.sampler import HealthSampler, warn_once_per_tool
from mfctl.runtime.summary import RunRecord, RunSummary
from mfctl.runtime.testbed import Testbed, testbed_for
from mfctl.runtime.topology import RunOCS
from mfctl.runtime.training import Training
from mfctl.signals import DeferSignals as _DeferSignals
from mfctl.signals import signal_of, sigterm_as_interrupt

log = logging.getLogger(__name__)


class Observer(NullObserver):
    """A run's progress hooks (:class:`mfctl.observer.Observer` plus the training's); the CLI
    subclasses this. Never prints from services."""

    def iteration(self, done: int, total: int, m: dict) -> None: ...  # m: the leader's iteration message
    def reconfiguration(self, rec: Reconfiguration) -> None: ...
    def log_line(self, host: str, line: str) -> None: ...


class Job:
    """One run of a playbook (:meth:`prepare` checks it, :meth:`run` runs it). ``testbed``
    defaults to :func:`~mfctl.runtime.testbed.testbed_for` the playbook."""

    def __init__(self, pb: Playbook, *, inventory_override: str | None = None, runs_dir: str | None = None,
                 observer: Observer | None = None, skip_health: bool = False,
                 health_limits: dict[str, float] | None = None, testbed: Testbed | None = None):
        self.pb, self.obs, self.skip_health = pb, observer or Observer(), skip_health
        self.health_limits = health_limits or {}  # threshold overrides (mfctl run --threshold)
        self.inventory_override = inventory_override
        self.testbed = testbed or testbed_for(pb, inventory_override)
        self.scale = self.testbed.time_scale
        self.runs_dir = Path(runs_dir or settings.get("runs_dir")).expanduser().resolve()
        self.run_id = time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)
        self.run_dir = self.runs_dir / self.run_id
        self.inv_path: str | None = None
        self.inv = None  # the inventory run on (a mock's, once started)
        self.plan: RunPlan | None = None
        self.journal: Journal | None = None
        self.store: MetricsStore | None = None
        self.token: str | None = None
        self.ctrl: Controller | None = None
        self.launcher: Launcher | None = None
        self.driver = None  # the OCS driver, open from the initial topology to teardown
        self.ocs: RunOCS | None = None  # ... and the run's work on it
        self.links: LinkPoller | None = None
        self.preflight = health_gate.Preflight()
        self.record = RunRecord()  # what the run learns, the OCS's state included
        self.t_train0: float | None = None
        self._aborting = False
        self.started = False  # holds the testbed lock: from here on the run keeps its directory
        self._stack = contextlib.ExitStack()  # teardown: what was acquired, in reverse

    # ---------------------------------------------------------------------------------
    def prepare(self) -> RunPlan:
        """Validate inventory and playbook together before anything starts. Raises ConfigError."""
        self.inv_path = self.inventory_override or str(self.pb.inventory_path())
        self.plan = plan_run(self.pb, load_inventory(self.inv_path))
        return self.plan

    def run(self) -> dict:
        """Run the job; return the summary (``RunSummary.to_dict()`` with ``exit_code``).
        ConfigError propagates before anything is started or written. A run refused before it
        started (its mock would not start, a hand-started mock's time scale, the testbed lock held)
        leaves no run directory — one rule with a playbook that does not fit: the error is the
        command's (and in the log file); a run that started keeps its directory however it ends."""
        if self.plan is None:
            self.prepare()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.journal = Journal(self.run_dir / "journal.jsonl")
        self.store = MetricsStore(self.run_dir / "metrics.db")
        fh = logging.FileHandler(self.run_dir / "mfctl.log")
        fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger("mfctl").addHandler(fh)
        logging.getLogger("mfctl").setLevel(logging.INFO)
        with sigterm_as_interrupt():  # (the handler found is put back after the clean-up)
            status, code, err = self._run_to_an_end()
            # a second Ctrl-C must not cut the clean-up short: the runtime, the Slurm job, the OCS
            # read-back, the mock and the run's records are finished first
            with _DeferSignals(reraise=False, on_signal=self._still_cleaning_up):
                self._stack.close()
                summary = self.summary(status, err)
                log.info("run %s %s after %d iterations, %d reconfiguration(s)%s", self.run_id, status,
                         len(self.record.iterations), len(self.record.reconfigs), f": {err}" if err else "")
                logging.getLogger("mfctl").removeHandler(fh)
                fh.close()
                if self.started:
                    self._write_records(summary, code)
                else:
                    self._discard_run_dir(summary)
        summary.exit_code = code
        return summary.to_dict() | {"exit_code": code}

    def _write_records(self, summary: RunSummary, code: int) -> None:
        """The run's end in the journal and the metrics store, summary.json, the runs index."""
        self.journal.append("run.end", status=summary.status, exit_code=code, error=summary.error)
        self.store.end_run(self.run_id, summary.status, code, summary)
        self.store.close()
        (self.run_dir / "summary.json").write_text(summary.to_json())
        rundir.remove_pid(self.run_dir)
        index_run(self.runs_dir, summary)

    def _discard_run_dir(self, summary: RunSummary) -> None:
        """A run refused before it started: no directory, no runs-index row (see :meth:`run`)."""
        import shutil

        self.store.close()
        shutil.rmtree(self.run_dir, ignore_errors=True)
        summary.run_dir = ""

    def _run_to_an_end(self) -> tuple[str, int, str | None]:
        """``(status, exit code, error)`` of the phases; anything but an interrupt or an
        MfctlError is raised after the teardown."""
        try:
            self._run()
        except KeyboardInterrupt as e:
            self._aborting = True
            if getattr(self, "lease", None) is not None and self.lease.lost.is_set():  # not the operator: fail safe
                return "failed", int(ExitCode.LOCKED), f"stopped: {self.lease.lost_reason}"
            return "interrupted", 130, f"interrupted by {signal_of(e)} (stopped by the operator)"
        except MfctlError as e:
            self._aborting = True
            return "failed", int(e.exit_code), str(e)
        except BaseException:
            self._aborting = True
            with _DeferSignals(reraise=False, on_signal=self._still_cleaning_up):
                self._stack.close()
            raise
        return "ok", 0, None

    def _still_cleaning_up(self, signum: int) -> None:
        self.obs.warning("still cleaning up (runtime, Slurm job, OCS read-back, mock) — the run's records are "
                         "written when it is done")

    # ---------------------------------------------------------------------------------
    def _run(self) -> None:
        pb, stack = self.pb, self._stack
        stack.callback(self.testbed.stop)  # first: a mock interrupted while it starts is stopped too
        inv_path = self.testbed.start(self.run_dir, self.obs)
        self.inv = inv = load_inventory(inv_path)
        self.testbed.check(inv)
        self.plan = plan_run(pb, inv)
        ctx = Context.from_settings(inv)
        # a lease renewed while the run lives; lost (lock service unreachable), the run is interrupted
        self.lease = stack.enter_context(testbed_lock(inv, f"mfctl run {pb.name} ({self.run_id})"))
        self.started = True
        rundir.write_pid(self.run_dir)
        self.store.start_run(self.run_id, pb.source or pb.name, inv.source, self.scale)
        self.journal.append("run.start", run_id=self.run_id, playbook=pb.source, inventory=inv.source)
        pool = stack.enter_context(ctx.pool())
        self.links = LinkPoller.for_run(stack.enter_context(ctx.pool()), linkup_timeout_s=pb.runtime.linkup_timeout_s,
                                        scale=self.scale, command_timeout_s=ctx.command_timeout)
        self._preflight(pool)
        self._initial_topology(ctx)
        training = self._launch(pool, ctx)
        training.loop({h.name for h in inv.hosts})
        self.ocs.final_check(inv.source or self.inv_path)

    def _preflight(self, pool) -> None:
        self.obs.phase("health", f"health sweep on {len(self.inv.hosts)} hosts")
        self.preflight = health_gate.sweep(pool, self.inv, limits=self.health_limits, store=self.store.health)
        self.preflight.gate(self.skip_health)
        p = self.preflight
        self.obs.phase("health", f"{p.healthy}/{len(p.results)} hosts healthy in {p.seconds:.2f} s")

    def _initial_topology(self, ctx: Context) -> None:
        names = self.plan.ocs_names
        self.obs.phase("ocs", "connecting to the OCS" if len(names) == 1 else f"connecting to {len(names)} OCSes")
        # each device lock (keyed by what the OCS says it is) is held until teardown closes its driver
        drivers = self.plan.drivers
        try:
            for name in names:
                drivers[name] = ctx.open_ocs(purpose=f"mfctl run {self.pb.name} ({self.run_id})", journals=[self.journal],
                                             ocs=name)
        except BaseException:
            for drv in drivers.values():
                drv.close()
            raise
        self.driver = drivers[names[0]] if len(names) == 1 else dict(drivers)  # several: each region's by name
        self.ocs = RunOCS(self.driver, self.plan, self.record, journal=self.journal, warn=self._warn, scale=self.scale)
        self._stack.callback(self.ocs.close)
        self.ocs.set_initial(self.links, self.obs)

    # ---------------------------------------------------------------------------------
    def _warn(self, message: str) -> None:
        log.warning("%s", message)
        self.record.warnings.append(message)
        self.obs.warning(message)

    def _welcome(self, host: str) -> dict:
        return self.plan.welcome(host, run_id=self.run_id, epoch=self.record.epoch, time_scale=self.scale,
                                 **self.testbed.welcome_fields(host))

    def _launch(self, pool, ctx: Context) -> Training:
        hosts = [h.name for h in self.inv.hosts]
        self.token = secrets.token_hex(16)
        listen = (self.testbed.controller_listen(self.inv), 0)  # the address the hosts reach, not every interface
        self.ctrl = Controller(token=self.token, welcome=self._welcome, expected_hosts=set(hosts), listen=listen)
        self._stack.callback(self.ctrl.close)
        addr = self.ctrl.address_str
        self.obs.phase("launch", f"launching the runtime ({self.pb.runtime.launcher}) on {len(hosts)} hosts; "
                                 f"controller on {addr}")
        self.launcher = launcher_for(self.pb, self.inv, pool, self.run_dir, self.run_id, journal=self.journal,
                                     observer=self.obs, on_line=self.obs.log_line)
        self._stack.callback(self._stop_launcher)
        self._stack.callback(lambda: self.ctrl.broadcast(list(self.ctrl.workers), {"type": "stop", "reason": "run ending"}))
        self.launcher.start(addr, self.token)
        self.launcher.wait_running()
        training = Training(self.plan, self.record, ctrl=self.ctrl, launcher=self.launcher, driver=self.driver,
                            links=self.links, store=self.store, journal=self.journal, observer=self.obs, warn=self._warn,
                            scale=self.scale, log_dir=self.run_dir / "logs")
        training.wait_hellos(hosts)
        self.journal.append("runtime.launched", hosts=hosts, controller=addr)
        self.t_train0 = time.monotonic()
        self._start_health_sampler(ctx)
        return training

    def _stop_launcher(self) -> None:
        self.launcher.stop(grace_s=0.0 if self._aborting else 3.0)  # a failed/interrupted run: at once
        self.journal.append("runtime.stopped", workers={h: {"rc": w.rc, "error": w.error}
                                                       for h, w in self.launcher.workers.items()})

    def _start_health_sampler(self, ctx: Context) -> None:
        """Sample health during the run on SSH sessions of the sampler's own (a hung tool holds only
        those); a command that does not answer within min(command_timeout, max(1 s, the interval))
        is a ``health.sample_timeout`` finding, and a warning of the run once per host and tool."""
        interval = self.pb.runtime.health_interval_s / self.scale
        if interval <= 0:
            return
        pool = self._stack.enter_context(ctx.pool(command_timeout=min(ctx.command_timeout, max(1.0, interval))))
        sampler = HealthSampler(pool, self.inv, interval_s=interval, store=self.store.health,
                                on_timeout=warn_once_per_tool(self._warn), limits=self.health_limits,
                                baseline=self.preflight.history).start()
        # at the run's end the sweeps under way finish (up to 2 s) and are stored; a failed or
        # interrupted run abandons them at once
        self._stack.callback(lambda: sampler.stop(finish_s=0.0 if self._aborting else 2.0))

    def summary(self, status: str, error: str | None) -> RunSummary:
        """The run's :class:`~mfctl.runtime.summary.RunSummary` as it stands."""
        inv = self.inv.source if self.inv is not None else self.inv_path
        return RunSummary.of_run(
            self.pb, self.record, self.plan.regions, run_id=self.run_id, status=status, error=error,
            inventory=self.inv.name if self.inv is not None else Path(self.inv_path or "?").name,
            run_dir=str(self.run_dir), time_scale=self.scale, health=self.preflight.summary(),
            slurm_job=self.launcher.job_id if self.launcher is not None else None,
            wall_train_s=max(0.0, time.monotonic() - self.t_train0) if self.t_train0 is not None else 0.0,
            warnings=recovery_hint(self.record.reconfigs, self.journal.records, inv,
                                   len(self.inv.ocses) if self.inv is not None else 1))


def run_playbook(path: str, **kw) -> dict:
    """Load ``path`` and run it. Returns the summary (with ``exit_code``)."""
    return Job(load_playbook(path), **kw).run()
