"""What this machine needs to reach an inventory's testbed: its known_hosts file and each SSH
key file. Found problems are warnings, not errors: an inventory may be validated away from the
machine that runs it (``mfctl inventory validate`` lists them)."""

from __future__ import annotations

from pathlib import Path


def local_file_problems(inv) -> list[str]:
    """One line per problem, each file once: a known_hosts file that does not exist (strict
    host-key checking then refuses every host), a key file that is missing, unreadable or not a
    private key (naming the first host that uses it)."""
    from mfctl.transport.libssh2 import key_file_problem
    from mfctl.transport.ssh import targets_from_inventory

    out, seen = [], set()
    for t in targets_from_inventory(inv):
        kh = Path(t.known_hosts).expanduser()
        if str(kh) not in seen:
            seen.add(str(kh))
            if not kh.is_file():
                out.append(f"known_hosts {kh} does not exist (strict host-key checking will refuse every host)")
        if t.key_file and t.key_file not in seen:
            seen.add(t.key_file)
            problem = key_file_problem(t.key_file)
            if problem:
                out.append(f"{problem} ({t.name})")
    return out
