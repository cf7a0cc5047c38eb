"""RoCE QoS of the mock host's NICs: ``mlnx_qos -i IF [--trust T] [--pfc …]``."""

from __future__ import annotations


def mlnx_qos(cfg, args, out, err):
    nd = args[args.index("-i") + 1] if "-i" in args else None
    nic = next((n for n in cfg.nics.values() if nd in n.netdevs), None)
    if nic is None:
        err(f"Netlink error: device {nd} not found\n")
        return 1
    if "--trust" in args:
        t = args[args.index("--trust") + 1]
        if t not in ("pcp", "dscp"):
            err(f"Invalid trust state: {t}\n")
            return 1
        nic.trust = t
    if "--pfc" in args:
        vals = args[args.index("--pfc") + 1].split(",")
        if len(vals) != 8 or any(v not in ("0", "1") for v in vals):
            err("--pfc takes 8 comma-separated 0/1 values\n")
            return 1
        nic.pfc = [int(v) for v in vals]
    out(f"DCBX mode: OS controlled\nPriority trust state: {nic.trust}\n"
        "Receive buffer size (bytes): 130944,130944,0,0,0,0,0,0,\n"
        "Cable len: 7\nPFC configuration:\n\tpriority    0   1   2   3   4   5   6   7\n"
        f"\tenabled     {'   '.join(map(str, nic.pfc))}   \n\tbuffer      0   0   0   1   0   0   0   0   \n"
        "tc: 0 ratelimit: unlimited, tsa: vendor\n\t priority:  1\n")
    return 0
