"""Fewer SSH round trips for a host read: the read-only commands whose argv is known before their
turn are sent together as one ``sh -c`` script (:func:`script`), and each one's stdout, stderr and
exit status are taken back apart (:func:`split`) — so a failure stays attributable to its own
command, with its own message, exactly as if it had run alone. The readers keep calling
``pool.run``/``run_checked``: :class:`Prefetched` answers a prefetched argv from the batch (once)
and sends anything else to the real pool.

The script brackets each command with marker lines on both streams::

    printf '@@mfctl-batch 3\\n'; printf '@@mfctl-batch 3\\n' >&2; 'ethtool' 'ens1f0np0';
    printf '\\n@@mfctl-batch end 3 %d\\n' $?; printf '\\n@@mfctl-batch end 3\\n' >&2

(``$?`` there is the command's status; the leading newline keeps a marker on a line of its own
when the output did not end with one, and is taken off again). A command whose markers are missing
(the batch cut off, its output truncated) is simply run on its own; a batch that fails as a whole
(no connection, timeout) leaves every command to run on its own, so nothing is worse than before."""

from __future__ import annotations

import re
from collections.abc import Sequence

from mfctl.transport.ssh import CommandResult, quote_argv

MARK = "@@mfctl-batch"


def script(argvs: Sequence[Sequence[str]]) -> str:
    """The ``sh -c`` script that runs ``argvs`` one after the other, bracketed with markers."""
    parts = []
    for i, a in enumerate(argvs):
        parts.append(f"printf '{MARK} {i}\\n'; printf '{MARK} {i}\\n' >&2; {quote_argv(a)}; "
                     f"printf '\\n{MARK} end {i} %d\\n' $?; printf '\\n{MARK} end {i}\\n' >&2")
    return "; ".join(parts)


def split(stdout: str, stderr: str, n: int) -> dict[int, tuple[int, str, str]]:
    """``{i: (rc, stdout, stderr)}`` for every command ``i`` of ``n`` whose markers are whole."""
    out: dict[int, tuple[int, str, str]] = {}
    errs = {int(m[1]): m[2] for m in re.finditer(rf"(?ms)^{MARK} (\d+)\n(.*?)\n{MARK} end \1$", stderr)}
    for m in re.finditer(rf"(?ms)^{MARK} (\d+)\n(.*?)\n{MARK} end \1 (\d+)$", stdout):
        i = int(m[1])
        if i < n and i in errs:
            out[i] = (int(m[3]), m[2], errs[i])
    return out


class Prefetched:
    """An SSH pool for one host's read: :meth:`prefetch` runs argvs as one batch; :meth:`run` /
    :meth:`run_checked` answer a prefetched argv from it (each result once), anything else through
    the pool. ``round_trips``: commands actually sent (for the measurement in the tests)."""

    def __init__(self, pool, host: str):
        self.pool, self.host = pool, host
        self.cache: dict[tuple[str, ...], CommandResult] = {}
        self.round_trips = 0

    def prefetch(self, argvs: Sequence[Sequence[str]]) -> None:
        todo = [list(map(str, a)) for a in dict.fromkeys(tuple(map(str, a)) for a in argvs)
                if tuple(map(str, a)) not in self.cache]
        if len(todo) < 2:
            return
        per = getattr(self.pool, "command_timeout", 30.0) or 30.0
        self.round_trips += 1
        r = self.pool.run(self.host, ["sh", "-c", script(todo)], timeout=per * len(todo))
        if r.error:
            return  # each command runs on its own later and says its own error
        for i, (rc, so, se) in split(r.stdout, r.stderr, len(todo)).items():
            self.cache[tuple(todo[i])] = CommandResult(host=self.host, argv=todo[i], rc=rc, stdout=so, stderr=se,
                                                       endpoint=r.endpoint)

    def run(self, host: str, argv: Sequence[str], *, timeout: float | None = None, **kw) -> CommandResult:
        hit = self.cache.pop(tuple(map(str, argv)), None) if host == self.host and not kw else None
        if hit is not None:
            return hit
        self.round_trips += 1
        return self.pool.run(host, argv, timeout=timeout, **kw)

    def run_checked(self, host: str, argv: Sequence[str], *, timeout: float | None = None) -> str:
        """As :meth:`mfctl.transport.ssh.SSHPool.run_checked` (the same errors and messages)."""
        return self.run(host, argv, timeout=timeout).checked(getattr(self.pool, "max_output_bytes", None))

    def __getattr__(self, name: str):
        return getattr(self.pool, name)
