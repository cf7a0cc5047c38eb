"""Shared CLI plumbing: consoles, JSON output, error → exit code mapping, logging."""

from __future__ import annotations

import functools
import logging
import re
import string
import sys
from pathlib import Path

import typer
from typer._click.exceptions import UsageError as ClickUsageError  # Typer 0.29 ships its own click
from typer.core import TyperArgument, TyperGroup, TyperOption

from mfctl.cli.plain import emit_json, print_error, print_heading, setup_logging, visible  # noqa: F401 (the CLI's helpers)

_DECLARED = object()  # option()'s default: the setting's own


def option(name: str, *flags: str, default=_DECLARED, help: str | None = None, **kw):
    """A ``typer.Option`` for the setting ``name`` (:data:`mfctl.settings.SETTINGS`): its ``MFCTL_*``
    variable as ``envvar`` and its limits as ``min``/``max`` (Typer checks both sources against them
    and shows the variable and the range in ``--help``), its help unless ``help`` is given, and its
    declared default — or ``default``: ``...`` for a required option, ``None`` for "not given" (the
    command then asks :mod:`mfctl.settings`; ``--help`` still shows the declared default). ``kw``
    goes to ``typer.Option`` as it is. One declaration, so an option, its variable and ``mfctl
    version --settings`` never disagree::

        fanout: int = option("fanout", "--fanout", default=None)
    """
    from mfctl import settings

    s = settings.SETTINGS[name]
    if default is _DECLARED:
        default = s.parse(s.default)
    kw.setdefault("show_default", s.default if default is None and s.default else True)
    if s.type is float:  # nan/inf are "not a number", not "greater than or equal to" (number_option)
        kw.setdefault("callback", _number_check(s.min, s.max))
        return typer.Option(default, *flags, envvar=s.env, help=help or s.help, **kw)
    if s.min is not None:
        kw.setdefault("min", s.min)
    if s.max is not None:
        kw.setdefault("max", s.max)
    return typer.Option(default, *flags, envvar=s.env, help=help or s.help, **kw)


def _range_text(min: float | None, max: float | None) -> str:
    return " ".join(x for x in (f"min {min:g}" if min is not None else "", f"max {max:g}" if max is not None else "") if x)


def _number_check(min: float | None, max: float | None):
    """A click callback: the value must be a finite number from ``min`` to ``max`` (either end
    optional); a usage error (exit 2) naming the option (and its variable) otherwise."""
    import math

    def check(ctx: typer.Context, param: typer.CallbackParam, value: float | None) -> float | None:
        if value is None or ctx.resilient_parsing:
            return value
        name = param.opts[0] if param.opts else param.name
        source = ctx.get_parameter_source(param.name or "")
        hint = f"{name} (env var: {param.envvar})" if source is not None and source.name == "ENVIRONMENT" else name
        if not math.isfinite(value):
            raise typer.BadParameter(f"{value!r} is not a number", param_hint=hint)
        if (min is not None and value < min) or (max is not None and value > max):
            raise typer.BadParameter(f"{value:g} is out of range ({_range_text(min, max)})", param_hint=hint)
        return value

    check.limits = (min, max)  # type: ignore[attr-defined]  (shown in --help: HelpOption)
    return check


def number_option(default: float, *flags: str, min: float | None = None, max: float | None = None, help: str = "",
                  **kw):
    """A float ``typer.Option`` whose value must be a number (not nan or ±inf) from ``min`` to
    ``max`` (either end optional): the range is shown in ``--help`` beside the type, and a bad
    value is a usage error (exit 2) saying "not a number" for nan/inf and the range otherwise —
    Typer's own range check says "greater than or equal to 0" of nan."""
    return typer.Option(default, *flags, callback=_number_check(min, max), help=help, **kw)


# --- --help as operators read it (the one place: every command of the app goes through polish()) ---

#: the word shown for a value's type in --help, as click has always written them
_TYPE_WORDS = {int: "INTEGER", float: "FLOAT", str: "TEXT", Path: "PATH"}


