"""A lease on the testbed lock, whatever keeps it (:mod:`mfctl.lock.file`, :mod:`mfctl.lock.redis_backend`).

A :class:`Lease` is held by one holder at a time until it is released or its lease (``ttl`` seconds
from the last renewal) expires. An in-process holder (``with testbed_lock(inv, "mfctl run …"):``)
has a renewer thread extending the lease every ``ttl/3`` s while the process lives; a holder
killed with ``kill -9`` (or a cancelled CI job) stops renewing and loses the lock when the lease
expires. A *detached* lease (``mfctl lock acquire --ttl S``) outlives the command that took it and
is renewed by ``mfctl lock renew --token`` or released by ``mfctl lock release --token``.

The holder record (:func:`holder_record`) says who holds it: user, host, pid (and its start time),
command line (secrets redacted: :func:`redacted_command`), CI job (:func:`ci_job`), purpose and
reason, since, lease expiry. The token is the holder's capability: only its SHA-256 prefix
(``token_id``) is ever stored, logged or printed — the token itself only by ``mfctl lock acquire``,
once, on stdout.
"""

from __future__ import annotations

import getpass
import hashlib
import logging
import os
import re
import secrets
import shlex
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit, urlunsplit

from mfctl.errors import LockError, MfctlError, UnreachableError
from mfctl.procs import start_ticks

log = logging.getLogger("mfctl.lock")

DEFAULT_TTL_S = 60.0
HOLDER_SCHEMA = "mfctl.lock.holder/v1"

#: CI systems and the environment variables that name a job (run/pipeline first, then the job)
CI_SYSTEMS: tuple[tuple[str, str, str | None, str | None], ...] = (
    # system, marker variable, pipeline/run variable, job variable
    ("github-actions", "GITHUB_RUN_ID", "GITHUB_RUN_ID", "GITHUB_JOB"),
    ("gitlab-ci", "CI_JOB_ID", "CI_PIPELINE_ID", "CI_JOB_ID"),
    ("jenkins", "BUILD_TAG", "BUILD_TAG", None),
    ("buildkite", "BUILDKITE_JOB_ID", "BUILDKITE_BUILD_ID", "BUILDKITE_JOB_ID"),
    ("circleci", "CIRCLE_WORKFLOW_ID", "CIRCLE_WORKFLOW_ID", "CIRCLE_BUILD_NUM"),
    ("azure-pipelines", "BUILD_BUILDID", "BUILD_BUILDID", "SYSTEM_JOBID"),
)

_SECRET_WORD = re.compile(r"(?i)(pass(word|wd)?|token|secret|api[_-]?key|auth|credential|private[_-]?key)")


class LockLost(LockError):
    """The holder could not renew its lease in time (the lock service unreachable, or the lease
    expired and was taken): it must stop, since another may hold the lock now (exit 5)."""


def token_id(token: str) -> str:
    """The token's public name: the first 16 hex digits of its SHA-256 (stored and shown; the
    token itself never is)."""
    return hashlib.sha256(token.encode()).hexdigest()[:16]


def new_token() -> str:
    """A fresh token: 32 random bytes, URL-safe base64 (``secrets.token_urlsafe``)."""
    return secrets.token_urlsafe(32)


def redact_url(url: str) -> str:
    """``url`` with any password in it replaced by ``***`` (``redis://:***@host:6379/0``)."""
    try:
        u = urlsplit(url)
    except ValueError:
        return "<unparsable url>"
    if u.password is None and "@" not in u.netloc:
        return url
    user = u.username or ""
    host = u.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{u.port}" if u.port else ""
    return urlunsplit((u.scheme, f"{user}:***@{host}{port}", u.path, u.query, u.fragment))


