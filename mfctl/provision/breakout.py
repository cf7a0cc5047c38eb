"""Breakouts as ConnectX does them: the ``NxSPEEDG`` grammar (:func:`parse`), what each card can
split into (:data:`CARDS`, keyed by the inventory's NIC ``model``), which transceivers can carry a
breakout (:data:`MODULES`, keyed by the inventory's ``optics``), and the check of one inventory NIC
against both (:func:`check_nic`). Hardware facts carry their source; ``docs/provisioning.md``
("Breakouts and optics as ConnectX does them") lists them.

Shapes: a breakout is ``ports`` sub-ports of ``speed_gbps`` Gbit/s each; a card port has
``serdes_lanes`` electrical lanes (4 on a QSFP28/56/112 cage); a module has ``channels`` optical
channels (one fibre pair each on parallel optics, one wavelength each on WDM optics).

On ConnectX a split is firmware configuration (``MODULE_SPLIT_M0`` maps each module lane to a
port, ``NUM_OF_PF`` the number of PCI physical functions), active after a firmware reset; each
sub-port is then a PCI function of its own (function 0, 1, ... of the card's slot) with its own
netdev (``ens1f0np0``, ``ens1f1np1``) and devlink port (``pci/0000:0c:00.1/131071``). mlx5 ports
are not splittable with ``devlink port split`` (that is the Spectrum switch driver, mlxsw).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_GRAMMAR = re.compile(r"^(?P<n>[1-9]\d?)x(?P<speed>\d{1,4}(?:\.\d{1,2})?)G$")


@dataclass(frozen=True)
class Breakout:
    """``ports`` sub-ports of ``speed_gbps`` each (``2x50G``: 2 of 50 Gbit/s)."""

    ports: int
    speed_gbps: float

    @property
    def total_gbps(self) -> float:
        return self.ports * self.speed_gbps

    def __str__(self) -> str:
        return f"{self.ports}x{self.speed_gbps:g}G"


def parse(text: str) -> Breakout:
    """``"2x50G"`` → ``Breakout(2, 50.0)``. Raises ValueError (saying the grammar) for anything else."""
    m = _GRAMMAR.match(text) if isinstance(text, str) else None
    if not m or float(m.group("speed")) <= 0:
        raise ValueError(f"{text!r} is not a breakout: expected NxSPEEDG (sub-ports x Gbit/s each), "
                         "e.g. 1x100G, 2x50G, 4x25G, 2x200G")
    return Breakout(int(m.group("n")), float(m.group("speed")))


@dataclass(frozen=True)
class Card:
    """What one ConnectX model's port can be split into.

    ``serdes_lanes``: electrical lanes per port; ``lane_gbps``: the rates one SerDes lane runs at
    (Gbit/s); ``splits``: the sub-port counts the firmware offers (1 = no split); ``split_param``:
    the firmware parameter that splits it (None: the card has none). ``source``: where it is documented."""

    model: str
    serdes_lanes: int
    lane_gbps: tuple[float, ...]
    max_port_gbps: float
    splits: tuple[int, ...]
    split_param: str | None
    source: str


#: Per-card split capability, keyed by the inventory's NIC ``model``.
CARDS: dict[str, Card] = {c.model: c for c in (
    Card("ConnectX-6", 4, (10.0, 25.0, 50.0), 200.0, (1,), None,
         "ConnectX-6 VPI/EN user manual, 'Features and Benefits' (QSFP56, 4 lanes, up to 200 Gb/s, 50G PAM4 SerDes); "
         "no module split is documented for ConnectX-6 and its mlxconfig has no MODULE_SPLIT parameter"),
    Card("ConnectX-6 Dx", 4, (10.0, 25.0, 50.0), 200.0, (1,), None,
         "ConnectX-6 Dx user manual (QSFP56, 4 lanes, 25G NRZ / 50G PAM4 SerDes); no 'Port Split Capable' "
         "ConnectX-6 Dx OPN and no MODULE_SPLIT parameter in its mlxconfig"),
    Card("ConnectX-7", 4, (10.0, 25.0, 50.0, 100.0), 400.0, (1, 2), "MODULE_SPLIT_M0",
         "ConnectX-7 'Port Split Capable' OPNs (e.g. MCX715105AS-WEAT: single-port QSFP112, mlxconfig shows "
         "MODULE_SPLIT_M0 Array[0..15]); split into 2 ports with MODULE_SPLIT_M0[lane]=port + NUM_OF_PF=2 (the DGX OS "
         "port-split procedure); a 4-way NIC split is not documented in the sources found"),
)}


@dataclass(frozen=True)
class Module:
    """A transceiver class. ``channels``: optical channels (``parallel``: one fibre pair each on an
    MPO; else wavelengths on one duplex LC pair, which cannot go to several destinations);
    ``channel_gbps``: rate per channel. ``identifier``/``connector``/``transceiver``: what
    ``ethtool -m`` prints for it (SFF-8636 for QSFP28; SFF-8024 codes). CMIS modules (400G DR4 class) are not
    modelled yet."""

    name: str
    rate_gbps: float
    channels: int
    channel_gbps: float
    parallel: bool
    connector: str  # "LC" or "MPO-12"
    identifier: str
    connector_line: str
    transceiver: str
    vendor: str
    part_number: str
    source: str


#: Transceiver classes an inventory's NIC ``optics`` may name.
MODULES: dict[str, Module] = {m.name: m for m in (
    Module("100G-CWDM4", 100.0, 4, 25.0, False, "LC", "0x11 (QSFP28)", "0x07 (LC)",
           "100G Ethernet: 100G CWDM4 MSA with FEC", "FINISAR CORP.", "FTLC1152RGPL",
           "CWDM4 MSA (4 wavelengths on one duplex SMF pair); SFF-8636 / SFF-8024 ext. compliance 0x06"),
    Module("100G-LR4", 100.0, 4, 25.0, False, "LC", "0x11 (QSFP28)", "0x07 (LC)",
           "100G Ethernet: 100G Base-LR4", "FINISAR CORP.", "FTLC1154RDPL",
           "IEEE 802.3 clause 88 (4 wavelengths on one duplex SMF pair); SFF-8024 ext. compliance 0x03"),
    Module("100G-SR4", 100.0, 4, 25.0, True, "MPO-12", "0x11 (QSFP28)", "0x0c (MPO Parallel Optic)",
           "100G Ethernet: 100G Base-SR4 or 25GBase-SR", "Mellanox", "MMA1B00-C100D",
           "IEEE 802.3 clause 95 (4 fibre pairs on MPO-12 MMF); SFF-8024 ext. compliance 0x02, connector 0x0C"),
    Module("100G-PSM4", 100.0, 4, 25.0, True, "MPO-12", "0x11 (QSFP28)", "0x0c (MPO Parallel Optic)",
           "100G Ethernet: 100G PSM4 Parallel SMF", "Mellanox", "MMS1C10-CM",
           "100G PSM4 MSA (4 fibre pairs on MPO-12 SMF); SFF-8024 ext. compliance 0x07"),
)}

#: Cables a NIC's ``cable`` may name, and the connector they plug into.
CABLES: dict[str, str] = {
    "duplex-lc": "LC",  # one fibre pair
    "mpo-12": "MPO-12",  # a trunk: every channel to the same far end
    "mpo-fanout": "MPO-12",  # MPO-12 to duplex LC legs (breakout cable): each channel pair to its own place
}


def subport_channels(module: Module, ports: int, index: int) -> list[int]:
    """The module channels (1-based, as ``ethtool -m`` numbers them) that sub-port ``index`` of a
    ``ports``-way split uses: channels are handed out in order, ``channels / ports`` each."""
    per = max(module.channels // ports, 1)
    return list(range(index * per + 1, index * per + per + 1))


def check_nic(nic) -> list[tuple[str, str]]:
    """One inventory NIC's breakout against its card, lanes, optics and cable: ``(field, problem)``
    pairs (field: the NIC key the problem is on), empty when it is buildable. ``nic``: an
    :class:`mfctl.inventory.models.NIC` (model, speed_gbps, breakout, lanes, optics, cable, role)."""
    try:
        b = parse(nic.breakout)
    except ValueError as e:
        return [("breakout", str(e))]
    out: list[tuple[str, str]] = []
    if len(nic.lanes) != b.ports:
        out.append(("lanes", f"breakout {b} has {b.ports} sub-port(s) but the inventory lists {len(nic.lanes)} lane(s)"))
    if abs(b.total_gbps - nic.speed_gbps) > 1e-6:
        out.append(("breakout", f"breakout {b} is {b.total_gbps:g} Gbit/s but the port is {nic.speed_gbps:g} Gbit/s"))
    card = CARDS.get(nic.model)
    if card is None:
        if b.ports > 1:
            out.append(("model", f"no split capability is known for model {nic.model!r} (known: {', '.join(CARDS)}): "
                                 f"breakout {b} cannot be checked, so it is refused"))
    else:
        if b.ports not in card.splits:
            out.append(("breakout", f"{card.model} splits a port only into {' or '.join(map(str, card.splits))} "
                                    f"(firmware-tested layouts), not {b.ports}"))
        if b.ports <= card.serdes_lanes:
            per_lane = b.speed_gbps / (card.serdes_lanes // b.ports)
            if per_lane > max(card.lane_gbps):
                out.append(("breakout", f"{b} needs {per_lane:g} Gbit/s per SerDes lane; {card.model} lanes run at "
                                        f"most {max(card.lane_gbps):g}"))
        else:
            out.append(("breakout", f"{b} needs {b.ports} sub-ports on {card.model}'s {card.serdes_lanes}-lane port"))
        if nic.speed_gbps > card.max_port_gbps:
            out.append(("speed_gbps", f"{card.model} ports run at most {card.max_port_gbps:g} Gbit/s"))
    mod = MODULES.get(nic.optics)
    if mod is None:
        return out + [("optics", f"unknown optics {nic.optics!r} (known: {', '.join(MODULES)})")]
    if abs(mod.rate_gbps - nic.speed_gbps) > 1e-6:
        out.append(("optics", f"{mod.name} is a {mod.rate_gbps:g} Gbit/s module on a {nic.speed_gbps:g} Gbit/s port"))
    if b.ports > 1:
        if not mod.parallel:
            out.append(("optics", f"{mod.name} carries all {mod.channels} channels on one duplex LC fibre pair: it cannot "
                                  f"break out to {b.ports} destinations (parallel optics on MPO, SR4/PSM4/DR4 class, can)"))
        elif mod.channels % b.ports:
            out.append(("optics", f"{mod.name}'s {mod.channels} channels do not divide into {b.ports} sub-ports"))
        elif abs(mod.channel_gbps * (mod.channels // b.ports) - b.speed_gbps) > 1e-6:
            out.append(("optics", f"a {b.speed_gbps:g}G sub-port on {mod.channels // b.ports} channel(s) of {mod.name} "
                                  f"runs at {mod.channel_gbps * (mod.channels // b.ports):g}G"))
        if nic.role == "ocs" and nic.cable != "mpo-fanout":
            out.append(("cable", f"sub-ports to {b.ports} OCS port pairs need an MPO fan-out (breakout) cable, "
                                 f"not {nic.cable}"))
    if CABLES[nic.cable] != mod.connector:
        out.append(("cable", f"a {nic.cable} cable does not plug into {mod.name}'s {mod.connector} connector"))
    return out


# --- after the split: which netdev is which sub-port --------------------------------------------

SPLIT_ARRAY = 16  # MODULE_SPLIT_M0 is Array[0..15] on ConnectX-7 (module lane -> port)


def split_layout(card: Card, ports: int) -> dict[str, str]:
    """The firmware settings that split ``card``'s port into ``ports``: ``MODULE_SPLIT_M0[i]`` =
    the (1-based) port module lane i feeds, lanes handed out in order (``serdes_lanes / ports``
    each), ``FF`` for array slots beyond the module's lanes; ``NUM_OF_PF`` = ``ports`` (one PCI
    physical function per port). The shape of NVIDIA's DGX OS port-split procedure
    (``MODULE_SPLIT_M0[0..3]=1 MODULE_SPLIT_M0[4..7]=2 MODULE_SPLIT_M0[8..15]=FF``, ``NUM_OF_PF=2``
    on an 8-lane ConnectX-8); on a 4-lane ConnectX-7 the same rule gives lanes 0-1 → 1, 2-3 → 2."""
    per = card.serdes_lanes // ports
    out = {f"{card.split_param}[{i}]": (str(i // per + 1) if i < card.serdes_lanes else "FF") for i in range(SPLIT_ARRAY)}
    out["NUM_OF_PF"] = str(ports)
    return out


def subport_pci(pci: str, k: int) -> str:
    """PCI address of sub-port ``k`` of the card whose function 0 is ``pci``: function ``k`` of the
    same slot (a split adds PCI physical functions; NVIDIA's nic-configuration-operator computes the
    new PFs' addresses the same way)."""
    head, fn = pci.rsplit(".", 1)
    return f"{head}.{int(fn) + k}"


def discover(ports: dict, pci: str, count: int, parents: dict[str, str] | None = None) -> dict[int, tuple[str, str | None]]:
    """Which netdev the host gives each sub-port: ``{k: (where it was found, netdev or None)}`` for
    the sub-ports ``0..count-1`` the host has a port for. ``ports``: the parsed ``devlink -j port
    show`` (:func:`mfctl.hosts.mellanox.parse_devlink_ports`); a port belongs to sub-port k when its
    name is ``pci/<subport_pci(pci, k)>/<index>`` (mlx5 names its uplink port by the PCI function:
    ``pci/0000:0c:00.1/131071``, kernels before 6.5). ``parents``: ``{ifname: parent PCI address}``
    from ``ip -d -j link show`` (:func:`parse_link_parents`), used for a sub-port devlink does not
    name by PCI (from Linux 6.5 mlx5's ports are ``auxiliary/mlx5_core.eth.N/…``)."""
    out: dict[int, tuple[str, str | None]] = {}
    for k in range(count):
        prefix = f"pci/{subport_pci(pci, k)}/"
        for p in ports.values():
            if p.name.startswith(prefix) and (p.flavour in (None, "physical")):
                out[k] = (p.name, p.netdev)
                break
        else:
            hit = sorted(n for n, dev in (parents or {}).items() if dev == subport_pci(pci, k))
            if hit:
                out[k] = (f"parentdev {subport_pci(pci, k)}", hit[0])
    return out


def parse_link_parents(text: str) -> dict[str, str]:
    """``ip -d -j link show`` → ``{ifname: parent PCI address}`` for the links whose ``parentbus``
    is ``pci`` (iproute2 prints ``parentbus``/``parentdev`` with ``-details``). Raises
    :class:`mfctl.errors.ParseError` on anything but a JSON array of links."""
    import json

    from mfctl.errors import ParseError

    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ParseError("ip -d -j link", e.lineno, "a JSON array of links", text.splitlines()[0][:80] if text else "") from None
    if not isinstance(doc, list):
        raise ParseError("ip -d -j link", 1, "a JSON array of links", text[:80])
    return {o["ifname"]: o["parentdev"] for o in doc
            if isinstance(o, dict) and "ifname" in o and o.get("parentbus") == "pci" and isinstance(o.get("parentdev"), str)}