def _type_word(param) -> str:
    """``INTEGER``, ``FLOAT``, ``TEXT``, ``PATH`` or ``[a|b|c]`` for ``param``'s value (Typer
    writes ``<int>``, ``<list[str]>``, ``<path>``)."""
    import enum
    import typing

    d = param.type_descriptor
    if d.is_choice and d.choices:
        return "[" + "|".join(str(c.value if isinstance(c, enum.Enum) else c) for c in d.choices) + "]"
    ann = d.annotation
    if typing.get_origin(ann) in (list, tuple):
        ann = (typing.get_args(ann) or (str,))[0]
    if isinstance(ann, type) and issubclass(ann, Path):
        return "PATH"
    return _TYPE_WORDS.get(ann, "TEXT") if isinstance(ann, type) else "TEXT"


def _limits_text(param) -> str | None:
    """The range of a float option checked by :func:`_number_check` (``0.05<=x<=86400``), else None."""
    lo, hi = getattr(param.callback, "limits", (None, None))
    fmt = lambda v: f"{v:g}"  # noqa: E731
    if lo is None and hi is None:
        return None
    return f"x<={fmt(hi)}" if lo is None else f"x>={fmt(lo)}" if hi is None else f"{fmt(lo)}<=x<={fmt(hi)}"


class HelpArgument(TyperArgument):
    """A Typer argument whose --help is written as click always has: ``PLAYBOOK`` (not
    ``{playbook}``) in the usage line, its value's type as ``PATH``/``TEXT`` (not ``<path>``)."""

    def display_type_rich(self, ctx):
        return _type_word(self)

    def _usage_display_name(self) -> str:
        name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return name + ("..." if self.nargs != 1 and not name.endswith("...") else "")


class HelpOption(TyperOption):
    """A Typer option whose --help says ``INTEGER``/``PATH`` (not ``<int>``) for its value, nothing
    for a flag (not ``<bool>``), a default as it is (not ``(32)``), a float's range beside its type."""

    def display_type_rich(self, ctx):
        if self.is_flag or self.count:
            return ""
        return self.metavar if self.metavar is not None else _type_word(self)

    def _get_default_string(self, *, ctx, show_default_is_str, default_value):
        if show_default_is_str:  # option()'s declared default of a None-default option: the value, as it is
            return str(self.show_default)
        return super()._get_default_string(ctx=ctx, show_default_is_str=False, default_value=default_value)

    def _get_number_range_help_str(self):
        return _limits_text(self) or super()._get_number_range_help_str()


def polish(command) -> None:
    """Make ``command`` and every command under it (a click command tree Typer built) write its
    --help as :class:`HelpArgument` and :class:`HelpOption` do: each parameter becomes one (the
    same object, its subclass: parsing is untouched); an argument is named in capitals (``RUN_ID``,
    also in its errors: "Missing argument 'RUN_ID'"); a command's line in its group's list is the
    first sentence of its help, the docstring's line breaks joined. Called once for the whole app by
    :class:`Group`, so a new command is covered without a line of its own."""
    import inspect

    stack = [command]
    while stack:
        cmd = stack.pop()
        stack.extend(getattr(cmd, "commands", {}).values())
        if cmd.short_help is None and cmd.help:  # a group's list of commands: the first sentence, its lines joined
            first = " ".join(inspect.cleandoc(cmd.help).split("\n\n")[0].split())
            cmd.short_help = re.split(r"(?<=[a-z0-9)]\.)\s+(?=[A-Z])", first, maxsplit=1)[0]
        for p in cmd.params:
            if type(p) is TyperArgument:
                p.__class__ = HelpArgument
                if p.metavar is None and p.name:
                    p.metavar = p.name.upper() + ("..." if p.nargs != 1 else "")
            elif type(p) is TyperOption:
                p.__class__ = HelpOption
        if not getattr(cmd.get_help_option, "polished", False):  # (-h/--help is made when first asked for)
            cmd.get_help_option = _help_option_of(cmd.get_help_option)


