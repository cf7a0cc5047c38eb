"""The parser registry (issue 19): one entry per parser, every entry importable, documented in
docs/parsers.md, recognised from its own samples."""

from __future__ import annotations

import inspect
import re

import pytest

from mfctl.errors import ParseError
from mfctl.hosts import registry
from support import DATA, GOLDEN, ROOT


def test_kind_names_are_unique_and_every_parser_imports():
    assert len(registry.names()) == len(set(registry.names()))
    for k in registry.KINDS:
        fn = k.function()
        assert callable(fn) and k.description and k.versions and k.command, k.name
        params = list(inspect.signature(fn).parameters)
        assert params[0] == "text" and all(o in params for o in k.options), k.name


def test_every_parser_function_of_mfctl_hosts_is_registered():
    registered = {k.parser for k in registry.KINDS}
    for path in sorted((ROOT / "mfctl" / "hosts").glob("*.py")):
        for name in re.findall(r"^def (parse_\w+)\(text", path.read_text(), re.M) + \
                re.findall(r"^def (unreachable_gpus)\(text", path.read_text(), re.M):
            assert f"mfctl.hosts.{path.stem}:{name}" in registered, f"{path.stem}.{name} is not in registry.KINDS"


def test_docs_list_every_kind():
    doc = (ROOT / "docs" / "parsers.md").read_text()
    rows = set(re.findall(r"^\| `([^`]+)` \|", doc, re.M))
    missing = [n for n in registry.names() if n not in rows]
    assert not missing, f"docs/parsers.md has no row for {missing}"


@pytest.mark.parametrize("path, kind", [
    (DATA / "nvidia-smi" / "h100x8-default-table-drv550.txt", "nvidia-smi"),
    (DATA / "nvidia-smi" / "v100-default-table-err-power-excerpt.txt", "nvidia-smi"),
    (DATA / "nvidia-smi" / "processes-gi-ci-drv535-excerpt.txt", "nvidia-smi"),
    (DATA / "nvidia-smi" / "h100-query-gpu-csv-load-drv590.txt", "nvidia-smi-query-gpu"),
    (DATA / "nvidia-smi" / "h100x8-q-drv535-161.txt", "nvidia-smi-q"),
    (DATA / "nvidia-smi" / "a10g-q-x-drv515.xml.txt", "nvidia-smi-q-x"),
    (DATA / "nvidia-smi" / "a100x8-nvlink-s-drv-fm.txt", "nvidia-smi-nvlink-s"),
    (DATA / "nvidia-smi" / "h100-topo-m-ansi-single-gpu-drv590.txt", "nvidia-smi-topo-m"),
    (GOLDEN / "ip-j-link" / "three-links" / "output.txt", "ip-j-link"),
    (DATA / "mellanox" / "ibstatus-a100-azure-8port-hdr.txt", "ibstatus"),
    (DATA / "mellanox" / "ibdev2netdev-cx6-ib-sriov-vfs-truncated.txt", "ibdev2netdev"),
    (DATA / "mellanox" / "show_gids-cx6-roce-v1-v2-ipv4.txt", "show_gids"),
    (GOLDEN / "ibv_devinfo" / "documented-format-two-hcas" / "output.txt", "ibv_devinfo"),
    (DATA / "mellanox" / "mlxconfig-set-cx6-vpi-reboot-required.txt", "mlxconfig"),
    (DATA / "mellanox" / "mlxfwmanager-query-spectrum-switch.txt", "mlxfwmanager"),
    (DATA / "mellanox" / "mlxlink-spectrum-25g-operational-truncated.txt", "mlxlink"),
    (DATA / "ethtool" / "link-cx4-40g-up.txt", "ethtool"),
    (DATA / "ethtool" / "m-sff8636-qsfp28-cwdm4-healthy.txt", "ethtool-m"),
    (DATA / "ethtool" / "S-mlx5-cx4lx-fw14.23-kernel4.15-stripped.txt", "ethtool-S"),
    (DATA / "dcgm" / "exporter-dgx-a100-nvlink-tx-zero.txt", "dcgm-exporter"),
    (DATA / "dcgm" / "a100-p4de-dcgmi-diag-r2-dcgm333.txt", "dcgmi-diag"),
    (DATA / "nccl-tests" / "h100-p5-allreduce-mpirun-tag-output.txt", "nccl-tests"),
    (DATA / "train-logs" / "megatron-core-moe-64e-top1-ep4-8gpu.txt", "train-log"),
])
def test_a_sample_is_recognised_as_its_kind(path, kind):
    assert registry.detect(path.read_bytes()) == kind
    parsed = registry.parse(None, path.read_bytes())
    assert (parsed.kind, parsed.detected, parsed.candidates[0]) == (kind, True, (parsed.candidates[0][0], kind))


def test_parse_by_name_options_and_unknown_text():
    assert registry.parse("nvidia-smi-query-gpu", "0, 45\n", fields=["index", "temperature.gpu"]).result == [
        {"index": 0, "temperature.gpu": 45}]
    with pytest.raises(TypeError):
        registry.parse("ibstat", "x", fields=["index"])
    with pytest.raises(KeyError, match="no parser kind 'nope'"):
        registry.parse("nope", "x")
    with pytest.raises(ParseError) as e:
        registry.parse(None, "\ufeff\r\nhello\r\n")
    assert (e.value.tool, e.value.line_no, e.value.got) == ("mfctl parse", 1, "hello")


def test_to_json_has_no_nan_and_sorts_sets():
    assert registry.to_json({"a": float("nan"), "b": {3, 1, 2}, 4: (1, float("inf"))}) == {
        "a": None, "b": [1, 2, 3], "4": [1, None]}
