"""Reading an operator's configuration file (inventory, playbook, provisioning recipe, firmware
manifest, OCS topology, traffic matrix) with a bound on its size.

:data:`MAX_FILE_BYTES` is 16 MiB. The largest real file, a 1,024-host inventory, is about 1.5 MB;
composing YAML takes several times a file's size in memory (a 300 MB file took 1.8 GB before it
was refused), so a larger file is refused before it is read — by its size when it is a regular
file, and for anything else (a pipe, ``/dev/zero``, ``/proc``) by a read that stops one byte past
the limit. Needs neither pydantic nor YAML (``mfctl exec`` reads inventories through it early).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from mfctl.errors import ConfigError

MAX_FILE_BYTES = 16 << 20


def _too_large(size: str, src: str) -> ConfigError:
    return ConfigError(f"file too large ({size}; a configuration file may have at most {MAX_FILE_BYTES >> 20} MiB)",
                       path=src)


def read_config(path: str | Path) -> bytes:
    """The bytes of the configuration file ``path``. Raises ConfigError (exit 3) naming the file when
    it cannot be read or is larger than :data:`MAX_FILE_BYTES`."""
    src = str(path)
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if stat.S_ISREG(st.st_mode) and st.st_size > MAX_FILE_BYTES:
                raise _too_large(f"{st.st_size} bytes", src)
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror or e}", path=src) from e
    if len(raw) > MAX_FILE_BYTES:
        raise _too_large(f"more than {MAX_FILE_BYTES} bytes", src)
    return raw
