"""Plan step for each lane's Ethernet link mode (:func:`plan_speed`): the speed and lane count the
inventory's breakout gives the sub-port (``2x50G`` on a 4-lane card: 50000 Mb/s on 2 lanes each),
forced with auto-negotiation off — ``ethtool -s IF speed MBPS lanes L autoneg off`` (ethtool(8);
``lanes`` needs ethtool and a kernel >= 5.10, the ``ETHTOOL_A_LINKMODES_LANES`` uAPI).

Read with ``ethtool IF`` (:func:`read_speed`, one command per lane): ``Supported link modes:``
and ``Advertised link modes:`` (``50000baseSR2/Full``: speed 50000, 2 lanes — the digits after the
medium), ``Speed:`` / ``Lanes:`` (only while the link is up: ``Speed: Unknown!`` and no ``Lanes:``
line when it is down), ``Auto-negotiation:``. A forced mode is what the driver advertises with
auto-negotiation off (mlx5 reports its admin link modes there), so it can be read back with the
link down — through an OCS with no circuit, the normal case right after provisioning. A mode the
port does not list in ``Supported link modes`` is MANUAL (the breakout, the card or the module is
not what the inventory says)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mfctl.errors import ParseError
from mfctl.provision import breakout
from mfctl.provision.actions import OUTCOME_UNSUPPORTED, Action, PlanContext
from mfctl.provision.steps.ports import host_netdevs, lane_ports

MORE_KEY = "speed"
_MODE = re.compile(r"^(\d+)base([A-Za-z]+?)(\d*)(?:_[A-Za-z0-9_]+)?/(Full|Half)$")


@dataclass
class LinkModes:
    """What ``ethtool IF`` says about the link mode (speeds in Mb/s)."""

    supported: list[str] = field(default_factory=list)
    advertised: list[str] = field(default_factory=list)
    autoneg: bool | None = None
    speed_mbps: int | None = None  #: None: ``Unknown!`` (link down)
    lanes: int | None = None  #: None: no ``Lanes:`` line (link down, or ethtool < 5.10)
    link: bool = False


def mode_of(name: str) -> tuple[int, int] | None:
    """``50000baseSR2/Full`` → (50000, 2); ``25000baseSR/Full`` → (25000, 1);
    ``100000baseLR4_ER4/Full`` → (100000, 4); None for a name that is no such mode."""
    m = _MODE.match(name)
    return (int(m[1]), int(m[3] or 1)) if m else None


def parse_ethtool_modes(text: str) -> LinkModes:
    """Parse ``ethtool IF`` (link-mode lists continue on lines indented under the first). Raises
    ParseError without a ``Settings for IF:`` line."""
    if not re.search(r"^\s*Settings for \S+:\s*$", text, re.M):
        raise ParseError("ethtool", 1, "'Settings for IF:'", text.strip().splitlines()[0][:80] if text.strip() else "")
    lm = LinkModes()
    cur: list[str] | None = None
    for raw in text.splitlines():
        m = re.match(r"^\s*([A-Za-z][A-Za-z -]*?):\s*(.*?)\s*$", raw)
        if m and not raw.startswith(" " * 20) and not raw.startswith("\t" + " " * 20):
            key, val = m[1], m[2]
            cur = None
            if key in ("Supported link modes", "Advertised link modes"):
                cur = lm.supported if key.startswith("Supported") else lm.advertised
                cur.extend(v for v in val.split() if "/" in v)
            elif key == "Auto-negotiation":
                lm.autoneg = val.lower() == "on"
            elif key == "Speed":
                ms = re.match(r"^(\d+)Mb/s$", val)
                lm.speed_mbps = int(ms[1]) if ms else None
            elif key == "Lanes" and val.isdigit():
                lm.lanes = int(val)
            elif key == "Link detected":
                lm.link = val.lower().startswith("yes")
        elif cur is not None:
            cur.extend(v for v in raw.split() if "/" in v)
    return lm


def set_argv(netdev: str, speed_mbps: int, lanes: int) -> list[str]:
    return ["ethtool", "-s", netdev, "speed", str(int(speed_mbps)), "lanes", str(int(lanes)), "autoneg", "off"]


def wanted_mode(nic) -> tuple[int, int] | None:
    """(speed Mb/s, lanes) of each sub-port of inventory NIC ``nic``: the breakout's per-sub-port
    speed, on the card's SerDes lanes / sub-ports (:data:`mfctl.provision.breakout.CARDS`); None when
    the breakout or the card is unknown (the inventory check refuses those)."""
    try:
        b = breakout.parse(nic.breakout)
    except ValueError:
        return None
    card = breakout.CARDS.get(nic.model) or breakout.CARDS.get(nic.model.split(" (")[0])  # an OEM variant: the card's
    if card is None or b.ports > card.serdes_lanes:
        return None
    return int(round(b.speed_gbps * 1000)), card.serdes_lanes // b.ports


def read_speed(pool, inv_host, act) -> dict[str, LinkModes | str]:
    """``{netdev: LinkModes}`` per lane's netdev, or the error text for a port ethtool could not read."""
    out: dict[str, LinkModes | str] = {}
    for nd in host_netdevs(inv_host, act):
        r = pool.run(inv_host.name, ["ethtool", nd])
        if r.error:
            from mfctl.errors import MfctlError

            raise MfctlError(f"{inv_host.name}: ethtool {nd}: {r.error}")
        try:
            out[nd] = parse_ethtool_modes(r.stdout) if r.ok else (r.stderr or r.stdout).strip()[:200]
        except ParseError as e:
            out[nd] = str(e)
    return out


