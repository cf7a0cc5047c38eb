"""``mfctl ocs show`` — the OCS's cross-connects, named by host, NIC and lane."""

from __future__ import annotations

from pathlib import Path

import typer

from mfctl.cli.common import JSON_OPT, emit_json, handle_errors, out_console

app = typer.Typer(help="Inspect the optical circuit switch.", no_args_is_help=True)


@app.command()
@handle_errors
def show(inventory: Path = typer.Option(..., "--inventory", "-i", envvar="MFCTL_INVENTORY", help="Inventory YAML."),
         json_out: bool = JSON_OPT):
    """Read every cross-connect (RTRV-PATCH) and name both ends from the inventory."""
    from rich.table import Table

    from mfctl import settings
    from mfctl.fabric.mapping import circuits_from_cross_connects, region_lanes
    from mfctl.inventory import load_inventory
    from mfctl.ocs.driver import driver_from_inventory

    inv = load_inventory(inventory)
    lanes = region_lanes(inv, [h.name for h in inv.hosts])
    by_tx = {l.ocs_tx: l for ls in lanes.values() for l in ls}
    by_rx = {l.ocs_rx: l for ls in lanes.values() for l in ls}
    with driver_from_inventory(inv, connect_timeout=settings.get_float("connect_timeout"),
                               command_timeout=settings.get_float("command_timeout")) as drv:
        xc = drv.cross_connects()
        endpoint = drv.endpoint
    circuits = circuits_from_cross_connects(lanes, xc)
    rows = []
    for i, o in sorted(xc.items()):
        a, b = by_tx.get(i), by_rx.get(o)
        rows.append({"in": i, "out": o, "from": a.key if a else None, "to": b.key if b else None})
    if json_out:
        emit_json({"schema": "mfctl.ocs.show/v1", "ocs": inv.ocs.name, "endpoint": endpoint, "cross_connects": rows,
                   "circuits": [c.to_dict() for c in circuits]})
        return
    t = Table("in", "out", "from (TX lane)", "to (RX lane)", title=f"{inv.ocs.name} cross-connects via {endpoint}")
    for r in rows:
        t.add_row(str(r["in"]), str(r["out"]), r["from"] or "(not in inventory)", r["to"] or "(not in inventory)")
    con = out_console()
    con.print(t)
    con.print(f"{len(rows)} cross-connects, {len(circuits)} duplex circuits")
