"""YAML loading with ``file:line`` errors, and the inventory's cross-checks.

Errors raised: :class:`mfctl.errors.ConfigError` (exit code 3), whose message names the
file and the line of the offending key: unknown or duplicate keys, wrong types, an OCS
port used twice on one OCS, an optical lane without its TX or RX port, a port beyond its
OCS's size, a region naming a missing host or an OCS the inventory does not have (or none when
it has several), two OCSes of one name.
"""

from __future__ import annotations

import contextlib
import gc
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from pydantic import BaseModel, ValidationError

from mfctl.errors import ConfigError
from mfctl.inventory.models import OCS, Inventory

if TYPE_CHECKING:
    import yaml

Loc = tuple  # a path of keys / indexes into the document
M = TypeVar("M", bound=BaseModel)


#: nodes YAML aliases may add once expanded (each use of an anchor counts its whole subtree again):
#: stops "billion laughs" documents. The file's own nodes are not counted: the 16 MiB size cap
#: (mfctl.inventory.files) bounds them — a 32,768-GPU inventory (4 MB) has ~1.7 million of them.
MAX_ALIAS_NODES = 200_000
MAX_DEPTH = 100  # nesting levels: no schema goes beyond ~10; deeper is a mistake or an attack (and Python's recursion limit)


class _Walk:
    """One document's walk: ``lines`` (key path → line), the nodes seen (by id: PyYAML composes an
    alias as the very node its anchor made, so a node met again is an alias's expansion) and what
    is left of :data:`MAX_ALIAS_NODES`."""

    def __init__(self, src: str):
        self.src = src
        self.lines: dict[Loc, int] = {}
        self.seen: set[int] = set()
        self.budget = MAX_ALIAS_NODES


def _walk(node: yaml.Node, path: Loc, w: _Walk, within: tuple = (), alias_line: int | None = None) -> None:
    """Record each key's line; refuse duplicate keys, non-scalar keys, aliases whose expansion adds
    more than :data:`MAX_ALIAS_NODES` nodes (naming the line of the alias that went past it),
    nesting beyond :data:`MAX_DEPTH`, and an alias inside the very node it names (``&x [*x]``: a
    structure that contains itself). ``within``: the nodes enclosing ``node``; ``alias_line``: the
    line of the alias whose expansion this is (None: the file's own text)."""
    lines, src = w.lines, w.src
    if alias_line is None and id(node) in w.seen:  # an alias: from here down, every node is an expansion
        alias_line = lines.get(path) or next((lines[path[:k]] for k in range(len(path) - 1, -1, -1) if path[:k] in lines),
                                             node.start_mark.line + 1)
    if alias_line is not None:
        w.budget -= 1
        if w.budget < 0:
            raise ConfigError(f"document too large: its YAML aliases expand to more than {MAX_ALIAS_NODES} nodes (an "
                              "alias on this line goes past it: a 'billion laughs' document?)", path=src, line=alias_line)
    else:
        w.seen.add(id(node))
    line = node.start_mark.line + 1
    # PyYAML's node kinds: mapping, sequence, scalar (each node class has an .id; the stubs leave it out, and
    # isinstance would need yaml imported here, which a cached inventory never does)
    if node.id == "scalar":  # type: ignore[attr-defined]
        lines[path] = line
        return
    if any(node is n for n in within):
        raise ConfigError(f"{_fmt_loc(path)}: a YAML alias refers to a list or mapping that contains it (a recursive "
                          f"structure, anchored on line {line})", path=src, line=lines.get(path) or lines.get(path[:-1], line))
    if len(within) >= MAX_DEPTH:
        raise ConfigError(f"nested more than {MAX_DEPTH} levels deep", path=src, line=line)
    lines[path] = line
    within = within + (node,)
    if node.id == "mapping":  # type: ignore[attr-defined]
        seen: dict[str, int] = {}
        for k, v in node.value:
            line = k.start_mark.line + 1
            if k.id != "scalar":  # (its text could be an expanded alias: never rendered; an alias's mark is its anchor's)
                raise ConfigError(f"{_fmt_loc(path)}: a key must be a plain value, not a {k.id}", path=src,
                                  line=max(k.start_mark.line, node.start_mark.line) + 1)
            key = k.value
            if key in seen:
                raise ConfigError(f"duplicate key {key!r} (first defined on line {seen[key]})", path=src, line=line)
            seen[key] = line
            lines[path + (key,)] = line
            _walk(v, path + (key,), w, within, alias_line)
            lines[path + (key,)] = line  # keep the key's line, not the value's
    else:
        for i, item in enumerate(node.value):
            _walk(item, path + (i,), w, within, alias_line)


