#!/usr/bin/env python3
"""Fan-out: one command on 128 mock SSH hosts on loopback — mfctl exec vs parallel-ssh vs Ansible.

All three run against the same mock testbed (128 paramiko SSH servers on 127.0.0.1, per-
instance host keys) in one run:
  - mfctl cold: `mfctl exec -i INV all -- hostname` as a new process (start-up, 128 SSH
    handshakes over libssh2 with strict host-key checks — the first ones while its CLI loads,
    mfctl.cli.ahead — the command, folding), the inventory already validated once
    (mfctl.inventory.cache, as after any earlier command on the file);
    "first use of inventory" is the same with a new state directory (the YAML parsed too);
  - mfctl warm: the same command again over the pooled, already-authenticated connections
    (one `SSHPool`, second `run_many`);
  - parallel-ssh: `ParallelSSHClient(...).run_command("hostname")` + joining the output, as a
    new process (pip install parallel-ssh); it does not verify host keys at all;
  - Ansible: `ansible all -m command -a hostname` ad hoc, OpenSSH transport, forks = 32
    (pip install ansible-core).
The same fan-out (32 at once) is used by all three. mfctl cold and parallel-ssh runs alternate,
so that a drift of the mock server weighs on both alike. Needs: `pip install parallel-ssh ansible-core`
in the interpreter given by $BENCH_PYTHON (default: this one); tools that are missing are
reported as null.

Prints a table, then one JSON line:
{"benchmark": "fanout", "hosts": 128, "mfctl_cold_s": …, "mfctl_cold_first_s": …, "mfctl_warm_s": …,
 "parallel_ssh_s": …, "ansible_s": …}
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
HOSTS = int(os.environ.get("HOSTS", "128"))
REPEATS = int(os.environ.get("REPEATS", "3"))
FANOUT = 32


def make_inventory(path: Path) -> None:
    import yaml

    doc = yaml.safe_load((ROOT / "inventory" / "mfabric-prototype.yaml").read_text())
    proto = doc["hosts"][0]
    hosts = []
    for i in range(HOSTS):
        h = json.loads(json.dumps(proto))
        h["name"] = f"node{i + 1:03d}"
        h["ssh"]["address"] = "192.0.2.1"
        h["nics"] = [n for n in h["nics"] if n["role"] == "eps"]
        hosts.append(h)
    doc.update(name="fanout-bench", hosts=hosts, regions=[{"name": "r0", "hosts": [h["name"] for h in hosts[:2]]}])
    path.write_text(yaml.safe_dump(doc))


def timed(cmd, env=None) -> float:
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    el = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({r.returncode}): {r.stderr[-500:]}")
    return el


def main() -> None:
    from mfctl import mockctl
    from mfctl.inventory import load_inventory
    from mfctl.transport.ssh import SSHPool, targets_from_inventory

    bench_py = os.environ.get("BENCH_PYTHON", sys.executable)
    # bytecode for mfctl's own modules, as `pip install` writes it for an installed package (and as
    # parallel-ssh and Ansible have it): with PYTHONDONTWRITEBYTECODE set and an editable install,
    # every cold run would otherwise compile mfctl from source (~0.05 s)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "mfctl")], check=True,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        make_inventory(tmp / "inv.yaml")
        os.environ["MFCTL_STATE_DIR"] = str(tmp / "state")  # this process and the tools it starts
        env = dict(os.environ)
        st = mockctl.start(tmp / "inv.yaml", tmp / "mock", timeout=120, sshd="paramiko")  # the figures' server
        try:
            inv = load_inventory(st["inventory"])
            key = Path(inv.hosts[0].ssh.key_file)
            ports = {h.name: h.ssh.port for h in inv.hosts}
            user = inv.hosts[0].ssh.user
            script = tmp / "pssh_run.py"
            script.write_text(textwrap.dedent(f"""
                from pssh.clients import ParallelSSHClient
                from pssh.config import HostConfig
                ports = {json.dumps(ports)}
                hosts = ["127.0.0.1"] * len(ports)
                cfg = [HostConfig(port=p, user={user!r}, private_key={str(key)!r}) for p in ports.values()]
                c = ParallelSSHClient(hosts, host_config=cfg, pool_size={FANOUT}, num_retries=1)
                out = c.run_command("hostname")
                c.join(out)
                assert all(list(o.stdout) for o in out)
            """))
            mfctl = [sys.executable, "-m", "mfctl", "exec", "-i", st["inventory"], "--fanout", str(FANOUT), "all", "--", "hostname"]
            # mfctl cold and parallel-ssh alternate, so that any drift of the mock server (it slows a little
            # over thousands of connections) weighs on both alike; the ratio is the median of the pairs'
            cold_t, pssh_t, first_t = [], [], []
            for i in range(REPEATS):
                # the first command on an inventory file parses its YAML; later ones read the validated copy
                first_t.append(timed(mfctl, dict(env, MFCTL_STATE_DIR=str(tmp / f"state-new-{i}"))))
                cold_t.append(timed(mfctl, env))
                if pssh_t is not None:
                    try:
                        pssh_t.append(timed([bench_py, str(script)]))
                    except (RuntimeError, FileNotFoundError) as e:
                        print(f"parallel-ssh not measured: {e}", file=sys.stderr)
                        pssh_t = None
            cold = statistics.median(cold_t)
            first = statistics.median(first_t)
            pssh = statistics.median(pssh_t) if pssh_t else None
            pair_ratio = statistics.median(p / c for c, p in zip(cold_t, pssh_t)) if pssh_t else None
            with SSHPool(targets_from_inventory(inv), fanout=FANOUT) as pool:
                names = [h.name for h in inv.hosts]
                pool.run_many(names, lambda h: ["hostname"])
                warm_t = []
                for _ in range(REPEATS):
                    t = time.perf_counter()
                    res = pool.run_many(names, lambda h: ["hostname"])
                    warm_t.append(time.perf_counter() - t)
                    assert all(r.ok for r in res)
            warm = statistics.median(warm_t)
            # Ansible ad hoc, OpenSSH with the mock's known_hosts
            ini = tmp / "hosts.ini"
            ini.write_text("[all]\n" + "".join(f"{n} ansible_host=127.0.0.1 ansible_port={p}\n" for n, p in ports.items()))
            ansible = shutil.which("ansible", path=str(Path(bench_py).parent))
            aenv = dict(env, ANSIBLE_HOST_KEY_CHECKING="True", ANSIBLE_FORKS=str(FANOUT), ANSIBLE_PYTHON_INTERPRETER="auto_silent",
                        ANSIBLE_SSH_ARGS=f"-o UserKnownHostsFile={tmp / 'state' / 'known_hosts'} -o ControlMaster=no",
                        ANSIBLE_LOCAL_TEMP=str(tmp / "ansible"), ANSIBLE_REMOTE_USER=user, ANSIBLE_PRIVATE_KEY_FILE=str(key),
                        ANSIBLE_STDOUT_CALLBACK="minimal")
            (tmp / "state" / "known_hosts").write_text(
                (tmp / "mock" / "known_hosts").read_text())
            try:
                ans = statistics.median(timed([ansible, "all", "-i", str(ini), "-m", "raw", "-a", "hostname"], aenv)
                                        for _ in range(max(1, REPEATS - 2))) if ansible else None
            except RuntimeError as e:
                print(f"ansible not measured: {e}", file=sys.stderr)
                ans = None
        finally:
            mockctl.stop(tmp / "mock")
    print(f"{'tool':<26} | {'seconds':>8} | vs mfctl cold | host keys checked")
    print("-" * 72)
    for name, v, kh in (("mfctl exec (cold)", cold, "yes (strict)"), ("  first use of inventory", first, "yes (strict)"),
                        ("mfctl (warm, pooled)", warm, "yes (at connect)"),
                        ("parallel-ssh", pssh, "no (not supported)"), ("ansible ad hoc", ans, "yes (OpenSSH)")):
        print(f"{name:<26} | {v if v is None else round(v, 3)!s:>8} | {'—' if v is None else f'{v / cold:.2f}x':>13} | {kh}")
    print(f"({HOSTS} mock SSH hosts on 127.0.0.1, fan-out {FANOUT}, median of {REPEATS}; 'hostname' on every host)")
    print("samples, s: mfctl cold " + " ".join(f"{x:.3f}" for x in cold_t)
          + ("; parallel-ssh " + " ".join(f"{x:.3f}" for x in pssh_t) if pssh_t else ""))
    if pair_ratio is not None:
        print(f"parallel-ssh / mfctl cold, median of the {REPEATS} alternating pairs: {pair_ratio:.2f}x "
              f"({'mfctl at least as fast' if pair_ratio >= 1 else f'mfctl {100 * (1 / pair_ratio - 1):.1f} % slower'})")
    print(json.dumps({"benchmark": "fanout", "hosts": HOSTS, "mfctl_cold_s": round(cold, 3), "mfctl_cold_first_s": round(first, 3), "mfctl_warm_s": round(warm, 4),
                      "parallel_ssh_s": None if pssh is None else round(pssh, 3), "ansible_s": None if ans is None else round(ans, 3)}))


if __name__ == "__main__":
    main()
