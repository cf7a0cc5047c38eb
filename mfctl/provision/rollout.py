"""Safe rollout of a provisioning apply: hosts in batches (rolling, or a canary of one first),
stopping at the first batch that fails; a Slurm node drained before its NIC reset and resumed
after it verified; the NIC that carries the management/SSH path never reset unless allowed.

- :func:`batches` — ``--batch N`` (N hosts at a time), ``--canary`` (a first batch of one);
- :func:`mgmt_guard` — which planned ``mlxfwreset`` would take down the host's management
  interface (``mgmt_netdev``) or the address mfctl reaches it at (a driver restart takes every
  netdev of the card down: NVIDIA's mlxfwreset documentation, docs/provisioning.md §Safe rollout);
- :class:`SlurmDrain` — ``scontrol update nodename=NODE state=drain reason=…`` on the inventory's
  login host, waits until ``scontrol -o show node`` says the node is drained (``IDLE+DRAIN``:
  no job left; ``ALLOCATED+DRAIN``/``MIXED+DRAIN`` is still *draining*), and ``state=resume``
  afterwards — only when the node's reason is still ours (never a node someone else drained).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from mfctl.errors import MfctlError, OperationFailed, ParseError, UnreachableError
from mfctl.hosts import iproute, mellanox
from mfctl.provision.actions import Action, HostPlan

#: what a reason set by mfctl starts with (Slurm appends `` [user@time]`` when it shows it)
REASON_PREFIX = "mfctl provision"
#: wall seconds between two reads of a draining node's state
DRAIN_POLL_S = 0.5


def batches(hosts: list[str], batch: int | None = None, canary: bool = False) -> list[list[str]]:
    """``hosts`` cut into the batches a rollout runs one after the other: all at once without
    ``batch``; ``batch`` hosts at a time; ``canary``: the first batch is one host. Raises
    ValueError for a batch below 1."""
    if batch is not None and batch < 1:
        raise ValueError(f"--batch must be at least 1, not {batch}")
    rest = list(hosts)
    out: list[list[str]] = []
    if canary and rest:
        out.append([rest.pop(0)])
    size = batch or len(rest) or 1
    out += [rest[i:i + size] for i in range(0, len(rest), size)]
    return out


def resets(hp: HostPlan) -> list[Action]:
    """The plan's NIC resets (``firmware-reset`` actions: an mlxfwreset restarts the driver)."""
    return [a for a in hp.actions if a.phase == "firmware-reset"]


def disrupts(hp: HostPlan) -> bool:
    """The plan takes the host's NICs down (a firmware reset), so its Slurm node is drained first."""
    return bool(resets(hp))


def mgmt_guard(pool, inv_host, hp: HostPlan) -> str | None:
    """Why a planned reset would cut mfctl off the host, or None: a NIC to be reset has the
    host's ``mgmt_netdev`` among its netdevs (devlink's ports of its PCI address and the
    inventory's lanes), or carries the SSH address the inventory reaches the host at. Reads
    ``devlink -j port show`` and ``ip -j addr show`` (raises MfctlError when it cannot)."""
    rs = resets(hp)
    if not rs:
        return None
    ports = mellanox.parse_devlink_ports(pool.run_checked(inv_host.name, mellanox.devlink_ports_argv()))
    ifaces = iproute.parse_addrs(pool.run_checked(inv_host.name, iproute.addr_argv()))
    ssh_ip = inv_host.ssh.address
    for a in rs:
        nic = next((n for n in inv_host.nics if n.pci and (a.target == f"{n.name} ({n.pci})" or n.pci in a.target)), None)
        if nic is None:
            continue
        netdevs = {p.netdev for p in ports.values() if p.name.startswith(f"pci/{nic.pci}/") and p.netdev}
        netdevs |= {lane.netdev for lane in nic.lanes}
        if inv_host.mgmt_netdev in netdevs:
            return (f"{inv_host.name}: {nic.name} ({nic.pci}) carries the management interface {inv_host.mgmt_netdev}: "
                    "its reset would cut the host off (--allow-mgmt-reset to reset it anyway)")
        on = sorted(nd for nd in netdevs if nd in ifaces and any(x.split("/")[0] == ssh_ip for x in ifaces[nd].addresses))
        if on:
            return (f"{inv_host.name}: {nic.name} ({nic.pci}) carries the SSH address {ssh_ip} on {on[0]}: "
                    "its reset would cut the host off (--allow-mgmt-reset to reset it anyway)")
    return None