def redacted_command(argv: list[str] | None = None, limit: int = 400) -> str:
    """The command line (default: this process's), as a shell would read it, with secrets
    replaced by ``***``: the value after an option named like a secret (``--token X``,
    ``--password=X``), ``NAME=value`` words whose name is secret-like, and passwords in URLs.
    At most ``limit`` characters."""
    argv = list(sys.argv if argv is None else argv)
    if argv and argv[0].endswith(("__main__.py", "/mfctl")):
        argv[0] = "mfctl"
    out: list[str] = []
    hide_next = False
    for a in argv:
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        if a.startswith("-") and _SECRET_WORD.search(a):
            if "=" in a:
                out.append(a.split("=", 1)[0] + "=***")
            else:
                out.append(a)
                hide_next = True
            continue
        if "=" in a and _SECRET_WORD.search(a.split("=", 1)[0]):
            out.append(a.split("=", 1)[0] + "=***")
            continue
        if "://" in a:
            a = redact_url(a)
        out.append(a)
    text = shlex.join(out)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def ci_job(environ: Mapping[str, str] | None = None) -> dict | None:
    """The CI job this process runs in, from the CI system's environment variables
    (GitHub Actions ``GITHUB_RUN_ID``/``GITHUB_JOB``, GitLab ``CI_PIPELINE_ID``/``CI_JOB_ID``,
    Jenkins ``BUILD_TAG``, Buildkite, CircleCI, Azure Pipelines), or None outside CI."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    for system, marker, run_var, job_var in CI_SYSTEMS:
        if env.get(marker):
            d: dict = {"system": system, "run": env.get(run_var) if run_var else None,
                       "job": env.get(job_var) if job_var else None}
            if system == "github-actions" and env.get("GITHUB_REPOSITORY"):
                d["repository"] = env["GITHUB_REPOSITORY"]
            if system == "gitlab-ci" and env.get("CI_PROJECT_PATH"):
                d["repository"] = env["CI_PROJECT_PATH"]
            return {k: v for k, v in d.items() if v}
    if env.get("CI"):
        return {"system": "unknown"}
    return None


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def iso(ts: float) -> str:
    """``ts`` (seconds since the epoch) as ISO 8601 UTC to the second: ``2026-12-01T20:01:02Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


_SECRET_VALUE = re.compile(r"(?i)\b(\w*(?:pass(?:word|wd)?|token|secret|api[_-]?key|auth|credential|private[_-]?key)\w*)"
                           r"(\s*[=:]\s*)(\S+)")


def redacted_text(text: str | None) -> str | None:
    """Free text (a lock's ``--reason``) with the value of every ``secret-like-name=value`` or
    ``name: value`` replaced by ``***``, as :func:`redacted_command` does for options."""
    return None if text is None else _SECRET_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}***", text)


def holder_record(name: str, purpose: str, *, ttl: float, token: str, reason: str | None = None,
                  detached: bool = False, backend: str = "file", now: float | None = None) -> dict:
    """Who takes the lock now (this process): what every backend stores beside the lock and
    what :func:`describe` and ``mfctl lock status`` show."""
    now = time.time() if now is None else now
    pid = os.getpid()
    return {"schema": HOLDER_SCHEMA, "name": name, "backend": backend, "user": _user(), "host": socket.gethostname(),
            "pid": pid, "start_ticks": start_ticks(pid), "command": redacted_command(), "ci": ci_job(),
            "purpose": purpose, "reason": redacted_text(reason), "since": iso(now), "since_ts": now, "ttl_s": ttl,
            "expires_ts": now + ttl, "expires": iso(now + ttl), "detached": detached, "token_id": token_id(token)}


def same_host_pid_alive(h: dict) -> bool | None:
    """The holder's process is alive (True) or gone (False) when it runs on this machine; None
    when it runs elsewhere (its pid means nothing here)."""
    if h.get("host") != socket.gethostname():
        return None
    pid = h.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    ticks = start_ticks(pid)
    return ticks is not None and h.get("start_ticks") in (None, ticks)


