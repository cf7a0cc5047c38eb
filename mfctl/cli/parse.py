"""``mfctl parse [KIND] [FILE|-]`` — any tool parser (:mod:`mfctl.hosts.registry`) on a file or
stdin: typed data out (a table at a terminal, ``--json`` one object), or a ParseError naming the
tool, the line and what was expected (exit 3). Without KIND the tool is recognised from the text
and the kind chosen is said (on stderr; ``detected``/``kind`` in ``--json``)."""

from __future__ import annotations

import logging
import sys
from typing import Any

import typer

from mfctl.cli.common import JSON_OPT, emit_json, handle_errors, out_console, print_error
from mfctl.errors import InputNotParsed, ParseError

#: the most text read (a paste or a capture, not a disk image): larger input is a usage error
MAX_BYTES = 64 * 1024 * 1024


def _read(path: str | None) -> bytes:
    from mfctl.errors import UsageError

    if path in (None, "-"):
        if path is None and sys.stdin.isatty():
            raise UsageError("give a FILE (or '-' and the output on stdin); mfctl parse --list names the kinds")
        data = sys.stdin.buffer.read(MAX_BYTES + 1)
        where = "stdin"
    else:
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_BYTES + 1)
        except OSError as e:  # a file given that cannot be read: exit 3, as for every file mfctl reads
            from mfctl.errors import ConfigError

            raise ConfigError(f"{path}: {e.strerror or e}") from None
        where = path
    if len(data) > MAX_BYTES:
        raise UsageError(f"{where}: more than {MAX_BYTES // 2**20} MiB: not a tool's output")
    return data


def _split(args: list[str]) -> tuple[str | None, str | None]:
    """(kind, file) from the positional words: ``KIND FILE``, ``KIND`` (stdin), ``FILE``, none."""
    from mfctl.errors import UsageError
    from mfctl.hosts import registry

    if len(args) > 2:
        raise UsageError(f"at most KIND and FILE, got {len(args)} words: {' '.join(args[2:])!r} is extra")
    if len(args) == 2:
        if args[0] not in registry.BY_NAME:
            import difflib

            near = difflib.get_close_matches(args[0], registry.names(), n=3)
            hint = f"did you mean {' or '.join(near)}? " if near else ""
            raise UsageError(f"no parser kind {args[0]!r}; {hint}mfctl parse --list names the {len(registry.names())} kinds")
        return args[0], args[1]
    if len(args) == 1:
        return (args[0], None) if args[0] in registry.BY_NAME else (None, args[0])
    return None, None


def _fields(text: str | None) -> list[str] | None:
    from mfctl.errors import UsageError

    if text is None:
        return None
    if "--query-gpu" in text:  # the command that printed it, e.g. from a script or a log
        from mfctl.hosts.nvidia_smi import query_fields

        try:
            return query_fields(text)[0]
        except ValueError as e:
            raise UsageError(f"--fields: {e}") from None
    out = [f.strip() for f in text.split(",") if f.strip()]
    if not out:
        raise UsageError("--fields needs the queried field names, e.g. index,name,temperature.gpu")
    return out


def _list(json_out: bool) -> None:
    from mfctl.hosts import registry

    rows = [{"kind": k.name, "command": k.command, "description": k.description, "versions": k.versions,
             "options": list(k.options)} for k in registry.KINDS]
    if json_out:
        emit_json({"schema": "mfctl.parse.kinds/v1", "kinds": rows})
        return
    from rich.table import Table

    t = Table("kind", "command", "what it reads", "versions covered", title="mfctl parse: parser kinds")
    for r in rows:
        t.add_row(r["kind"], r["command"], r["description"], r["versions"])
    out_console().print(t)


