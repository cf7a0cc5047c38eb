"""Byte streams to a device console: serial (pyserial ``serial_for_url``), raw TCP, SSH.

All three expose ``write(bytes)``, ``read(timeout) -> bytes`` (``b""`` when nothing
arrived in time; :class:`ConnectionError` when the peer closed) and ``close()``.
Connect errors become :class:`mfctl.errors.UnreachableError` naming the endpoint and
the limit that fired.
"""

from __future__ import annotations

import socket
import time

from mfctl.errors import UnreachableError


class SerialStream:
    """A serial line: device path (``/dev/ttyUSB0``, a pty) or URL (``socket://``, ``rfc2217://``)."""

    def __init__(self, device: str, *, baudrate: int = 9600, bytesize: int = 8, parity: str = "N",
                 stopbits: int = 1, timeout: float = 5.0):
        import serial  # lazy: keeps `mfctl --help` fast

        self.name = f"serial:{device}"
        try:
            self._ser = serial.serial_for_url(device, baudrate=baudrate, bytesize=bytesize, parity=parity,
                                              stopbits=stopbits, timeout=0, write_timeout=timeout,
                                              do_not_open=True)
            if hasattr(self._ser, "exclusive"):
                self._ser.exclusive = True  # a console line has one user at a time (flock)
            self._ser.open()
        except (serial.SerialException, ValueError, OSError) as e:
            busy = "lock" in str(e).lower() or "busy" in str(e).lower()
            raise UnreachableError(f"cannot open serial {device}: "
                                   + ("in use by another process" if busy else str(e))) from e
        self._serial_exc = serial.SerialException

    def write(self, data: bytes) -> None:
        try:
            self._ser.write(data)
            self._ser.flush()
        except (self._serial_exc, OSError) as e:
            raise ConnectionError(f"{self.name}: write failed: {e}") from e

    def read(self, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._ser.timeout = max(0.0, min(0.05, deadline - time.monotonic()))
                data = self._ser.read(max(1, self._ser.in_waiting))
            except (self._serial_exc, OSError) as e:
                raise ConnectionError(f"{self.name}: read failed: {e}") from e
            if data or time.monotonic() >= deadline:
                return data

    def close(self) -> None:
        try:
            self._ser.close()
        except OSError:
            pass


class _SocketLike:
    """write/read/close over an object with ``sendall``/``recv``/``settimeout`` (socket, SSH channel)."""

    name = "stream"
    _io = None

    def write(self, data: bytes) -> None:
        try:
            self._io.sendall(data)
        except OSError as e:
            raise ConnectionError(f"{self.name}: write failed: {e}") from e

    def read(self, timeout: float) -> bytes:
        self._io.settimeout(max(0.001, timeout))
        try:
            data = self._io.recv(65536)
        except (socket.timeout, TimeoutError):
            return b""
        except OSError as e:
            raise ConnectionError(f"{self.name}: read failed: {e}") from e
        if not data:
            raise ConnectionError(f"{self.name}: connection closed by peer")
        return data


class TCPStream(_SocketLike):
    """Raw TL1 over TCP (Polatis default port 3082)."""

    def __init__(self, address: str, port: int, *, connect_timeout: float = 10.0):
        self.name = f"tcp:{address}:{port}"
        try:
            self._sock = socket.create_connection((address, port), timeout=connect_timeout)
        except (socket.timeout, TimeoutError) as e:
            raise UnreachableError(f"{self.name}: connect timed out after {connect_timeout:g} s") from e
        except OSError as e:
            raise UnreachableError(f"{self.name}: connect failed: {e.strerror or e}") from e
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._io = self._sock

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass


class SSHStream(_SocketLike):
    """TL1 over an SSH shell channel (Polatis default port 6252), strict host keys."""

    def __init__(self, target, *, connect_timeout: float = 10.0):
        from mfctl.transport.ssh import connect

        self.name = f"ssh:{target.address}:{target.port}"
        self._client = connect(target, connect_timeout)
        try:
            self._chan = self._client.invoke_shell(term="dumb", width=200)
            self._io = self._chan
        except Exception as e:  # paramiko raises SSHException or OSError subclasses
            self._client.close()
            raise UnreachableError(f"{self.name}: cannot open shell: {e}") from e

    def close(self) -> None:
        self._client.close()
