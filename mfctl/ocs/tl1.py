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
from collections.abc import Sequence
from dataclasses import dataclass, field

from mfctl.errors import ConfigError

CTAG_RE = re.compile(r"[A-Za-z0-9]{1,6}\Z")

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


class TL1FieldError(ConfigError, ValueError):
    """A value that would reach the OCS breaks TL1's grammar. Names the field and the
    offending character (never the value of a secret); nothing was sent."""

    def __init__(self, field: str, problem: str):
        self.field, self.problem = field, problem
        super().__init__(f"{field}: {problem} (TL1 reserves ; : , \" & and control characters; nothing was sent)")


#: Characters TL1 gives a meaning to (GR-831 §3: block, parameter and list separators,
#: quoted-string delimiter, grouping) — never allowed inside a value we send.
RESERVED = frozenset(';:,"&')
# matched with fullmatch: `$` would let a trailing newline through
_IDENT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
_VERB_RE = re.compile(r"[A-Z][A-Z0-9]*(-[A-Z0-9]+){0,2}")
_AID_ITEM_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
_KEY_RE = re.compile(r"[A-Za-z][A-Za-z0-9_\-]{0,31}")


def _describe_char(c: str) -> str:
    if c in RESERVED:
        return f"the reserved character {c!r}"
    if ord(c) < 32 or ord(c) == 127:
        return f"a control character (0x{ord(c):02x})"
    if c.isspace():
        return "whitespace"
    return f"a non-ASCII character (U+{ord(c):04X})"


def check_text(field: str, value: str, *, secret: bool = False, max_len: int = 64) -> str:
    """A positional TL1 value (a password, a parameter value): 1..``max_len`` printable ASCII
    characters, none of :data:`RESERVED`, no whitespace. With ``secret`` the error gives the
    position, never the value. Returns ``value``; raises :class:`TL1FieldError`."""
    if not isinstance(value, str) or not value:
        raise TL1FieldError(field, "is empty")
    if len(value) > max_len:
        raise TL1FieldError(field, f"is {len(value)} characters long, at most {max_len}")
    for k, c in enumerate(value):
        if c in RESERVED or not ("!" <= c <= "~"):
            where = f"character {k + 1}" if secret else f"{value[:40]!r} at character {k + 1}"
            raise TL1FieldError(field, f"{where} is {_describe_char(c)}")
    return value


def check_ident(field: str, value: str) -> str:
    """A TL1 identifier (user id, TID, single AID): a letter or digit, then letters, digits,
    ``_ . -`` (at most 64). Returns ``value``; raises :class:`TL1FieldError`."""
    if not isinstance(value, str) or not _IDENT_RE.fullmatch(value):
        bad = next((c for c in str(value) if c in RESERVED or not ("!" <= c <= "~")), None)
        why = (f"contains {_describe_char(bad)}" if bad
               else "is not 1-64 letters, digits, '_', '.', '-' (starting with a letter or digit)")
        raise TL1FieldError(field, f"{str(value)[:40]!r} {why}")
    return value


def check_aid(value: str, field: str = "AID") -> str:
    """The AID block: ``ALL``, or item lists joined by ``&`` / ``&&`` (ranges), optionally two
    such lists separated by one ``,`` (ENT-PATCH ``inputs,outputs``). Items are identifiers."""
    if value == "":
        return value
    lists = value.split(",")
    if len(lists) > 2:
        raise TL1FieldError(field, f"{value[:40]!r} has more than one ','")
    for lst in lists:
        for item in re.split(r"&&?", lst):
            if not _AID_ITEM_RE.fullmatch(item):
                bad = next((c for c in item if c in RESERVED or not ("!" <= c <= "~")), None)
                why = f"contains {_describe_char(bad)}" if bad else "has an empty or malformed item"
                raise TL1FieldError(field, f"{value[:40]!r} {why}")
    return value


def check_params(value: str, field: str = "parameters") -> str:
    """A name-defined block ``KEY=VALUE[,KEY=VALUE...]`` or one position-defined value (GR-831
    does not mix the two in a block): keys are names, values :func:`check_text` values."""
    parts = value.split(",")
    if len(parts) == 1 and "=" not in value:
        check_text(field, value)
        return value
    for part in parts:
        key, eq, val = part.partition("=")
        if not eq:
            raise TL1FieldError(field, f"{part[:20]!r} is not KEY=VALUE (a keyword block has only KEY=VALUE items)")
        if not _KEY_RE.fullmatch(key):
            raise TL1FieldError(field, f"keyword {key[:20]!r} is not a name")
        check_text(f"{field} {key}", val)
    return value


def encode(verb: str, ctag: str, *, tid: str = "", aid: str = "", params: str | None = None, gb: str = "",
           secret: bool = False) -> bytes:
    """Encode one TL1 input message. ``params`` is the keyword/payload block (``K=V,...``);
    with ``secret`` it is one positional value (the ACT-USER password) checked without being
    quoted in errors. Every field goes through the grammar above: a reserved character is a
    :class:`TL1FieldError`, never sent."""
    if not CTAG_RE.match(ctag):
        raise TL1FieldError("CTAG", f"must be 1-6 alphanumerics, got {ctag[:10]!r}")
    if not _VERB_RE.fullmatch(verb.upper()):
        raise TL1FieldError("verb", f"{verb[:20]!r} is not VERB[-MOD1[-MOD2]]")
    if tid:
        check_ident("TID", tid)
    check_aid(aid)
    if gb:
        check_ident("general block", gb)
    msg = f"{verb.upper()}:{tid}:{aid}:{ctag}"
    if params is not None:
        if secret:
            if params:
                check_text("password", params, secret=True)
        elif params:
            check_params(params)
        msg += f":{gb}:{params}"
    return (msg + ";").encode("ascii")


#: An echoed input message (a console that echoes what it is sent): ``VERB:...;`` on a line.
ECHO_RE = re.compile(r"^\s*[A-Za-z][A-Za-z0-9]*(?:-[A-Za-z0-9]+){0,2}:[^\r\n]*;\s*$")
_ACT_USER_RE = re.compile(r"(ACT-USER:[^:;\r\n]*:[^:;\r\n]*:[^:;\r\n]*:[^:;\r\n]*:)[^;\r\n]*", re.I)


def redact(text: str, secrets: tuple[str, ...] | list[str] | set[str] = ()) -> str:
    """``text`` with the payload of any ``ACT-USER`` (the password) and every string in
    ``secrets`` replaced by ``******`` — for logs, errors and garbage kept for diagnosis."""
    text = _ACT_USER_RE.sub(r"\1******", text)
    for s in secrets:
        if s:
            text = text.replace(s, "******")
    return text


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
    # our own command echoed by the console (some serial consoles echo input) is not part of the reply
    lines = [ln for ln in lines if ln.strip() and ln.strip() != "<" and not ECHO_RE.match(ln)]
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


def format_reply(sid: str, stamp: str, ctag: str, code: str, lines: Sequence[str] = (), *,
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
