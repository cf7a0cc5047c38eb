"""NCCL debug logs (``NCCL_DEBUG=INFO`` or ``WARN``), and the PyTorch watchdog lines around them,
as typed events that say which host, process and GPU each came from.

NCCL prefixes every line with ``HOST:PID:TID [DEV]`` (``src/debug.cc``): the number in brackets is
the process's CUDA device, not its rank; the rank comes from the process's
``comm 0x… rank R nranks N cudaDev D … Init COMPLETE`` line when the log has it. Launchers may
put their own prefix first (srun ``0: ``, mpirun ``[1,12]<stdout>:``, a time stamp): it is skipped.

Events (NCCL 2.4–2.2x wording, samples in ``tests/data/nccl-debug`` and ``tests/data/nccl-tests``):

* init: ``NCCL version 2.10.3+cuda11.0``; ``Bootstrap : Using IF:ADDR<0>``; ``NET/Plugin : …``
  (the network plugin, or "No plugin found … using internal implementation"); ``NET/IB : Using
  [0]mlx5_6:1/RoCE [1]… ; OOB IF:ADDR``; ``Using network IB|Socket|…``; ``NCCL_IB_GID_INDEX set by
  environment to 3.``; ``comm … rank R nranks N cudaDev D … Init COMPLETE``;
* ``NET/IB : Got async event : port error`` (newer: ``NET/IB : mlx5_0:1 Got async event : …``);
* completion (QP) errors: ``Got completion with error 4, opcode 1, len 0, vendor err 81`` (2.4),
  ``Got completion from peer HOST<PORT> with error 12, opcode 2, len 1, vendor err 129`` and
  ``… with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid … remoteGids…`` (2.19+). The
  status is ``ibv_wc_status`` (verbs.h): 12 is IBV_WC_RETRY_EXC_ERR, the transport retry counter
  exceeded — the peer never acknowledged (a dead link, a wrong GID index, a route);
* timeouts: NCCL WARN lines that say timeout / timed out, and PyTorch's ``[Rank R] Watchdog caught
  collective operation timeout: WorkNCCL(SeqNum=…, OpType=…, …, Timeout(ms)=…) ran for N
  milliseconds before timing out.``;
* every other NCCL WARN, kept as a warning with its source file:line.

A line cut in the middle keeps what it has (a completion error cut before ``vendor err``: its
vendor error is None). Text with no NCCL line at all raises ParseError.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mfctl.errors import ParseError
from mfctl.hosts.textin import normalized

#: ibv_wc_status (libibverbs verbs.h) → its meaning.
WC_STATUS = {1: "local length error", 2: "local QP operation error", 4: "local protection error",
             5: "work request flushed", 7: "bad response", 8: "local access error",
             9: "remote invalid request", 10: "remote access error", 11: "remote operation error",
             12: "transport retry counter exceeded", 13: "RNR retry counter exceeded",
             16: "remote aborted", 19: "fatal error", 20: "response timeout", 21: "general error"}

_PREFIX = re.compile(r"(?P<host>[\w.\-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] (?:(?P<src>[\w./\-]+:\d+) )?"
                     r"NCCL (?P<level>INFO|WARN|TRACE|ABORT)\s?(?P<msg>.*)$")
_VERSION = re.compile(r"NCCL version (?P<v>\d+\.\d+\.\d+\S*)")
_IB_USING = re.compile(r"^NET/IB\s*:\s*Using\s+(?P<devs>.*?)(?:\s*;\s*OOB\s+(?P<oob>\S+))?\s*$")
_IB_DEV = re.compile(r"\[(?P<i>\d+)\](?P<name>[\w.\-]+):(?P<port>\d+)/(?P<ll>\w+)")
_ASYNC = re.compile(r"^NET/IB\w*\s*:\s*(?:(?P<dev>[\w.\-]+):(?P<port>\d+)\s+)?Got async event\s*:\s*(?P<ev>.*?)\s*$")
_COMPLETION = re.compile(
    r"^NET/IB\w*\s*:\s*Got completion(?: from peer (?P<peer>[^<\s]+)<(?P<pport>\d+)>)? with "
    r"(?:error |status=)(?P<status>\d+)(?:,?\s*opcode[ =](?P<opcode>\d+))?(?:,?\s*len[ =](?P<len>\d+))?"
    r"(?:,?\s*vendor err (?P<vendor>\d+))?(?:\s*\((?P<dir>\w+)\))?"
    r"(?:\s*localGid\s*(?P<lgid>\S+))?(?:\s*remoteGids?\s*(?P<rgid>\S+))?")
_COMM = re.compile(r"comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) nranks (?P<n>\d+) cudaDev (?P<dev>\d+)"
                   r"(?:.*?busId (?P<bus>[0-9a-f]+))?.*Init COMPLETE", re.I)
_GID = re.compile(r"NCCL_IB_GID_INDEX set by environment to (?P<g>\d+)")
_NETWORK = re.compile(r"^Using network (?P<net>.+?)\s*$")
_WATCHDOG = re.compile(r"\[(?:PG \S+ )?Rank (?P<rank>\d+)\] Watchdog caught collective operation timeout: "
                       r"WorkNCCL\((?P<work>.*)\) ran for (?P<ran>\d+) milliseconds")
_BOOTSTRAP = re.compile(r"^Bootstrap\s*:\s*Using\s+(?P<iface>\S+)")


@dataclass
class Origin:
    """Where a line came from: host, process, thread and the CUDA device in brackets; ``rank``
    when the process's Init COMPLETE line names it (None otherwise)."""

    host: str
    pid: int
    tid: int
    device: int
    rank: int | None = None


