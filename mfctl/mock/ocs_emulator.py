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
from dataclasses import dataclass, field
from typing import Callable

from mfctl.ocs import tl1

log = logging.getLogger(__name__)

DARK_DBM = -60.0


@dataclass
class Faults:
    """Fault injection knobs (tests set these on a running emulator)."""

    deny_ports: set[int] = field(default_factory=set)  # ENT-PATCH touching these → DENY SROF
    drop_after_command: bool = False  # close the link instead of replying (once)
    alarm_before_reply: bool = False  # send a REPT ALM before the next reply (once)
    garble_before_reply: bool = False  # send junk bytes before the next reply (once)


class OCSEmulator:
    """Device state and TL1 engine, shared by every session/transport."""

    def __init__(self, inputs: int, outputs: int, *, sid: str = "MOCK-OCS", user: str = "admin",
                 password: str = "", base_ms: float = 41.1, per_xc_ms: float = 0.18, delete_ms: float = 5.0,
                 insertion_loss_db: float = 1.0, tx_power_dbm: dict[int, float] | None = None):
        self.inputs, self.outputs = inputs, outputs
        self.sid, self.user, self.password = sid, user, password
        self.base_ms, self.per_xc_ms, self.delete_ms = base_ms, per_xc_ms, delete_ms
        self.il = insertion_loss_db
        self.tx_power = dict(tx_power_dbm or {})
        self.patches: dict[int, int] = {}
        self.changed_at: dict[int, float] = {}  # input port → monotonic time of last change
        self.faults = Faults()
        self.lock = threading.RLock()
        self.atag = 0
        self.listeners: list[Callable[[dict[int, int]], None]] = []
        self.physical_ms_total = 0.0  # modelled switching time spent, for benchmarks
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

    def port_power(self, port: int) -> float:
        """Received power at an output port, or transmit power at an input port (dBm)."""
        if port <= self.inputs:
            return self.tx_power.get(port, DARK_DBM)
        for i, o in self.patches.items():
            if o == port and i in self.tx_power:
                return round(self.tx_power[i] - self.il, 2)
        return DARK_DBM

    def _valid_port(self, p: int) -> bool:
        return 1 <= p <= self.inputs + self.outputs

    # --- engine -------------------------------------------------------------------------
    def execute(self, text: str, session: dict) -> list[str]:
        """Run one command (without the trailing ';'); return output chunks to send."""
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
        f = self.faults
        if f.alarm_before_reply:
            f.alarm_before_reply = False
            out.append(self.alarm("**", "REPT ALM OCS", ['1:MJ,LOS,SA,,,NEND,RCV:"Loss of light"']))
        if f.garble_before_reply:
            f.garble_before_reply = False
            out.append("\r\n\x07#@!garbled line\r\n;\r\n")
        if verb == "ACT-USER":
            if session.get("preauth"):
                session["user"] = aid or self.user
                out.append(self.reply(ctag, comment="Already logged in"))
            elif aid == self.user and params == self.password:
                session["user"] = aid
                out.append(self.reply(ctag))
            else:
                out.append(self.deny(ctag, "PIUI", "Invalid user or password"))
            return out
        if not session.get("user"):
            return out + [self.deny(ctag, "PLNA", "Not logged in")]
        try:
            handler = getattr(self, "_cmd_" + verb.replace("-", "_"))
        except AttributeError:
            return out + [self.deny(ctag, "IICM", f"unknown command {verb[:20]}")]
        try:
            out.append(handler(ctag, aid, params, session))
        except ValueError as e:
            out.append(self.deny(ctag, "IIAC", str(e)))
        return out

    def _cmd_CANC_USER(self, ctag, aid, params, session):
        session["user"] = None
        return self.reply(ctag)

    def _cmd_RTRV_HDR(self, ctag, aid, params, session):
        return self.reply(ctag)

    def _cmd_RTRV_NETYPE(self, ctag, aid, params, session):
        return self.reply(ctag, lines=["POLATIS,MOCK-7000,OCS,mfctl-mock-1.0"])

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

    def _cmd_ENT_PATCH(self, ctag, aid, params, session):
        if "," not in aid:
            return self.deny(ctag, "IISP", "expected in,out")
        a, b = aid.split(",", 1)
        ins, outs = self._ports(a), self._ports(b)
        if len(ins) != len(outs):
            return self.deny(ctag, "IISP", "input and output lists differ in length")
        with self.lock:
            used_out = {o: i for i, o in self.patches.items()}
            for i, o in zip(ins, outs):
                if not (i <= self.inputs and o > self.inputs):
                    return self.deny(ctag, "IIAC", f"{i},{o} is not input,output")
                if i in self.patches:
                    return self.deny(ctag, tl1.PORT_IN_USE, f"port {i} already connected to {self.patches[i]}")
                if o in used_out:
                    return self.deny(ctag, tl1.PORT_IN_USE, f"port {o} already connected to {used_out[o]}")
                if i in self.faults.deny_ports or o in self.faults.deny_ports:
                    return self.deny(ctag, "SROF", f"switching failure on port {i if i in self.faults.deny_ports else o}")
            if len(set(ins)) != len(ins) or len(set(outs)) != len(outs):
                return self.deny(ctag, "IIAC", "port listed twice")
            delay = (self.base_ms + self.per_xc_ms * len(ins)) / 1000
            time.sleep(delay)
            self.physical_ms_total += delay * 1000
            now = time.monotonic()
            for i, o in zip(ins, outs):
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
            time.sleep(self.delete_ms / 1000)
            self.physical_ms_total += self.delete_ms
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

    def _notify(self, snapshot: dict[int, int]) -> None:
        for fn in self.listeners:
            fn(snapshot)

    # --- sessions -----------------------------------------------------------------------
    def session(self, read: Callable[[], bytes], write: Callable[[bytes], None], *, preauth: bool = False) -> None:
        """Serve one connection until it closes: accumulate to ';', execute, reply."""
        state = {"user": None, "preauth": preauth}
        buf = ""
        while True:
            data = read()
            if not data:
                return
            buf += data.decode("ascii", errors="replace")
            while ";" in buf:
                cmd, buf = buf.split(";", 1)
                cmd = cmd.strip("\r\n\x00 \t")
                if not cmd:
                    continue
                if self.faults.drop_after_command:
                    self.faults.drop_after_command = False
                    return
                for chunk in self.execute(cmd, state):
                    write(chunk.encode())


class PtyServer:
    """Serve the emulator on a pseudo-terminal; clients open ``slave_path`` with pyserial."""

    def __init__(self, emu: OCSEmulator):
        self.emu = emu
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