def plan_speed(ctx: PlanContext) -> list[Action]:
    if not ctx.spec.link.force:
        return []
    more = ctx.act.more.get(MORE_KEY, {})
    acts = []
    for lp in lane_ports(ctx):
        if lp.fresh:  # a re-split port: planned after its reset
            continue
        want = wanted_mode(lp.nic)
        if want is None:  # a card the breakout table does not know: its lanes per sub-port are unknown
            acts.append(Action("links", lp.netdev, "link mode", f"model {lp.nic.model!r}: lanes per sub-port unknown",
                               "left as it is (link.force needs the card in mfctl.provision.breakout.CARDS)", [],
                               outcome=OUTCOME_UNSUPPORTED))
            continue
        speed, lanes = want
        lm = more.get(lp.netdev)
        if isinstance(lm, str) or lm is None:
            acts.append(Action("links", lp.netdev, "link mode", f"unreadable ({lm or 'not read'})",
                               f"{speed} Mb/s on {lanes} lane(s)", [], manual=f"ethtool {lp.netdev} could not be read: {lm}"))
            continue
        supported = {mode_of(m) for m in lm.supported}
        if want not in supported:
            listed = ", ".join(lm.supported) or "none"
            acts.append(Action("links", lp.netdev, "link mode", f"supported: {listed}", f"{speed} Mb/s on {lanes} lane(s)",
                               [], manual=f"{lp.nic.name} breakout {lp.nic.breakout} needs {speed} Mb/s on {lanes} "
                                          f"lane(s) per sub-port, which {lp.netdev} does not support ({listed})"))
            continue
        adv = {mode_of(m) for m in lm.advertised}
        forced = lm.autoneg is False and adv == {want}
        running_other = lm.link and lm.speed_mbps is not None and (lm.speed_mbps, lm.lanes or lanes) != want
        if not forced or running_other:
            now = (f"autoneg {'on' if lm.autoneg else 'off' if lm.autoneg is False else '?'}, advertised "
                   f"{' '.join(lm.advertised) or 'none'}"
                   + (f", up at {lm.speed_mbps} Mb/s on {lm.lanes} lane(s)" if lm.link and lm.speed_mbps else ""))
            acts.append(Action("links", lp.netdev, "link mode", now, f"{speed} Mb/s on {lanes} lane(s), autoneg off",
                               [set_argv(lp.netdev, speed, lanes)]))
    return acts