def describe(what: str, name: str, h: dict | None, now: float | None = None) -> str:
    """The one message that says who holds a lock (a refusal, ``mfctl lock status``): ``what``
    (testbed, device) and its ``name``, then pid, host, purpose, since — and user, command, CI job,
    reason and lease expiry when the record has them."""
    if not h:
        return f"{what} {name!r} is locked (its holder did not say who it is)"
    now = time.time() if now is None else now
    text = (f"{what} {name!r} is locked by pid {h.get('pid', '?')} on {h.get('host', '?')} for {h.get('purpose', '?')!r} "
            f"since {h.get('since', '?')}")
    extra = []
    if h.get("user"):
        extra.append(f"user {h['user']}")
    ci = h.get("ci")
    if isinstance(ci, dict) and ci:
        extra.append("CI " + " ".join(f"{k} {v}" for k, v in ci.items() if k != "repository" and v)
                     + (f" ({ci['repository']})" if ci.get("repository") else ""))
    if h.get("reason"):
        extra.append(f"reason {h['reason']!r}")
    exp = h.get("expires_ts")
    if isinstance(exp, (int, float)):
        left = exp - now
        extra.append(f"lease until {iso(exp)} ({left:.0f} s left)" if left >= 0 else f"lease expired at {iso(exp)}")
    if h.get("command"):
        extra.append(f"command: {h['command']}")
    return text + (f" ({'; '.join(extra)})" if extra else "")


class Refused(LockError):
    """The lock is held by another holder; ``holder`` is its record (or None)."""

    def __init__(self, message: str, holder: dict | None = None, status: dict | None = None):
        super().__init__(message)
        self.holder = holder
        self.status = status

    def to_dict(self) -> dict:
        return super().to_dict() | {"holder": public_holder(self.holder)}


def public_holder(h: dict | None) -> dict | None:
    """A holder record as shown (``--json``): everything but the pid's start time."""
    if not h:
        return None
    return {k: v for k, v in h.items() if k not in ("start_ticks",)}


