"""``mfctl exec``: connect to the hosts while the command line is still being parsed.

A cold ``mfctl exec`` spends ~0.1 s loading its CLI parser (Typer, which builds a pydantic
adapter for every parameter) before it knows what to do; the SSH handshakes that follow wait on
the hosts, not on this process. :func:`start` reads the command line with a few lines of
stdlib code first and, when it is sure what it says, starts those handshakes
(:meth:`mfctl.transport.ssh.SSHPool.start_many`: connect, check the host key, authenticate — no
command is sent) so that they overlap the parser's start. ``exec_cmd`` then :func:`take`\\ s the
batch if the parsed options agree, and runs the command on it; otherwise the batch is cancelled
and nothing changes. When in doubt (``--help``, an option it does not know, no ``--``, a bad
value, an inventory that does not load) :func:`start` does nothing at all, silently: the normal
path then finds and reports whatever is wrong.

The grammar read here is ``exec_cmd``'s, and both are built from one declaration, :data:`OPTIONS`:
each option's flags here, its variable, type and limits in :data:`mfctl.settings.SETTINGS`
(``exec_cmd`` makes its Typer options from the same with :func:`mfctl.cli.common.option`). Options
stand in any order before ``--``, with one host set, then ``--`` and the command.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass

log = logging.getLogger(__name__)

#: ``exec_cmd``'s options, declared once: parameter → (setting of :data:`mfctl.settings.SETTINGS`, flags).
#: ``exec_cmd`` builds its Typer options from this (variable, type, limits and help from the setting) and
#: :func:`read_argv` its grammar; a flag's setting has type bool, every other option takes a value.
OPTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "inventory": ("inventory", ("--inventory", "-i")),
    "fanout": ("fanout", ("--fanout",)),
    "connect_timeout": ("connect_timeout", ("--connect-timeout",)),
    "timeout": ("command_timeout", ("--timeout",)),
    "json_out": ("json", ("--json",)),
}
_INT = re.compile(r"[0-9]{1,9}")  # ASCII only: int() would also take other scripts' digits, the parser does not
_FLOAT = re.compile(r"[0-9]{1,9}(\.[0-9]{1,9})?")


def _setting(param: str):
    from mfctl.settings import SETTINGS

    return SETTINGS[OPTIONS[param][0]]


def _grammar() -> tuple[dict[str, str], set[str]]:
    """(flag → parameter, for options that take a value; the flags that take none)."""
    valued, flags = {}, set()
    for param, (_, words) in OPTIONS.items():
        if _setting(param).type is bool:
            flags.update(words)
        else:
            valued.update(dict.fromkeys(words, param))
    return valued, flags


def _accepted(param: str, raw: str) -> bool:
    """Whether the parser would take ``raw`` for ``param``: an ASCII number of the setting's type
    within its limits (anything else, a path, is taken as it is)."""
    s = _setting(param)
    if s.type not in (int, float):
        return True
    if not (_INT if s.type is int else _FLOAT).fullmatch(raw):
        return False
    lo, hi = s.limits
    return lo <= float(raw) <= hi


@dataclass(frozen=True)
class Key:
    """What a batch was started for; ``exec_cmd`` runs on it only if its own options give the same."""

    inventory: str  # absolute path
    hosts: tuple[str, ...]
    fanout: int
    connect_timeout: float  # s
    targets: tuple  # the hosts' SSHTargets: address, port, user, key, known_hosts, policy


def targets_for(doc: dict, path: str, names: list[str]) -> list:
    """The SSH targets of ``names`` (in that order) in the inventory data ``doc`` read from ``path``."""
    from pathlib import Path

    from mfctl.transport.ssh import targets_from_data

    by_name = {t.name: t for t in targets_from_data(doc, Path(path).resolve().parent)}
    return [by_name[n] for n in names]


_pending: tuple[Key, object] | None = None  # (key, mfctl.transport.ssh.Batch)


def read_argv(args: list[str]) -> dict | None:
    """``exec``'s options and host set from ``args`` (the words after ``exec``), or None when the
    words are not plainly a runnable ``exec`` command line. Values are strings, as typed (or as
    their variables hold them), by parameter name."""
    if "--" not in args or args.index("--") == len(args) - 1:
        return None  # no `--`, or no command
    valued, flags = _grammar()
    opts = _read_words(args[:args.index("--")], valued, flags)
    if opts is None:
        return None
    for param in OPTIONS:
        env = _setting(param).env
        if _setting(param).type is bool:
            from mfctl.settings import FALSE_WORDS, TRUE_WORDS

            if os.environ.get(env, "").strip().lower() not in TRUE_WORDS | FALSE_WORDS:
                return None  # a flag's variable: any value but these is refused by the parser
        elif param not in opts and os.environ.get(env):
            opts[param] = os.environ[env]
    if not all(_accepted(p, v) for p, v in opts.items() if p != "hosts"):
        return None
    return opts if "inventory" in opts and "hosts" in opts else None


def _read_words(words: list[str], valued: dict[str, str], flags: set[str]) -> dict | None:
    """The options and the host set among the words before ``--``; None for anything this reader
    leaves to the parser (``--help``, an option it does not know, a second positional word)."""
    opts: dict = {}
    it = iter(words)
    for w in it:
        name, eq, value = w.partition("=") if w.startswith("--") else (w, "", "")
        short = next((f for f in valued if len(f) == 2 and f != w and w.startswith(f)), None)  # -iPATH, as click reads it
        if name in valued:
            value = value if eq else next(it, None)
            if value is None:
                return None
            opts[valued[name]] = value
        elif short is not None:
            opts[valued[short]] = w[2:]
        elif w in flags:
            pass
        elif w.startswith("-") or "hosts" in opts:
            return None
        else:
            opts["hosts"] = w
    return opts


def start(args: list[str]) -> None:
    """Begin connecting for ``mfctl exec`` ``args`` (see the module's docstring); never raises."""
    global _pending
    cancel()  # one batch at a time
    try:
        opts = read_argv(args)
        if opts is None:
            return
        from mfctl import settings
        from mfctl.cli.plain import setup_logging
        from mfctl.inventory.data import load_inventory_data
        from mfctl.inventory.hostsets import select_hosts
        from mfctl.transport.ssh import SSHPool

        fanout = int(opts["fanout"]) if "fanout" in opts else settings.get_int("fanout")
        ct = float(opts["connect_timeout"]) if "connect_timeout" in opts else settings.get_float("connect_timeout")
        setup_logging()  # a host key accepted ahead is logged where the command's log goes
        path = os.path.abspath(opts["inventory"])
        doc = load_inventory_data(path)
        names = select_hosts(opts["hosts"], [h["name"] for h in doc["hosts"]],
                             {r["name"]: r["hosts"] for r in doc["regions"]})
        targets = targets_for(doc, path, names)
        if any(t.host_key_policy != "strict" for t in targets):
            return  # accept-new writes known_hosts: only for a command line the parser has accepted
        pool = SSHPool(targets, connect_timeout=ct, fanout=fanout)
        _pending = (Key(path, tuple(names), fanout, ct, tuple(targets)), pool.start_many(names, close=True))
        log.debug("exec: connecting ahead to %d hosts", len(names))
    except Exception:  # noqa: BLE001 - anything wrong is found and reported again by the normal path
        _pending = None


def take(key: Key):
    """The batch started for ``key``, or None; a batch started for anything else is cancelled."""
    global _pending
    pending, _pending = _pending, None
    if pending is None:
        return None
    if pending[0] != key:
        pending[1].cancel()
        pending[1].pool.close()
        log.debug("exec: options differ from what was read ahead; connecting afresh")
        return None
    return pending[1]


def cancel() -> None:
    """Close whatever :func:`start` opened and nobody took (the parser refused the command line)."""
    global _pending
    pending, _pending = _pending, None
    if pending is not None:
        pending[1].cancel()
        pending[1].pool.close()