def parse_scontrol_node(text: str) -> dict[str, str]:
    """``Key=value`` fields of ``scontrol -o show node NAME`` (one line; a value such as
    ``Reason=mfctl provision: … [root@2026-12-01T17:30:00]`` ends where the next `` Key=``
    starts). Raises ParseError without ``NodeName`` and ``State``."""
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    fields = {k: v.strip() for k, v in re.findall(r"(?:^|\s)([A-Za-z][\w/:]*)=(.*?)(?=\s[A-Za-z][\w/:]*=|\s*$)",
                                                    line.strip())}
    if "NodeName" not in fields or "State" not in fields:
        raise ParseError("scontrol", 1, "'NodeName=… State=STATE …' (scontrol -o show node NAME)", line[:120])
    return fields


def drain_state(state: str) -> str:
    """Slurm's node state word → ``drained`` (DRAIN flag, no job: ``IDLE+DRAIN``, ``DOWN+DRAIN``),
    ``draining`` (DRAIN flag with jobs: ``ALLOCATED+DRAIN``, ``MIXED+DRAIN``, ``…+COMPLETING``) or
    ``up`` (no DRAIN flag) — sinfo(1) NODE STATE CODES: DRAINED, DRAINING."""
    words = state.upper().split("+")
    if "DRAIN" not in words:
        return "up"
    busy = words[0] in ("ALLOCATED", "MIXED", "COMPLETING") or "COMPLETING" in words
    return "draining" if busy else "drained"


@dataclass
class NodeStatus:
    node: str
    state: str  #: as scontrol prints it (``IDLE+DRAIN``)
    reason: str  #: without Slurm's `` [user@time]`` suffix; "" when none

    @property
    def drain(self) -> str:
        return drain_state(self.state)

    @property
    def ours(self) -> bool:
        return self.reason.startswith(REASON_PREFIX)


class SlurmDrain:
    """Drain and resume Slurm nodes through ``scontrol`` on a login host (``pool``: an SSH pool
    with a target ``login``). Node names are the inventory's host names (Slurm's NodeName).
    ``timeout_s``: how long a node may stay DRAINING (its jobs running) before we give up."""

    def __init__(self, pool, login: str, run_id: str, *, timeout_s: float = 3600.0, poll_s: float = DRAIN_POLL_S):
        self.pool, self.login, self.run_id = pool, login, run_id
        self.timeout_s, self.poll_s = timeout_s, poll_s
        self.reason = f"{REASON_PREFIX} {run_id}: NIC firmware reset"

    def status(self, node: str) -> NodeStatus:
        r = self.pool.run(self.login, ["scontrol", "-o", "show", "node", node])
        if not r.ok:
            msg = r.error or (r.stderr or r.stdout).strip()[:200]
            raise (UnreachableError if r.error else OperationFailed)(
                f"{self.login}: scontrol show node {node}: {msg} (is {node} a Slurm node?)")
        f = parse_scontrol_node(r.stdout)
        reason = re.sub(r"\s*\[[^\]]*@[^\]]*\]\s*$", "", f.get("Reason", "")).strip()
        return NodeStatus(node, f["State"], "" if reason == "(null)" else reason)

    def _update(self, node: str, *words: str) -> None:
        argv = ["scontrol", "update", f"nodename={node}", *words]
        r = self.pool.run(self.login, argv)
        if not r.ok:
            msg = r.error or (r.stderr or r.stdout).strip()[:200]
            raise (UnreachableError if r.error else OperationFailed)(f"{self.login}: {' '.join(argv[:4])}: {msg}")

    def drain(self, node: str, stop=None, on_wait=None) -> tuple[bool, list[str]]:
        """Drain ``node`` and wait until it is DRAINED. Returns (we drained it — so we may resume
        it —, notes for people). A node already drained by someone else is waited for but never
        ours. Raises MfctlError when Slurm refuses or the node stays DRAINING past the timeout."""
        notes = []
        st = self.status(node)
        ours = True
        if st.drain != "up" and not st.ours:
            ours = False
            notes.append(f"{node} was already drained by someone else ({st.reason or 'no reason'}): it stays drained")
        else:
            self._update(node, "state=drain", f"reason={self.reason}")
            notes.append(f"{node} drained in Slurm ({self.reason})")
        t0 = time.monotonic()
        seen: list[str] = []
        while True:
            st = self.status(node)
            if not seen or seen[-1] != st.state:
                seen.append(st.state)
            if st.drain == "drained":
                break
            if st.drain == "up":
                raise OperationFailed(f"{node}: the drain was undone in Slurm (State={st.state}) before the NIC reset")
            if time.monotonic() - t0 > self.timeout_s:
                raise OperationFailed(f"{node}: still {st.state} after {self.timeout_s:g} s (a job is running on it; "
                                      "MFCTL_DRAIN_TIMEOUT): its NICs were not reset")
            if stop is not None and stop.is_set():
                raise OperationFailed(f"{node}: interrupted while draining ({st.state})")
            if on_wait is not None:
                on_wait(node, st)
            time.sleep(self.poll_s)
        if len(seen) > 1:
            notes.append(f"{node}: waited {time.monotonic() - t0:.1f} s for its jobs ({' → '.join(seen)})")
        return ours, notes

    def status_safe(self, node: str) -> str:
        """``ours`` when the node is drained with our reason, ``other``, or ``unknown`` (unreadable)."""
        try:
            st = self.status(node)
        except MfctlError:
            return "unknown"
        return "ours" if st.drain != "up" and st.reason == self.reason else "other"

    def resume(self, node: str) -> str:
        """Resume ``node`` if the drain is still ours (its reason unchanged); a note saying what was done."""
        try:
            st = self.status(node)
        except MfctlError as e:
            return f"{node}: not resumed: {e}"
        if st.drain == "up":
            return f"{node}: already resumed by someone else (State={st.state})"
        if st.reason != self.reason:
            return f"{node}: not resumed: drained since for another reason ({st.reason or 'none'})"
        try:
            self._update(node, "state=resume")
        except MfctlError as e:
            return f"{node}: not resumed: {e}"
        return f"{node} resumed in Slurm"


