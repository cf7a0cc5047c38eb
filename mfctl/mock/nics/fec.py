"""FEC of the mock host's ports: ``ethtool --show-fec IF`` / ``ethtool --set-fec IF encoding E``
(ethtool(8); the netlink ethtool's ``Supported/Configured FEC encodings`` / ``Active FEC
encoding`` lines). 100G-CWDM4 and 25G-per-lane NRZ links run RS-FEC (Clause 91: the module says
"100G CWDM4 MSA with FEC"), so a port in ``Auto`` is active RS. Every other ethtool call goes to
:func:`mfctl.mock.nics.links.ethtool`."""

from __future__ import annotations

from mfctl.mock.nics import links
from mfctl.mock.nics.qos import port

_ENC = {"auto": "Auto", "rs": "RS", "baser": "BaseR", "off": "Off", "llrs": "LLRS"}


def ethtool(cfg, args, out, err):
    if args[:1] not in (["--show-fec"], ["--set-fec"]):
        return links.ethtool(cfg, args, out, err)
    nd = args[1] if len(args) > 1 else ""
    st = port(cfg, nd)
    if st is None:
        err(f"netlink error: no device matches name ({nd})\n")
        return 1
    if args[0] == "--show-fec":
        active = "RS" if st.fec in ("Auto", "RS") else "None" if st.fec == "Off" else st.fec
        out(f"FEC parameters for {nd}:\nSupported/Configured FEC encodings: {st.fec}\nActive FEC encoding: {active}\n")
        return 0
    enc = args[3].lower() if len(args) == 4 and args[2] == "encoding" else None
    if enc not in _ENC or enc == "llrs":
        err("ethtool: bad command line argument(s)\nFor more information run ethtool -h\n")
        return 1
    st.fec = _ENC[enc]
    return 0
