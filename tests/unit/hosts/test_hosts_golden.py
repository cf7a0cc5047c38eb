"""Every tool parser against its golden folder: ``tests/golden/<tool>/<case>/output.txt`` parses
to ``expected.json`` (or raises as ``expected_error.json`` says). One parametrised test for all
of them (genieparser's convention): a new capture is a new folder, no code. See
``tests/golden/README.md`` for the layout and how to add a case.

``<tool>/parser.json`` names the parser as ``module:function`` (plus optional ``kwargs``).
The parser's result is compared in full after serialising it to JSON: dataclasses field by
field (as ``dataclasses.asdict``) plus their public properties (``RdmaPort.active``,
``DiagResult.failed``: derived facts the old tests asserted), pydantic models by
``model_dump(mode="json")``, tuples as lists, dict keys as strings. The comparison is strict
on JSON types: ``59`` (int) is not ``59.0`` (float), ``true`` is not ``1``.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import os
from pathlib import Path

import pytest

from support import GOLDEN

#: MFCTL_GOLDEN_WRITE=1 writes a missing expected.json from today's parser (never overwrites) and
#: fails the case, so that nobody goes green without reading the file against output.txt.
WRITE = os.environ.get("MFCTL_GOLDEN_WRITE") == "1"


def jsonable(x):
    """The parser's result as JSON data (see the module docstring). Raises TypeError for anything
    else, so a new result type is a decision, never a silent ``repr``."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        out = {f.name: jsonable(getattr(x, f.name)) for f in dataclasses.fields(x)}
        for name in dir(type(x)):
            if not name.startswith("_") and isinstance(getattr(type(x), name), property):
                out[name] = jsonable(getattr(x, name))
        return out
    if hasattr(x, "model_dump"):
        return x.model_dump(mode="json")
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if x is None or isinstance(x, (str, bool, int, float)):
        return x
    raise TypeError(f"no JSON form for {type(x).__name__}: add one to jsonable()")


def differences(want, got, where="$") -> list[str]:
    """Where ``got`` differs from ``want`` (JSON data), strict on types; [] when equal."""
    if type(want) is not type(got):
        return [f"{where}: expected {want!r} ({type(want).__name__}), got {got!r} ({type(got).__name__})"]
    if isinstance(want, dict):
        out = [f"{where}: key {k!r} missing" for k in want if k not in got]
        out += [f"{where}: unexpected key {k!r} = {got[k]!r}" for k in got if k not in want]
        return out + [d for k in want if k in got for d in differences(want[k], got[k], f"{where}.{k}")]
    if isinstance(want, list):
        if len(want) != len(got):
            return [f"{where}: expected {len(want)} items, got {len(got)}"]
        return [d for i, (a, b) in enumerate(zip(want, got)) for d in differences(a, b, f"{where}[{i}]")]
    if isinstance(want, float) and math.isnan(want) and math.isnan(got):
        return []
    return [] if want == got else [f"{where}: expected {want!r}, got {got!r}"]


def _parser(tool_dir: Path):
    spec = json.loads((tool_dir / "parser.json").read_text())
    module, _, name = spec["parser"].partition(":")
    return getattr(importlib.import_module(module), name), spec.get("kwargs", {})


def _cases() -> list:
    out = []
    for tool_dir in sorted(p for p in GOLDEN.iterdir() if p.is_dir()):
        for case in sorted(p for p in tool_dir.iterdir() if p.is_dir()):
            out.append(pytest.param(case, id=f"{tool_dir.name}/{case.name}"))
    return out


CASES = _cases()


@pytest.mark.parametrize("case", CASES)
def test_golden(case: Path):
    parse, kwargs = _parser(case.parent)
    text = (case / "output.txt").read_text()
    expected, expected_error = case / "expected.json", case / "expected_error.json"
    assert not (expected.exists() and expected_error.exists()), f"{case}: one of expected.json, expected_error.json"
    if expected_error.exists():
        want = json.loads(expected_error.read_text())
        with pytest.raises(Exception) as e:
            parse(text, **kwargs)
        assert type(e.value).__name__ == want["type"], e.value
        assert want["message_contains"] in str(e.value)
        for attr, value in want.get("attributes", {}).items():
            assert getattr(e.value, attr) == value, attr
        return
    got = json.loads(json.dumps(jsonable(parse(text, **kwargs))))
    if not expected.exists():
        if WRITE:
            expected.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n")
            pytest.fail(f"wrote {expected}: review it against output.txt, then rerun")
        pytest.fail(f"{case}: no expected.json (MFCTL_GOLDEN_WRITE=1 writes one from today's parser, to review)")
    diffs = differences(json.loads(expected.read_text()), got)
    assert not diffs, "\n".join(diffs[:20])


def test_every_tool_and_case_is_complete():
    """Each tool folder names an importable parser; each case has its output and one expectation,
    and a line in PROVENANCE.md (where the capture came from, or that it was written here)."""
    provenance = (GOLDEN / "PROVENANCE.md").read_text()
    tools = sorted(p for p in GOLDEN.iterdir() if p.is_dir())
    assert len(tools) >= 20 and len(CASES) >= 60
    for tool_dir in tools:
        parse, _ = _parser(tool_dir)
        assert callable(parse), tool_dir
        for case in (p for p in tool_dir.iterdir() if p.is_dir()):
            assert (case / "output.txt").is_file(), case
            assert (case / "expected.json").is_file() != (case / "expected_error.json").is_file(), case
            assert f"`{tool_dir.name}/{case.name}`" in provenance, f"{case}: no line in tests/golden/PROVENANCE.md"


def test_the_comparison_is_strict():
    """The checker itself can fail: types, missing and extra keys, list lengths."""
    assert differences({"a": [1, 2.5, None]}, {"a": [1, 2.5, None]}) == []
    assert differences({"t": 59}, {"t": 59.0}) == ["$.t: expected 59 (int), got 59.0 (float)"]
    assert differences({"b": True}, {"b": 1}) and differences({"a": 1}, {}) and differences({}, {"a": 1})
    assert differences([1, 2], [1]) == ["$: expected 2 items, got 1"]
    assert differences({"x": [{"y": "a"}]}, {"x": [{"y": "b"}]}) == ["$.x[0].y: expected 'a', got 'b'"]

    @dataclasses.dataclass
    class Port:
        state: str
        ports: tuple = ()

        @property
        def active(self) -> bool:
            return self.state == "Active"

    assert jsonable({1: Port("Active", (1, "x"))}) == {"1": {"state": "Active", "ports": [1, "x"], "active": True}}
    with pytest.raises(TypeError):
        jsonable(object())
