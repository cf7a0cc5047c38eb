"""``mfctl inventory validate|show``"""

from __future__ import annotations

from pathlib import Path

import typer

from mfctl.cli.common import JSON_OPT, argument, emit_json, handle_errors, markup, out_console, print_error

app = typer.Typer(help="Validate and show testbed inventories.", no_args_is_help=True)

INV_ARG = argument("inventory", help="Inventory YAML file.")


def _facts(inv) -> dict:
    lanes = sum(len(h.ocs_lanes()) for h in inv.hosts)
    return {"name": inv.name, "hosts": len(inv.hosts), "gpus": sum(h.gpus.count for h in inv.hosts),
            "ocs_lanes": lanes, "ocs": f"{inv.ocs.model} {inv.ocs.size.inputs}x{inv.ocs.size.outputs}",
            "eps": inv.eps.model, "regions": {r.name: r.hosts for r in inv.regions}}


@app.command()
@handle_errors
def validate(path: Path = INV_ARG, json_out: bool = JSON_OPT):
    """Check an inventory: schema, unknown/duplicate keys, OCS ports, regions. Exit 3 if invalid."""
    from mfctl.inventory import load_inventory

    inv = load_inventory(path, cached=False)  # the file itself, every time (and the cache refreshed)
    facts = _facts(inv)
    notes = _local_files(inv)
    if json_out:
        emit_json({"schema": "mfctl.inventory.validate/v1", "valid": True, "path": str(path), **facts, "warnings": notes})
        return
    typer.echo(f"{path}: valid — {facts['hosts']} hosts, {facts['gpus']} GPUs, {facts['ocs_lanes']} optical lanes "
               f"on {facts['ocs']}, {len(inv.regions)} region(s)")
    for n in notes:
        print_error(n, "warning")


def _local_files(inv) -> list[str]:
    """Warnings about the files this machine needs to reach the testbed: the known_hosts file and
    each SSH key file (missing, unreadable, not a private key). Not errors: an inventory may be
    validated away from the machine that runs it."""
    from mfctl.transport.libssh2 import key_file_problem
    from mfctl.transport.ssh import targets_from_inventory

    out, seen = [], set()
    for t in targets_from_inventory(inv):
        kh = Path(t.known_hosts).expanduser()
        if str(kh) not in seen:
            seen.add(str(kh))
            if not kh.is_file():
                out.append(f"known_hosts {kh} does not exist (strict host-key checking will refuse every host)")
        if t.key_file and t.key_file not in seen:
            seen.add(t.key_file)
            problem = key_file_problem(t.key_file)
            if problem:
                out.append(f"{problem} ({t.name})")
    return out


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
    transports = ", ".join(f"{t.kind}:{getattr(t, 'device', None) or f'{t.address}:{t.port}'}" for t in inv.ocs.transports)
    con.print(markup("OCS [bold]{}[/]: {}, {}x{}, via {}", inv.ocs.name, inv.ocs.model, inv.ocs.size.inputs,
                     inv.ocs.size.outputs, transports))
    con.print(markup("EPS [bold]{}[/]: {}, {} x {:g}G", inv.eps.name, inv.eps.model, inv.eps.ports, inv.eps.port_speed_gbps))
    for r in inv.regions:
        con.print(markup("region [bold]{}[/]: {}", r.name, ", ".join(r.hosts)))