@dataclass
class IbDevice:
    index: int  # NCCL's index ([0] …)
    name: str  # mlx5_6
    port: int
    link_layer: str  # IB / RoCE


@dataclass
class ProcessInit:
    """What one NCCL process chose at init (a field the log does not show is None/empty)."""

    host: str
    pid: int
    version: str | None = None
    bootstrap: str | None = None  # the OOB interface (IF:ADDR<0>)
    plugin: str | None = None  # the NET/Plugin line's text
    network: str | None = None  # "IB", "Socket", "AWS Libfabric", …
    ib_devices: list[IbDevice] = field(default_factory=list)
    gid_index: int | None = None
    ranks: dict[int, int] = field(default_factory=dict)  # CUDA device → rank
    nranks: int | None = None


@dataclass
class Event:
    """One event. ``kind``: async_event, completion_error, timeout, warning. ``line_no``: 1-based."""

    kind: str
    line_no: int
    origin: Origin | None
    message: str
    source: str | None = None  # NCCL's file:line
    ib_device: str | None = None  # mlx5_0:1 when the line names it
    status: int | None = None  # ibv_wc_status of a completion error
    meaning: str | None = None
    vendor_err: int | None = None
    opcode: int | None = None
    peer: str | None = None  # the peer's address, without its <port>
    direction: str | None = None  # Send / Recv
    local_gid: str | None = None
    remote_gid: str | None = None
    timeout_ms: int | None = None
    ran_ms: int | None = None
    operation: str | None = None  # the watchdog's OpType
    rank: int | None = None  # the watchdog's [Rank R] (NCCL lines: origin.rank)


@dataclass
class NcclLog:
    version: str | None = None
    processes: list[ProcessInit] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]

    @property
    def failures(self) -> list[str]:
        """One line per distinct failing place (host, GPU, device, peer, what), first seen first:
        what ``bench nccl`` and health print to name the failing link."""
        out: list[str] = []
        for e in self.events:
            if e.kind not in ("completion_error", "async_event", "timeout"):
                continue
            o = e.origin
            where = (f"{o.host} GPU {o.device}" + (f" (rank {o.rank})" if o.rank is not None else "")) if o else \
                f"rank {e.rank if e.rank is not None else '?'}"
            dev = e.ib_device or (self._nic_of(o) if o else None)
            if e.kind == "completion_error":
                what = (f"NET/IB completion error status {e.status}"
                        + (f" ({e.meaning})" if e.meaning else "")
                        + (f", vendor err {e.vendor_err}" if e.vendor_err is not None else "")
                        + (f", peer {e.peer}" if e.peer else ""))
            elif e.kind == "async_event":
                what = f"NET/IB async event: {e.message}"
            else:
                what = f"timeout: {e.message}"
            line = f"{where}{f' via {dev}' if dev else ''}: {what}"
            if line not in out:
                out.append(line)
        return out

    def _nic_of(self, o: Origin) -> str | None:
        """The IB device of a process that listed exactly one (NET/IB : Using [0]mlx5_6:1/RoCE)."""
        for p in self.processes:
            if p.host == o.host and p.pid == o.pid and len(p.ib_devices) == 1:
                d = p.ib_devices[0]
                return f"{d.name}:{d.port}"
        return None


