"""``mfctl lock status|acquire|release|renew|wait``: the testbed lock's lease (docs/locks.md)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer

from mfctl.cli.common import JSON_OPT, confirm, emit_json, handle_errors, markup, number_option, option, out_console, print_error

app = typer.Typer(help="The testbed lock (a lease): who holds it, take it for a script, renew, release, wait.",
                  no_args_is_help=True)

INV_OPT = option("inventory", "--inventory", "-i", default=..., help="Inventory YAML (its lock: section says where the "
                 "lock lives).")
TOKEN_OPT = typer.Option(None, "--token-file", help="A file holding the token `mfctl lock acquire` printed ('-': "
                         "stdin); default: MFCTL_LOCK_TOKEN. Never on the command line: every user of the machine "
                         "sees it there.")


def _token(token_file: Path | None) -> str:
    """The lease's token: from ``--token-file`` (``-``: stdin), else ``MFCTL_LOCK_TOKEN``; '' if neither."""
    from mfctl import settings
    from mfctl.errors import ConfigError

    if token_file is None:
        return (settings.get("lock_token") or "").strip()
    try:
        text = sys.stdin.read(4096) if str(token_file) == "-" else token_file.read_text()[:4096]
    except OSError as e:
        raise ConfigError(f"--token-file {token_file}: {e.strerror or e}") from None
    return text.strip()


def _lease(inventory: Path, purpose: str = "mfctl lock", **kw):
    from mfctl.inventory import load_inventory
    from mfctl.lock import testbed_lock

    inv = load_inventory(inventory)
    kw.setdefault("token", "")  # an MFCTL_LOCK_TOKEN in the environment is not borrowed here
    return testbed_lock(inv, purpose, **kw)


def _ago(ts) -> str:
    if not isinstance(ts, (int, float)):
        return ""
    s = time.time() - ts
    return f"{s:.0f} s ago" if s < 120 else (f"{s / 60:.0f} min ago" if s < 7200 else f"{s / 3600:.1f} h ago")


def _render(st: dict) -> None:
    con = out_console()
    style = {"held": "bold red", "stale": "bold yellow", "free": "bold green"}[st["state"]]
    con.print(markup("{} {} ({} {}): [" + style + "]{}[/]", st["what"], repr(st["name"]), st["backend"], st["where"],
                     st["state"]), highlight=False)
    h = st.get("holder")
    if st.get("stale"):
        con.print(markup("  stale    {}{}", st["stale"], "" if st["available"] else
                         f" — free when its lease expires in {st['expires_in_s'] or 0:.0f} s"), highlight=False)
    if not h:
        return
    ci = h.get("ci") or {}
    rows = [("holder", f"pid {h.get('pid', '?')} on {h.get('host', '?')}, user {h.get('user', '?')}"
             + (" (detached: mfctl lock acquire)" if h.get("detached") else "")),
            ("purpose", h.get("purpose") or "-"), ("reason", h.get("reason") or "-"),
            ("command", h.get("command") or "-"),
            ("CI job", " ".join(f"{k} {v}" for k, v in ci.items()) if ci else "-"),
            ("since", f"{h.get('since', '?')} ({_ago(h.get('since_ts'))})"),
            ("lease", f"until {h.get('expires', '?')}" + (f" ({st['expires_in_s']:.0f} s left)" if
                                                         isinstance(st.get("expires_in_s"), (int, float)) and
                                                         st["expires_in_s"] >= 0 else "")),
            ("token id", h.get("token_id") or "-")]
    for k, v in rows:
        con.print(markup("  {:<8} {}", k, str(v)), highlight=False)


@app.command()
@handle_errors
def status(inventory: Path = INV_OPT, json_out: bool = JSON_OPT):
    """Who holds the testbed lock: user, host, pid, command, CI job, purpose, reason, since, lease expiry;
    "stale" when its holder is gone (killed, a cancelled CI job) or its lease expired without a release. Exit 0."""
    st = _lease(inventory).status()
    if json_out:
        emit_json({"schema": "mfctl.lock.status/v1", **st})
        return
    _render(st)


