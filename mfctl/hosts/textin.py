"""One normalisation of tool output before any parser reads it.

What operators paste and what transports hand back is not always clean text: a file saved on
Windows starts with a UTF-8 byte-order mark and ends its lines with CRLF, a capture through a
serial console or ``script(1)`` holds NUL bytes, a log holds bytes that are not UTF-8. Every
parser in :mod:`mfctl.hosts` reads text through :func:`clean` (by the :func:`normalized`
decorator, so direct callers get it too, and again at :func:`mfctl.hosts.registry.parse`):

- bytes are decoded as UTF-8, an undecodable byte becoming U+FFFD (never an exception);
- a leading byte-order mark (U+FEFF, also after leading blank space) is dropped;
- ``CRLF`` and a lone ``CR`` become ``LF``; NUL characters are dropped;
- lone surrogates (a ``surrogateescape`` decode elsewhere) become U+FFFD;
- Unicode line breaks other than ``LF`` that :meth:`str.splitlines` would split on (``VT``,
  ``FF``, ``FS``/``GS``/``RS``, ``NEL``, U+2028/U+2029) become a space, so that a line number
  counted by ``splitlines`` is the line number counted by ``\\n`` (what json/XML report).

Tabs and ANSI escapes are kept: some formats need them (``nvidia-smi topo -m`` is tab separated).
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_BREAKS = re.compile("[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean(text: str | bytes | bytearray | None) -> str:
    """``text`` as the parsers expect it (see the module docstring). ``None`` is empty text."""
    if text is None:
        return ""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise TypeError(f"tool output must be text or bytes, got {type(text).__name__}")
    if "\ufeff" in text[:64]:
        head, sep, rest = text.partition("\ufeff")
        if not head.strip():
            text = head + rest
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if "\x00" in text:
        text = text.replace("\x00", "")
    text = _BREAKS.sub(" ", text)
    return _SURROGATE.sub("\ufffd", text)


def normalized(fn: F) -> F:
    """Decorate a parser ``fn(text, ...)`` so that it reads :func:`clean` text."""

    @functools.wraps(fn)
    def wrapper(text, *args, **kwargs):
        return fn(clean(text), *args, **kwargs)

    wrapper.__wrapped_parser__ = fn  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def line_at(text: str, line_no: int | None) -> str:
    """The 1-based ``line_no`` of ``text`` (``""`` past its end or for None): what a ParseError
    quotes when a decoder (json, XML) names a line that may be just past the last one."""
    if not line_no or line_no < 1:
        return ""
    lines = text.split("\n")
    return lines[line_no - 1] if line_no <= len(lines) else ""