def _proc(log: NcclLog, o: Origin) -> ProcessInit:
    for p in log.processes:
        if p.host == o.host and p.pid == o.pid:
            return p
    p = ProcessInit(o.host, o.pid)
    log.processes.append(p)
    return p


def _int(x: str | None) -> int | None:
    return int(x) if x is not None else None


def _nccl_line(log: NcclLog, no: int, o: Origin, level: str, src: str | None, msg: str) -> None:
    p = _proc(log, o)
    v = _VERSION.search(msg)
    if v:
        p.version = v.group("v")
        log.version = log.version or p.version
        return
    m = _IB_USING.match(msg)
    if m:
        p.ib_devices = [IbDevice(int(d["i"]), d["name"], int(d["port"]), d["ll"]) for d in _IB_DEV.finditer(m["devs"])]
        return
    if msg.startswith("NET/Plugin"):
        p.plugin = msg.split(":", 1)[1].strip() if ":" in msg else msg
        return
    for rx, attr in ((_NETWORK, "network"), (_BOOTSTRAP, "bootstrap")):
        m = rx.match(msg)
        if m:
            setattr(p, attr, m.group(1))
            return
    g = _GID.search(msg)
    if g:
        p.gid_index = int(g["g"])
        return
    c = _COMM.search(msg)
    if c:
        p.ranks[int(c["dev"])] = int(c["rank"])
        p.nranks = int(c["n"])
        return
    if level not in ("WARN", "ABORT"):
        return
    a = _ASYNC.match(msg)
    if a:
        log.events.append(Event("async_event", no, o, a["ev"], src,
                                ib_device=f"{a['dev']}:{a['port']}" if a["dev"] else None))
        return
    ce = _COMPLETION.match(msg)
    if ce:
        st = int(ce["status"])
        log.events.append(Event("completion_error", no, o, msg, src, status=st, meaning=WC_STATUS.get(st),
                                vendor_err=_int(ce["vendor"]), opcode=_int(ce["opcode"]), peer=ce["peer"],
                                direction=ce["dir"], local_gid=ce["lgid"], remote_gid=ce["rgid"]))
        return
    kind = "timeout" if re.search(r"time(?:d)?[ -]?out", msg, re.I) else "warning"
    log.events.append(Event(kind, no, o, msg, src))


@normalized
def parse_debug(text: str) -> NcclLog:
    """Parse an NCCL debug log (with any other lines interleaved). Raises ParseError when the
    text has no NCCL line and no PyTorch NCCL watchdog line."""
    log = NcclLog()
    seen = False
    for no, raw in enumerate(text.splitlines(), 1):
        m = _PREFIX.search(raw)
        if m:
            seen = True
            o = Origin(m["host"], int(m["pid"]), int(m["tid"]), int(m["dev"]))
            _nccl_line(log, no, o, m["level"], m["src"], m["msg"].strip())
            continue
        v = _VERSION.search(raw)
        if v and raw.strip().startswith("NCCL version"):
            seen = True
            log.version = log.version or v.group("v")
            continue
        w = _WATCHDOG.search(raw)
        if w:
            seen = True
            work = dict(kv.split("=", 1) for kv in w["work"].split(", ") if "=" in kv)
            t = work.get("Timeout(ms)", "")
            log.events.append(Event("timeout", no, None,
                                    f"{work.get('OpType', 'collective')} (SeqNum "
                                    f"{work.get('SeqNum', '?')}) ran for {w['ran']} ms, timeout {t or '?'} ms",
                                    "ProcessGroupNCCL", timeout_ms=int(t) if t.isdigit() else None,
                                    ran_ms=int(w["ran"]), operation=work.get("OpType"), rank=int(w["rank"])))
    if not seen:
        raise ParseError("nccl debug log", None, "'HOST:PID:TID [DEV] NCCL INFO|WARN …' lines",
                         text.strip().splitlines()[0][:80] if text.strip() else "")
    for e in log.events:  # ranks are known once the Init COMPLETE lines are read
        if e.origin is not None:
            p = next((p for p in log.processes if p.host == e.origin.host and p.pid == e.origin.pid), None)
            if p is not None:
                e.origin.rank = p.ranks.get(e.origin.device)
    return log


def failing_links(text: str, limit: int = 4) -> list[str]:
    """The failing places an NCCL log names (:attr:`NcclLog.failures`, at most ``limit``, with
    "(+N more)" when there are more); [] for text without NCCL lines."""
    try:
        found = parse_debug(text).failures
    except ParseError:
        return []
    return found[:limit] + ([f"(+{len(found) - limit} more)"] if len(found) > limit else [])
