"""Polatis-class OCS emulator speaking TL1 over a pseudo-terminal, raw TCP and SSH.

Timing model (paper App. C, DESIGN §2): an ENT-PATCH that moves ``n`` one-way
cross-connects completes after ``base_ms + per_xc_ms * n`` — defaults 41.1 ms + 0.18 ms
per cross-connect, which reproduces the measured 41.4 / 42.4 / 46.8 ms means for 1 / 4 /
16 duplex circuit pairs. DLT-PATCH takes ``delete_ms`` (default 5 ms). Optical power
at an output port = transmit power of the connected input's lane − insertion loss.
Autonomous ``REPT ALM`` messages (loss of light) can be interleaved before a reply.
"""

from __future__ import annotations

import logging
import os
import pty
import select
import socket
import threading
import time
import tty
import uuid
from dataclasses import dataclass, field
from typing import Callable

from mfctl.ocs import tl1

log = logging.getLogger(__name__)

DARK_DBM = -60.0


@dataclass
class Faults:
    """Fault injection knobs (tests set these on a running emulator). One-shot knobs reset
    themselves after firing."""

    deny_ports: set[int] = field(default_factory=set)  # ENT-PATCH touching these → DENY SROF
    deny_patch_numbers: set[int] = field(default_factory=set)  # the n-th ENT-PATCH (1-based, all sessions) → DENY SROF
    timeout_next: bool = False  # swallow the next command: never reply (once)
    timeout_verb: str | None = None  # swallow the next command with this verb (once)
    drop_after_command: bool = False  # close the link instead of executing the next command (once)
    die_mid_reply: bool = False  # execute the next command, send half its reply, close (once)
    drop_bytes: int = 0  # drop this many bytes from the middle of the next reply (once)
    alarm_before_reply: bool = False  # send a REPT ALM before the next reply (once)
    garble_before_reply: bool = False  # send junk bytes before the next reply (once)
    partial_apply: int | None = None  # next ENT-PATCH makes only the first k cross-connects, says COMPLD (once)
    reply_lost: bool = False  # execute the next command but send no reply (once): a timeout after the change
    on_verb: str | None = None  # the one-shot knobs above fire only on a command with this verb (kept until cleared)


class _Session:
    def __init__(self, write: Callable[[bytes], None], preauth: bool):
        self._write = write
        self.lock = threading.Lock()
        self.user: str | None = None
        self.preauth = preauth
        self.alarms = True

    def write(self, data: str) -> None:
        with self.lock:
            self._write(data.encode())


