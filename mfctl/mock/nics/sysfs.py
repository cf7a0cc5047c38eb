"""The mock host's sysfs/procfs files of RoCE and multi-rail routing, per netdev:
``/sys/class/net/IF/ecn/roce_np|roce_rp/enable/<prio>`` and ``ecn/roce_np/cnp_dscp`` /
``cnp_802p_prio`` (NVIDIA MLNX_OFED "Explicit Congestion Notification (ECN)"), and
``/proc/sys/net/ipv4/conf/IF|all/arp_ignore|arp_announce|rp_filter`` (kernel
Documentation/networking/ip-sysctl.rst). Read with ``grep -Hs . PATH…`` (``PATH:VALUE`` lines,
exit 2 when a file is missing, as GNU grep), written with ``sh -c 'echo V > PATH'`` or
``sysctl -w net/ipv4/conf/IF/KEY=V`` (procps; ``sysctl -n`` reads)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mfctl.mock.nics.qos import port

_ECN = re.compile(r"^/sys/class/net/([^/]+)/ecn/(roce_np|roce_rp)/enable/([0-7])$")
_CNP = re.compile(r"^/sys/class/net/([^/]+)/ecn/roce_np/(cnp_dscp|cnp_802p_prio)$")
_CONF = re.compile(r"^/proc/sys/net/ipv4/conf/([^/]+)/(arp_ignore|arp_announce|rp_filter)$")
_LIMITS = {"enable": (0, 1), "cnp_dscp": (0, 63), "cnp_802p_prio": (0, 7), "arp_ignore": (0, 8), "arp_announce": (0, 2),
           "rp_filter": (0, 2)}


@dataclass
class HostSysctl:
    """``net.ipv4.conf.all.*`` (the kernel uses max(all, IF) for these three)."""

    all: dict[str, int] = field(default_factory=lambda: {"arp_ignore": 0, "arp_announce": 0, "rp_filter": 0})


def host_sysctl(cfg) -> HostSysctl:
    if "_sysctl" not in cfg.__dict__:
        cfg._sysctl = HostSysctl()
    return cfg._sysctl


def read(cfg, path: str) -> str | None:
    """The file's content (no newline), or None when it does not exist."""
    if m := _ECN.match(path):
        st = port(cfg, m[1])
        return None if st is None else str((st.ecn_np if m[2] == "roce_np" else st.ecn_rp)[int(m[3])])
    if m := _CNP.match(path):
        st = port(cfg, m[1])
        return None if st is None else str(getattr(st, m[2]))
    if m := _CONF.match(path):
        if m[1] == "all":
            return str(host_sysctl(cfg).all[m[2]])
        st = port(cfg, m[1])
        return None if st is None else str(st.sysctl[m[2]])
    return None


def write(cfg, path: str, value: str) -> str | None:
    """Write ``value``; the error text (as the shell/kernel says it) or None."""
    key = path.rsplit("/", 1)[-1]
    m = _ECN.match(path) or _CNP.match(path) or _CONF.match(path)
    if m is None or read(cfg, path) is None:
        return f"cannot create {path}: Directory nonexistent"
    lo, hi = _LIMITS["enable" if _ECN.match(path) else key]
    if not value.isdigit() or not lo <= int(value) <= hi:
        return "write error: Invalid argument"
    v = int(value)
    if m[1] == "all":
        host_sysctl(cfg).all[key] = v
        return None
    st = port(cfg, m[1])
    assert st is not None  # read() found the file
    if _ECN.match(path):
        (st.ecn_np if m[2] == "roce_np" else st.ecn_rp)[int(m[3])] = v
    elif _CNP.match(path):
        setattr(st, key, v)
    else:
        st.sysctl[key] = v
    return None


def grep(cfg, args, out, err):
    """``grep -Hs . PATH…`` (anything else: not this tool's job, None); an empty file has no line."""
    from mfctl.mock.nics import tuning

    if len(args) < 3 or args[0] not in ("-Hs", "-sH") or args[1] != ".":
        return None
    rc = 1
    for p in args[2:]:
        v = tuning.read(cfg, p) if tuning.handles(p) else read(cfg, p)
        if v == "":
            continue
        if v is None:
            rc = 2
            continue
        out(f"{p}:{v}\n")
        rc = 0 if rc == 1 else rc
    return rc


