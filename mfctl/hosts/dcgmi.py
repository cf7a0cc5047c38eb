"""``dcgmi diag`` result tables (old layout: one row per test; DCGM 4 layout: per-GPU
continuation rows) and ``dcgmi discovery -l`` (``<<<NULL>>>`` names are missing data)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mfctl.errors import ParseError
from mfctl.hosts.textin import normalized

#: A test's result word, as dcgmi prints it, to one of pass / fail / skip / warn.
_STATUS = (("pass", "pass"), ("fail", "fail"), ("error", "fail"), ("skip", "skip"), ("warn", "warn"),
           ("not run", "skip"))
#: Per-GPU continuation rows: DCGM 3.x "Fail - GPU: 0" (or "GPU: 0, 1"), DCGM 4.x "GPU0: Pass".
_GPU3 = re.compile(r"^(?P<r>Pass|Fail|Skip|Warn\w*|Error)\s*-\s*GPUs?:\s*(?P<g>\d+(?:\s*,\s*\d+)*)\s*$", re.I)
_GPU4 = re.compile(r"^GPU\s*(?P<g>\d+):\s*(?P<r>.*)$")
#: Rows that annotate the test above them instead of being a test (DCGM 3.x).
_NOTES = ("Warning", "Info")


def status_of(result: str) -> str | None:
    """``pass`` / ``fail`` / ``skip`` / ``warn`` for a dcgmi result text ("Pass - All", "Fail",
    "Skip", "Warn"), None for anything else."""
    low = result.strip().lower()
    return next((st for word, st in _STATUS if low.startswith(word)), None)


@dataclass
class DiagResult:
    """One ``dcgmi diag`` table. ``tests``: test → its row's result text as printed ("Pass - All",
    "Pass - GPU: 1"); ``per_gpu``: test → {GPU index: result word} from per-GPU rows (DCGM 3.x
    "Fail - GPU: 0" continuation rows, DCGM 4.x "GPU0: Pass"); ``warnings``/``info``: test → every
    "Warning"/"Info" row under it, wrapped text rejoined; ``sections``: test → its section
    (Deployment, Integration, Hardware, Stress)."""

    metadata: dict[str, str] = field(default_factory=dict)
    tests: dict[str, str] = field(default_factory=dict)
    per_gpu: dict[str, dict[int, str]] = field(default_factory=dict)
    warnings: dict[str, list[str]] = field(default_factory=dict)
    info: dict[str, list[str]] = field(default_factory=dict)
    sections: dict[str, str] = field(default_factory=dict)

    @property
    def status(self) -> dict[str, dict[str, str | None]]:
        """Per test, per GPU ("all" when the row covers every GPU): pass / fail / skip / warn.
        A test with per-GPU rows has only those; a test whose own row names no GPU ("Pass - All",
        "Fail") has its status under "all"."""
        out: dict[str, dict[str, str | None]] = {}
        for t, r in self.tests.items():
            gpus = self.per_gpu.get(t)
            if gpus:
                out[t] = {str(g): status_of(v) for g, v in sorted(gpus.items())}
            else:
                out[t] = {"all": status_of(r)}
        return out

    @property
    def failed(self) -> list[str]:
        """Failed tests: "TEST" when the row fails for all GPUs, "TEST (GPU N)" per failing GPU."""
        out = []
        for t, r in self.tests.items():
            gpus = self.per_gpu.get(t)
            if gpus:
                out += [f"{t} (GPU {g})" for g, v in sorted(gpus.items()) if status_of(v) == "fail"]
            elif status_of(r) == "fail":
                out.append(t)
        return out


@normalized
def parse_diag(text: str) -> DiagResult:
    """Parse a ``dcgmi diag -r N`` table (DCGM 2.x-4.x layouts). Raises ParseError naming the line."""
    res = DiagResult()
    section = None
    last: str | None = None  # the test the next continuation rows belong to
    target: tuple[dict[str, list[str]], str] | None = None  # the note a wrapped line continues
    chunk_len = 0  # length of the last text chunk (to spot a mid-word wrap)
    width: int | None = None  # text width of the result column
    header_seen = False
    for no, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if s.startswith(("+", "|-")) and width is None:
            cols = s.strip("+|").split("+")
            if len(cols) >= 2:
                width = len(cols[1]) - 3  # "| " + text + "  |": dcgmi leaves one column spare
        m = re.match(r"^[|+]-+\s*(\w[\w ]*?)\s*-+\+", s)
        if m:
            section, last, target = m.group(1), None, None
            continue
        if not s or s.startswith(("Successfully", "+---", "+===")) or set(s) <= set("+-="):
            continue
        m = re.match(r"^\|\s*(.*?)\s*\|\s*(.*?)\s*\|?$", s)  # a truncated capture may lose the last pipe
        if not m:
            raise ParseError("dcgmi diag", no, "'| test | result |'", s)
        name, result = m.group(1), m.group(2)
        if not header_seen and name == "Diagnostic" and result == "Result":
            header_seen = True
            continue
        if section == "Metadata":
            if name:
                res.metadata[name] = result
                last = name
            elif last:
                res.metadata[last] += " " + result
            continue
        if name in _NOTES or (name and name.split()[0] in _NOTES and last):
            if last is None:
                raise ParseError("dcgmi diag", no, f"a test row before its {name!r} row", s)
            book = res.warnings if name.startswith("Warning") else res.info
            book.setdefault(last, []).append(result)
            target, chunk_len = (book, last), len(result)
            continue
        if name:
            res.tests[name] = result
            res.sections[name] = section or ""
            last, target, chunk_len = name, None, len(result)
            g = _GPU3.match(result)
            if g:
                for idx in re.findall(r"\d+", g.group("g")):
                    res.per_gpu.setdefault(name, {})[int(idx)] = g.group("r").capitalize()
            continue
        if last is None:
            raise ParseError("dcgmi diag", no, "a test row before a continuation row", s)
        note = re.match(r"^(Warning|Info)\s*:\s*(.*)$", result)  # a note in the result column (DCGM 4.x)
        if note:
            book = res.warnings if note.group(1) == "Warning" else res.info
            book.setdefault(last, []).append(note.group(2))
            target, chunk_len = (book, last), len(result)
            continue
        g3, g4 = _GPU3.match(result), _GPU4.match(result)
        if target is None and (g3 or g4):
            if g3:
                for idx in re.findall(r"\d+", g3.group("g")):
                    res.per_gpu.setdefault(last, {})[int(idx)] = g3.group("r").capitalize()
            elif g4:
                res.per_gpu.setdefault(last, {})[int(g4.group("g"))] = g4.group("r")
            continue
        # dcgmi wraps long text at the column's width, mid-word: a chunk that filled it goes on without a space
        sep = "" if width is not None and chunk_len >= width else " "
        if target is not None:
            book, t = target
            book[t][-1] += sep + result
        else:
            res.tests[last] += sep + result
        chunk_len = len(result)
    if not res.tests and not res.metadata:
        raise ParseError("dcgmi diag", None, "a result table", text.strip()[:80])
    return res


@dataclass
class DiscoveredGPU:
    gpu_id: int
    name: str | None
    pci_bus_id: str | None
    uuid: str | None


@normalized
def parse_discovery(text: str) -> list[DiscoveredGPU]:
    out: list[DiscoveredGPU] = []
    cur: DiscoveredGPU | None = None
    for no, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s.startswith("|"):
            continue
        cells = [c.strip() for c in s.strip("|").split("|")]
        if len(cells) != 2 or cells[0] == "GPU ID":
            continue
        if cells[0].isdigit():
            cur = DiscoveredGPU(int(cells[0]), None, None, None)
            out.append(cur)
        if cur is None:
            raise ParseError("dcgmi discovery", no, "a row starting with a GPU id", s)
        k, _, v = cells[1].partition(":")
        v = v.strip()
        v = None if v in ("<<<NULL>>>", "N/A", "") else v
        if k == "Name":
            cur.name = v
        elif k == "PCI Bus ID":
            cur.pci_bus_id = v
        elif k == "Device UUID":
            cur.uuid = v
    if not out:
        raise ParseError("dcgmi discovery", None, "'| <id> | Name: … |' rows", text.strip()[:80])
    return out