class OCSEmulator:
    """Device state and TL1 engine, shared by every session/transport."""

    def __init__(self, inputs: int, outputs: int, *, sid: str = "MOCK-OCS", user: str = "admin",
                 password: str = "", base_ms: float = 41.1, per_xc_ms: float = 0.18, delete_ms: float = 5.0,
                 insertion_loss_db: float = 1.0, tx_power_dbm: dict[int, float] | None = None,
                 ack_after_s: float = 2.0, serial: str | None = None, echo: bool = False):
        self.inputs, self.outputs = inputs, outputs
        self.sid, self.user, self.password = sid, user, password
        # unique per instance, as every real switch's serial number is (RTRV-INV::OCS → SN=)
        self.serial = serial or "MOCK" + uuid.uuid4().hex[:10].upper()
        self.echo = echo  # a console that echoes what it receives (some serial consoles do)
        self.base_ms, self.per_xc_ms, self.delete_ms = base_ms, per_xc_ms, delete_ms
        self.ack_after_s = ack_after_s
        self.il = insertion_loss_db
        self.tx_power = dict(tx_power_dbm or {})
        self.patches: dict[int, int] = {}
        self.changed_at: dict[int, float] = {}  # input port → monotonic time of last change
        self.shutters_closed: set[int] = set()
        self.standing: dict[int, str] = {}  # output port → timestamp of a LOS condition
        self.faults = Faults()
        self.lock = threading.RLock()
        self.atag = 0
        self.sessions: list[_Session] = []
        self._outbox: list[str] = []  # autonomous messages waiting to be broadcast
        self.listeners: list[Callable[[dict[int, int]], None]] = []
        self.physical_ms_total = 0.0  # modelled switching time spent, for benchmarks
        self.busy_ms_total = 0.0  # wall time from a command's ';' to its reply written (physical included)
        self.stats = {"commands": 0}

    # --- helpers ------------------------------------------------------------------------
    def stamp(self) -> str:
        return time.strftime("%y-%m-%d %H:%M:%S")

    def reply(self, ctag: str, code: str = "COMPLD", lines=(), **kw) -> str:
        return tl1.format_reply(self.sid, self.stamp(), ctag, code, list(lines), **kw)

    def deny(self, ctag: str, code: str, comment: str) -> str:
        return self.reply(ctag, "DENY", error_code=code, comment=comment)

    def alarm(self, almcde: str, verb: str, lines: list[str]) -> str:
        with self.lock:
            self.atag = self.atag % 65535 + 1
            return tl1.format_autonomous(self.sid, self.stamp(), almcde, self.atag, verb, lines)

    def _lit(self, in_port: int) -> bool:
        return in_port in self.tx_power and in_port not in self.shutters_closed

    def port_power(self, port: int) -> float:
        """Received power at an output port, or transmit power at an input port (dBm)."""
        if port <= self.inputs:
            return self.tx_power.get(port, DARK_DBM) if port not in self.shutters_closed else DARK_DBM
        if port in self.shutters_closed:
            return DARK_DBM
        for i, o in self.patches.items():
            if o == port and self._lit(i):
                return round(self.tx_power[i] - self.il, 2)
        return DARK_DBM

    def _valid_port(self, p: int) -> bool:
        return 1 <= p <= self.inputs + self.outputs

    def _update_alarms(self) -> list[str]:
        """Raise LOS on connected outputs that receive no light; clear it when they do or
        when the cross-connect goes. Returns the autonomous messages to send."""
        msgs = []
        with self.lock:
            now_los = {o for i, o in self.patches.items() if not self._lit(i) or o in self.shutters_closed}
            for o in sorted(now_los - set(self.standing)):
                self.standing[o] = time.strftime("%m-%d,%H-%M-%S")
                msgs.append(self.alarm("**", "REPT ALM OCS", [f'{o}:MJ,LOS,SA,{self.standing[o]},NEND,RCV:\\"Loss of signal\\"']))
            for o in sorted(set(self.standing) - now_los):
                ts = self.standing.pop(o)
                msgs.append(self.alarm("A ", "REPT ALM OCS", [f'{o}:CL,LOS,SA,{ts},NEND,RCV:\\"Loss of signal\\"']))
        return msgs

    def broadcast(self, msgs: list[str]) -> None:
        for sess in list(self.sessions):
            if sess.alarms and sess.user:
                for m in msgs:
                    try:
                        sess.write(m)
                    except OSError:
                        pass

    # --- engine -------------------------------------------------------------------------
    def execute(self, text: str, session: _Session, armed: bool = True) -> list[str]:
        """Run one command (without the trailing ';'); return output chunks to send. One-shot
        faults fire only when ``armed`` (see :attr:`Faults.on_verb`)."""
        self.stats["commands"] += 1
        fields = text.strip().split(":")
        verb = fields[0].strip().upper()
        if len(fields) < 4:
            return [self.deny("0", "IISP", "expected VERB:TID:AID:CTAG")]
        tid, aid, ctag = fields[1].strip(), fields[2].strip(), fields[3].strip()
        params = fields[5] if len(fields) > 5 else ""
        if not tl1.CTAG_RE.match(ctag):
            return [self.deny("0", "IICT", f"invalid CTAG {ctag[:10]}")]
        if tid and tid != self.sid:
            return [self.deny(ctag, "IITA", f"TID {tid} is not {self.sid}")]
        out: list[str] = []
        f = self.faults if armed else Faults()
        if f.alarm_before_reply:
            f.alarm_before_reply = False
            out.append(self.alarm("**", "REPT ALM OCS", ['1:MJ,LOS,SA,,,NEND,RCV:\\"Loss of light\\"']))
        if f.garble_before_reply:
            f.garble_before_reply = False
            out.append("\r\n\x07#@!garbled line\r\n;\r\n")
        if verb == "ACT-USER":
            if session.preauth:
                session.user = aid or self.user
                out.append(self.reply(ctag, comment="Already logged in"))
            elif aid == self.user and params == self.password:
                session.user = aid
                out.append(self.reply(ctag))
            else:
                out.append(self.deny(ctag, "PIUI", "Invalid user or password"))
            return out
        if not session.user:
            return out + [self.deny(ctag, "PLNA", "Not logged in")]
        handler = getattr(self, "_cmd_" + verb.replace("-", "_"), None)
        if handler is None:
            return out + [self.deny(ctag, "IICM", f"unknown command {verb[:20]}")]
        try:
            out.append(handler(ctag, aid, params, session))
        except ValueError as e:
            out.append(self.deny(ctag, "IIAC", str(e)))
        return out

    def _cmd_CANC_USER(self, ctag, aid, params, session):
        session.user = None
        return self.reply(ctag)

    def _cmd_RTRV_HDR(self, ctag, aid, params, session):
        return self.reply(ctag)

    def _cmd_INH_MSG_ALL(self, ctag, aid, params, session):
        session.alarms = False
        return self.reply(ctag)

    def _cmd_ALW_MSG_ALL(self, ctag, aid, params, session):
        session.alarms = True
        return self.reply(ctag)

    def _cmd_RTRV_NETYPE(self, ctag, aid, params, session):
        return self.reply(ctag, lines=["POLATIS,MOCK-7000,OCS,mfctl-mock-1.0"])

    def _cmd_RTRV_INV(self, ctag, aid, params, session):
        return self.reply(ctag, lines=[f"OCS:PN=MOCK-7000-{self.inputs}x{self.outputs},SN={self.serial},HWREV=1"])

    def _cmd_RTRV_EQPT(self, ctag, aid, params, session):
        if aid.upper() == "SYSTEM" and "SIZE" in params.upper():
            return self.reply(ctag, lines=[f"SYSTEM:SIZE={self.inputs}x{self.outputs}"])
        return self.deny(ctag, "IDNV", f"unsupported parameter {params[:30]}")

    def _ports(self, aid: str) -> list[int]:
        try:
            ports = tl1.parse_aid(aid)
        except ValueError:
            raise ValueError(f"bad AID {aid[:30]}") from None
        bad = [p for p in ports if not self._valid_port(p)]
        if bad:
            raise ValueError(f"port {bad[0]} out of range 1..{self.inputs + self.outputs}")
        return ports

    def _sleep_modelled(self, ms: float, ctag: str, session: _Session) -> None:
        """Spend the modelled physical time; acknowledge with IP first if it is long."""
        if ms / 1000 > self.ack_after_s:
            session.write(f"IP {ctag}\r\n<")
        time.sleep(ms / 1000)
        self.physical_ms_total += ms

    def _cmd_ENT_PATCH(self, ctag, aid, params, session):
        if "," not in aid:
            return self.deny(ctag, "IISP", "expected in,out")
        a, b = aid.split(",", 1)
        ins, outs = self._ports(a), self._ports(b)
        if len(ins) != len(outs):
            return self.deny(ctag, "IISP", "input and output lists differ in length")
        with self.lock:
            self.stats["ent_patch"] = n = self.stats.get("ent_patch", 0) + 1
            if n in self.faults.deny_patch_numbers:
                return self.deny(ctag, "SROF", f"switching failure (injected fault: ENT-PATCH {n})")
            used_out = {o: i for i, o in self.patches.items()}
            if len(set(ins)) != len(ins) or len(set(outs)) != len(outs):
                return self.deny(ctag, "IIAC", "port listed twice")
            for i, o in zip(ins, outs):
                if not (i <= self.inputs and o > self.inputs):
                    return self.deny(ctag, "IIAC", f"{i},{o} is not input,output")
                if i in self.patches:
                    return self.deny(ctag, tl1.PORT_IN_USE, f"port {i} already connected to {self.patches[i]}")
                if o in used_out:
                    return self.deny(ctag, tl1.PORT_IN_USE, f"port {o} already connected to {used_out[o]}")
                if i in self.faults.deny_ports or o in self.faults.deny_ports:
                    return self.deny(ctag, "SROF", f"switching failure on port {i if i in self.faults.deny_ports else o}")
            pairs = list(zip(ins, outs))
            if self.faults.partial_apply is not None:
                pairs, self.faults.partial_apply = pairs[: self.faults.partial_apply], None
            self._sleep_modelled(self.base_ms + self.per_xc_ms * len(ins), ctag, session)
            now = time.monotonic()
            for i, o in pairs:
                self.patches[i] = o
                self.changed_at[i] = now
            snapshot = dict(self.patches)
        self._notify(snapshot)
        return self.reply(ctag)

    def _cmd_DLT_PATCH(self, ctag, aid, params, session):
        with self.lock:
            if aid.upper() == "ALL":
                targets = list(self.patches)
            else:
                ports = self._ports(aid)
                by_out = {o: i for i, o in self.patches.items()}
                targets = [p if p in self.patches else by_out.get(p) for p in ports]
                if None in targets:
                    missing = ports[targets.index(None)]
                    return self.deny(ctag, "SNVS", f"port {missing} is not connected")
            self._sleep_modelled(self.delete_ms, ctag, session)
            now = time.monotonic()
            for i in targets:
                self.patches.pop(i, None)
                self.changed_at[i] = now
            snapshot = dict(self.patches)
        self._notify(snapshot)
        return self.reply(ctag)

    def _cmd_RTRV_PATCH(self, ctag, aid, params, session):
        with self.lock:
            items = sorted(self.patches.items())
            if aid:
                want = set(self._ports(aid))
                items = [(i, o) for i, o in items if i in want or o in want]
        return self.reply(ctag, lines=[f"{i},{o}" for i, o in items])

    def _cmd_RTRV_PORT_POWER(self, ctag, aid, params, session):
        ports = self._ports(aid) if aid else list(range(1, self.inputs + self.outputs + 1))
        with self.lock:
            return self.reply(ctag, lines=[f"{p}:{self.port_power(p):.2f}" for p in ports])

    def _cmd_RTRV_PORT_SHUTTER(self, ctag, aid, params, session):
        ports = self._ports(aid) if aid else list(range(1, self.inputs + self.outputs + 1))
        with self.lock:
            return self.reply(ctag, lines=[f"{p}:{'CLOSED' if p in self.shutters_closed else 'OPEN'}" for p in ports])

    def _cmd_OPR_PORT_SHUTTER(self, ctag, aid, params, session):
        with self.lock:
            self.shutters_closed |= set(self._ports(aid))
        self._after_state_change()
        return self.reply(ctag)

    def _cmd_RLS_PORT_SHUTTER(self, ctag, aid, params, session):
        with self.lock:
            self.shutters_closed -= set(self._ports(aid))
        self._after_state_change()
        return self.reply(ctag)

    def _cmd_RTRV_ALM_ALL(self, ctag, aid, params, session):
        with self.lock:
            return self.reply(ctag, lines=[f'{o}:MJ,LOS,SA,{ts},NEND,RCV:\\"Loss of signal\\"'
                                           for o, ts in sorted(self.standing.items())])

    def _after_state_change(self) -> None:
        msgs = self._update_alarms()
        with self.lock:
            self._outbox.extend(msgs)

    def _drain_outbox(self) -> list[str]:
        with self.lock:
            out, self._outbox = self._outbox, []
        return out

    def _notify(self, snapshot: dict[int, int]) -> None:
        self._after_state_change()
        for fn in self.listeners:
            fn(snapshot)

    # --- sessions -----------------------------------------------------------------------
    def session(self, read: Callable[[], bytes], write: Callable[[bytes], None], *, preauth: bool = False) -> None:
        """Serve one connection until it closes: accumulate to ';', execute, reply."""
        sess = _Session(write, preauth)
        with self.lock:
            self.sessions.append(sess)
        try:
            self._serve(sess, read)
        finally:
            with self.lock:
                self.sessions.remove(sess)

    def _serve(self, sess: _Session, read: Callable[[], bytes]) -> None:
        buf = ""
        while True:
            data = read()
            if not data:
                return
            text = data.decode("ascii", errors="replace")
            if self.echo:
                sess.write(text.replace(";", ";\r\n"))
            buf += text
            while ";" in buf:
                cmd, buf = buf.split(";", 1)
                cmd = cmd.strip("\r\n\x00 \t")
                if not cmd:
                    continue
                f = self.faults
                if f.on_verb and cmd.split(":", 1)[0].strip().upper() != f.on_verb.upper():
                    f = Faults()  # not the command the faults wait for: a clean exchange
                if f.drop_after_command:
                    f.drop_after_command = False
                    return
                if f.timeout_next:
                    f.timeout_next = False
                    continue
                if f.timeout_verb and cmd.split(":", 1)[0].strip().upper() == f.timeout_verb:
                    f.timeout_verb = None
                    continue
                t_cmd = time.perf_counter()
                chunks = self.execute(cmd, sess, armed=f is self.faults)
                if f.reply_lost:
                    f.reply_lost = False
                    continue
                if f.die_mid_reply:
                    f.die_mid_reply = False
                    text = "".join(chunks)
                    sess.write(text[: len(text) // 2])
                    return
                if f.drop_bytes:
                    text = "".join(chunks)
                    mid = len(text) // 2
                    chunks, f.drop_bytes = [text[:mid] + text[mid + f.drop_bytes:]], 0
                for chunk in chunks:
                    sess.write(chunk)
                self.busy_ms_total += (time.perf_counter() - t_cmd) * 1000
                alarms = self._drain_outbox()
                if alarms:
                    self.broadcast(alarms)


class PtyServer:
    """Serve the emulator on a pseudo-terminal; clients open ``slave_path`` with pyserial."""

    def __init__(self, emu: OCSEmulator, baudrate: int | None = None):
        self.emu = emu
        self.baudrate = baudrate  # when set, writes take 10 bit times per byte (8N1 framing)
        self.line_ms_total = 0.0  # modelled serial line time spent sending, for benchmarks
        self.master, self.slave = pty.openpty()
        tty.setraw(self.slave)
        self.slave_path = os.ttyname(self.slave)
        self._stop = threading.Event()
        threading.Thread(target=self._loop, daemon=True, name="ocs-pty").start()

    def _loop(self) -> None:
        def read() -> bytes:
            while not self._stop.is_set():
                r, _, _ = select.select([self.master], [], [], 0.2)
                if r:
                    try:
                        return os.read(self.master, 4096)
                    except OSError:
                        return b""
            return b""

        def write(b: bytes) -> None:
            if self.baudrate:
                t = len(b) * 10 / self.baudrate
                time.sleep(t)
                self.line_ms_total += t * 1000
            os.write(self.master, b)

        while not self._stop.is_set():
            # a serial console has no "connection": a new session starts after EOF
            self.emu.session(read, write)

    def close(self) -> None:
        self._stop.set()
        for fd in (self.master, self.slave):
            try:
                os.close(fd)
            except OSError:
                pass


class TCPServer:
    """Serve the emulator on raw TCP (Polatis uses 3082; here any free port on 127.0.0.1)."""

    def __init__(self, emu: OCSEmulator, port: int = 0):
        self.emu = emu
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True, name="ocs-tcp").start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def run(c=conn):
                def read() -> bytes:
                    try:
                        return c.recv(4096)
                    except OSError:
                        return b""

                try:
                    self.emu.session(read, c.sendall)
                except OSError:
                    pass
                finally:
                    c.close()

            threading.Thread(target=run, daemon=True).start()

    def close(self) -> None:
        self.sock.close()


def ssh_shell_handler(emu: OCSEmulator):
    """on_shell callback for :class:`mfctl.mock.sshd.MockSSHServer`: TL1 over an SSH channel."""

    def handle(channel) -> None:
        def read() -> bytes:
            try:
                return channel.recv(4096)
            except (OSError, EOFError):
                return b""

        try:
            emu.session(read, channel.sendall, preauth=True)
        except (OSError, EOFError):
            pass

    return handle


