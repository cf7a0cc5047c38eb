"""``mfctl inventory validate|show``"""

from __future__ import annotations

from pathlib import Path

import typer

from mfctl.cli.common import JSON_OPT, argument, emit_json, handle_errors, markup, out_console, print_error

app = typer.Typer(help="Validate and show testbed inventories.", no_args_is_help=True)

INV_ARG = argument("inventory", help="Inventory YAML file.")


def _ocs_kinds(inv) -> str:
    """The OCSes by model and size, alike ones counted (``32 x Polatis Series 7000 384x384``, not
    the same words 32 times)."""
    from collections import Counter

    kinds = Counter(f"{o.model} {o.size.inputs}x{o.size.outputs}" for o in inv.ocses)
    return " + ".join(k if n == 1 else f"{n} x {k}" for k, n in kinds.items())


def _facts(inv) -> dict:
    lanes = sum(len(h.ocs_lanes()) for h in inv.hosts)
    return {"name": inv.name, "hosts": len(inv.hosts), "gpus": sum(h.gpus.count for h in inv.hosts),
            "ocs_lanes": lanes, "ocs": _ocs_kinds(inv),
            "eps": inv.eps.model, "regions": {r.name: r.hosts for r in inv.regions}}


@app.command()
@handle_errors
def validate(path: Path = INV_ARG, json_out: bool = JSON_OPT):
    """Check an inventory: schema, unknown/duplicate keys, OCS ports, regions. Exit 3 if invalid."""
    from mfctl.inventory import load_inventory
    from mfctl.inventory.local import local_file_problems

    inv = load_inventory(path, cached=False)  # the file itself, every time (and the cache refreshed)
    facts = _facts(inv)
    notes = local_file_problems(inv)
    if json_out:
        emit_json({"schema": "mfctl.inventory.validate/v1", "valid": True, "path": str(path), **facts, "warnings": notes})
        return
    typer.echo(f"{path}: valid — {facts['hosts']} hosts, {facts['gpus']} GPUs, {facts['ocs_lanes']} optical lanes "
               f"on {facts['ocs']}, {len(inv.regions)} region(s)")
    for n in notes:
        print_error(n, "warning")


@app.command()
@handle_errors
def show(path: Path = INV_ARG, json_out: bool = JSON_OPT):
    """Show hosts, NICs, lanes and the OCS ports each optical lane lands on."""
    from rich import box
    from rich.table import Table

    from mfctl.inventory import load_inventory

    inv = load_inventory(path)
    if json_out:
        emit_json({"schema": "mfctl.inventory.show/v1", **inv.model_dump(mode="json", exclude={"source"})})
        return
    con = out_console()
    con.print(markup("[bold]{}[/] — {}", inv.name, inv.description))
    t = Table("host", "NIC", "model", "role", "NUMA", "lane", "netdev", "OCS tx→rx", title="hosts and lanes", box=box.SIMPLE_HEAD)
    for col in t.columns:
        col.no_wrap = True
    for h in inv.hosts:
        first = True
        for nic in h.nics:
            for lane in nic.lanes:
                t.add_row(h.name if first else "", nic.name, nic.model, nic.role,
                          str(nic.numa_node), f"{lane.index} {nic.breakout}", lane.netdev,
                          f"{lane.ocs_tx}→{lane.ocs_rx}" if lane.ocs_tx else "—")
                first = False
    con.print(t)
    for h in inv.hosts:
        con.print(f"{h.name}: ssh {h.ssh.user}@{h.ssh.address}:{h.ssh.port}, {h.gpus.count} x {h.gpus.model}", highlight=False)
    for o in inv.ocses:
        transports = ", ".join(f"{t.kind}:{getattr(t, 'device', None) or f'{t.address}:{t.port}'}" for t in o.transports)
        con.print(markup("OCS [bold]{}[/]: {}, {}x{}, via {}", o.name, o.model, o.size.inputs, o.size.outputs, transports))
    con.print(markup("EPS [bold]{}[/]: {}, {} x {:g}G", inv.eps.name, inv.eps.model, inv.eps.ports, inv.eps.port_speed_gbps))
    for r in inv.regions:
        o = inv.region_ocs(r)
        con.print(markup("region [bold]{}[/]: {}{}", r.name, ", ".join(r.hosts),
                         f" (OCS {o.name})" if len(inv.ocses) > 1 and o is not None else ""))
