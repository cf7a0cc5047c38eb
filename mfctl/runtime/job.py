"""The main job: a reconfigurable MoE training run (DESIGN §4, §6).

:func:`run_playbook` validates, locks the testbed, sweeps health, sets and verifies the
initial topology, launches the runtime on every host, then runs the controller loop:
per-layer traffic in → EWMA prediction → plan per region → reconfigure when the predicted
gain over the window exceeds the cost → metrics. Progress goes to an observer (the CLI
renders it); the result is a summary dict.

Times: OCS switching is wall-clock (the emulator models the physical time in real time);
link-up, drain/resume and iteration times are *testbed* time — wall time multiplied by
the playbook's ``mock.time_scale`` (1 on hardware).
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import secrets
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mfctl import mockctl, settings
from mfctl.errors import ConfigError, MfctlError, OperationFailed, UnreachableError
from mfctl.fabric import mapping
from mfctl.fabric.planner import LinkRates, objective, plan as plan_circuits
from mfctl.fabric.predict import CrossLayerModel, EWMAPredictor, LastPredictor, rel_error
from mfctl.fabric.traffic import expert_to_rank, load_routing, rank_matrix, rank_to_server, server_matrix
from mfctl.hosts import health
from mfctl.inventory import load_inventory
from mfctl.lock import TestbedLock
from mfctl.metrics.store import MetricsStore, index_run
from mfctl.ocs.driver import open_ocs, pending_apply
from mfctl.ocs.journal import Journal
from mfctl.runtime.controller import Controller
from mfctl.runtime.launcher import Launcher
from mfctl.runtime.playbook import Playbook, load_playbook
from mfctl.runtime.reconfig import LinkPoller, Proposal, Reconfiguration, Reconfigurator, WaitTimeout
from mfctl.runtime.render import render_hosts, render_slurm, slurm_output
from mfctl.runtime.sampler import HealthSampler
from mfctl.runtime.slurm import SlurmLaunch
from mfctl.signals import DeferSignals as _DeferSignals
from mfctl.transport.ssh import SSHPool, targets_from_inventory

log = logging.getLogger(__name__)

from mfctl.fabric.planner import GOODPUT  # noqa: E402,F401 (re-exported for older importers)


class Observer:
    """Progress hooks; the CLI subclasses this. Never prints from services."""

    def phase(self, name: str, detail: str = "") -> None: ...
    def iteration(self, done: int, total: int, m: dict) -> None: ...
    def reconfiguration(self, rec: dict) -> None: ...
    def warning(self, message: str) -> None: ...  # the Job also keeps them for the summary
    def log_line(self, host: str, line: str) -> None: ...


@dataclass
class RegionState:
    name: str
    hosts: list[str]
    ports: np.ndarray
    lanes: dict[str, list[mapping.LaneRef]]
    circuits: list[mapping.Circuit] = field(default_factory=list)  # on the OCS
    routed: list[mapping.Circuit] | None = None  # of those, the ones carrying traffic (lanes up); None: all
    predicted: np.ndarray | None = None  # the policy's prediction of per-layer dispatch bytes [L, n, n]
    predictors: dict = field(default_factory=dict)
    last_reconfig_iter: int = 0
    last_iter_s: float | None = None


def _sigterm_as_interrupt(signum, frame):
    raise KeyboardInterrupt


class Job:
    def __init__(self, pb: Playbook, *, inventory_override: str | None = None, runs_dir: str | None = None,
                 observer: Observer | None = None, skip_health: bool = False,
                 health_limits: dict[str, float] | None = None):
        self.pb = pb
        self.health_limits = health_limits or {}  # threshold overrides (mfctl run --threshold)
        self.obs = observer or Observer()
        self.inventory_override = inventory_override
        self.runs_dir = Path(runs_dir or settings.get("runs_dir")).expanduser().resolve()
        self.skip_health = skip_health
        self.run_id = time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)
        self.run_dir = self.runs_dir / self.run_id
        self.scale = pb.mock.time_scale if pb.mock.enabled else 1.0
        self.epoch = 0
        self.reconfigs: list[Reconfiguration] = []
        self.iter_rows: dict[int, dict] = {}
        self.done_hosts: set[str] = set()
        self.failed: str | None = None
        self.pred_errors: dict[str, list[float]] = {}
        self.warnings: list[str] = []
        self.mock_state: Path | None = None
        self.mock_started = False

    # ---------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Validate inventory and playbook together before anything starts. Raises ConfigError."""
        self.inv_path = self.inventory_override or str(self.pb.inventory_path())
        self._check_job_fits(load_inventory(self.inv_path))

    def run(self) -> dict:
        """Run the job; return the summary (with ``exit_code``). ConfigError propagates
        before anything is started or written."""
        if not hasattr(self, "inv_path"):
            self.prepare()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.journal = Journal(self.run_dir / "journal.jsonl")
        self.store = MetricsStore(self.run_dir / "metrics.db")
        fh = logging.FileHandler(self.run_dir / "mfctl.log")
        fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger("mfctl").addHandler(fh)
        logging.getLogger("mfctl").setLevel(logging.INFO)
        old_term = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
        if old_term is not None:
            signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
        status, code, err = "ok", 0, None
        self._aborting = False
        try:
            self._run()
        except KeyboardInterrupt:
            status, code, err = "interrupted", 130, "stopped by the operator (SIGINT/SIGTERM)"
            self._aborting = True
        except MfctlError as e:
            status, code, err = "failed", int(e.exit_code), str(e)
            self._aborting = True
        except BaseException:
            self._aborting = True
            with _DeferSignals(reraise=False, on_signal=self._still_cleaning_up):
                self._teardown()
            if old_term is not None:
                signal.signal(signal.SIGTERM, old_term)
            raise
        # a second Ctrl-C must not cut the clean-up short: the runtime, the Slurm job, the OCS
        # read-back, the mock and the run's records are finished first
        with _DeferSignals(reraise=False, on_signal=self._still_cleaning_up):
            self._teardown()
            summary = self.summary(status, err)
            log.info("run %s %s after %d iterations, %d reconfiguration(s)%s", self.run_id, status, len(self.iter_rows),
                     len(self.reconfigs), f": {err}" if err else "")
            logging.getLogger("mfctl").removeHandler(fh)
            self.journal.append("run.end", status=status, exit_code=code, error=err)
            if getattr(self, "store", None):
                self.store.end_run(self.run_id, status, code, summary)
                self.store.close()
            (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
            index_run(self.runs_dir, summary)
        if old_term is not None:  # after the block, which puts back the handlers it found
            signal.signal(signal.SIGTERM, old_term)
        summary["exit_code"] = code
        return summary

    def _still_cleaning_up(self, signum: int) -> None:
        self.obs.warning("still cleaning up (runtime, Slurm job, OCS read-back, mock) — the run's records are "
                         "written when it is done")

    # ---------------------------------------------------------------------------------
    def _run(self) -> None:
        pb = self.pb
        inv_path = self.inv_path
        self.pool = self.ctrl = self.launcher = self.driver = None
        if pb.mock.enabled and not self.inventory_override:
            self.obs.phase("mock", f"starting the mock testbed for {Path(inv_path).name}")
            self.mock_state = self.run_dir / "mock"
            st = mockctl.start(inv_path, self.mock_state, time_scale=self.scale)
            self.mock_started = True
            inv_path = st["inventory"]
        self.inv = inv = load_inventory(inv_path)
        status = Path(inv_path).parent / "status.json"
        if pb.mock.enabled and status.exists():  # a mock started by hand: its time scale must be the playbook's
            ts = json.loads(status.read_text()).get("time_scale")
            if ts is not None and abs(float(ts) - self.scale) > 1e-9:
                raise ConfigError(f"the mock testbed runs at time scale {ts:g} but the playbook says {self.scale:g} "
                                  f"(mfctl mock up --time-scale {self.scale:g})", path=pb.source)
        self.store.start_run(self.run_id, pb.source or pb.name, inv.source, self.scale)
        self.journal.append("run.start", run_id=self.run_id, playbook=pb.source, inventory=inv.source)
        self._check_job_fits(inv)
        with TestbedLock(inv.name, f"mfctl run {pb.name} ({self.run_id})"):
            self.pool = self._ssh_pool()
            # link polls on sessions of their own: a host's session runs one command at a time, and a
            # poll must not wait behind another command (a Slurm poll, a hung tool); each poll has a timeout
            self.link_pool = self._ssh_pool()
            self.links = LinkPoller(self.link_pool, timeout_s=pb.runtime.linkup_timeout_s / self.scale,
                                    interval_s=max(0.005, 0.25 / self.scale),
                                    poll_timeout_s=min(settings.get_float("command_timeout"),
                                                       max(1.0, pb.runtime.linkup_timeout_s / self.scale)))
            self._preflight()
            self._initial_topology()
            self._launch()
            self._loop()
            self._final_check()

    def _ssh_pool(self, command_timeout: float | None = None) -> SSHPool:
        """A pool of SSH sessions to every host (timeouts in s, from the settings)."""
        return SSHPool(targets_from_inventory(self.inv), connect_timeout=settings.get_float("connect_timeout"),
                       command_timeout=command_timeout or settings.get_float("command_timeout"),
                       fanout=settings.get_int("fanout"))

    def _check_job_fits(self, inv) -> None:
        pb = self.pb
        try:
            trace = load_routing(pb.model.routing, pb.training.domains)
        except ValueError as e:
            raise ConfigError(str(e), path=pb.source) from None
        self.trace = trace
        gps = inv.hosts[0].gpus.count
        if any(h.gpus.count != gps for h in inv.hosts):
            raise ConfigError("hosts have different GPU counts; the simulated runtime needs them equal", path=inv.source)
        ep, tp = pb.parallelism.ep, pb.parallelism.tp
        for r in inv.regions:
            if ep * tp != len(r.hosts) * gps:
                raise ConfigError(f"EP {ep} x TP {tp} = {ep * tp} GPUs, but region {r.name} has "
                                  f"{len(r.hosts)} x {gps} GPUs (a region is one EP group)", path=self.pb.source)
        if trace.num_experts % ep:
            raise ConfigError(f"{trace.num_experts} experts of {trace.model} do not divide over EP={ep}", path=pb.source)
        if pb.mock.crash_host and pb.mock.crash_host not in {h.name for h in inv.hosts}:
            raise ConfigError(f"mock.crash_host {pb.mock.crash_host!r} is not in the inventory", path=pb.source)
        sh = pb.runtime.slurm.submit_host
        if pb.runtime.launcher == "slurm" and sh and sh not in {h.name for h in inv.hosts}:
            raise ConfigError(f"runtime.slurm.submit_host {sh!r} is not in the inventory", path=pb.source)
        nic = inv.hosts[0].ocs_lanes()[0][0]
        eps_nics = inv.hosts[0].eps_nics()
        self.rates = LinkRates(circuit_Bps=nic.lane_rate_gbps * 1e9 / 8 * GOODPUT,
                               eps_Bps=sum(n.speed_gbps for n in eps_nics) * 1e9 / 8 * GOODPUT)
        self.er = expert_to_rank(trace.num_experts, ep)
        try:
            self.crosslayer = CrossLayerModel.load(pb.model.routing, pb.training.domains)
        except ValueError:
            self.crosslayer = None
        self.rs = rank_to_server(ep, tp, gps)
        self.gps = gps
        self.regions = {}
        for r in inv.regions:
            lanes = mapping.region_lanes(inv, r.hosts)
            self.regions[r.name] = RegionState(r.name, list(r.hosts), np.array([len(lanes[h]) for h in r.hosts]), lanes)

    # ---------------------------------------------------------------------------------
    def _preflight(self) -> None:
        self.obs.phase("health", f"health sweep on {len(self.inv.hosts)} hosts")
        t = time.monotonic()
        before = self._nic_history = health.load_baseline(self.inv)  # the NIC counters' history, as `mfctl health` keeps it
        res = health.full_sweep(self.pool, self.inv, limits=self.health_limits,  # `mfctl health`'s checks (the OCS apart)
                                baseline=before)
        try:
            health.save_baseline(self.inv, res, before)
        except OSError as e:
            log.warning("NIC counters of the pre-flight sweep not kept: %s", e)
        self.health = [h.to_dict() for h in res]
        for h in res:
            self.store.health(h.host, h.worst, [f.to_dict() for f in h.findings])
        self.health_s = time.monotonic() - t
        unreachable = [h for h in res if not h.reachable]
        if unreachable:
            raise UnreachableError("unreachable: " + "; ".join(f"{h.host}: {f.message}" for h in unreachable for f in h.findings[:1]))
        crit = [f for h in res for f in h.findings if f.severity == "critical"]
        if crit and not self.skip_health:
            msg = "; ".join(f"{f.host}: {f.message}" for f in crit[:5])
            raise OperationFailed(f"health sweep found {len(crit)} critical problem(s): {msg}")
        self.obs.phase("health", f"{sum(h.worst == 'ok' for h in res)}/{len(res)} hosts healthy in {self.health_s:.2f} s")

    def _initial_topology(self) -> None:
        self.obs.phase("ocs", "connecting to the OCS")
        # the device lock (keyed by what the OCS says it is) is held until teardown closes the driver
        self.driver = open_ocs(self.inv, purpose=f"mfctl run {self.pb.name} ({self.run_id})", journals=[self.journal],
                               connect_timeout=settings.get_float("connect_timeout"),
                               command_timeout=settings.get_float("command_timeout"))
        current = self.driver.cross_connects()
        self.journal.append("ocs.state", endpoint=self.driver.endpoint, cross_connects=sorted(current.items()))
        desired: dict[int, int] = {}
        region_ports = set()
        for reg in self.regions.values():
            region_ports |= {p for ls in reg.lanes.values() for l in ls for p in (l.ocs_tx, l.ocs_rx)}
            prev = mapping.circuits_from_cross_connects(reg.lanes, current)
            how = self.pb.topology.initial
            n = len(reg.hosts)
            if how == "keep":
                reg.circuits = prev
            else:
                if how == "random":
                    C = _random_regular(reg.ports, np.random.default_rng([self.pb.training.seed, 99]))
                else:
                    B = self._prior_matrix(n)
                    C = plan_circuits(B, reg.ports, self.rates, method=self.pb.topology.planner).circuits
                reg.circuits = mapping.map_circuits(C, reg.hosts, reg.lanes, prev)
            desired.update(mapping.cross_connect_map(reg.circuits))
        # cross-connects on ports outside every region are left alone
        for i, o in current.items():
            if i not in region_ports and o not in region_ports:
                desired[i] = o
        self.obs.phase("ocs", f"initial topology ({self.pb.topology.initial}) via {self.driver.endpoint}")
        with _DeferSignals():
            res = self.driver.apply(desired, reason="initial topology")
        self.initial_apply = res.to_dict()
        self.initial_circuits = {r.name: mapping.circuit_matrix(r.circuits, r.hosts).tolist() for r in self.regions.values()}
        t = time.monotonic()
        lw = self.links.wait([c for r in self.regions.values() for c in r.circuits])
        self.initial_linkup_ms = (lw.up_at - t) * 1000 * self.scale
        if lw.down:
            self._warn(f"initial circuits with lanes still down after {self.pb.runtime.linkup_timeout_s:g} s: {', '.join(lw.down)}")
        down = set(lw.down)
        for reg in self.regions.values():
            reg.routed = [c for c in reg.circuits if not {f"{c.a.host}:{c.a.netdev}", f"{c.b.host}:{c.b.netdev}"} & down]
        self.last_plan: dict[int, int] | None = dict(res.readback)  # what the OCS holds (None: could not be read)

    def _prior_matrix(self, n: int) -> np.ndarray:
        """Expected dispatch bytes from the trace's mean routing (before any traffic is seen)."""
        p = self.trace.probs.mean(axis=0)  # [trace layer, expert]
        tokens_per_rank = self.pb.training.seq_len * self.pb.training.micro_batch * self.trace.top_k
        mats = []
        for l in range(self.pb.model.layers):
            t = np.tile(p[self.trace.trace_layer_for(l)] * tokens_per_rank, (self.pb.parallelism.ep, 1))
            mats.append(server_matrix(rank_matrix(t, self.er, self.pb.parallelism.ep), self.rs, n,
                                      self.pb.model.hidden * self.pb.model.bytes_per_element))
        return np.stack(mats)

    # ---------------------------------------------------------------------------------
    def _warn(self, message: str) -> None:
        log.warning("%s", message)
        self.warnings.append(message)
        self.obs.warning(message)

    def _welcome(self, host: str) -> dict:
        pb = self.pb
        reg = next(r for r in self.regions.values() if host in r.hosts)
        routed = reg.circuits if reg.routed is None else reg.routed  # (lanes down: those pairs over the EPS)
        C = mapping.circuit_matrix(routed, reg.hosts)
        crash = pb.mock.crash_at_iteration if pb.mock.crash_host == host else None
        return {"run_id": self.run_id, "region": reg.name, "hosts": reg.hosts, "leader": reg.hosts[0],
                "iterations": pb.training.iterations, "time_scale": self.scale, "epoch": self.epoch,
                "model": pb.model.model_dump(), "parallelism": pb.parallelism.model_dump(),
                "training": pb.training.model_dump(), "gpus_per_server": self.gps,
                "rates": {"circuit_Bps": self.rates.circuit_Bps, "eps_Bps": float(self.rates.eps_Bps)},
                "circuits": C.tolist(), "routes": mapping.route_table(routed, reg.hosts),
                "crash_at_iteration": crash}

    def _launch(self) -> None:
        hosts = [h.name for h in self.inv.hosts]
        self.token = secrets.token_hex(16)
        bind = "127.0.0.1" if self.pb.mock.enabled else _advertised_ip(self.inv.hosts[0].ssh.address)
        self.ctrl = Controller(token=self.token, welcome=self._welcome, expected_hosts=set(hosts), listen=(bind, 0))
        addr = self.ctrl.address_str  # bound on the address the hosts reach, not every interface
        self.obs.phase("launch", f"launching the runtime ({self.pb.runtime.launcher}) on {len(hosts)} hosts; controller on {addr}")
        if self.pb.runtime.launcher == "slurm":
            self._submit_slurm(hosts, addr)
        else:
            self.launcher = Launcher(self.pool, self.run_dir / "logs", on_line=self.obs.log_line)
            for hl in render_hosts(self.pb, self.inv, addr, self.token):
                self.journal.append("runtime.launch", host=hl.host, command=hl.command_line(redact=True))
                w = self.launcher.start(hl.host, hl.full_argv())
                if w.error:
                    raise UnreachableError(w.error)
        # wait for every worker's hello
        pending = set(hosts)
        deadline = time.monotonic() + 30
        while pending:
            host, msg = self._next_event(deadline, "runtime workers to connect: " + ", ".join(sorted(pending)))
            if msg["type"] == "hello":
                pending.discard(host)
            else:
                self._handle(host, msg)
        self.journal.append("runtime.launched", hosts=hosts, controller=addr)
        self.t_train0 = time.monotonic()
        self._start_health_sampler()

    def _submit_slurm(self, hosts: list[str], addr: str) -> None:
        """sbatch the rendered script on the submit host, then wait while the job is queued."""
        sl = self.pb.runtime.slurm
        submit_host = sl.submit_host or hosts[0]
        script = render_slurm(self.pb, self.inv, addr, "<from-environment>", self.run_id)
        (self.run_dir / "sbatch.sh").write_text(script)
        self.launcher = SlurmLaunch(self.pool, submit_host, hosts, self.run_dir / "logs", on_line=self.obs.log_line,
                                    journal=self.journal)
        job_id = self.launcher.submit(script, slurm_output(self.pb, self.run_id), self.token)
        self.obs.phase("launch", f"submitted Slurm job {job_id} on {submit_host}; waiting for it to start")
        shown = []

        def on_wait(state, reason):
            if state and (state, reason) not in shown:
                shown.append((state, reason))
                self.obs.phase("launch", f"Slurm job {job_id} {state or 'submitted'}{f' ({reason})' if reason else ''}")

        self.launcher.wait_running(sl.queue_timeout_s, on_wait)

    def _start_health_sampler(self) -> None:
        """Sample health during the run on SSH sessions of the sampler's own (a hung tool holds only
        those); a command that does not answer within min(command_timeout, max(1 s, the interval))
        is a ``health.sample_timeout`` finding, and a warning of the run once per host and tool."""
        interval = self.pb.runtime.health_interval_s / self.scale
        if interval <= 0:
            return
        self.sample_pool = self._ssh_pool(min(settings.get_float("command_timeout"), max(1.0, interval)))
        warned: set[tuple[str, str]] = set()

        def on_timeout(host: str, f) -> None:
            if (host, f.component) not in warned:
                warned.add((host, f.component))
                self._warn(f"{host}: {f.message}; recorded as {f.code}, training unaffected")

        self.sampler = HealthSampler(self.sample_pool, self.inv, interval_s=interval, store=self.store.health,
                                     on_timeout=on_timeout, limits=self.health_limits,
                                     baseline=getattr(self, "_nic_history", None)).start()

    def _next_event(self, deadline: float, waiting_for: str) -> tuple[str, dict]:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeout(f"timed out waiting for {waiting_for}")
            for w in self.launcher.workers.values():
                if w.done.is_set() and w.host not in self.done_hosts and self.ctrl and w.host not in self.ctrl.workers:
                    if self.ctrl.events.empty():
                        why = f"{w.error}, " if w.error else ""
                        raise OperationFailed(f"runtime on {w.host} exited ({why}rc {w.rc}) before finishing; "
                                              f"see {w.log_path}")
            try:
                return self.ctrl.events.get(timeout=min(remaining, 0.2))
            except queue.Empty:
                continue

    # ---------------------------------------------------------------------------------
    def _loop(self) -> None:
        hosts = {h.name for h in self.inv.hosts}
        self.obs.phase("train", f"training {self.pb.training.iterations} iterations")
        while self.done_hosts != hosts:
            host, msg = self._next_event(time.monotonic() + 300, "runtime progress")
            self._handle(host, msg, allow_reconfig=True)
            if self.failed:
                raise OperationFailed(self.failed)

    def _handle(self, host: str, msg: dict, allow_reconfig: bool = False) -> None:
        t = msg["type"]
        if t == "iteration":
            self.store.iteration(host, msg)
            reg = next(r for r in self.regions.values() if host in r.hosts)
            if host == reg.hosts[0]:
                self.iter_rows[msg["iteration"]] = msg
                reg.last_iter_s = msg["seconds"]
                self.obs.iteration(msg["iteration"], self.pb.training.iterations, msg)
        elif t == "traffic":
            reg = next(r for r in self.regions.values() if host == r.hosts[0])
            B = np.asarray(msg["matrices"], dtype=float)
            self._log_predictions(reg, msg["iteration"], B, msg.get("tokens") or {})
            reg.predicted = reg.predictors[self.pb.policy.predictor].predict()
            if allow_reconfig and self.pb.policy.enabled:
                self._maybe_reconfigure(reg, msg["iteration"])
        elif t == "bye":
            self.done_hosts.add(host)
        elif t == "error":
            self.failed = f"runtime on {host} reported: {msg.get('message')}"
        elif t == "_disconnected":
            if host not in self.done_hosts:
                self.failed = f"runtime on {host} disconnected before finishing (see {self.run_dir / 'logs' / (host + '.log')})"
                raise OperationFailed(self.failed)

    def _log_predictions(self, reg: RegionState, iteration: int, B: np.ndarray, tokens: dict) -> None:
        """Score every predictor's guess for this iteration, then let them see it. The
        cross-layer model predicts trace layer b from layer a of the same iteration."""
        if not reg.predictors:
            reg.predictors = {"last": LastPredictor(), "ewma": EWMAPredictor(self.pb.policy.ewma_alpha)}
        for name, pr in reg.predictors.items():
            guess = pr.predict()
            if guess is not None and guess.shape == B.shape:
                err = rel_error(guess, B)
                self.store.prediction(iteration, reg.name, name, err)
                self.pred_errors.setdefault(name, []).append(err)
            pr.observe(B)
        if self.crosslayer is not None and tokens:
            for (a, b) in self.crosslayer.P:
                if str(a) in tokens and str(b) in tokens:
                    ta, tb = np.asarray(tokens[str(a)]), np.asarray(tokens[str(b)])
                    n = len(reg.hosts)

                    def fold(t, n=n):
                        return server_matrix(rank_matrix(t, self.er, self.pb.parallelism.ep), self.rs, n, 1.0)

                    err = rel_error(fold(self.crosslayer.predict_tokens(ta, a, b)), fold(tb))
                    name = f"crosslayer-{a}-{b}"
                    self.store.prediction(iteration, reg.name, name, err)
                    self.pred_errors.setdefault(name, []).append(err)

    def _maybe_reconfigure(self, reg: RegionState, iteration: int) -> None:
        pol = self.pb.policy
        if iteration - reg.last_reconfig_iter < pol.min_interval_iterations and reg.last_reconfig_iter:
            return
        left = self.pb.training.iterations - iteration
        if left <= 1 or reg.last_iter_s is None:
            return
        if self.last_plan is None and not self._reread_ocs():
            return  # what the OCS holds is not known: no change is planned on top of it
        t0 = time.perf_counter()
        B = reg.predicted
        C_cur = mapping.circuit_matrix(reg.circuits, reg.hosts)
        # minimum-change planning: keep the current circuits unless something is better by
        # more than min_improvement, and then change as few circuits as possible
        p = plan_circuits(B, reg.ports, self.rates, method=self.pb.topology.planner, current=C_cur,
                          tolerance=pol.min_improvement)
        if np.array_equal(p.circuits, C_cur):
            return
        new = mapping.map_circuits(p.circuits, reg.hosts, reg.lanes, reg.circuits)
        keep = [c for c in new if c in reg.circuits]
        C_keep = mapping.circuit_matrix(keep, reg.hosts)
        mb = self.pb.training.micro_batches
        cand = np.stack([C_cur, p.circuits, C_keep])
        o_cur, o_new, o_keep = (float(x) for x in objective(B, cand, self.rates))
        gain_per_iter = (o_cur - o_new) * mb
        window = min(pol.window_iterations, left)
        R = self._expected_reconfig_s()
        slowdown = max(0.0, (o_keep - o_cur) * mb) / max(reg.last_iter_s, 1e-9)
        cost = R * slowdown / (1 + slowdown)
        gain = gain_per_iter * window
        t_plan = (time.perf_counter() - t0) * 1000
        self.journal.append("policy.decision", region=reg.name, iteration=iteration, gain_s=gain, cost_s=cost,
                            objective_now_s=o_cur, objective_plan_s=o_new, method=p.method,
                            circuits=p.circuits.tolist())
        if gain - cost <= pol.min_gain_s:
            return
        self._reconfigure(reg, iteration, new, p, gain, cost, o_cur, o_new, t_plan)

    def _expected_reconfig_s(self) -> float:
        if not self.reconfigs:
            return self.pb.policy.expected_reconfig_s
        tot = [(r.t_switch_ms + r.t_linkup_ms + r.t_drain_ms + r.t_resume_ms) / 1000 for r in self.reconfigs]
        return float(np.mean(tot))

    def _reconfigure(self, reg: RegionState, iteration: int, new: list[mapping.Circuit], p, gain, cost,
                     o_cur, o_new, t_plan_ms) -> None:
        """Run one reconfiguration (:class:`mfctl.runtime.reconfig.Reconfigurator`) and take in its
        outcome: the region's circuits and routes, the last plan (= what the OCS holds), the
        records, a warning when it did not go as planned. Raises OperationFailed only when a
        worker did not resume (the OCS is consistent with the records by then)."""
        self.epoch += 1
        e = self.epoch
        self.obs.phase("reconfig", f"epoch {e}: {reg.name} at iteration {iteration}")
        region_ports = {port for ls in reg.lanes.values() for l in ls for port in (l.ocs_tx, l.ocs_rx)}
        prop = Proposal(epoch=e, region=reg.name, hosts=list(reg.hosts), lanes=reg.lanes, iteration=iteration,
                        old=list(reg.circuits), new=list(new), planned=p.circuits, ocs_before=dict(self.last_plan),
                        region_ports=region_ports, routed=reg.routed, method=p.method, predicted_gain_s=gain,
                        predicted_cost_s=cost, objective_before_s=o_cur, objective_after_s=o_new, t_plan_ms=t_plan_ms)
        machine = Reconfigurator(self.driver, self, self.links, scale=self.scale,
                                 drain_timeout_s=self.pb.runtime.drain_timeout_s,
                                 resume_timeout_s=self.pb.runtime.resume_timeout_s,
                                 journal=self.journal.append, guard=_DeferSignals)
        try:
            rec = machine.run(prop)
        except BaseException:  # interrupted, a worker lost: the records and the last plan stay true
            if machine.rec is not None:
                self._take(reg, machine.rec)
            raise
        self._take(reg, rec)
        if rec.fatal:
            raise OperationFailed(rec.fatal)

    def _take(self, reg: RegionState, rec: Reconfiguration) -> None:
        """Take in a reconfiguration's outcome (see :meth:`_reconfigure`)."""
        e = rec.epoch
        reg.circuits, reg.routed = rec.in_force, rec.routed
        self.last_plan = rec.ocs_state  # the OCS as read back (None: it could not be read)
        reg.last_reconfig_iter = rec.iteration
        self.reconfigs.append(rec)
        d = rec.to_dict()
        self.store.reconfiguration(d)
        log.info("reconfiguration epoch %d %s: +%d/-%d cross-connects, switch %.1f ms, link-up %.2f s, runtime %.0f ms",
                 e, rec.outcome, rec.xc_added, rec.xc_removed, rec.t_switch_ms, rec.t_linkup_ms / 1000,
                 d["t_runtime_ms"])
        what = rec.describe()
        if what:
            self._warn(what)
        elif rec.lanes_down:
            self._warn(f"epoch {e}: {rec.failures[-1].error}" if rec.failures else
                       f"epoch {e}: lanes did not come up: {', '.join(rec.lanes_down)}")
        self.obs.reconfiguration(d)

    def _reread_ocs(self) -> bool:
        """Read the OCS again after it could not be read; True when it could (the last plan is then
        what it holds, and each region's circuits what the read shows)."""
        try:
            rb = self.driver.cross_connects()
        except (OperationFailed, UnreachableError) as e:
            log.warning("OCS still unreadable: %s", e)
            return False
        self.last_plan = rb
        for reg in self.regions.values():
            found = mapping.circuits_from_cross_connects(reg.lanes, rb)
            known = {frozenset((c.a.key, c.b.key)): c for c in reg.circuits}
            routed = reg.circuits if reg.routed is None else reg.routed
            reg.circuits = [known.get(frozenset((c.a.key, c.b.key)), c) for c in found]
            reg.routed = [c for c in reg.circuits if c in routed]  # (a circuit new to us: not until polled up)
        self.journal.append("ocs.state", endpoint=self.driver.endpoint, cross_connects=sorted(rb.items()), reread=True)
        return True

    # --- the workers, as the reconfiguration protocol sees them (reconfig.Workers) -------
    def broadcast(self, hosts: list[str], msg: dict) -> list[str]:
        return self.ctrl.broadcast(hosts, msg)

    def await_all(self, hosts: list[str], mtype: str, epoch: int, timeout_testbed_s: float) -> set[str]:
        """Wait for ``mtype`` of ``epoch`` from every host that has not finished training (a
        finished one has nothing to drain or resume), handling the other messages; return the
        hosts still missing after ``timeout_testbed_s`` (+ 2 s wall of slack)."""
        pending = set(hosts) - self.done_hosts
        deadline = time.monotonic() + timeout_testbed_s / self.scale + 2
        while pending:
            try:
                host, msg = self._next_event(deadline, f"{mtype} for epoch {epoch} from {', '.join(sorted(pending))}")
            except WaitTimeout:
                return pending
            if msg["type"] == mtype and msg.get("epoch") == epoch:
                pending.discard(host)
            else:
                self._handle(host, msg)
                pending -= self.done_hosts
        return set()

    # ---------------------------------------------------------------------------------
    def _final_check(self) -> None:
        rb = self.driver.cross_connects()
        self.final_readback = rb
        self.final_matches = rb == self.last_plan
        self.journal.append("ocs.final", readback=sorted(rb.items()), matches_plan=self.final_matches)
        if self.last_plan is None:  # unknown since a failed reconfiguration (said then): what it holds now
            self._warn(f"the OCS could not be read back after a failed reconfiguration; at the end it holds "
                       f"{len(rb)} cross-connects: check with `mfctl ocs show -i {self.inv.source or self.inv_path}`")
            return
        if not self.final_matches:
            raise OperationFailed("final OCS read-back does not match the last plan")

    def _teardown(self) -> None:
        if getattr(self, "sampler", None):
            self.sampler.stop()
        if getattr(self, "ctrl", None):
            self.ctrl.broadcast(list(self.ctrl.workers), {"type": "stop", "reason": "run ending"})
        if getattr(self, "launcher", None):
            if isinstance(self.launcher, SlurmLaunch):  # a failed/interrupted run cancels its job at once
                if self._aborting and not self.launcher.ended:
                    self.obs.phase("stop", f"cancelling Slurm job {self.launcher.job_id} (scancel)")
                self.launcher.stop(grace_s=0.0 if self._aborting else 3.0)
            else:
                self.launcher.stop()
            self.journal.append("runtime.stopped", workers={h: {"rc": w.rc, "error": w.error}
                                                           for h, w in self.launcher.workers.items()})
        if getattr(self, "ctrl", None):
            self.ctrl.close()
        if getattr(self, "driver", None):
            with contextlib.suppress(MfctlError, OSError):
                if not hasattr(self, "final_readback"):
                    rb = self.driver.cross_connects()
                    self.journal.append("ocs.final", readback=sorted(rb.items()),
                                        matches_plan=rb == getattr(self, "last_plan", None))
                self.driver.close()
        for pool in ("pool", "link_pool", "sample_pool"):
            if getattr(self, pool, None):
                getattr(self, pool).close()
        if self.mock_started:
            mockctl.stop(self.mock_state)

    def _recovery_hint(self) -> list[str]:
        """The warning to run ``mfctl ocs recover`` when a failed reconfiguration left the OCS
        differing from its plan and that change is still pending in the journal (as ``ocs recover``
        finds it: a later change supersedes it)."""
        last = next((r for r in reversed(self.reconfigs) if r.outcome != "cancelled"), None)
        if last is None or not last.ocs_needs_recovery or getattr(self, "journal", None) is None:
            return []
        inv = getattr(getattr(self, "inv", None), "source", None) or getattr(self, "inv_path", "INVENTORY")
        try:
            pend = pending_apply([r for r in self.journal.records() if str(r.get("op", "")).startswith("ocs.")])
        except (OSError, ValueError) as e:
            log.warning("run journal not readable for the recovery hint: %s", e)
            pend = {"reason": f"epoch {last.epoch}"}
        if pend is None:
            return []
        return [f"the OCS was left differing from the plan by epoch {last.epoch} ({last.outcome}; change "
                f"{pend.get('reason')!r} unfinished): run `mfctl ocs recover -i {inv}` after the run to finish it, "
                "or with --rollback to undo it"]

    # ---------------------------------------------------------------------------------
    def summary(self, status: str, error: str | None) -> dict:
        rows = [self.iter_rows[k] for k in sorted(self.iter_rows)]
        secs = [r["seconds"] for r in rows]
        tokens = sum(r["tokens"] for r in rows)
        inter = sum(r["inter_bytes"] for r in rows)
        ocs = sum(r["ocs_bytes"] for r in rows)
        wall = max(0.0, time.monotonic() - self.t_train0) if hasattr(self, "t_train0") else 0.0
        out = {
            "schema": "mfctl.run.summary/v1", "run_id": self.run_id, "status": status, "error": error,
            "playbook": self.pb.name,
            "inventory": getattr(getattr(self, "inv", None), "name", None) or Path(getattr(self, "inv_path", "?")).name,
            "run_dir": str(self.run_dir), "time_scale": self.scale, "launcher": self.pb.runtime.launcher,
            "slurm_job": getattr(getattr(self, "launcher", None), "job_id", None),
            "fsmoe": {"pipeline_degree": self.pb.training.pipeline_degree,  # 0: best per layer
                      "bp_pipeline_degree": self.pb.training.bp_pipeline_degree,
                      "grad_partitions": self.pb.training.grad_partitions},
            "iterations": len(rows), "iterations_planned": self.pb.training.iterations,
            "iteration_time_s": {"mean": _r(np.mean(secs)), "p50": _r(np.percentile(secs, 50)),
                                 "min": _r(min(secs)), "max": _r(max(secs))} if secs else None,
            "tokens_per_s": _r(tokens / sum(secs)) if secs else None,
            "iteration_time_by_epoch_s": {str(e): _r(np.mean([r["seconds"] for r in rows if r["epoch"] == e and not r.get("paused")]))
                                          for e in sorted({r["epoch"] for r in rows})
                                          if any(r["epoch"] == e and not r.get("paused") for r in rows)},
            "tokens": tokens, "simulated_train_s": _r(sum(secs)), "wall_train_s": _r(wall),
            "ep_inter_server_bytes": inter, "ep_bytes_on_circuits": ocs,
            "ep_share_on_circuits": _r(ocs / inter) if inter else None,
            "reconfigurations": [r.to_dict() for r in self.reconfigs],
            "warnings": self.warnings + self._recovery_hint(),
            "prediction_rel_error": {k: _r(np.mean(v)) for k, v in sorted(self.pred_errors.items())},
            "health": {"hosts": len(getattr(self, "health", [])),
                       "ok": sum(h["status"] == "ok" for h in getattr(self, "health", [])),
                       "sweep_s": _r(getattr(self, "health_s", 0.0))},
            "initial_topology": {"mode": self.pb.topology.initial, "circuits": getattr(self, "initial_circuits", None),
                                 "hosts": {r: list(st.hosts) for r, st in getattr(self, "regions", {}).items()},  # matrix order
                                 "apply": getattr(self, "initial_apply", None),
                                 "linkup_ms": _r(getattr(self, "initial_linkup_ms", 0.0))},
        }
        if hasattr(self, "final_readback"):
            out["ocs"] = {"endpoint": self.driver.endpoint if self.driver else None,
                          "cross_connects": sorted([i, o] for i, o in self.final_readback.items()),
                          "matches_last_plan": self.final_matches,
                          "circuits": {r.name: [c.to_dict() for c in r.circuits] for r in self.regions.values()}}
        if self.reconfigs:
            keys = ["t_switch_ms", "t_linkup_ms", "t_runtime_ms"]
            out["reconfiguration_means"] = {k: _r(np.mean([r[k] for r in out["reconfigurations"]])) for k in keys}
            failed = [r for r in self.reconfigs if r.outcome != "applied" or r.failures]
            if failed:  # what did not go as planned, and what the region was left on
                out["reconfigurations_failed"] = [{"epoch": r.epoch, "region": r.region, "outcome": r.outcome,
                                                   "error": r.error, "ocs_needs_recovery": r.ocs_needs_recovery}
                                                  for r in failed]
        return out


def _r(x, nd=4):
    return None if x is None else round(float(x), nd)


def _random_regular(ports: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random multigraph using every port it can (the MixNet simulator's random_connect())."""
    n = len(ports)
    C = np.zeros((n, n), dtype=int)
    avail = np.array(ports, dtype=int)
    for _ in range(int(avail.sum())):
        cand = [(i, j) for i in range(n) for j in range(i + 1, n) if avail[i] > 0 and avail[j] > 0]
        if not cand:
            break
        i, j = cand[rng.integers(len(cand))]
        C[i, j] += 1
        C[j, i] += 1
        avail[i] -= 1
        avail[j] -= 1
    return C


def _advertised_ip(peer: str) -> str:
    """This machine's address towards ``peer`` (a host's SSH address): the source address the
    kernel picks for it (a UDP connect sends nothing), which the controller binds and the
    hosts are given. Raises UnreachableError when there is no route to ``peer``."""
    import socket

    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(peer, 9, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(sockaddr)
            return s.getsockname()[0]
    except OSError as e:
        raise UnreachableError(f"no route from this machine to {peer} for the runtime controller: {e}") from None


def run_playbook(path: str, **kw) -> dict:
    """Load ``path`` and run it. Returns the summary (with ``exit_code``)."""
    return Job(load_playbook(path), **kw).run()