def _help_option_of(get):
    """``get`` (a command's ``get_help_option``) whose option is a :class:`HelpOption` too."""

    @functools.wraps(get)
    def get_help_option(ctx):
        opt = get(ctx)
        if type(opt) is TyperOption:
            opt.__class__ = HelpOption
        return opt

    get_help_option.polished = True  # type: ignore[attr-defined]
    return get_help_option


class Group(TyperGroup):
    """The ``mfctl`` root group (``typer.Typer(cls=Group)``): :func:`polish`\\ es every command
    under it as it is built."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        polish(self)

    def main(self, *a, **kw):
        polish(self)  # (Typer adds --install-completion and --show-completion after it built the group)
        return super().main(*a, **kw)

    # click's own usage errors (an unknown option, a bad value) are raised while the root's or a
    # command's arguments are parsed, before any mfctl code runs: with --json, say them as JSON too
    def make_context(self, info_name, args, *a, **kw):
        self._words = list(args)  # the command line, as given (before click consumes it)
        try:
            return super().make_context(info_name, args, *a, **kw)
        except ClickUsageError as e:
            _usage_error_as_json(e, self._words)
            raise

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except ClickUsageError as e:
            _usage_error_as_json(e, getattr(self, "_words", []))
            raise


def _usage_error_as_json(e: ClickUsageError, argv: list[str]) -> None:
    """With ``--json`` (or ``MFCTL_JSON``) among mfctl's words of ``argv`` (not a remote command's
    after ``--``): the ``mfctl.error/v1`` object a failing command prints, on stdout, for click's
    usage errors (exit 2) too; click still says it on stderr."""
    import os

    from mfctl.cli.plain import TRUE_WORDS

    words = argv[:argv.index("--")] if "--" in argv else argv
    if "--json" in words or os.environ.get("MFCTL_JSON", "").strip().lower() in TRUE_WORDS:
        emit_json({"schema": "mfctl.error/v1", "error": {"type": "UsageError", "message": e.format_message(),
                                                         "exit_code": int(e.exit_code)}})


def argument(name: str, default=..., help: str | None = None, **kw):
    """A ``typer.Argument`` for the setting ``name``: its ``MFCTL_*`` variable when not given
    (``mfctl inventory validate`` with ``MFCTL_INVENTORY`` set)."""
    from mfctl import settings

    s = settings.SETTINGS[name]
    return typer.Argument(default, help=help or s.help, envvar=s.env, **kw)


JSON_OPT = option("json", "--json", help="Print one JSON object on stdout (for CI).")
HOSTS_OPT = typer.Option(None, "--hosts", help="Only these hosts: a host set (all, gpu01,gpu03, gpu[01-04]!gpu02, "
                         "@region0); default all.")


def _one_value(ctx: typer.Context, param: typer.CallbackParam, value: list[str] | None) -> list[str] | None:
    """A single-valued option taken as a list (:func:`one_option`): given twice it is a usage error
    naming both values (click itself would keep the last one silently)."""
    if value and len(value) > 1:
        flag = max(param.opts, key=len)
        raise typer.BadParameter(f"given {len(value)} times ({', '.join(repr(v) for v in value)}): give {flag} "
                                 "once", ctx=ctx, param=param)
    return value


def one_option(*flags: str, metavar: str, help: str):
    """An option that may be given at most once, declared ``list[str] | None`` (click keeps only the
    last of a repeated single-valued option, so it is collected as a list and a second value is a
    usage error, exit 2, naming both); :func:`one_value` turns the parameter into ``str | None``."""
    return typer.Option(None, *flags, metavar=metavar, help=help, callback=_one_value, show_default=False)


def one_value(value: list[str] | str | None) -> str | None:
    """The value of a :func:`one_option` (None: not given)."""
    if isinstance(value, list):
        return value[0] if value else None
    return value


OCS_OPT = one_option("--ocs", metavar="NAME", help="The OCS to work on, by its inventory name (default: the only "
                     "one; required when the inventory has several).")


def output_path(path: Path | None, option: str) -> Path | None:
    """A report file an option names (``--junit F``), checked before the work that fills it: its
    directory must exist and be writable, and it must not be a directory — else UsageError (2),
    before an hour of sweep or training is lost to a typo. ``-`` (stdout) and None pass."""
    import os

    from mfctl.errors import UsageError

    if path is None or str(path) == "-":
        return path
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise UsageError(f"{option} {path}: is a directory (give a file name)")
    if not parent.is_dir():
        raise UsageError(f"{option} {path}: no directory {parent}")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"{option} {path}: cannot be written (permission denied)")
    return path


def host_names(hosts: str | None, inv) -> list[str]:
    """``--hosts`` as names of the inventory (all of them when not given), through the one host
    selector exec uses too (:func:`mfctl.inventory.hostsets.select_hosts`: ClusterShell sets,
    ``@region``); UsageError otherwise."""
    from mfctl.errors import UsageError
    from mfctl.inventory.hostsets import select_hosts

    known = [h.name for h in inv.hosts]
    if hosts is None:
        return known
    if not hosts.replace(",", "").strip():
        raise UsageError("--hosts is empty (leave it out for all hosts)")
    return select_hosts(hosts, known, {r.name: list(r.hosts) for r in inv.regions})


def _console(**kw):
    """A rich Console whose every string (printed, table cell, title) goes through :func:`visible`."""
    from rich.console import Console

    class _Console(Console):
        def render_str(self, text, *a, **k):
            return super().render_str(visible(text), *a, **k)

    return _Console(**kw)


def out_console():
    """Results on stdout; when it is not a terminal (a file, a pipe, CI), lines are not
    wrapped at 80 columns so that grep and log parsers see whole lines.

    The consoles of mfctl read no markup and no ``:emoji:`` codes in the strings they are given
    (printed, or as table cells and titles): those carry names, log lines, paths and messages from
    users and hosts, printed as they are. mfctl's own styling is built with :func:`markup`."""
    tty = sys.stdout.isatty()
    return _console(markup=False, emoji=False) if tty else _console(width=240, soft_wrap=True, markup=False, emoji=False)