@handle_errors
def parse(args: list[str] = typer.Argument(None, metavar="[KIND] [FILE|-]", show_default=False,
                                           help="The parser kind (mfctl parse --list; recognised from the text when "
                                                "left out) and the file ('-' or none: stdin)."),
          list_kinds: bool = typer.Option(False, "--list", help="Name every parser kind and exit."),
          fields: str = typer.Option(None, "--fields", help="nvidia-smi-query-gpu: the queried fields, comma separated "
                                                             "(as in --query-gpu=…), for CSV printed with noheader."),
          json_out: bool = JSON_OPT):
    """Parse a tool's output with mfctl's own parser: typed data, or the line that broke it (exit 3)."""
    from mfctl.errors import UsageError
    from mfctl.hosts import registry

    if list_kinds:
        _list(json_out)
        return
    kind, path = _split(args or [])
    field_list = _fields(fields)
    if field_list is not None:
        kind = kind or "nvidia-smi-query-gpu"
        if "fields" not in registry.get(kind).options:
            raise UsageError(f"--fields is for nvidia-smi-query-gpu, not {kind}")
    data = _read(path)
    try:
        parsed = registry.parse(kind, data, fields=field_list)
    except ParseError as e:
        raise InputNotParsed(e, kind or registry.detect(data)) from None
    except Exception as e:  # noqa: BLE001 - a parser bug: said as a parse failure, the traceback in the log file
        logging.getLogger("mfctl").exception("parser %s failed", kind)
        raise InputNotParsed(ParseError(kind or "mfctl parse", None, f"input the parser handles (parser bug: "
                                        f"{type(e).__name__}: {e})"), kind) from None
    k = registry.get(parsed.kind)
    if parsed.detected and not json_out:
        others = ", ".join(n for _, n in parsed.candidates[1:4])
        print_error(f"recognised as {parsed.kind} ({k.command})" + (f"; also matched: {others}" if others else "")
                    + "; name the kind to choose: mfctl parse KIND FILE", "note")
    result = registry.to_json(parsed.result)
    if json_out:
        emit_json({"schema": "mfctl.parse/v1", "kind": parsed.kind, "detected": parsed.detected,
                   "candidates": [n for _, n in parsed.candidates], "command": k.command, "data": result})
        return
    _show(parsed.kind, result)


# --- a table for any parser's result -------------------------------------------------------------

def _cell(v: Any) -> str:
    import json

    if v is None:
        return "-"
    if isinstance(v, (dict, list)):
        s = json.dumps(v, separators=(",", ":"))
        return s if len(s) <= 60 else s[:57] + "..."
    return str(v)


def _records(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(r, dict) for r in v)


def _show(title: str, data: Any) -> None:
    """Print ``data`` (JSON data) as tables: records as rows, a dict of records with a key column,
    an object's scalar fields as one key/value table and its record lists as tables of their own."""
    import sys

    from rich.table import Table

    con = out_console()
    if not sys.stdout.isatty():
        con.width = 1000  # a file or a pipe: whole rows, never folded (grep sees each value on its row)

    def records(name: str, rows: list[dict], keys: list[str] | None = None) -> None:
        cols = list(dict.fromkeys(c for r in rows for c in r))
        t = Table(*(["key"] if keys is not None else []), *cols, title=name)
        for i, r in enumerate(rows):
            t.add_row(*([keys[i]] if keys is not None else []), *(_cell(r.get(c)) for c in cols))
        con.print(t)

    def show(name: str, v: Any) -> None:
        if _records(v):
            records(name, v)
        elif isinstance(v, list):
            t = Table(*(f"{i}" for i in range(max((len(x) if isinstance(x, list) else 1) for x in v))) if v else "value",
                      title=name)
            for x in v:
                t.add_row(*(_cell(c) for c in (x if isinstance(x, list) else [x])))
            con.print(t)
        elif isinstance(v, dict) and v and all(isinstance(x, dict) for x in v.values()):
            records(name, list(v.values()), keys=list(v))
        elif isinstance(v, dict):
            flat = {k: x for k, x in v.items() if not (_records(x) or (isinstance(x, dict) and x
                                                                        and all(isinstance(y, dict) for y in x.values())))}
            if flat or not v:
                t = Table("field", "value", title=name)
                for k, x in flat.items():
                    t.add_row(k, _cell(x))
                con.print(t)
            for k, x in v.items():
                if k not in flat:
                    show(f"{name}: {k}", x)
        else:
            con.print(_cell(v), highlight=False)

    show(title, data)