def _read(path: str | Path) -> bytes:
    from mfctl.inventory.files import read_config

    return read_config(path)


def load_yaml_with_lines(path: str | Path, raw: bytes | None = None) -> tuple[Any, dict[Loc, int]]:
    """Parse YAML safely; return the data and a map from key path to 1-based line.
    ``raw``: the file's bytes when the caller has read them already (``path`` names them).

    Raises ConfigError for unreadable files, YAML syntax errors and duplicate keys.
    """
    src = str(path)
    if raw is None:
        raw = _read(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ConfigError(f"not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})", path=src, line=line) from None
    if "\x00" in text:
        raise ConfigError("not a text file (contains NUL bytes)", path=src, line=text[: text.index("\x00")].count("\n") + 1)
    import yaml  # here, not at the top: an inventory read from the cache (mfctl.inventory.cache) needs no YAML

    loader = loader_class()(text)  # parsed once: the nodes give the lines, then the data
    try:
        with _no_cyclic_gc():
            node = loader.get_single_node()
            if node is None:
                raise ConfigError("file is empty", path=src)
            w = _Walk(src)
            _walk(node, (), w)
            lines = w.lines
            data = loader.construct_document(node)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        at: int | None = mark.line + 1 if mark else None
        quote = _unclosed_quote(text, at)
        if quote and quote != at:  # where the parser stopped is lines after the slip
            what += f" (an unclosed quote on line {quote}?)"
        raise ConfigError(f"YAML: {what}", path=src, line=at) from None
    except _TooDeep as e:  # the pure composer (libyaml's stops at 1,000 levels, _walk at MAX_DEPTH)
        raise ConfigError(f"nested more than {MAX_DEPTH} levels deep", path=src, line=e.line) from None
    except RecursionError:  # (deep nesting past what _TooDeep stops: not expected)
        raise ConfigError(f"nested more than {MAX_DEPTH} levels deep", path=src) from None
    finally:
        loader.dispose()
    return data, lines


LOADERS = ("auto", "libyaml", "pure")  #: setting yaml_loader
_MISSING = object()
_classes: dict[str, type] = {}


def loader_kind() -> str:
    """``"libyaml"`` or ``"pure"``: what setting ``yaml_loader`` asks for (``auto``: libyaml where PyYAML
    was built with it, ``yaml.__with_libyaml__``). Another word, or ``libyaml`` where PyYAML has none,
    is a ConfigError saying so (exit 3)."""
    import yaml

    from mfctl import settings

    env = settings.SETTINGS["yaml_loader"].env
    want = (settings.get("yaml_loader") or "auto").strip().lower()
    if want not in LOADERS:
        raise ConfigError(f"{env}={want!r}: one of {', '.join(LOADERS)}")
    has = bool(getattr(yaml, "__with_libyaml__", False)) and hasattr(yaml, "CSafeLoader")
    if want == "libyaml" and not has:
        raise ConfigError(f"{env}=libyaml, but this PyYAML was built without libyaml (yaml.__with_libyaml__ is "
                          "False): use auto or pure")
    return "libyaml" if want != "pure" and has else "pure"


def loader_class(kind: str | None = None) -> type:
    """The safe loader mfctl parses YAML with: PyYAML's ``CSafeLoader`` (libyaml's scanner, parser and
    composer in C) or its pure-Python ``SafeLoader`` (``kind``; default :func:`loader_kind`), with
    two changes that keep every result: the tag of a plain scalar is resolved once per distinct
    text in a document (PyYAML runs its implicit resolvers' regular expressions on every scalar,
    from C too: a Python call per node), and a scalar whose value is immutable (str, int, float,
    bool, None) is constructed once per distinct (tag, text). Only safe tags are constructed
    either way."""
    kind = kind or loader_kind()
    cls = _classes.get(kind)
    if cls is None:
        import yaml
        from yaml.nodes import ScalarNode

        base = yaml.CSafeLoader if kind == "libyaml" else yaml.SafeLoader
        resolve = base.resolve

        construct = base.construct_object
        immutable = (str, int, float, bool, type(None))

        def __init__(self, stream):
            base.__init__(self, stream)
            self._mfctl_tags, self._mfctl_scalars = {}, {}

        def construct_object(self, node, deep=False):
            if node.__class__ is not ScalarNode:
                return construct(self, node, deep)
            key = (node.tag, node.value)
            data = self._mfctl_scalars.get(key, _MISSING)
            if data is _MISSING:
                data = construct(self, node, deep)
                if type(data) in immutable:  # (a timestamp or binary is made each time, as before)
                    self._mfctl_scalars[key] = data
            return data

        def cached_resolve(self, kind, value, implicit):
            if kind is ScalarNode and implicit[0] and not self.yaml_path_resolvers:
                tag = self._mfctl_tags.get(value)
                if tag is None:
                    tag = self._mfctl_tags[value] = resolve(self, kind, value, implicit)
                return tag
            return resolve(self, kind, value, implicit)

        members = {"__init__": __init__, "resolve": cached_resolve, "construct_object": construct_object}
        if kind == "pure":  # its composer recurses in Python: stopped at MAX_DEPTH, at the line _walk would name
            from yaml.events import CollectionStartEvent

            compose = yaml.SafeLoader.compose_node

            def compose_node(self, parent, index):
                self._mfctl_depth = depth = getattr(self, "_mfctl_depth", 0)
                if depth >= MAX_DEPTH and self.check_event(CollectionStartEvent):
                    raise _TooDeep(self.peek_event().start_mark.line + 1)
                self._mfctl_depth = depth + 1
                try:
                    return compose(self, parent, index)
                finally:
                    self._mfctl_depth = depth

            members["compose_node"] = compose_node
        cls = _classes[kind] = type(f"Mfctl{base.__name__}", (base,), members)
    return cls


class _TooDeep(Exception):
    """The pure loader's composer went past :data:`MAX_DEPTH` at this line."""

    def __init__(self, line: int):
        super().__init__(line)
        self.line = line


@contextlib.contextmanager
def _no_cyclic_gc():
    """Python's cyclic garbage collector off while a document is composed and constructed (back on after,
    if it was). Each of the ~500,000 nodes of a 32,768-GPU inventory is a new tracked object: the
    collector's passes over them, again and again as they pile up, took 2/3 of the parse (4.0 s -> 1.2 s
    for its nodes); none of it is cyclic garbage (an alias inside what it names is refused before it is
    constructed)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _unclosed_quote(text: str, upto: int | None) -> int | None:
    """The first line before ``upto`` whose double or single quotes do not pair up (outside a
    comment), where a quoted scalar that swallowed the following lines began; None if none."""
    import re

    for no, ln in enumerate(text.splitlines()[: upto or None], 1):
        body = re.sub(r"\s#.*$", "", ln.replace('\\"', ""))
        if body.lstrip().startswith("#"):
            continue
        if body.count('"') % 2 or (body.count("'") % 2 and '"' not in body):
            return no
    return None


def _line_for(loc: Loc, lines: dict[Loc, int]) -> int | None:
    loc = tuple(loc)
    while loc:
        if loc in lines:
            return lines[loc]
        loc = loc[:-1]
    return lines.get(())


def _fmt_loc(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def validate_model(model: type[M], data: Any, lines: dict[Loc, int], src: str) -> M:
    """Validate ``data`` against ``model``; the first error becomes a ConfigError at its line."""
    if not isinstance(data, dict):
        raise ConfigError(f"the file must be a YAML mapping of keys (name: ..., hosts: ...), not a {type(data).__name__}",
                          path=src, line=1)
    try:
        return model.model_validate(data)
    except ValidationError as e:
        problems = [(_one_ocs_loc(loc, data), msg) for loc, msg in _problems(e.errors(), model)]
        (loc, msg), rest = problems[0], problems[1:]
        raise ConfigError(msg if not loc else f"{_fmt_loc(loc)}: {msg}", path=src, line=_line_for(loc, lines),
                          more=[(_line_for(lc, lines), f"{_fmt_loc(lc)}: {m}") for lc, m in rest]) from None


def _one_ocs_loc(loc: Loc, data: dict) -> Loc:
    """An inventory's single ``ocs`` mapping is validated as a list of one: ``ocs[0].size`` is
    the file's ``ocs.size``."""
    if len(loc) >= 2 and loc[0] == "ocs" and loc[1] == 0 and isinstance(data.get("ocs"), dict):
        return ("ocs",) + tuple(loc[2:])
    return loc


def _field(model, key: str):
    """The field of ``model`` that the document's ``key`` fills (by name, or by its alias)."""
    f = model.model_fields.get(key)
    if f is None:
        f = next((f for f in model.model_fields.values() if f.alias == key), None)
    return f


def _model_at(model, loc: Loc):
    """The pydantic model class that holds the key at ``loc`` (its parent's), or None — through
    lists, dicts, optionals and unions of models (the first one that has the next key)."""
    import typing

    from pydantic import BaseModel

    def models(ann) -> list:
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            return [ann]
        return [m for a in typing.get_args(ann) for m in models(a)]

    current = [model]
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        nxt = [m for c in current if (f := _field(c, str(part))) is not None for m in models(f.annotation)]
        if not nxt:
            return None
        current = nxt
    return current[0] if current else None


def _problems(errs: list, model=None) -> list[tuple[Loc, str]]:
    """pydantic's errors as ``(location, message)``, every one: unknown keys first (a misspelled
    key is why a required one is "missing": ``unknown key 'trainig' (did you mean 'training'?)``,
    and the "Field required" it explains is left out), then the others as pydantic found them."""
    import difflib

    unknown, other = [], []
    missing: dict[Loc, list] = {}
    for err in errs:
        loc = _doc_loc(tuple(err["loc"]))
        if err["type"] == "missing":
            missing.setdefault(loc[:-1], []).append(loc[-1])
    explained = set()
    for err in errs:
        loc = _doc_loc(tuple(err["loc"]))
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            holder = _model_at(model, loc) if model is not None else None
            known = [str(m) for m in missing.get(loc[:-1], [])] or (
                [f.alias or k for k, f in holder.model_fields.items()] if holder else [])
            near = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
            if near:
                explained.add(loc[:-1] + (near[0],))
            unknown.append((loc, f"unknown key {loc[-1]!r}" + (f" (did you mean {near[0]!r}?)" if near else "")))
            continue
        if err["type"] == "union_tag_invalid":
            msg = f"unknown kind {err['input'].get('kind')!r}; expected one of {err['ctx'].get('expected_tags')}"
            loc = loc + ("kind",)
        other.append((loc, msg))
    other = [(loc, m) for loc, m in other if loc not in explained]
    return unknown + other


def _doc_loc(loc: Loc) -> Loc:
    """Drop the discriminator tag pydantic inserts after a list index of a tagged union
    (``transports.0.tcp.port`` → ``transports.0.port``)."""
    out = []
    for k, part in enumerate(loc):
        if k >= 2 and isinstance(loc[k - 1], int) and loc[k - 2] == "transports" and part in ("serial", "tcp", "ssh"):
            continue
        out.append(part)
    return tuple(out)


def cross_check(inv: Inventory) -> list[tuple[Loc, str]]:
    """Checks that span several objects. Returns (location, message) pairs, in file order."""
    problems: list[tuple[Loc, str]] = []
    names: dict[str, int] = {}
    for hi, h in enumerate(inv.hosts):
        if h.name in names:
            problems.append((("hosts", hi, "name"), f"duplicate host name {h.name!r} (also hosts[{names[h.name]}])"))
        names.setdefault(h.name, hi)
    logins: set[str] = set()
    for li, lh in enumerate(inv.login_hosts):
        if lh.name in names or lh.name in logins:
            problems.append((("login_hosts", li, "name"), f"duplicate host name {lh.name!r} (a login host is not a "
                                                         "GPU host, and each is named once)"))
        logins.add(lh.name)
    problems += _check_ocses(inv)
    used: dict[tuple[str, int], str] = {}  # (OCS name, port) -> the lane on it: ports are unique per OCS
    several = len(inv.ocses) > 1
    region_of: dict[str, Any] = {}  # host -> its first region (Inventory.ocs_of_host's rule, without a scan per host)
    for r in inv.regions:
        for hn in r.hosts:
            region_of.setdefault(hn, r)
    for hi, h in enumerate(inv.hosts):
        ocs: OCS | None
        if len(inv.ocses) == 1:
            ocs = inv.ocses[0]
        else:
            ocs = inv.region_ocs(region_of[h.name]) if h.name in region_of else None
        if ocs is None and h.ocs_lanes():
            problems.append((("hosts", hi, "name"), f"host {h.name!r} has optical lanes but is in no region that names "
                                                    f"its OCS (the inventory has {len(inv.ocses)}: "
                                                    f"{', '.join(inv.ocs_names)})"))
        size = ocs.size if ocs is not None else None
        on = f" {ocs.name}" if several and ocs is not None else ""
        if not h.eps_nics():
            problems.append((("hosts", hi, "nics"), f"host {h.name!r} has no NIC with role 'eps' (the electrical fallback)"))
        nic_names: set[str] = set()
        for ni, nic in enumerate(h.nics):
            if nic.name in nic_names:
                problems.append((("hosts", hi, "nics", ni, "name"), f"duplicate NIC name {nic.name!r} on {h.name}"))
            nic_names.add(nic.name)
            problems += _check_breakout(h.name, hi, ni, nic)
            for li, lane in enumerate(nic.lanes):
                base = ("hosts", hi, "nics", ni, "lanes", li)
                where = f"{h.name}/{nic.name} lane {lane.index}"
                if nic.role == "ocs":
                    if lane.ocs_tx is None:
                        problems.append((base, f"optical lane {where} has no ocs_tx port"))
                    if lane.ocs_rx is None:
                        problems.append((base, f"optical lane {where} has no ocs_rx port"))
                elif lane.ocs_tx is not None or lane.ocs_rx is not None:
                    problems.append((base, f"lane {where} is on an EPS NIC but names OCS ports"))
                for key, port, lo, hi_ in (
                    ("ocs_tx", lane.ocs_tx, 1, size.inputs if size else 0),
                    ("ocs_rx", lane.ocs_rx, size.inputs + 1 if size else 0, size.total if size else 0),
                ):
                    if port is None or ocs is None or size is None:
                        continue
                    if not lo <= port <= hi_:
                        kind = "input" if key == "ocs_tx" else "output"
                        problems.append((base + (key,), f"{key} {port} of {where} is beyond the OCS{on} {kind} ports "
                                                         f"{lo}..{hi_} ({size.inputs}x{size.outputs})"))
                    elif (ocs.name, port) in used:
                        problems.append((base + (key,), f"OCS{on} port {port} used twice: {where} and "
                                                         f"{used[ocs.name, port]}"))
                    else:
                        used[ocs.name, port] = where
    seen_regions: set[str] = set()
    in_region: dict[str, str] = {}
    for ri, r in enumerate(inv.regions):
        if r.name in seen_regions:
            problems.append((("regions", ri, "name"), f"duplicate region name {r.name!r}"))
        seen_regions.add(r.name)
        for hi, hn in enumerate(r.hosts):
            if hn not in names:
                problems.append((("regions", ri, "hosts", hi), f"region {r.name!r} names missing host {hn!r}"))
            elif hn in in_region:
                problems.append((("regions", ri, "hosts", hi), f"host {hn!r} is in regions {in_region[hn]!r} and {r.name!r}"))
            in_region.setdefault(hn, r.name)
    return problems


def _check_ocses(inv: Inventory) -> list[tuple[Loc, str]]:
    """The OCSes named once each; each region names one of them (it must when there are several)."""
    problems: list[tuple[Loc, str]] = []
    seen: set[str] = set()
    for k, o in enumerate(inv.ocses):
        if o.name in seen:
            problems.append((("ocs", k, "name"), f"duplicate OCS name {o.name!r} (each OCS of an inventory has its own)"))
        seen.add(o.name)
    for ri, r in enumerate(inv.regions):
        if r.ocs is None and len(inv.ocses) > 1:
            problems.append((("regions", ri, "name"), f"region {r.name!r} names no OCS (ocs: NAME), but the inventory "
                                                      f"has {len(inv.ocses)}: {', '.join(inv.ocs_names)}"))
        elif r.ocs is not None and r.ocs not in seen:
            problems.append((("regions", ri, "ocs"), f"region {r.name!r} names OCS {r.ocs!r}, which the inventory does "
                                                     f"not have (it has {', '.join(inv.ocs_names)})"))
    return problems


def _check_breakout(host: str, hi: int, ni: int, nic) -> list[tuple[Loc, str]]:
    """A NIC's breakout against its card, lanes, optics and cable (:func:`mfctl.provision.breakout.check_nic`),
    and its lanes numbered 0..N-1 once each (lane k is sub-port k: PCI function k of the card's slot)."""
    from mfctl.provision.breakout import check_nic

    base: Loc = ("hosts", hi, "nics", ni)
    out: list[tuple[Loc, str]] = [(base + (key,), f"{host}/{nic.name}: {msg}") for key, msg in check_nic(nic)]
    idx = sorted(lane.index for lane in nic.lanes)
    if idx != list(range(len(nic.lanes))):
        out.append((base + ("lanes",), f"{host}/{nic.name}: lane indexes {idx} are not 0..{len(nic.lanes) - 1} "
                                       "once each (lane k is sub-port k)"))
    return out


def load_checked(path: str | Path, model: type[M], check: Callable[[M], list[tuple[Loc, str]]] | None = None,
                 raw: bytes | None = None) -> M:
    src = str(path)
    data, lines = load_yaml_with_lines(path, raw)
    obj = validate_model(model, data, lines, src)
    if check:
        problems = check(obj)
        if problems:
            (loc, msg), rest = problems[0], problems[1:]
            raise ConfigError(msg, path=src, line=_line_for(loc, lines),
                              more=[(_line_for(lc, lines), m) for lc, m in rest])
    return obj


def load_inventory(path: str | Path, cached: bool = True) -> Inventory:
    """Load and fully validate an inventory file. Raises ConfigError (exit 3).

    A file that validated once is remembered by its content (:mod:`mfctl.inventory.cache`): the
    next command validates the cached JSON with pydantic (~1 ms) instead of composing the YAML
    again (~25 ms for 128 hosts, ~0.2 s for 1,024), then runs the same cross-checks.
    ``cached=False`` parses the file whatever the cache holds (``mfctl inventory validate``)."""
    from mfctl.inventory import cache

    raw = _read(path)
    inv = cache.get(raw) if cached else None
    if inv is None or cross_check(inv):
        inv = load_checked(path, Inventory, cross_check, raw)
        cache.put(raw, inv)
    inv.source = str(Path(path).resolve())
    return inv