_FIELD = "\ue000"  # a private-use character stands for each field while markup() parses its template


def markup(template: str, *args, **kwargs):
    """A rich Text from mfctl's own markup ``template`` (``"[bold]run {}[/] on {}"``) whose
    ``str.format`` fields are filled with ``args``/``kwargs`` as plain text, styled as the markup
    around them says: a playbook named ``[/x]`` or a log line ``[/data/ckpt/iter_0000100]`` is
    printed as it is, never read as markup (the values are never parsed, not even escaped). The
    template must be a literal written in mfctl, never data."""
    from rich.text import Span, Text

    fmt = string.Formatter()
    parts: list[str] = []
    values: list[str] = []
    auto = 0
    for literal, field, spec, conv in fmt.parse(template):
        parts.append(literal)
        if field is None:
            continue
        if field == "":
            field, auto = str(auto), auto + 1
        obj, _ = fmt.get_field(field, args, kwargs)
        values.append(visible(fmt.format_field(fmt.convert_field(obj, conv), spec or "")))
        parts.append(_FIELD)
    text = Text.from_markup("".join(parts), emoji=False)
    cuts = sorted({i + d for i, c in enumerate(text.plain) if c == _FIELD for d in (0, 1)})
    out, k = Text(), 0
    for piece in text.divide(cuts):
        if piece.plain == _FIELD:
            piece = Text(values[k], spans=[Span(0, len(values[k]), s.style) for s in piece.spans])
            k += 1
        out.append_text(piece)
    return out


