"""TL1 codec (Telcordia GR-831 input, GR-833 output) as spoken by Polatis-class OCSes.

Input message::

    VERB-MOD1[-MOD2]:[TID]:[AID]:CTAG[:[GB]][:[payload]];

Output blocks (DESIGN §5, ``../shared/research/protocols.md`` §1.1)::

    \\r\\n\\n   SID YY-MM-DD HH:MM:SS\\r\\nM  CTAG COMPLD\\r\\n   "data"\\r\\n;
    ... M  CTAG DENY\\r\\n   IIAC\\r\\n   /* text */\\r\\n;
    IP CTAG\\r\\n<                                   (acknowledgement of a slow command)
    ... \\r\\n*C 17 REPT ALM OCS\\r\\n   "..."\\r\\n;   (autonomous message, ATAG 17)

A block ends with a line holding only ``;`` (last block) or ``>`` (more blocks with the
same CTAG follow). Parsing never raises on garbage: unrecognised text is returned as a
:class:`Garbage` item so the client can log it and keep reading.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

CTAG_RE = re.compile(r"^[A-Za-z0-9]{1,6}$")

#: GR-833 / vendor error codes. Which code a real Polatis sends for some cases is not
#: public (protocols.md §1.1): correct this one table against hardware.
ERROR_CODES: dict[str, str] = {
    "IICM": "invalid command",
    "ICNV": "command not valid",
    "IISP": "invalid syntax or punctuation",
    "IITA": "invalid target identifier",
    "IIAC": "invalid access identifier",
    "IICT": "invalid correlation tag",
    "IPNV": "parameter not valid",
    "IDNV": "data not valid",
    "INUP": "unimplemented non-null parameter",
    "ENEQ": "equipment not equipped",
    "SNVS": "not in valid state",
    "SROF": "requested operation failed",
    "SARB": "system resources busy",
    "SSRE": "system resources exceeded",
    "PLNA": "login not active",
    "PIUI": "input user identity not valid",
    "MERR": "multiple errors",
}

#: Error used by the emulator when a port is already cross-connected (unverified on hardware).
PORT_IN_USE = "SNVS"


def format_aid(ports: list[int] | tuple[int, ...]) -> str:
    """AID list of ports: consecutive runs become ``a&&b`` ranges, the rest ``&`` lists."""
    if not ports:
        raise ValueError("empty AID list")
    out: list[str] = []
    ps = list(ports)
    i = 0
    while i < len(ps):
        j = i
        while j + 1 < len(ps) and ps[j + 1] == ps[j] + 1:
            j += 1
        if j - i >= 2:
            out.append(f"{ps[i]}&&{ps[j]}")
        else:
            out.extend(str(p) for p in ps[i : j + 1])
        i = j + 1
    return "&".join(out)


def parse_aid(text: str) -> list[int]:
    """Inverse of :func:`format_aid`: ``1&3&&5`` → ``[1, 3, 4, 5]``. Raises ValueError."""
    out: list[int] = []
    for part in re.split(r"(?<!&)&(?!&)", text):
        if "&&" in part:
            lo, hi = part.split("&&", 1)
            a, b = int(lo), int(hi)
            if b < a:
                raise ValueError(f"bad range {part!r}")
            out.extend(range(a, b + 1))
        else:
            out.append(int(part))
    return out


def encode(verb: str, ctag: str, *, tid: str = "", aid: str = "", params: str | None = None, gb: str = "") -> bytes:
    """Encode one TL1 input message. ``params`` is the keyword/payload block (``K=V,...``)."""
    if not CTAG_RE.match(ctag):
        raise ValueError(f"CTAG must be 1-6 alphanumerics, got {ctag!r}")
    msg = f"{verb.upper()}:{tid}:{aid}:{ctag}"
    if params is not None:
        msg += f":{gb}:{params}"
    return (msg + ";").encode("ascii")


@dataclass
class Reply:
    """A command response block (or the merged blocks of a multi-block response)."""

    ctag: str
    code: str  # COMPLD, DENY, PRTL, DELAY, RTRV
    sid: str = ""
    lines: list[str] = field(default_factory=list)  # data lines, quotes removed
    comments: list[str] = field(default_factory=list)
    error_code: str | None = None  # four-letter code of a DENY
    more: bool = False  # block ended with '>'
    raw: str = ""


@dataclass
class Autonomous:
    """An autonomous message (REPT ALM / REPT EVT) with its ATAG."""

    almcde: str  # '*C', '**', '* ', 'A '
    atag: int
    verb: str
    sid: str = ""
    lines: list[str] = field(default_factory=list)
    raw: str = ""


@dataclass
class Ack:
    """``IP``/``PF``/``OK``/``RL`` acknowledgement of a slow command."""

    code: str
    ctag: str
    raw: str = ""


@dataclass
class Garbage:
    """Text that is not a TL1 block (logged by the client, never a reply)."""

    raw: str


Item = Reply | Autonomous | Ack | Garbage

_ACK_RE = re.compile(r"^\s*(IP|PF|OK|RL)\s+([A-Za-z0-9]{1,6})\s*\r?\n<", re.M)
_TERM_RE = re.compile(r"\r?\n[ \t]*([;>])[ \t]*(?=\r?\n|$)")
_REPLY_RE = re.compile(r"^M\s+(\S+)\s+(COMPLD|DENY|PRTL|DELAY|RTRV)\b")
_AUTO_RE = re.compile(r"^(\*C|\*\*|\* |A |\*|A)\s*(\d+)\s+(REPT\s+\S+.*)$")
_HEADER_RE = re.compile(r"^\s*(\S.*?)\s+(\d\d-\d\d-\d\d)\s+(\d\d:\d\d:\d\d)\s*$")


class Decoder:
    """Incremental decoder: feed text, get complete items. Never raises on bad input."""

    def __init__(self) -> None:
        self.buf = ""

    def feed(self, data: str) -> list[Item]:
        self.buf += data
        items: list[Item] = []
        while True:
            item = self._next()
            if item is None:
                return items
            items.append(item)

    def _next(self) -> Item | None:
        buf = self.buf
        stripped = buf.lstrip("\r\n\x00 ")
        if not stripped:
            self.buf = ""
            return None
        # an acknowledgement: "IP ctag\r\n<"
        m = _ACK_RE.match(stripped)
        if m:
            self.buf = stripped[m.end():]
            return Ack(code=m.group(1), ctag=m.group(2), raw=m.group(0))
        m = _TERM_RE.search(buf)
        if not m:
            if stripped in (";", ">", "<"):
                self.buf = ""
                return None
            return None
        block, self.buf = buf[: m.start()], buf[m.end():]
        return parse_block(block, m.group(1))


def parse_block(block: str, terminator: str = ";") -> Item:
    """Classify and parse one terminated block (without its terminator line)."""
    raw = block
    lines = [ln.rstrip("\r") for ln in block.replace("\r\n", "\n").split("\n")]
    lines = [ln for ln in lines if ln.strip() and ln.strip() != "<"]
    if len(lines) < 2:
        return Garbage(raw)
    sid = ""
    hm = _HEADER_RE.match(lines[0])
    if hm:
        sid = hm.group(1)
        body = lines[1:]
    else:
        body = lines
    if not body:
        return Garbage(raw)
    head = body[0]
    rm = _REPLY_RE.match(head)
    if rm:
        reply = Reply(ctag=rm.group(1), code=rm.group(2), sid=sid, more=(terminator == ">"), raw=raw)
        for ln in body[1:]:
            s = ln.strip()
            if s.startswith("/*"):
                reply.comments.append(s[2:].rstrip("*/").strip())
            elif s.startswith('"') and s.endswith('"') and len(s) >= 2:
                reply.lines.append(s[1:-1].replace('\\"', '"'))
            elif reply.code == "DENY" and reply.error_code is None and re.fullmatch(r"[A-Z]{4}", s):
                reply.error_code = s
            else:
                reply.lines.append(s)
        return reply
    am = _AUTO_RE.match(head)
    if am:
        code = am.group(1)
        code = code if len(code) == 2 else code + " "
        auto = Autonomous(almcde=code, atag=int(am.group(2)), verb=am.group(3).strip(), sid=sid, raw=raw)
        for ln in body[1:]:
            s = ln.strip()
            auto.lines.append(s[1:-1] if s.startswith('"') and s.endswith('"') and len(s) >= 2 else s)
        return auto
    return Garbage(raw)


def format_reply(sid: str, stamp: str, ctag: str, code: str, lines: list[str] = (), *,
                 error_code: str | None = None, comment: str | None = None, more: bool = False) -> str:
    """Format a response block exactly as GR-833 lays it out (used by the emulator and tests)."""
    out = f"\r\n\n   {sid} {stamp}\r\nM  {ctag} {code}\r\n"
    if error_code:
        out += f"   {error_code}\r\n"
    for ln in lines:
        out += f'   "{ln}"\r\n'
    if comment:
        out += f"   /* {comment} */\r\n"
    return out + (">\r\n" if more else ";\r\n")


def format_autonomous(sid: str, stamp: str, almcde: str, atag: int, verb: str, lines: list[str]) -> str:
    out = f"\r\n\n   {sid} {stamp}\r\n{almcde} {atag} {verb}\r\n"
    for ln in lines:
        out += f'   "{ln}"\r\n'
    return out + ";\r\n"
