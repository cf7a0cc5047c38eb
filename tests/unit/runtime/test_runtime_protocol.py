"""The runtime protocol's error paths end cleanly: controller lost, malformed message,
version mismatch, wrong token."""

import json
import socket
import subprocess
import sys
import time

import pytest

from mfctl.runtime.client import ControllerLost, RuntimeClient
from mfctl.runtime.controller import Controller
from mfctl.runtime.protocol import ProtocolError, decode, encode

WELCOME = {"run_id": "t", "region": "r0", "hosts": ["h1", "h2", "h3", "h4"], "leader": "h1", "iterations": 30,
           "time_scale": 200.0, "epoch": 0,
           "model": {"name": "Mixtral-8x7B", "routing": "mixtral", "layers": 4, "hidden": 4096, "ffn_hidden": 14336,
                     "gated": True, "bytes_per_element": 2},
           "parallelism": {"ep": 8, "tp": 4},
           "training": {"iterations": 30, "seq_len": 4096, "micro_batch": 1, "micro_batches": 2},
           "gpus_per_server": 8, "rates": {"circuit_Bps": 11.5e9, "eps_Bps": 11.5e9},
           "circuits": [[0, 1, 1, 1], [1, 0, 1, 1], [1, 1, 0, 1], [1, 1, 1, 0]], "routes": {}}


def test_codec_rejects_bad_messages():
    assert decode(encode({"type": "hello"}))["v"] == 1
    for bad in (b"not json\n", b"[1,2]\n", b'{"type": "hello", "v": 2}\n', b'{"v": 1}\n'):
        with pytest.raises(ProtocolError):
            decode(bad)


def test_version_mismatch_and_malformed_message_end_cleanly():
    ctrl = Controller(token="tok", welcome=lambda h: WELCOME, expected_hosts={"h1"})
    try:
        s = socket.create_connection(ctrl.address, timeout=5)
        s.sendall(b'{"v": 2, "type": "hello", "host": "h1", "token": "tok"}\n')
        reply = json.loads(s.makefile().readline())
        assert reply["type"] == "error" and "version" in reply["message"]
        s.close()
        # a good worker, then garbage on its connection: the controller says why and drops it
        rt = RuntimeClient(ctrl.address_str, host="h1", token="tok")
        assert rt.connect()["run_id"] == "t"
        rt.conn.sock.sendall(b"{garbage\n")
        deadline = time.monotonic() + 5
        while not rt.lost.is_set() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert rt.lost.is_set()
        msgs = rt.poll()
        assert msgs and msgs[-1]["type"] == "error" and "protocol error" in msgs[-1]["message"]
        events = []
        while not ctrl.events.empty():
            events.append(ctrl.events.get()[1]["type"])
        assert events[-1] == "_disconnected"
    finally:
        ctrl.close()


def test_wrong_token_is_refused():
    ctrl = Controller(token="right", welcome=lambda h: WELCOME, expected_hosts={"h1"})
    try:
        with pytest.raises(ControllerLost, match="refused"):
            RuntimeClient(ctrl.address_str, host="h1", token="wrong").connect()
    finally:
        ctrl.close()


def test_runtime_keeps_training_when_the_controller_is_lost():
    ctrl = Controller(token="tok", welcome=lambda h: WELCOME, expected_hosts={"h1"})
    proc = subprocess.Popen([sys.executable, "-m", "mfctl.mock.simruntime", "--controller", ctrl.address_str,
                             "--host", "h1", "--token", "tok"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 3 and time.monotonic() < deadline:
            host, msg = ctrl.events.get(timeout=10)
            seen += msg["type"] == "iteration"
        ctrl.close()  # the controller dies mid-training
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "controller lost" in out and "iteration       30/      30" in out
