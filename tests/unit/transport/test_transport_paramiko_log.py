"""paramiko's own loggers never print to the terminal: what it logs when a host vanishes under a
session goes to mfctl's log (issue 17 item 9: raw ``Socket exception`` / ``Error reading SSH
protocol banner`` tracebacks before the command's error)."""

import logging
import subprocess
import sys

LOGS = ("import logging, mfctl.transport.ssh\n"
        "t = logging.getLogger('paramiko.transport')\n"
        "t.error('Socket exception: Connection reset by peer (104)')\n"
        "try:\n    raise EOFError()\nexcept EOFError:\n"
        "    t.error('Exception (client): Error reading SSH protocol banner', exc_info=True)\n"
        "logging.getLogger('paramiko').warning('a warning of its own')\n")


def test_paramiko_records_do_not_reach_stderr_in_a_real_process():
    r = subprocess.run([sys.executable, "-c", LOGS], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_paramiko_records_go_to_mfctls_log_handlers():
    import mfctl.transport.ssh  # noqa: F401 - installs the forwarding

    got: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            got.append(record)

    h = Keep()
    logging.getLogger("mfctl").addHandler(h)
    try:
        logging.getLogger("paramiko.transport").error("Socket exception: Connection reset by peer (104)")
        logging.getLogger("paramiko.transport").info("chatter: not kept")
    finally:
        logging.getLogger("mfctl").removeHandler(h)
    assert [r.getMessage() for r in got] == ["Socket exception: Connection reset by peer (104)"]
    assert got[0].name == "paramiko.transport" and got[0].levelno == logging.ERROR