class Lease:
    """A lease on one named lock (see the module's docstring); a backend implements the
    underscore methods. Use as a context manager, or :meth:`acquire` / :meth:`release`.

    ``timeout``: seconds to wait for it (0: try once). ``ttl``: lease seconds. ``detached``: no
    renewer, and the lease outlives this process (``mfctl lock acquire``). ``token``: a token
    already holding the lock (``MFCTL_LOCK_TOKEN``: a script's ``mfctl lock acquire``, or the
    process that started this one): the lease is then *borrowed* — not taken nor released
    here, but kept alive while this process lives (never shortened: a borrower extends it to at
    least ``ttl`` s from now), and lost here too when its owner's lease ends.
    ``on_lost(message)``: called in the renewer thread (after ``lost`` is set) when the lease
    cannot be renewed in time; the default interrupts the main thread (KeyboardInterrupt, as Ctrl-C) so
    the holder stops rather than carry on without the lock."""

    what = "testbed"
    backend = "?"

    def __init__(self, name: str, purpose: str, *, timeout: float = 0.0, ttl: float = DEFAULT_TTL_S,
                 reason: str | None = None, detached: bool = False, token: str | None = None,
                 on_lost: Callable[[str], None] | None = None, poll_s: float = 0.05):
        self.name, self.purpose, self.timeout, self.ttl = name, purpose, float(timeout), float(ttl)
        self.reason, self.detached = reason, detached
        self.token: str | None = None  #: the holder's token while held (secret: never log it)
        self._offered = token
        self.borrowed = False  #: held through another's token (kept alive, never released here)
        self.held = False
        self.expires_ts: float | None = None  #: when the lease ends unless renewed (epoch seconds)
        self.lost = threading.Event()  #: set when the renewer could not keep the lease
        self.lost_reason: str | None = None
        self.on_lost = on_lost
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._record: dict | None = None

    # -- what a backend provides -----------------------------------------------------------
    def where(self) -> str:
        """Where the lock lives (a path, a redacted URL): for messages."""
        raise NotImplementedError

    def _try_acquire(self, record: dict, token: str) -> bool:
        """Take the lock for ``token`` if it is free (or its holder stale); atomically."""
        raise NotImplementedError

    def _extend(self, token: str, ttl: float, keep_longer: bool = False) -> dict | None:
        """Extend the lease held by ``token`` to ``ttl`` s from now (``keep_longer``: or leave it
        if it ends later); the holder record updated, or None when ``token`` does not hold it.
        Raises UnreachableError when it cannot tell."""
        raise NotImplementedError

    def _release(self, token: str) -> bool:
        """Release the lock if ``token`` holds it; False if it does not."""
        raise NotImplementedError

    def _inspect(self) -> dict:
        """``{"record": dict|None, "present": bool, "expires_in_s": float|None, "last": dict|None}``:
        the raw state (``last``: the record of a holder whose lease expired without a release)."""
        raise NotImplementedError

    def _force_release(self) -> None:
        raise NotImplementedError

    def _after_release(self) -> None:
        """In-process resources (a file lock) let go once the lease is released."""

    # -- the lease -------------------------------------------------------------------------
    def __enter__(self) -> Lease:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def acquire(self) -> Lease:
        """Take the lock (waiting up to ``timeout`` s, polling every ``poll_s``) and, unless
        detached, start the renewer. Raises :class:`Refused` (LockError, exit 5) naming the
        holder, UnreachableError (exit 4) when the lock service cannot be reached."""
        if self._offered and self.owns(self._offered):
            self.token, self.borrowed, self.held = self._offered, True, True
            self._start_renewer()
            log.info("%s %r: working under the lease of token %s (borrowed)", self.what, self.name,
                     token_id(self._offered))
            return self
        if self._offered:  # a script's lease (MFCTL_LOCK_TOKEN) that ended: say so, never lock anew behind its back
            h = self.holder()
            raise LockLost(f"{self.what} {self.name!r}: the lease of MFCTL_LOCK_TOKEN (token {token_id(self._offered)}) "
                           "is not held: " + (describe(self.what, self.name, h) if h else "it expired or was released")
                           + " (mfctl lock acquire again, or unset MFCTL_LOCK_TOKEN)")
        token = new_token()
        deadline = time.monotonic() + self.timeout
        while True:
            record = holder_record(self.name, self.purpose, ttl=self.ttl, token=token, reason=self.reason,
                                   detached=self.detached, backend=self.backend)
            if self._try_acquire(record, token):
                break
            if time.monotonic() >= deadline:
                st = self.status()
                raise Refused(describe(self.what, self.name, st.get("holder")), st.get("holder"), st)
            time.sleep(min(self.poll_s, max(0.0, deadline - time.monotonic())) or self.poll_s)
        self.token, self.held, self._record = token, True, record
        self.expires_ts = record["expires_ts"]
        self._start_renewer()
        log.info("%s %r locked at %s for %r (token %s, lease %g s)", self.what, self.name, self.where(),
                 self.purpose, token_id(token), self.ttl)
        return self

    def _start_renewer(self) -> None:
        self.lost.clear()
        self.lost_reason = None
        if not self.detached:
            self._stop.clear()
            self._renewer = threading.Thread(target=self._renew_loop, name=f"mfctl-lease-{self.name}", daemon=True)
            self._renewer.start()

    def renew(self, token: str | None = None, ttl: float | None = None) -> float:
        """Extend the lease held by ``token`` (default: this holder's) to ``ttl`` s (default: its
        own) from now; the new expiry (epoch s). Raises LockLost when that token does not hold
        the lock (any more), UnreachableError when the lock service cannot be reached."""
        own = token is None or token == self.token
        token = token or self.token
        if not token:
            raise LockError(f"{self.what} {self.name!r}: not held here: nothing to renew")
        ttl = float(ttl or self.ttl)
        rec = self._extend(token, ttl, keep_longer=self.borrowed and own)
        if rec is None:
            raise LockLost(f"{self.what} {self.name!r}: the lease (token {token_id(token)}) is no longer held "
                           f"at {self.where()}: it expired or was released by force")
        self.expires_ts = float(rec.get("expires_ts") or time.time() + ttl)
        if token == self.token:
            self._record = rec
        return self.expires_ts

    def release(self, token: str | None = None) -> bool:
        """With ``token``: release the lease that token holds (``mfctl lock release --token``).
        Else stop the renewer and release the lock (a borrowed lease is left to its owner). True if
        it was released here; a lock service that cannot be reached is logged, not raised (the
        lease then expires by itself)."""
        if token is not None:
            return self._release(token)
        self._stop.set()
        if self._renewer is not None and self._renewer is not threading.current_thread():
            self._renewer.join(timeout=5)
        self._renewer = None
        if not self.held:
            return False
        self.held = False
        if self.borrowed or not self.token:
            return False
        token, self.token = self.token, None
        try:
            done = self._release(token)
        except UnreachableError as e:
            log.warning("%s %r: could not release the lock (%s): its lease expires by itself", self.what, self.name, e)
            done = False
        finally:
            self._after_release()
        return done

    def check(self) -> None:
        """Raise :class:`LockLost` if the renewer lost the lease (call it at safe points)."""
        if self.lost.is_set():
            raise LockLost(self.lost_reason or f"{self.what} {self.name!r}: the lease was lost")

    def owns(self, token: str) -> bool:
        """``token`` holds the lock now (its lease not expired)."""
        st = self._inspect()
        rec = st.get("record")
        return bool(st.get("present") and rec and rec.get("token_id") == token_id(token) and self._live(st))

    # -- what holds it ---------------------------------------------------------------------
    def _live(self, st: dict) -> bool:
        """The state ``st`` has a holder still holding it (not stale)."""
        return self._stale_reason(st) is None and bool(st.get("present"))

    def _stale_reason(self, st: dict) -> str | None:
        rec = st.get("record")
        if not st.get("present") or not rec:
            return None
        if not rec.get("detached") and same_host_pid_alive(rec) is False and not self._locked_in_process():
            return f"its holder (pid {rec.get('pid')} on {rec.get('host')}) is gone"
        left = st.get("expires_in_s")
        if isinstance(left, (int, float)) and left <= 0 and not self._locked_in_process():
            return f"its lease expired at {rec.get('expires', '?')}"
        return None

    def _locked_in_process(self) -> bool:
        """A live process holds the backend's own exclusion (the file backend's flock)."""
        return False

    def holder(self) -> dict | None:
        """The record of who holds the lock now, or None when free (or its holder is stale)."""
        st = self._inspect()
        return st["record"] if self._live(st) else None

    def status(self) -> dict:
        """``mfctl lock status``'s object: ``state`` held|stale|free, ``holder`` (record),
        ``stale`` (why), ``available`` (an acquire would succeed now), ``expires_in_s``."""
        st = self._inspect()
        rec, stale = st.get("record"), self._stale_reason(st)
        if st.get("present") and stale is None:
            state, available = "held", False
        elif st.get("present"):
            state, available = "stale", self._stale_is_free()
        elif st.get("last"):
            rec, state, available = st["last"], "stale", True
            stale = f"its lease expired at {rec.get('expires', '?')} without a release (holder killed or cancelled)"
        else:
            state, available = "free", True
        return {"name": self.name, "what": self.what, "backend": self.backend, "where": self.where(), "state": state,
                "available": available, "stale": stale, "expires_in_s": st.get("expires_in_s") if st.get("present") else None,
                "holder": public_holder(rec)}

    def _stale_is_free(self) -> bool:
        """A stale holder's lock can be taken now (file: yes; a lock service: at lease expiry)."""
        return True

    def force_release(self) -> dict | None:
        """Remove the lock whoever holds it (``mfctl lock release --force``); the holder it had."""
        st = self._inspect()
        self._force_release()
        return st.get("record") or st.get("last")

    # -- the renewer -----------------------------------------------------------------------
    def _renew_loop(self) -> None:
        interval = max(0.05, self.ttl / 3)
        last_ok = time.monotonic()
        while not self._stop.wait(interval):
            try:
                self.renew()
                last_ok = time.monotonic()
                interval = max(0.05, self.ttl / 3)
                continue
            except LockLost as e:
                self._lose(str(e))
                return
            except (MfctlError, OSError) as e:  # unreachable, or the record cannot be written: retried
                left = self.ttl - (time.monotonic() - last_ok)
                if left <= self.ttl / 3:  # stop before the lease ends: nobody may take it while we still act
                    self._lose(f"{self.what} {self.name!r}: cannot renew the lease at {self.where()} ({e}); "
                               f"it ends in {max(left, 0):.1f} s: stopping")
                    return
                log.warning("%s %r: cannot renew the lease at %s (%s): retrying, %.1f s left", self.what, self.name,
                            self.where(), e, left)
                interval = max(0.05, min(1.0, self.ttl / 10))

    def _lose(self, message: str) -> None:
        self.lost_reason = message
        self.lost.set()
        log.error("%s", message)
        if self.on_lost is not None:
            self.on_lost(message)
        else:
            import _thread

            _thread.interrupt_main()
