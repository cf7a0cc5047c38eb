"""TL1 client: one command in flight, replies matched by CTAG, alarms queued.

Errors raised:
- :class:`TL1Deny` — the device answered ``DENY`` (carries the four-letter code and block);
- :class:`TL1Timeout` — no terminated reply for our CTAG within the per-command timeout
  (says what was last read);
- :class:`TL1ConnectionError` — the link died (the driver reconnects and logs in again).
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
import time

from mfctl.errors import OperationFailed, UnreachableError
from mfctl.ocs import tl1

log = logging.getLogger(__name__)


class TL1Error(OperationFailed):
    """Base of TL1 errors."""


class TL1Deny(TL1Error):
    """The OCS refused a command. ``code`` is the GR-833 error code (e.g. ``SNVS``)."""

    def __init__(self, command: str, reply: tl1.Reply):
        self.command, self.reply = command, reply
        self.code = reply.error_code or "????"
        meaning = tl1.ERROR_CODES.get(self.code, "unknown code")
        comment = f": {'; '.join(reply.comments)}" if reply.comments else ""
        super().__init__(f"OCS denied {command!r}: {self.code} ({meaning}){comment}")


class TL1Partial(TL1Deny):
    """The OCS completed only part of a command (``PRTL``); ``reply.lines`` say which AIDs failed."""


class TL1Timeout(TL1Error, UnreachableError):
    exit_code = UnreachableError.exit_code


class TL1ConnectionError(TL1Error, UnreachableError):
    exit_code = UnreachableError.exit_code


class TL1Client:
    """Speak TL1 over a stream (see :mod:`mfctl.transport.streams`)."""

    def __init__(self, stream, *, command_timeout: float = 10.0, max_alarms: int = 1000):
        self.stream = stream
        self.command_timeout = command_timeout
        self.decoder = tl1.Decoder()
        self.autonomous: collections.deque[tl1.Autonomous] = collections.deque(maxlen=max_alarms)
        self.garbage: list[str] = []
        self._ctags = itertools.count(1)
        self._lock = threading.Lock()
        self._last_read = ""
        self._items: collections.deque = collections.deque()  # decoded, not yet consumed
        self.last_atag: int | None = None
        self.atag_gaps: list[tuple[int, int]] = []  # (expected, got): autonomous messages lost
        self._secrets: set[str] = set()  # values sent with secret=True: redacted from every log and error

    def redact(self, text: str) -> str:
        """``text`` without any password this client has sent (nor any echoed ACT-USER payload)."""
        return tl1.redact(text, self._secrets)

    def next_ctag(self) -> str:
        return str(next(self._ctags) % 999999 or 1)

    def command(self, verb: str, *, aid: str = "", tid: str = "", params: str | None = None,
                timeout: float | None = None, secret: bool = False) -> tl1.Reply:
        """Send one command and return its COMPLD reply (multi-block replies merged).
        With ``secret`` the payload (a password) never appears in errors or logs."""
        timeout = self.command_timeout if timeout is None else timeout
        with self._lock:
            ctag = self.next_ctag()
            msg = tl1.encode(verb, ctag, tid=tid, aid=aid, params=params, secret=secret)
            if secret and params:
                self._secrets.add(params)
            text = self.redact(msg.decode())
            log.debug("tl1 > %s", text)
            try:
                self.stream.write(msg)
            except ConnectionError as e:
                raise TL1ConnectionError(f"{self.stream.name}: {e}") from e
            merged: tl1.Reply | None = None
            deadline = time.monotonic() + timeout
            while True:
                # items decoded earlier but not consumed (they arrived behind a reply) come first
                while self._items:
                    item = self._items.popleft()
                    if isinstance(item, tl1.Autonomous):
                        self._autonomous(item)
                    elif isinstance(item, tl1.Ack):
                        deadline = max(deadline, time.monotonic() + timeout)  # in progress: extend
                    elif isinstance(item, tl1.Garbage):
                        raw = self.redact(item.raw)
                        self.garbage.append(raw)
                        log.warning("tl1: ignoring unrecognised text %r", raw[:80])
                    elif item.ctag != ctag:
                        log.warning("tl1: reply for CTAG %s while waiting for %s (stale), ignored", item.ctag, ctag)
                    else:
                        if merged is None:
                            merged = item
                        else:
                            merged.lines += item.lines
                            merged.comments += item.comments
                            merged.raw += item.raw
                            merged.code = item.code
                        if item.more:
                            continue
                        log.debug("tl1 < %s %s (%d lines)", ctag, merged.code, len(merged.lines))
                        if self._secrets and self.redact(merged.raw) != merged.raw:  # a device may quote what it was sent
                            merged.raw = self.redact(merged.raw)
                            merged.lines = [self.redact(x) for x in merged.lines]
                            merged.comments = [self.redact(x) for x in merged.comments]
                        if merged.code == "PRTL":
                            raise TL1Partial(text, merged)
                        if merged.code != "COMPLD":
                            raise TL1Deny(text, merged)
                        return merged
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TL1Timeout(f"{self.stream.name}: no reply to {text!r} within {timeout:g} s "
                                     f"(command timeout); last read: {self.redact(self._last_read)[-120:]!r}")
                self._pull(min(remaining, 0.5), f"link lost waiting for {text!r}")

    def _pull(self, timeout: float, context: str) -> None:
        """Read what arrives within ``timeout`` and decode it into the item queue."""
        try:
            data = self.stream.read(timeout)
        except ConnectionError as e:
            raise TL1ConnectionError(f"{self.stream.name}: {context}: {e}") from e
        if data:
            chunk = data.decode("ascii", errors="replace")
            self._last_read = (self._last_read + chunk)[-400:]
            if self._secrets or "ACT-USER" in self._last_read.upper():
                self._last_read = self.redact(self._last_read)
            self._items.extend(self.decoder.feed(chunk))

    def _autonomous(self, item: tl1.Autonomous) -> None:
        """Queue an autonomous message; record a gap when ATAGs skip (they count 1..65535)."""
        if self.last_atag is not None:
            expected = self.last_atag % 65535 + 1
            if item.atag != expected:
                self.atag_gaps.append((expected, item.atag))
                log.warning("tl1: autonomous messages lost: expected ATAG %d, got %d", expected, item.atag)
        self.last_atag = item.atag
        self.autonomous.append(item)
        log.info("tl1 autonomous %s %s %s", item.almcde.strip(), item.atag, item.verb)

    def drain(self, timeout: float = 0.0) -> list[tl1.Autonomous]:
        """Read whatever autonomous messages arrive within ``timeout`` s (no command sent)
        and return everything queued so far, emptying the queue."""
        with self._lock:
            deadline = time.monotonic() + timeout
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._pull(min(remaining, 0.2), "link lost while listening")
            keep: collections.deque = collections.deque()
            for item in self._items:
                if isinstance(item, tl1.Autonomous):
                    self._autonomous(item)
                elif isinstance(item, tl1.Reply):
                    keep.append(item)  # a late reply stays for whoever waits for its CTAG
            self._items = keep
            out = list(self.autonomous)
            self.autonomous.clear()
            return out

    def close(self) -> None:
        self.stream.close()
