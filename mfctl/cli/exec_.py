"""``mfctl exec HOSTS -- COMMAND`` — one command on many hosts over pooled SSH."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer
from typer.core import TyperCommand

from mfctl.cli import ahead
from mfctl.cli.common import emit_json, handle_errors, option, print_error, print_heading

_ARGS = "mfctl.exec.args"


class ExecCommand(TyperCommand):
    """exec's click command: it keeps the words it was given, so that exec can insist that the
    remote command stands after ``--`` (click would otherwise read the command's own options,
    ``-i``, ``--json``, ``--timeout``…, as mfctl's)."""

    def parse_args(self, ctx, args):
        ctx.meta[_ARGS] = list(args)
        return super().parse_args(ctx, args)


def _option(param: str, **kw):
    """exec's option ``param`` from its one declaration (:data:`mfctl.cli.ahead.OPTIONS`: flags; the
    setting's variable, type, limits and help), so that the reading ahead and Typer agree."""
    setting, flags = ahead.OPTIONS[param]
    return option(setting, *flags, **kw)


@handle_errors
def exec_cmd(ctx: typer.Context,
             hosts: str = typer.Argument(..., help="Host set: all, gpu01,gpu02, gpu[01-04], gpu[01-04]!gpu02 or @REGION."),
             command: list[str] = typer.Argument(..., help="The command and its arguments, after -- (mfctl's own "
                                                 "options may stand anywhere before it)."),
             inventory: Path = _option("inventory", default=..., help="The inventory YAML."),
             fanout: int = _option("fanout", default=None, help="Hosts contacted at once."),
             connect_timeout: float = _option("connect_timeout", default=None,
                                              help="TCP, SSH handshake and login, per host, s."),
             timeout: float = _option("timeout", default=None, help="Per-command timeout, s."),
             json_out: bool = _option("json_out", help="Print one JSON object on stdout (for CI).")):
    """Run COMMAND on HOSTS in parallel (each word quoted for the remote shell); identical results are folded.
    Exit code: 0 all ok, 1 a command failed somewhere, 2 usage, 4 a host was unreachable or timed out,
    130 interrupted (Ctrl-C: no further host gets the command, those under way are abandoned)."""
    from mfctl import settings
    from mfctl.cli.fold import fold, one_host
    from mfctl.inventory.data import load_inventory_data
    from mfctl.inventory.hostsets import select_hosts
    from mfctl.transport.results import Results
    from mfctl.transport.ssh import SSHPool

    _check_words(ctx.meta.get(_ARGS), hosts, command)
    path = os.path.abspath(inventory)
    doc = load_inventory_data(path)  # hosts, regions, SSH endpoints: no pydantic models needed
    names = select_hosts(hosts, [h["name"] for h in doc["hosts"]], {r["name"]: r["hosts"] for r in doc["regions"]})
    fanout = fanout or settings.get_int("fanout")
    connect_timeout = connect_timeout or settings.get_float("connect_timeout")
    timeout = timeout or settings.get_float("command_timeout")
    targets = ahead.targets_for(doc, path, names)
    # the connections `mfctl exec` began while this parser loaded (mfctl.cli.ahead), if they are for exactly this
    batch = ahead.take(ahead.Key(path, tuple(names), fanout, connect_timeout, tuple(targets)))
    with batch.pool if batch else SSHPool(targets, connect_timeout=connect_timeout, fanout=fanout) as pool:
        results = (batch or pool.start_many(names, close=True)).run(lambda h: command, timeout=timeout)
        cap = pool.max_output_bytes  # what a truncated stream kept
    worst = Results.of(results).exit_code()  # 4 a host unreachable or timed out, else 1 a command failed, else 0
    groups = fold(results, lambda r: r.host,
                  lambda r: (r.rc, r.stdout, r.stderr, r.error_shared, r.stdout_dropped, r.stderr_dropped))
    if json_out:
        emit_json({"schema": "mfctl.exec/v1", "command": command, "exit_code": int(worst),
                   "results": [r.to_dict() for r in results],
                   "folded": [{"hosts": hs, "rc": r.rc, "stdout": r.stdout, "stderr": r.stderr,
                               "error": r.error if one_host(hs) else r.error_shared, "truncated": r.truncated,
                               "stdout_dropped_bytes": r.stdout_dropped, "stderr_dropped_bytes": r.stderr_dropped}
                              for hs, r in groups]})
    else:
        _print_groups(groups, cap)
    raise typer.Exit(worst)


def _check_words(words: list[str] | None, hosts: str, command: list[str]) -> None:
    """The remote command must stand after ``--`` and HOSTS before it (``words``: the command line
    as click got it). Raises UsageError (exit 2)."""
    from mfctl.errors import UsageError

    if not command:
        raise UsageError("no command given (mfctl exec -i INV HOSTS -- COMMAND ...)")
    if words is None:
        return
    if "--" not in words:
        raise UsageError("the command must follow --: mfctl exec [OPTIONS] HOSTS -- COMMAND (without it, the "
                         "command's own options, such as -i, --json or --timeout, would be read as mfctl's)")
    tail = words[words.index("--") + 1:]
    if hosts not in words[:words.index("--")]:
        raise UsageError("HOSTS goes before --: mfctl exec [OPTIONS] HOSTS -- COMMAND")
    if list(command) != tail:  # click took words before -- as the command's first ones
        extra = list(command)[:len(command) - len(tail)]
        raise UsageError(f"only HOSTS and mfctl's options go before --, the whole command after it "
                         f"({' '.join(extra)[:200]!r} stands before --)")


def _print_groups(groups, cap: int) -> None:
    """Each folded group's heading and the hosts' output as they wrote it (like ssh, pdsh, clush);
    ``cap``: the bytes a truncated stream kept."""
    from mfctl.cli.fold import one_host

    for hs, r in groups:
        err = r.error if one_host(hs) else r.error_shared  # one host: its own address
        print_heading(f"---- {hs} ({f'error: {err}' if r.error else f'rc={r.rc}'}) ----")
        if r.stdout:
            sys.stdout.write(r.stdout if r.stdout.endswith("\n") else r.stdout + "\n")
        if r.stdout_dropped:
            sys.stdout.write(_truncated(cap, r.stdout_dropped, "stdout") + "\n")
        if r.stderr or r.stderr_dropped:
            sys.stdout.flush()
            mark = "\n" + _truncated(cap, r.stderr_dropped, "stderr") if r.stderr_dropped else ""
            print_error(r.stderr.rstrip("\n") + mark, f"stderr {hs}")
    sys.stdout.flush()


def _truncated(kept: int, dropped: int, stream: str) -> str:
    return f"[output truncated after {kept} bytes: {dropped} more bytes of {stream} dropped (MFCTL_MAX_OUTPUT_BYTES)]"


exec_cmd.typer_options = {"cls": ExecCommand}  # read by mfctl.cli.app.build
