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

The grammar read here is ``exec_cmd``'s: ``-i/--inventory PATH``, ``--fanout N``,
``--connect-timeout S``, ``--timeout S``, ``--json``, in any order before ``--``, one host set,
then ``--`` and the command. A test holds the two together.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass

log = logging.getLogger(__name__)

_VALUED = {"-i": "inventory", "--inventory": "inventory", "--fanout": "fanout",
           "--connect-timeout": "connect_timeout", "--timeout": "timeout"}
_FLAGS = {"--json"}
_ENV = {"inventory": "MFCTL_INVENTORY", "fanout": "MFCTL_FANOUT", "connect_timeout": "MFCTL_CONNECT_TIMEOUT",
        "timeout": "MFCTL_COMMAND_TIMEOUT"}
_FLAG_ENV = {"--json": "MFCTL_JSON"}  # a flag's variable: any value but these is refused by the parser
_INT = re.compile(r"[0-9]{1,9}")  # ASCII only: int() would also take other scripts' digits, the parser does not
_FLOAT = re.compile(r"[0-9]{1,9}(\.[0-9]{1,9})?")


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
    words are not plainly a runnable ``exec`` command line. Values are strings, as typed."""
    if "--" not in args:
        return None
    cut = args.index("--")
    if cut == len(args) - 1:
        return None  # no command
    opts: dict = {}
    words = iter(args[:cut])
    for w in words:
        name, eq, value = w.partition("=") if w.startswith("--") else (w, "", "")
        if name in _VALUED:
            if not eq:
                value = next(words, None)
                if value is None:
                    return None
            opts[_VALUED[name]] = value
        elif w.startswith("-i") and len(w) > 2:  # -iPATH, as click reads it
            opts["inventory"] = w[2:]
        elif w in _FLAGS:
            pass
        elif w.startswith("-") or "hosts" in opts:
            return None  # --help, an unknown option, a second positional word: let the parser speak
        else:
            opts["hosts"] = w
    for name, env in _ENV.items():
        if name not in opts and os.environ.get(env):
            opts[name] = os.environ[env]
    from mfctl.cli.plain import FALSE_WORDS, TRUE_WORDS

    if any(os.environ.get(env, "").strip().lower() not in TRUE_WORDS | FALSE_WORDS for env in _FLAG_ENV.values()):
        return None
    if "fanout" in opts and not _INT.fullmatch(opts["fanout"]):
        return None
    if any(k in opts and not _FLOAT.fullmatch(opts[k]) for k in ("connect_timeout", "timeout")):
        return None
    return opts if "inventory" in opts and "hosts" in opts else None


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
        from mfctl.hosts.fold import select_hosts
        from mfctl.inventory.data import load_inventory_data
        from mfctl.transport.ssh import SSHPool

        fanout = int(opts["fanout"]) if "fanout" in opts else settings.get_int("fanout")
        ct = float(opts["connect_timeout"]) if "connect_timeout" in opts else settings.get_float("connect_timeout")
        if fanout < 1 or not 0.1 <= ct <= 86400 or not 0.1 <= float(opts.get("timeout", 1)) <= 86400:
            return  # the parser refuses these (exec_cmd's min/max)
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

