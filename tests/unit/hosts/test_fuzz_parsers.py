"""Every registered parser (:data:`mfctl.hosts.registry.KINDS`, so kinds added later are covered
too) on its corpus files mangled: cut after every line and inside lines, CRLF, a BOM, NUL, tabs,
non-UTF-8 bytes, empty and whitespace-only input. Each must give a typed result or raise
``ParseError`` naming its tool — never another exception. Deterministic cuts first, then a bounded
hypothesis search (``max_examples`` per kind, no deadline) over random cuts and insertions."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mfctl.errors import ParseError
from mfctl.hosts import registry
from mfctl.hosts.textin import clean

ROOT = Path(__file__).resolve().parents[3]
MAX_CUTS = 24  # line cuts per file (evenly spread over long files): the suite stays fast
KINDS = [k.name for k in registry.KINDS]


def corpus(kind: registry.Kind) -> list[bytes]:
    files = sorted({f for g in (*kind.samples, kind.golden) for f in glob.glob(str(ROOT / g))})
    return [Path(f).read_bytes() for f in files]


def spread(n: int, most: int = MAX_CUTS) -> list[int]:
    return list(range(n)) if n <= most else sorted({round(i * (n - 1) / (most - 1)) for i in range(most)})


def variants(data: bytes) -> list[str | bytes]:
    """The deterministic manglings of one file."""
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    out: list[str | bytes] = ["", " ", "\n\n", "   \n\t \n", "\ufeff", "\x00", b"\xff\xfe", "\r\n"]
    for k in spread(len(lines) + 1):
        out += ["\n".join(lines[:k]), "\n".join(lines[:k]) + "\n"]
    for k in spread(len(lines)):
        ln = lines[k]
        if len(ln) > 1:
            out.append("\n".join(lines[:k] + [ln[: len(ln) // 2]]))
            out.append("\n".join(lines[:k] + [ln[:1]]))
    out += [text.replace("\n", "\r\n"), "\ufeff" + text, "\ufeff" + text.replace("\n", "\r\n"),
            text.replace("\n", "\x00\n"), text.replace("  ", "\t"), text.replace(" ", "\t"), "\x00" + text,
            data.replace(b" ", b"\xff", 7), b"\xef\xbb\xbf" + data.replace(b"\n", b"\r\n"), data[: len(data) // 3],
            text.replace(":", "\ufffd", 3), text.upper(), "\n".join(reversed(lines))]
    return out


def check(kind: registry.Kind, v: str | bytes) -> None:
    """A typed result or a ParseError: text through the parser called directly (what the health
    sweep does), bytes through the registry (what ``mfctl parse`` does)."""
    try:
        kind.function()(v) if isinstance(v, str) else registry.parse(kind.name, v)
    except ParseError as e:
        assert e.tool and e.expected, e


@pytest.mark.parametrize("name", KINDS)
def test_every_kind_has_a_sample(name):
    assert corpus(registry.get(name)), \
        f"{name}: no sample file: give its Kind a samples glob"


@pytest.mark.parametrize("name", KINDS)
def test_deterministic_manglings_never_crash(name):
    kind = registry.get(name)
    for data in corpus(kind) or [b""]:
        for v in variants(data):
            check(kind, v)


@pytest.mark.parametrize("name", KINDS)
def test_bom_crlf_nul_read_as_the_clean_text_by_direct_callers(name):
    """The parser called directly (not through the registry) reads a BOM + CRLF + NUL copy of each
    sample as it reads the sample: one normalisation, in the helper every parser uses."""
    kind = registry.get(name)
    fn = kind.function()
    for data in corpus(kind):
        text = clean(data)
        mangled = "\ufeff" + text.replace("\n", "\x00\r\n")
        try:
            want = registry.to_json(fn(text))
        except ParseError as e:
            with pytest.raises(ParseError) as got:
                fn(mangled)
            assert (got.value.tool, got.value.line_no) == (e.tool, e.line_no)
            continue
        assert registry.to_json(fn(mangled)) == want


_JUNK = st.sampled_from(["\r", "\n", "\x00", "\ufeff", "\t", "\ufffd", "|", ":", " ", "-", "=", "[", "]", "{", "}",
                         '"', ",", "0", "9", "N/A", "ERR!", "\x1b[4m", "\u2028", "\x0c"])


@pytest.mark.parametrize("name", KINDS)
@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_cuts_and_insertions_never_crash(name, data):
    kind = registry.get(name)
    files = corpus(kind) or [b""]
    raw = files[data.draw(st.integers(0, len(files) - 1), label="file")]
    text = raw.decode("utf-8", errors="replace")
    cut = data.draw(st.integers(0, len(text)), label="cut")
    text = text[:cut]
    for _ in range(data.draw(st.integers(0, 4), label="insertions")):
        at = data.draw(st.integers(0, len(text)), label="at")
        text = text[:at] + data.draw(_JUNK, label="junk") + text[at:]
    check(kind, text)
    check(kind, text.encode("utf-8", errors="surrogatepass")[: len(text) // 2] + b"\xff\xc3")