@app.command()
@handle_errors
def acquire(inventory: Path = INV_OPT,
            ttl: float = number_option(300.0, "--ttl", min=1, max=86400, help="Lease, seconds: the lock is free again "
                                       "this long after the last renew unless released"),
            reason: str = typer.Option(None, "--reason", help="Why (shown to whoever is refused)."),
            timeout: float = number_option(0.0, "--timeout", min=0, max=86400, help="Seconds to wait for the holder "
                                           "to let go (0: try once)"),
            json_out: bool = JSON_OPT):
    """Take the lock for a script: it stays held after this command exits, until `mfctl lock release` or the
    lease expires (`mfctl lock renew` extends it). Prints the token (only here: keep it secret; pass it to
    mfctl commands as MFCTL_LOCK_TOKEN). Exit 5 when held by another (naming it)."""
    lease = _lease(inventory, "held by a script (mfctl lock acquire)", ttl=ttl, reason=reason, timeout=timeout,
                   detached=True).acquire()
    st = lease.status()
    token = lease.token or ""
    if json_out:
        emit_json({"schema": "mfctl.lock.acquire/v1", "token": token, "token_id": (st["holder"] or {}).get("token_id"),
                   "expires": (st["holder"] or {}).get("expires"), "ttl_s": ttl, **{k: st[k] for k in
                                                                                ("name", "backend", "where", "holder")}})
        return
    print_error(f"testbed {lease.name!r} locked for {ttl:g} s (until {(st['holder'] or {}).get('expires', '?')}); "
                "release with: MFCTL_LOCK_TOKEN=<token> mfctl lock release -i …", "locked")
    typer.echo(token)


@app.command()
@handle_errors
def release(inventory: Path = INV_OPT, token_file: Path = TOKEN_OPT,
            force: bool = typer.Option(False, "--force", help="Release it whoever holds it (asks; --yes)."),
            yes: bool = option("yes", "--yes", "-y", help="Do not ask for confirmation (--force)."),
            json_out: bool = JSON_OPT):
    """Release the lease the token holds (exit 5 if it holds none); `--force`: whoever holds it, after a
    confirmation (a live in-process holder on this machine cannot be: stop that command)."""
    from mfctl.errors import LockError, UsageError
    from mfctl.lock import describe, public_holder, token_id

    token = _token(token_file)
    lease = _lease(inventory)
    if force:
        st = lease.status()
        if st["state"] == "free":
            done, h = False, None
        else:
            confirm(f"{describe(lease.what, lease.name, st['holder'])}. Release it by force?", yes, "the testbed lock")
            h = lease.force_release()
            done = True
    elif token:
        h = lease.holder()
        if not lease.release(token):
            why = (f"it is held by another token: {describe(lease.what, lease.name, h)}" if h else
                   "its lease expired, or it was released")
            raise LockError(f"testbed {lease.name!r}: the token {token_id(token)} holds no lock at {lease.where()} "
                            f"({why})")
        done = True
    else:
        raise UsageError("mfctl lock release needs the token (MFCTL_LOCK_TOKEN or --token-file), or --force")
    if json_out:
        emit_json({"schema": "mfctl.lock.release/v1", "name": lease.name, "released": done, "forced": force,
                   "holder": public_holder(h)})
        return
    typer.echo(f"testbed {lease.name!r}: " + ("released" + (" by force" if force else "") if done else "not locked"))


@app.command()
@handle_errors
def renew(inventory: Path = INV_OPT, token_file: Path = TOKEN_OPT,
          ttl: float = number_option(300.0, "--ttl", min=1, max=86400, help="New lease from now, seconds"),
          json_out: bool = JSON_OPT):
    """Extend the lease the token holds to --ttl seconds from now. Exit 5 when it holds none (expired)."""
    from mfctl.errors import UsageError
    from mfctl.lock.lease import iso

    token = _token(token_file)
    if not token:
        raise UsageError("mfctl lock renew needs the token (MFCTL_LOCK_TOKEN or --token-file)")
    lease = _lease(inventory)
    exp = lease.renew(token, ttl)
    if json_out:
        emit_json({"schema": "mfctl.lock.renew/v1", "name": lease.name, "expires": iso(exp), "expires_ts": exp,
                   "ttl_s": ttl})
        return
    typer.echo(f"testbed {lease.name!r}: lease renewed until {iso(exp)}")


@app.command()
@handle_errors
def wait(inventory: Path = INV_OPT,
         timeout: float = number_option(600.0, "--timeout", min=0, max=86400, help="Seconds to wait"),
         json_out: bool = JSON_OPT):
    """Wait until the lock is free (without taking it: `acquire --timeout` waits and takes it). Exit 0 when
    free, 5 when still held after --timeout (naming the holder)."""
    from mfctl.lock import Refused, describe

    lease = _lease(inventory)
    t0 = time.monotonic()
    while True:
        st = lease.status()
        if st["available"] or time.monotonic() - t0 >= timeout:
            break
        time.sleep(min(0.1, max(0.0, timeout - (time.monotonic() - t0))))
    waited = time.monotonic() - t0
    if not st["available"]:
        raise Refused(describe(lease.what, lease.name, st["holder"]) + f" (waited {waited:.1f} s)", st["holder"], st)
    if json_out:
        emit_json({"schema": "mfctl.lock.wait/v1", "name": lease.name, "free": True, "waited_s": round(waited, 3),
                   "state": st["state"]})
        return
    typer.echo(f"testbed {lease.name!r}: free (waited {waited:.1f} s)")