def shipped(path: Path, default: Path) -> Path:
    """``path`` itself, unless it is the relative ``default`` and missing here: then the copy
    in the mfctl checkout (so ``mfctl mock up`` or ``provision plan`` work from any folder).
    UsageError when there is neither (an mfctl installed from a wheel has no checkout: its
    inventories and recipes are in the source tree, not the package)."""
    if path == default and not path.exists():
        candidate = Path(__file__).resolve().parents[2] / default
        if candidate.exists():
            return candidate
        from mfctl.errors import UsageError

        raise UsageError(f"the default {default} is neither here nor in an mfctl checkout beside this mfctl "
                         f"({candidate.parent}): give the file's path (a checkout of mfctl has it under {default.parent}/)")
    return path


def err_console():
    """Progress and warnings on stderr; unwrapped when stderr is not a terminal (CI logs)."""
    plain = {"markup": False, "emoji": False}  # (see out_console)
    return _console(stderr=True, **plain) if sys.stderr.isatty() else _console(stderr=True, width=240, soft_wrap=True, **plain)


def handle_errors(fn):
    """Map MfctlError to its exit code and a one-line message (JSON on stdout with --json)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from mfctl.cli import plain
        from mfctl.errors import ExitCode, MfctlError

        plain.begin(command=True)  # this command's own state (CliRunner may call the app again in this process)
        setup_logging()
        def fail(e: MfctlError):
            logging.getLogger("mfctl").error("%s", e)
            try:
                if kwargs.get("json_out"):
                    emit_json({"schema": "mfctl.error/v1", "error": e.to_dict()})
                    return typer.Exit(int(e.exit_code))
            except OSError:  # stdout itself is what failed
                pass
            print_error(str(e))
            return typer.Exit(int(e.exit_code))

        try:
            return fn(*args, **kwargs)
        except MfctlError as e:
            raise fail(e) from None
        except KeyboardInterrupt as e:
            from mfctl.cli.plain import report_interrupt

            report_interrupt(bool(kwargs.get("json_out")), getattr(e, "message", "interrupted"))
            raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
        except BrokenPipeError:  # `mfctl ... | head`: the reader left, which is not a failure
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
            raise typer.Exit(int(ExitCode.OK)) from None
        except OSError as e:
            from mfctl.errors import OperationFailed, UsageError

            if e.filename is not None:  # a path the operator gave (--junit, --out, --runs-dir, ...)
                raise fail(UsageError(f"{e.filename}: {e.strerror or e}")) from None
            # e.g. a full disk under stdout or a report: one line here, the traceback in the log file
            logging.getLogger("mfctl").exception("I/O error")
            import os

            done = fail(OperationFailed(f"I/O error: {e.strerror or e}"))
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # what stdout still buffers goes nowhere
            raise done from None

    return wrapper


class PromptInterrupted(KeyboardInterrupt):
    """Ctrl-C at :func:`confirm`'s question: :func:`handle_errors` says ``mfctl: <message>`` and
    exits 130, as for any interrupt."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def confirm(question: str, yes: bool, what: str = "the OCS") -> None:
    """Ask ``question`` at a terminal (exit 1 when refused or at end of input); ``--yes`` skips it;
    without a terminal it is a usage error naming ``what`` the command would change. Ctrl-C at the
    question is an interrupt (exit 130, "mfctl: interrupted at the confirmation: nothing was
    changed"), not click's "Aborted!" and exit 1."""
    from mfctl.errors import ExitCode, UsageError

    if yes:
        return
    if not sys.stdin.isatty():
        raise UsageError(f"this changes {what}: confirm with --yes when not at a terminal")
    try:
        agreed = typer.confirm(question, default=False, err=True)
    except typer.Abort as e:  # click's: Ctrl-C or end of input at the prompt (it would say "Aborted!" and exit 1)
        if isinstance(e.__context__, KeyboardInterrupt):
            sys.stderr.write("\n")  # (the prompt's line is left unfinished)
            raise PromptInterrupted("interrupted at the confirmation: nothing was changed") from None
        agreed = False  # Ctrl-D: no answer is no
    if not agreed:
        print_error("not confirmed: nothing was changed", "aborted")
        raise typer.Exit(int(ExitCode.FAILED))
