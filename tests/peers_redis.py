"""Helpers of the lock tests (tests/unit/lock, ``from peers_redis import ...``): a real
``redis-server`` (Debian's redis-server) or ``etcd`` (etcd-server) on 127.0.0.1 on free ports
(.ci/run installs both; a test skips, saying so, without them), and processes that hold or race
for a testbed lock."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RedisServer:
    proc: subprocess.Popen
    port: int
    password: str | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, socket_timeout=2,
                           socket_connect_timeout=2)

    def pause(self) -> None:
        """A network partition: the server is there but answers nothing (SIGSTOP)."""
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_redis(tmp_path: Path, password: str | None = None) -> RedisServer:
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed (Debian package redis-server; .ci/run installs it): "
                    "the Redis lock backend is tested against a real server only")
    pytest.importorskip("redis", reason="the redis Python client (a dependency of mfctl) is not installed")
    import redis

    d = tmp_path / f"redis-{time.monotonic_ns()}"
    d.mkdir()
    for _ in range(5):
        port = free_port()
        args = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(d),
                "--daemonize", "no", "--logfile", str(d / "redis.log")]
        if password:
            args += ["--requirepass", password]
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        srv = RedisServer(p, port, password)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and p.poll() is None:
            try:
                if srv.client().ping():
                    return srv
            except redis.RedisError:
                time.sleep(0.05)
        srv.stop()  # the port was taken meanwhile: another one
    pytest.fail(f"redis-server did not start: {(d / 'redis.log').read_text()[-2000:] if (d / 'redis.log').exists() else ''}")


def holder_code(lock: dict, name: str, purpose: str, *, ttl: float, detached: bool = False, hold: str = "sleep") -> str:
    """Python code for a subprocess that takes the lock and prints ``held TOKEN_ID`` (then sleeps)."""
    return (
        "import sys, time, json\n"
        "from types import SimpleNamespace\n"
        "from mfctl.inventory.models import LockBackend\n"
        "from mfctl.lock import testbed_lock\n"
        f"inv = SimpleNamespace(name={name!r}, lock=LockBackend(**json.loads({json.dumps(lock)!r})), base_dir=None)\n"
        f"lk = testbed_lock(inv, {purpose!r}, ttl={ttl!r}, detached={detached!r}, token='').acquire()\n"
        "print('held', lk.token, flush=True)\n"
        "time.sleep(120)\n")


def spawn(code: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.PIPE, env={**os.environ, **(env or {})}, cwd=ROOT)


def worker_code(lock: dict, name: str) -> str:
    """A subprocess that takes orders on stdin, one a line: ``acquire TIMEOUT AT`` (at epoch
    second AT, try to take the lock, waiting up to TIMEOUT s: prints ``won T`` with the time it
    had it, or ``lost T``), ``release`` (prints ``released T`` with the time it called release)."""
    return (
        "import sys, time, json\n"
        "from types import SimpleNamespace\n"
        "from mfctl.errors import LockError\n"
        "from mfctl.inventory.models import LockBackend\n"
        "from mfctl.lock import testbed_lock\n"
        f"inv = SimpleNamespace(name={name!r}, lock=LockBackend(**json.loads({json.dumps(lock)!r})), base_dir=None)\n"
        "lk = None\n"
        "testbed_lock(inv, 'warm-up', token='').status()  # the client imported and connected before the clock runs\n"
        "print('ready', flush=True)\n"
        "for line in sys.stdin:\n"
        "    cmd, *a = line.split()\n"
        "    if cmd == 'acquire':\n"
        "        at = float(a[1])\n"
        "        if at - time.time() > 0.01: time.sleep(at - time.time() - 0.01)\n"
        "        while time.time() < at: pass\n"
        "        lk = testbed_lock(inv, 'worker', float(a[0]), ttl=10, token='')\n"
        "        try:\n"
        "            lk.acquire(); print('won', repr(time.time()), flush=True)\n"
        "        except LockError:\n"
        "            lk = None; print('lost', repr(time.time()), flush=True)\n"
        "    elif cmd == 'release':\n"
        "        t = time.time()\n"
        "        if lk is not None: lk.release()\n"
        "        lk = None; print('released', repr(t), flush=True)\n")


def ask(p: subprocess.Popen, line: str) -> None:
    p.stdin.write(line + "\n")
    p.stdin.flush()


def answer(p: subprocess.Popen) -> tuple[str, float]:
    out = p.stdout.readline().split()
    assert out, f"the worker died: {p.stderr.read()[-2000:]}"
    return out[0], float(out[1]) if len(out) > 1 else 0.0


@dataclass
class EtcdServer:
    proc: subprocess.Popen
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_etcd(tmp_path: Path) -> EtcdServer:
    """A one-member etcd (Debian's etcd-server) on two free 127.0.0.1 ports, its data in ``tmp_path``."""
    import urllib.request

    exe = shutil.which("etcd")
    if exe is None:
        pytest.skip("etcd is not installed (Debian package etcd-server; .ci/run installs it): "
                    "the etcd lock backend is tested against a real server only")
    d = tmp_path / f"etcd-{time.monotonic_ns()}"
    d.mkdir()
    for _ in range(5):
        port, peer = free_port(), free_port()
        args = [exe, "--name", "t", "--data-dir", str(d / "data"), "--listen-client-urls", f"http://127.0.0.1:{port}",
                "--advertise-client-urls", f"http://127.0.0.1:{port}", "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", f"t=http://127.0.0.1:{peer}", "--log-level", "warn"]
        with open(d / "etcd.log", "ab") as log:
            p = subprocess.Popen(args, stdout=log, stderr=log)
        srv = EtcdServer(p, port)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and p.poll() is None:
            try:
                req = urllib.request.Request(f"{srv.url}/v3/kv/range", data=b'{"key": "eA=="}', method="POST")
                with urllib.request.urlopen(req, timeout=1):
                    return srv
            except OSError:
                time.sleep(0.1)
        srv.stop()
    pytest.fail(f"etcd did not start: {(d / 'etcd.log').read_text()[-2000:]}")
