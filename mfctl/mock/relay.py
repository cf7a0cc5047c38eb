"""The relay a real sshd runs for every session on a mock host (``ForceCommand``).

``python -I -S relay.py --socket <state>/hosts/<name>.sock`` connects to the mock testbed's
unix socket for that host (:mod:`mfctl.mock.relayserver`) and forwards, until the command ends:

- the command line (``$SSH_ORIGINAL_COMMAND``; none: a shell request) and whether the session
  has a terminal (``isatty(0)``: the client asked for a pty);
- stdin (``I`` frames, then ``E`` at its end), stdout/stderr back (``O``/``R``), the exit status
  (``X``: a number; negative ``-N`` = killed by signal N, which the relay then dies of itself, so
  sshd reports ``exit-signal`` as it does for a real command killed by a signal);
- signals the relay receives (``S``: SIGINT from a pty's ^C, SIGTERM, SIGQUIT, SIGUSR1/2);
- the hang-up: sshd closes the pipes to the session (``POLLERR``/``POLLHUP`` on stdout or stderr,
  ``EPIPE``) or the pty (SIGHUP) when the client closes the channel or the connection — the relay
  then closes the socket, which the mock takes as SIGHUP on the command. A real host without a
  pty would let the command run on until its next write (SIGPIPE); the mock stops it at once.

Frames are ``type (1 byte) + length (4 bytes, big-endian) + payload``; the hello (``H``) is
``b"1"``/``b"0"`` (a pty or not), then ``b"c"`` and the command's bytes, or ``b"s"`` (a shell).
Its start-up is paid on every command a mock host runs, so it imports only C modules (``_socket``
and ``_signal``, not ``socket``/``signal``/``json``, which pull in ``enum`` and ``re``) and runs with
``-I -S`` (no site, no mfctl): ~10 ms of Python start-up. Exit 255 with a message on stderr when
the mock is not there.
"""

import _signal as signal  # the C module: signal.py would import enum (≈ 5 ms of every command)
import _socket as socket
import errno
import os
import select
import struct
import sys

HEADER = struct.Struct(">cI")
CHUNK = 65536
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
CONNECT_TIMEOUT_S = 5.0  # the mock's socket is local: it answers at once or is not there


def hello(command: bytes | None, pty: bool) -> bytes:
    """The hello frame's payload (see the module doc)."""
    return (b"1" if pty else b"0") + (b"s" if command is None else b"c" + command)


def parse_hello(payload: bytes) -> tuple[str | None, bool]:
    """``(command or None for a shell, pty)``; raises ValueError for anything else."""
    if len(payload) < 2 or payload[:1] not in (b"0", b"1") or payload[1:2] not in (b"c", b"s"):
        raise ValueError(f"not a relay hello: {payload[:16]!r}")
    command = payload[2:].decode("utf-8", errors="replace") if payload[1:2] == b"c" else None
    return command, payload[:1] == b"1"


def frame(kind: bytes, payload: bytes = b"") -> bytes:
    return HEADER.pack(kind, len(payload)) + payload


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _die(rc: int) -> None:
    """Exit like the command did: ``-N`` → killed by signal N (sshd sends exit-signal)."""
    if rc < 0:
        sig = -rc
        try:
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
            os.kill(os.getpid(), sig)
        except (OSError, ValueError):
            pass
        os._exit(128 + sig)
    os._exit(rc & 0xFF)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "--socket":
        sys.stderr.write("usage: relay.py --socket PATH\n")
        return 2
    path = argv[1]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(CONNECT_TIMEOUT_S)
    try:
        sock.connect(path)
    except OSError as e:
        sys.stderr.write(f"mock host: cannot reach the mock testbed at {path}: {e.strerror or e}\n")
        return 255
    sock.setblocking(True)
    sock.settimeout(None)
    sock.sendall(frame(b"H", hello(os.environb.get(b"SSH_ORIGINAL_COMMAND"), os.isatty(0))))

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    for s in (*FORWARDED_SIGNALS, signal.SIGHUP):
        signal.signal(s, lambda *_: None)  # delivered through the wakeup pipe
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # a closed stdout is EPIPE, read as a hang-up

    poll = select.poll()
    poll.register(sock, select.POLLIN)
    poll.register(wake_r, select.POLLIN)
    poll.register(0, select.POLLIN)
    tty = os.isatty(0)
    for fd in (1, 2):
        poll.register(fd, 0)  # only POLLERR/POLLHUP: sshd closed its end of the pipe, socket or pty
    buf = bytearray()
    to_mock = [True]  # the socket still takes frames

    def send(data: bytes) -> None:
        # The mock may have sent the command's last frames (O…, X) and closed its end already: a
        # write that fails then (EPIPE, reset) is not a hang-up — those frames are still to be read
        if to_mock[0]:
            try:
                sock.sendall(data)
            except (BrokenPipeError, ConnectionResetError):
                to_mock[0] = False

    try:
        while True:
            for fd, ev in poll.poll():
                if fd == wake_r:
                    for sig in os.read(wake_r, 64):
                        if sig == signal.SIGHUP:
                            return _hang_up(sock)
                        send(frame(b"S", str(sig).encode()))
                elif fd == 0:
                    try:
                        data = os.read(0, CHUNK)
                    except OSError as e:
                        if e.errno == errno.EIO:  # a pty whose master is gone
                            return _hang_up(sock)
                        data = b""
                    if data:
                        send(frame(b"I", data))
                        continue
                    if not tty:  # a pipe or socket at its end stays readable: stop watching it
                        poll.unregister(0)
                    send(frame(b"E"))  # (on a pty: ^D at the start of a line)
                elif fd == sock.fileno():
                    data = sock.recv(CHUNK)
                    if not data:
                        sys.stderr.write("mock host: the mock testbed closed the session\n")
                        return 255
                    buf += data
                    while len(buf) >= HEADER.size:
                        kind, n = HEADER.unpack_from(buf)
                        if len(buf) < HEADER.size + n:
                            break
                        payload = bytes(buf[HEADER.size:HEADER.size + n])
                        del buf[:HEADER.size + n]
                        if kind == b"O":
                            _write_all(1, payload)
                        elif kind == b"R":
                            _write_all(2, payload)
                        elif kind == b"X":
                            sock.close()
                            _die(int(payload))
                elif ev & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
                    return _hang_up(sock)
    except BrokenPipeError:
        return _hang_up(sock)
    except (ConnectionError, OSError) as e:
        if getattr(e, "errno", None) in (errno.EIO, errno.EPIPE):
            return _hang_up(sock)
        try:
            sys.stderr.write(f"mock host: relay failed: {e}\n")
        except OSError:
            pass
        return 255


def _hang_up(sock) -> int:
    """The session is gone: closing the socket tells the mock (SIGHUP on the command)."""
    sock.close()
    return 129  # 128 + SIGHUP; nobody is left to read it


if __name__ == "__main__":
    _die(main(sys.argv[1:]))
