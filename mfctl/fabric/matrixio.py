"""Read traffic matrices and topologies from CSV, JSON or NPY files.

Two kinds of traffic (``kind``):
- ``server-bytes``: ``B[i, j]`` bytes server i sends server j in one dispatch all-to-all,
  shape ``[n, n]`` or per layer ``[L, n, n]``;
- ``tokens``: Megatron's ``num_global_tokens_per_expert`` — token copies EP rank r sends to
  expert e, shape ``[R, E]`` or ``[L, R, E]``; folded onto servers with the expert
  placement (contiguous by default), TP and GPUs per server, and ``hidden × bytes``.

JSON may carry the kind and its parameters: ``{"kind": "tokens", "layers": [...], "tp": 4,
"gpus_per_server": 8, "hidden": 4096, "bytes_per_element": 2, "expert_placement": [...]}``
(``matrix`` for a single layer). CSV holds one 2-D matrix (``#`` comments allowed).
Errors: :class:`mfctl.errors.ConfigError` naming the file (and line for CSV).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mfctl.errors import ConfigError
from mfctl.fabric.traffic import expert_to_rank, rank_matrix, rank_to_server, server_matrix
from mfctl.inventory.files import read_config


@dataclass
class TrafficSpec:
    kind: str = "server-bytes"
    tp: int = 1
    gpus_per_server: int = 8
    hidden: int = 4096
    bytes_per_element: int = 2
    expert_placement: list[int] | None = None


_KINDS = {"c": "complex numbers", "U": "text", "S": "bytes", "O": "Python objects", "M": "dates", "m": "time spans",
          "V": "records"}


def _ragged(doc) -> str:
    """Where a nested JSON list stops being rectangular: ``matrix[1] has 1 values, matrix[0] 2``."""
    stack: list[tuple[str, object]] = [("matrix", doc)]
    while stack:
        at, x = stack.pop()
        if not isinstance(x, list):
            continue
        kinds = {isinstance(y, list) for y in x}
        if len(kinds) > 1:
            return f"{at} mixes numbers and lists"
        lens = [len(y) for y in x if isinstance(y, list)]
        for i, n in enumerate(lens):
            if n != lens[0]:
                return f"{at}[{i}] has {n} values, {at}[0] {lens[0]}"
        stack.extend((f"{at}[{i}]", y) for i, y in enumerate(x))
    return "its rows differ in length"


def _load_array(path: Path) -> tuple[np.ndarray, dict]:
    suffix = path.suffix.lower()
    if not path.is_file():
        raise ConfigError("is a directory, not a file" if path.is_dir() else "no such file", path=str(path))
    if suffix == ".npy":
        try:
            arr = np.load(path, allow_pickle=False)
        except (ValueError, OSError):  # numpy's advice (allow_pickle) is not for a traffic matrix
            raise ConfigError("not a NumPy .npy array of numbers", path=str(path)) from None
        if arr.dtype.kind not in "biuf":  # strings, complex, dates, records: no byte counts (and no raw numpy warning)
            raise ConfigError(f"a NumPy array of {arr.dtype} ({_KINDS.get(arr.dtype.kind, arr.dtype.kind)}), "
                              "expected real numbers", path=str(path))
        return np.asarray(arr, dtype=float), {}
    if suffix == ".json":
        try:
            doc = json.loads(read_config(path).decode())
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ConfigError(f"not JSON: {e}", path=str(path), line=getattr(e, "lineno", None)) from None
        except RecursionError:  # json's decoder on arrays nested ~1,000 deep
            raise ConfigError("not a matrix: arrays nested too deeply", path=str(path)) from None
        meta = {}
        if isinstance(doc, dict):
            meta = {k: v for k, v in doc.items() if k not in ("matrix", "layers", "circuits")}
            if not any(k in doc for k in ("matrix", "layers", "circuits")):
                raise ConfigError(f"expected a 'matrix' or 'layers' (or 'circuits') key, found {sorted(doc) or 'none'}",
                                  path=str(path))
            doc = doc.get("layers", doc.get("matrix", doc.get("circuits")))
        stack: list[tuple[tuple[int, ...], object]] = [((), doc)]
        while stack:  # true/false would become 1/0 and "12" 12.0: neither is a byte count
            at, x = stack.pop()
            if isinstance(x, (bool, str)):
                cell = "".join(f"[{i}]" for i in at)
                raise ConfigError(f"matrix{cell} is {json.dumps(x)}, expected a number", path=str(path))
            if isinstance(x, list):
                stack.extend((at + (i,), y) for i, y in enumerate(x))
        try:
            return np.asarray(doc, dtype=float), meta
        except OverflowError:  # an integer beyond a float (10**400): not a byte count
            raise ConfigError("matrix holds a number too large for a float (above ~1.8e308)", path=str(path)) from None
        except (TypeError, ValueError):
            raise ConfigError(f"matrix is not a rectangular array of numbers: {_ragged(doc)}", path=str(path)) from None
    rows = []
    try:
        text = read_config(path).decode()
    except UnicodeDecodeError:
        raise ConfigError("not a text CSV file", path=str(path)) from None
    for no, ln in enumerate(text.splitlines(), 1):
        ln = ln.split("#", 1)[0].strip()
        if not ln:
            continue
        cells = ln.replace(";", ",").split(",")
        if any(c.strip() == "" for c in cells):
            raise ConfigError("empty cell (write 0 for no traffic)", path=str(path), line=no)
        try:
            rows.append([float(x) for x in cells])
        except ValueError:
            raise ConfigError(f"expected comma-separated numbers, got {ln[:60]!r}", path=str(path), line=no) from None
        if rows and len(rows[-1]) != len(rows[0]):
            raise ConfigError(f"row has {len(rows[-1])} values, the first row {len(rows[0])}", path=str(path), line=no)
    if not rows:
        raise ConfigError("no numbers in file", path=str(path))
    return np.asarray(rows, dtype=float), {}


def load_traffic(path: str | Path, spec: TrafficSpec) -> np.ndarray:
    """Per-layer server-bytes matrices ``[L, n, n]`` from a file (see module doc)."""
    path = Path(path)
    arr, meta = _load_array(path)
    kind = meta.get("kind", spec.kind)
    for k in ("tp", "gpus_per_server", "hidden", "bytes_per_element", "expert_placement"):
        if k in meta:
            setattr(spec, k, meta[k])
    for k in ("tp", "gpus_per_server", "hidden", "bytes_per_element"):
        v = getattr(spec, k)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"{k} must be a positive integer, got {v!r}", path=str(path))
    if spec.expert_placement is not None and not (
            isinstance(spec.expert_placement, list)
            and all(isinstance(x, int) and not isinstance(x, bool) for x in spec.expert_placement)):
        raise ConfigError("expert_placement must be a list of EP rank numbers", path=str(path))
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise ConfigError("traffic must be finite and non-negative", path=str(path))
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim != 3:
        raise ConfigError(f"expected a 2-D matrix or a list of them, got shape {arr.shape}", path=str(path))
    if kind == "server-bytes":
        if arr.shape[1] != arr.shape[2]:
            raise ConfigError(f"server × server matrix must be square, got {arr.shape[1]}×{arr.shape[2]}", path=str(path))
        if arr.shape[1] < 2:
            raise ConfigError("a region needs at least 2 servers", path=str(path))
        return arr
    if kind != "tokens":
        raise ConfigError(f"unknown kind {kind!r} (server-bytes or tokens)", path=str(path))
    _, R, E = arr.shape
    if spec.expert_placement is not None:
        er = np.asarray(spec.expert_placement, dtype=int)
        if er.shape != (E,) or er.min() < 0 or er.max() >= R:
            raise ConfigError(f"expert_placement must list an EP rank (0..{R - 1}) for each of {E} experts", path=str(path))
    else:
        if E % R:
            raise ConfigError(f"{E} experts do not divide over {R} EP ranks; give expert_placement", path=str(path))
        er = expert_to_rank(E, R)
    try:
        rs = rank_to_server(R, spec.tp, spec.gpus_per_server)
    except ValueError as e:
        raise ConfigError(str(e), path=str(path)) from None
    n = int(rs.max()) + 1
    if n < 2:
        raise ConfigError(f"{R} EP ranks x TP {spec.tp} fit on one server of {spec.gpus_per_server} GPUs: nothing crosses "
                          "the fabric (is 'tp' set?)", path=str(path))
    return server_matrix(rank_matrix(arr, er, R), rs, n, spec.hidden * spec.bytes_per_element)


def load_topology(path: str | Path, n: int) -> np.ndarray:
    """A circuit matrix ``[n, n]`` (symmetric, non-negative integers) from CSV/JSON/NPY."""
    path = Path(path)
    arr, _ = _load_array(path)
    if arr.shape != (n, n) or (arr != np.round(arr)).any() or (arr < 0).any() or (arr != arr.T).any():
        raise ConfigError(f"a topology is a symmetric {n}×{n} matrix of circuit counts", path=str(path))
    return arr.astype(int)