def roll(pool, inv, spec, manifest, plans: list[HostPlan], *, journal=None, stop=None, observer=None,
         batch: int | None = None, canary: bool = False, allow_mgmt_reset: bool = False,
         drain: SlurmDrain | None = None, on_step=None, on_batch=None) -> list:
    """Apply ``plans`` batch by batch (:func:`batches`): per batch, the management-NIC guard, the
    Slurm drain of every host whose plan resets a NIC (waiting for DRAINED), apply (re-planned
    after each host's last reset), verify, and the resume of the nodes we drained that verified
    (a node that did not verify stays drained, said so). The first batch with a host not ok
    stops the rollout: the later batches' hosts are ``skipped``, saying which batch failed.
    ``on_batch(k, n, hosts)`` is told each batch as it starts. Results in the plans' order."""
    from mfctl.provision.apply import ApplyResult, apply, replanner, verify

    by_host = {hp.host: hp for hp in plans}
    results: dict[str, ApplyResult] = {}
    order = batches(list(by_host), batch, canary)
    replan = replanner(pool, inv, spec, manifest)
    failed_at: str | None = None
    for k, names in enumerate(order, 1):
        if failed_at or (stop is not None and stop.is_set()):
            for h in names:
                results[h] = ApplyResult(h, skipped=f"not started: {failed_at or 'interrupted before this batch'}")
            continue
        if on_batch is not None:
            on_batch(k, len(order), names)
        if journal:
            journal.append("provision.batch", batch=k, of=len(order), hosts=names, state="start")
        ready: list[str] = []
        drained: list[str] = []
        for h in names:
            hp = by_host[h]
            res = ApplyResult(h)
            why: str | None = None
            if not hp.error and not allow_mgmt_reset and resets(hp):
                try:
                    why = mgmt_guard(pool, inv.host(h), hp)
                except MfctlError as e:
                    why = f"{h}: could not check which NIC carries the management path: {e}"
                if why:
                    res.failed = {"step": "management NIC guard", "error": why + "; nothing was changed on this host"}
            if why is None and not hp.error and drain is not None and disrupts(hp):
                try:
                    ours, notes = drain.drain(h, stop)
                    res.notes += notes
                    if ours:
                        drained.append(h)
                    if journal:
                        journal.append("provision.drain", host=h, ours=ours, notes=notes, state="done")
                except MfctlError as e:
                    why = str(e)
                    res.failed = {"step": "Slurm drain", "error": f"{why}; nothing was changed on this host"}
                    if journal:
                        journal.append("provision.drain", host=h, state="failed", error=why)
                    if drain.status_safe(h) == "ours":
                        res.notes.append(drain.resume(h))
            results[h] = res
            if why is None:
                ready.append(h)
        if ready:
            done = apply(pool, [by_host[h] for h in ready], journal, stop, observer=observer, replan=replan, on_step=on_step)
            verify(pool, inv, spec, manifest, done, ready, observer=observer)
            for r in done:
                r.notes = results[r.host].notes + r.notes
                results[r.host] = r
        for h in drained:
            r = results[h]
            if r.ok:
                note = drain.resume(h) if drain is not None else ""
            else:
                note = f"{h}: left drained in Slurm: not verified after apply"
            r.notes.append(note)
            if journal:
                journal.append("provision.resume", host=h, note=note)
        bad = [h for h in names if not results[h].ok]
        if journal:
            journal.append("provision.batch", batch=k, of=len(order), hosts=names, state="failed" if bad else "done",
                           failed=bad)
        if bad and k < len(order):
            failed_at = f"batch {k} of {len(order)} failed ({', '.join(bad)})"
    return [results[h] for h in by_host]