def sh(cfg, argv, out, err):
    """``sh -c 'echo V > PATH'`` on one of the files above or of :mod:`.tuning` (traffic class, configfs,
    IRQ affinity), and ``sh -c 'echo V | tee PATH… > /dev/null'`` (anything else: None, the shell's job)."""
    from mfctl.mock.nics import tuning

    if len(argv) == 3 and argv[1] == "-c" and argv[2].startswith("printf '@@mfctl-batch 0"):
        return batch(cfg, argv[2], out, err)
    if len(argv) == 3 and argv[1] == "-c" and (t := re.fullmatch(r"echo (\S+) \| tee ((?:/\S+ )+)> /dev/null", argv[2])):
        return tuning.tee(cfg, t[1], t[2].split(), err)
    m = re.fullmatch(r"echo (\S+) > (/(?:sys|proc)/\S+)", argv[2]) if len(argv) == 3 and argv[1] == "-c" else None
    if m is None:
        return None
    if tuning.handles(m[2]):
        e = tuning.write(cfg, m[2], m[1])
        if e:
            err("sh: 1: echo: echo: I/O error\n" if e == "Invalid argument" else f"sh: 1: cannot create {m[2]}: {e}\n")
            return 1 if e == "Invalid argument" else 2
        return 0
    e = write(cfg, m[2], m[1])
    if e:
        err(f"sh: 1: {e}\n" if e.startswith("cannot") else "sh: 1: echo: echo: I/O error\n")
        return 2 if e.startswith("cannot") else 1
    return 0


def sysctl(cfg, args, out, err):
    """``sysctl -w net/ipv4/conf/IF/KEY=V`` and ``sysctl -n KEY`` (dots or slashes)."""
    if len(args) == 2 and args[0] in ("-w", "-n"):
        key, _, val = args[1].partition("=")
        parts = key.replace(".", "/").split("/") if "/" not in key else key.split("/")
        path = "/proc/sys/" + "/".join(parts)
        if args[0] == "-n":
            v = read(cfg, path)
            if v is None:
                err(f"sysctl: cannot stat {path}: No such file or directory\n")
                return 255
            out(v + "\n")
            return 0
        if read(cfg, path) is None:
            err(f"sysctl: cannot stat {path}: No such file or directory\n")
            return 255
        if write(cfg, path, val):
            err(f'sysctl: setting key "{".".join(parts)}": Invalid argument\n')
            return 255
        out(f"{'.'.join(parts)} = {val}\n")
        return 0
    err("sysctl: only -w KEY=VALUE and -n KEY are modelled\n")
    return 255


_BATCH = re.compile(r"printf '@@mfctl-batch (\d+)\\n'; printf '@@mfctl-batch \1\\n' >&2; (.*?); "
                    r"printf '\\n@@mfctl-batch end \1 %d\\n' \$\?; printf '\\n@@mfctl-batch end \1\\n' >&2(?:; |$)")


class _Channel:
    """What :meth:`mfctl.mock.hosts.MockHost.handle` writes to, for one command of a batch."""

    closed = False

    def __init__(self, out, err):
        self._out, self._err = out, err

    def sendall(self, data: bytes) -> None:
        self._out(data.decode(errors="replace"))

    def sendall_stderr(self, data: bytes) -> None:
        self._err(data.decode(errors="replace"))

    def settimeout(self, _t) -> None:
        pass

    def recv(self, _n: int) -> bytes:
        return b""  # no stdin in a batch


def batch(cfg, script: str, out, err) -> int:
    """The read batch of :func:`mfctl.provision.batch.script`: each command run as the host runs it
    (its own exit status, stdout and stderr between its markers), as ``sh`` would."""
    pos, rc = 0, 0
    for m in _BATCH.finditer(script):
        if m.start() != pos:
            break
        pos = m.end()
        i = m[1]
        out(f"@@mfctl-batch {i}\n")
        err(f"@@mfctl-batch {i}\n")
        rc = cfg.host.handle(m[2], _Channel(out, err))
        out(f"\n@@mfctl-batch end {i} {rc}\n")
        err(f"\n@@mfctl-batch end {i}\n")
    if pos != len(script):
        err("sh: 1: Syntax error: not a read batch the mock knows\n")
        return 2
    return 0
