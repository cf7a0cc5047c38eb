"""Every tool parser of :mod:`mfctl.hosts`, by kind name: what ``mfctl parse`` runs, what the
fuzz test iterates and what ``docs/parsers.md`` lists.

An entry (:class:`Kind`) names the parser function (``"module:function"``, imported only when
used), a one-line description, the tool versions its samples cover, a detector (how to
recognise the text: :func:`score` picks the kind with the highest score for ``mfctl parse``
without a kind) and the sample files (globs from the repository root: the fuzz corpus).

Adding a parser is adding one :class:`Kind` to :data:`KINDS` (see ``/tmp/h/parse-registry.md``
and ``docs/parsers.md``)::

    Kind("nccl-debug", "mfctl.hosts.nccl_log:parse_debug", "NCCL_DEBUG=INFO/WARN log lines",
         "NCCL 2.7-2.21", rx(r"NCCL INFO|NCCL WARN", 60), ("tests/data/nccl-tests/nccl-debug-*.txt",)),

Input normalisation (BOM, CRLF, NUL, non-UTF-8 bytes) happens once in :func:`parse`, through
:func:`mfctl.hosts.textin.clean`, whichever parser runs.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from mfctl.errors import ParseError
from mfctl.hosts.textin import clean

Detector = Callable[[str], int]


def rx(pattern: str, score: int, flags: int = re.M) -> Detector:
    """A detector: ``score`` when ``pattern`` is found in the text (``re.M``: ``^`` is a line start)."""
    c = re.compile(pattern, flags)

    def detect(text: str) -> int:
        return score if c.search(text) else 0

    detect.__doc__ = f"{score} when /{pattern}/ matches"
    return detect


def every(*detectors: Detector) -> Detector:
    """A detector: the lowest score of ``detectors`` (all must match)."""
    return lambda text: min(d(text) for d in detectors)


def best(*detectors: Detector) -> Detector:
    """A detector: the highest score of ``detectors`` (any may match)."""
    return lambda text: max(d(text) for d in detectors)


@dataclass(frozen=True)
class Kind:
    """One parser. ``name``: the kind name (``mfctl parse NAME``); ``parser``: ``"module:function"``
    taking the text (plus ``options`` as keywords); ``samples``: globs of sample files (repository
    root relative; the golden folder ``tests/golden/NAME/*/output.txt`` is added when it exists)."""

    name: str
    parser: str
    description: str
    versions: str
    detect: Detector
    samples: tuple[str, ...] = ()
    command: str = ""  #: the command whose output this is, as an operator would run it
    options: tuple[str, ...] = ()  #: keyword options the parser takes (``fields`` for a CSV without header)
    owner: str = field(default="", compare=False)  #: who maintains it (informational)

    def function(self) -> Callable[..., Any]:
        module, _, attr = self.parser.partition(":")
        return getattr(importlib.import_module(module), attr)

    @property
    def golden(self) -> str:
        return f"tests/golden/{self.name}/*/output.txt"


_CSV_HEAD = r"^\s*[A-Za-z_][A-Za-z0-9_.]*(?: \[[^\]\n]+\])?(?:, ?[A-Za-z_][A-Za-z0-9_.]*(?: \[[^\]\n]+\])?)+\s*$"

KINDS: list[Kind] = [
    # --- nvidia-smi ---------------------------------------------------------------------
    Kind("nvidia-smi", "mfctl.hosts.nvidia_smi:parse_table",
         "nvidia-smi (no options): the GPU table, MIG devices, processes, ERR! fields, unreachable GPUs",
         "R384.90, R450.80, R525.85/125, R535, R550.90, R580.126 (79-, 87- and 89-column layouts)",
         best(rx(r"^\|\s*NVIDIA-SMI \S+\s+Driver Version:", 95),
              rx(r"^\|\s*\d+\s+.+?\s+(?:On|Off|N/A)\s*\|\s*[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d", 85),
              rx(r"^\|\s*(?:Processes|MIG devices):\s*\|", 80), rx(r"^No devices were found\s*$", 50),
              rx(r"Unable to determine the device handle for GPU", 35)),
         ("tests/data/nvidia-smi/*default-table*.txt", "tests/data/nvidia-smi/*mig-devices*.txt",
          "tests/data/nvidia-smi/processes-*.txt", "tests/data/nvidia-smi/unreachable-*.txt"), "nvidia-smi"),
    Kind("nvidia-smi-query-gpu", "mfctl.hosts.nvidia_smi:parse_query_csv",
         "nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]: one dict per GPU",
         "nvidia-smi R450+ (samples: 590.48.01); header with units, or no header given --fields",
         every(rx(_CSV_HEAD, 70), rx(r"\b(?:index|name|pci\.bus_id|uuid|temperature\.gpu|power\.draw|memory\.\w+)\b", 70)),
         ("tests/data/nvidia-smi/*query-gpu*.txt",), "nvidia-smi --query-gpu=FIELDS --format=csv", ("fields",)),
    Kind("nvidia-smi-q", "mfctl.hosts.nvidia_smi:parse_query_text",
         "nvidia-smi -q (text): per GPU temperature, power, persistence, MIG, ECC, remapped rows",
         "nvidia-smi 535.129.03, 535.161.08, 590.48.01",
         rx(r"^=+\s*NVSMI LOG\s*=+\s*$|^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d\s*$", 90),
         ("tests/data/nvidia-smi/*-q-[!x]*.txt",), "nvidia-smi -q"),
    Kind("nvidia-smi-q-x", "mfctl.hosts.nvidia_smi:parse_query_xml",
         "nvidia-smi -q -x (XML, DTD v11 and v12): the same fields as nvidia-smi-q",
         "nvidia-smi 515.105.01 (nvsmi_device_v11), 535.54.03 (v12)",
         rx(r"<nvidia_smi_log\b|<!DOCTYPE nvidia_smi_log", 95), ("tests/data/nvidia-smi/*q-x*.xml.txt",),
         "nvidia-smi -q -x"),
    Kind("nvidia-smi-nvlink-s", "mfctl.hosts.nvidia_smi:parse_nvlink_status",
         "nvidia-smi nvlink -s: per GPU, per link speed in GB/s (inactive links None)",
         "nvidia-smi 590.48.01 and fabric-manager era A100 drivers",
         best(every(rx(r"^GPU \d+: .+\(UUID: ", 80), rx(r"^\s*Link \d+: ", 80)),
              rx(r"Nvlink queries are not supported", 80)),
         ("tests/data/nvidia-smi/*nvlink*.txt",), "nvidia-smi nvlink -s"),
    Kind("nvidia-smi-topo-m", "mfctl.hosts.nvidia_smi:parse_topo",
         "nvidia-smi topo -m: the GPU/NIC connection matrix and CPU/NUMA affinity",
         "nvidia-smi 590.48.01 (ANSI header), R5xx with GPU NUMA ID; tab separated or pasted with spaces",
         rx(r"^\s*(?:\x1b\[[0-9;]*m)?\s*GPU0\b.*Affinity", 90), ("tests/data/nvidia-smi/*topo*.txt",),
         "nvidia-smi topo -m"),
    Kind("nvidia-smi-unreachable", "mfctl.hosts.nvidia_smi:unreachable_gpus",
         "the 'Unable to determine the device handle for GPU …' lines of any nvidia-smi output",
         "any driver (wording from NVIDIA/open-gpu-kernel-modules#387)",
         rx(r"Unable to determine the device handle for GPU", 30),
         ("tests/data/nvidia-smi/unreachable-*.txt", "tests/data/nvidia-smi/*unreachable*.txt"), "nvidia-smi"),
    # --- iproute2 / devlink ---------------------------------------------------------------
    Kind("ip-j-link", "mfctl.hosts.iproute:parse_links", "ip -j link show: links with operstate, MTU, carrier",
         "iproute2 JSON (4.14+)", rx(r'^\s*\[\s*\{.*"ifname"', 70, re.S),
         ("tests/data/seeds/ip-j-addr-*.txt",), "ip -j link show"),
    Kind("ip-j-addr", "mfctl.hosts.iproute:parse_addrs", "ip -j addr show: links with their addresses",
         "iproute2 JSON (4.14+)", rx(r'^\s*\[\s*\{.*"ifname".*"addr_info"', 80, re.S),
         ("tests/data/seeds/ip-j-addr-*.txt",), "ip -j addr show"),
    Kind("ip-j-rule", "mfctl.hosts.rails:parse_rules", "ip -j rule show: (priority, source, table) per rule",
         "iproute2 JSON (4.14+)", rx(r'^\s*\[\s*\{\s*"priority"\s*:.*"table"', 75, re.S),
         ("tests/data/seeds/ip-j-rule-*.txt",), "ip -j rule show"),
    Kind("ip-j-route", "mfctl.hosts.rails:parse_routes", "ip -j route show table all: routes with their table",
         "iproute2 JSON (4.14+)", rx(r'^\s*\[\s*\{\s*"(?:type"\s*:\s*"\w+"\s*,\s*")?dst"\s*:', 75, re.S),
         ("tests/data/seeds/ip-j-route-*.txt",),
         "ip -j route show table all"),
    Kind("devlink-port", "mfctl.hosts.mellanox:parse_devlink_ports",
         "devlink -j port show: ports by netdev with flavour, lanes, split group",
         "iproute2 devlink JSON (5.x+)", rx(r'^\s*\{\s*"port"\s*:\s*\{', 80),
         ("tests/data/seeds/devlink-j-*.txt",), "devlink -j port show"),
    Kind("devlink-port-text", "mfctl.hosts.devlink:parse_port_show",
         "devlink port show (plain text): ports by netdev with flavour, port, lanes, PF/VF numbers, nested blocks",
         "iproute2 devlink 5.x-6.x text (sample: ice in switchdev with 4 VFs, 2024)",
         rx(r"^[^\s/]+/[^\s/]+/\d+: (?:type \w+ )?(?:netdev \S+ )?flavour \w+", 85),
         ("tests/data/devlink/*.txt",), "devlink port show"),
    # --- RDMA -------------------------------------------------------------------------------
    Kind("ibstat", "mfctl.hosts.rdma:parse_ibstat", "ibstat: CA blocks, port state, rate, link layer, firmware",
         "infiniband-diags (rdma-core 2x-5x), ConnectX-4..7", rx(r"^CA '[^']+'\s*$", 90),
         ("tests/data/mellanox/ibstat-*.txt",), "ibstat"),
    Kind("ibstatus", "mfctl.hosts.rdma:parse_ibstatus", "ibstatus: per device port state and rate",
         "infiniband-diags ibstatus script", rx(r"^Infiniband device '[^']+' port \d+ status:", 90),
         ("tests/data/mellanox/ibstatus-*.txt",), "ibstatus"),
    Kind("ibdev2netdev", "mfctl.hosts.rdma:parse_ibdev2netdev", "ibdev2netdev: RDMA device port → netdev (Up/Down)",
         "MLNX_OFED / DOCA OFED ibdev2netdev", rx(r"^\S+ port \d+ ==> \S+", 90),
         ("tests/data/mellanox/ibdev2netdev-*.txt",), "ibdev2netdev"),
    Kind("show_gids", "mfctl.hosts.rdma:parse_show_gids", "show_gids: GID table (index, GID, IPv4, RoCE v1/v2, netdev)",
         "MLNX_OFED show_gids", rx(r"^DEV\s+PORT\s+INDEX\s+GID|^\S+\s+\d+\s+\d+\s+[0-9a-f]{4}(?::[0-9a-f]{4}){7}\s", 90),
         ("tests/data/mellanox/show_gids-*.txt",), "show_gids"),
    Kind("ibv_devinfo", "mfctl.hosts.rdma:parse_ibv_devinfo", "ibv_devinfo: HCAs, firmware, port state and link layer",
         "rdma-core ibv_devinfo (ConnectX-4 Lx..7 fw 14.25-28.39, Azure-renamed devices; tabs or pasted spaces)",
         rx(r"^\s*hca_id:\s*\S+", 90), ("tests/data/rdma/ibv_devinfo-*.txt",), "ibv_devinfo"),
    # --- Mellanox / NVIDIA networking tools ---------------------------------------------------
    Kind("mlxconfig", "mfctl.hosts.mellanox:parse_mlxconfig", "mlxconfig [-e] q / set: parameters per column, pending",
         "MFT 4.x mlxconfig (ConnectX-6 VPI, ConnectX-7 OSFP)",
         every(rx(r"^\s*Device #\d+:", 90), rx(r"^\s*Configurations:", 90)),
         ("tests/data/mellanox/mlxconfig-*.txt",), "mlxconfig -d PCI -e q"),
    Kind("mlxfwmanager", "mfctl.hosts.mellanox:parse_mlxfwmanager",
         "mlxfwmanager --query: per device PSID, PCI, FW current/available, status",
         "MFT 4.x (Spectrum switch sample)",
         best(rx(r"^Querying Mellanox devices firmware", 90), every(rx(r"^\s*Device #\d+:", 85), rx(r"^\s*PSID:", 85))),
         ("tests/data/mellanox/mlxfwmanager-*.txt",), "mlxfwmanager --query"),
    Kind("mlxfwreset-query", "mfctl.hosts.mellanox:parse_mlxfwreset_query",
         "mlxfwreset -d PCI query: the reset levels and which are supported", "mstflint / MFT mlxfwreset",
         rx(r"^\s*Reset-levels:", 90), ("tests/data/seeds/mlxfwreset-*.txt",), "mlxfwreset -d PCI query"),
    Kind("mlxlink", "mfctl.hosts.mellanox:parse_mlxlink", "mlxlink -d DEV: the Operational Info block",
         "MFT mlxlink (old text layout)", rx(r"^\s*Operational Info\s*$", 85),
         ("tests/data/mellanox/mlxlink-*.txt",), "mlxlink -d DEVICE"),
    Kind("mlnx_qos", "mfctl.hosts.mellanox:parse_mlnx_qos", "mlnx_qos -i IF: trust state and PFC enabled row",
         "MLNX_OFED mlnx_qos", rx(r"^\s*Priority trust (?:state|mode):", 70),
         ("tests/data/seeds/mlnx_qos-*.txt",), "mlnx_qos -i NETDEV"),
    Kind("mlnx_qos-full", "mfctl.hosts.roce:parse_mlnx_qos",
         "mlnx_qos -i IF in full: trust, dscp2prio, PFC, ETS bandwidth and priority → TC",
         "MLNX_OFED mlnx_qos", every(rx(r"^\s*Priority trust (?:state|mode):", 75), rx(r"^\s*tc:\s*\d", 75)),
         ("tests/golden/mlnx_qos/*/output.txt",), "mlnx_qos -i NETDEV"),
    # --- ethtool ------------------------------------------------------------------------------
    Kind("ethtool", "mfctl.hosts.ethtool:parse_link", "ethtool IF: speed, duplex, link detected",
         "ethtool 4.x-6.x (ConnectX-4 sample)", rx(r"^Settings for \S+:", 90),
         ("tests/data/ethtool/link-*.txt",), "ethtool NETDEV"),
    Kind("ethtool-m", "mfctl.hosts.ethtool:parse_module", "ethtool -m IF: module identity and DOM readings",
         "ethtool 5.x-6.x, SFF-8636 QSFP28 and CMIS 4.0 QSFP-DD",
         rx(r"^\s*Identifier\s*:.*\(|^\s*(?:Laser output power|Receiver signal|Rx power|Module temperature)\b", 85),
         ("tests/data/ethtool/m-*.txt",), "ethtool -m NETDEV"),
    Kind("ethtool-S", "mfctl.hosts.ethtool:parse_stats", "ethtool -S IF: NIC counters (mlx5 prio counters)",
         "ethtool, mlx5_core (firmware 14.23, kernel 4.15)",
         best(rx(r"^NIC statistics:", 90), rx(r"^\s*(?:rx|tx)_[a-z0-9_]+:\s*\d+\s*$", 50)),
         ("tests/data/ethtool/S-*.txt",), "ethtool -S NETDEV"),
    Kind("ethtool-fec", "mfctl.hosts.roce:parse_fec", "ethtool --show-fec IF: configured and active FEC",
         "ethtool 5.x-6.x (ioctl and netlink wording)", rx(r"^\s*(?:Supported/)?Configured FEC encodings:", 90),
         ("tests/data/seeds/ethtool-show-fec-*.txt",),
         "ethtool --show-fec NETDEV"),
    # --- DCGM ---------------------------------------------------------------------------------
    Kind("dcgm-exporter", "mfctl.hosts.dcgm:parse_exporter", "dcgm-exporter metrics text (blank sentinels → None)",
         "dcgm-exporter 2.x-3.x", rx(r"^DCGM_FI_\w+\{", 90), ("tests/data/dcgm/exporter-*.txt",),
         "curl -s http://localhost:9400/metrics"),
    Kind("dcgmi-diag", "mfctl.hosts.dcgmi:parse_diag", "dcgmi diag -r N: per test (and per GPU) results",
         "DCGM 3.3.1 (\"Pass - GPU: 1\" rows, Warning/Info rows), 3.3.3 (one row per test), 4.2.3 (per-GPU rows)",
         rx(r"^\s*[|+]-+\s*Diagnostic\s*[|+]|^\s*\|\s*Diagnostic\s*\|\s*Result\s*\||"
            r"^\+-+\s+(?:Metadata|Deployment|Integration|Hardware|Stress)\s+-+\+", 85),
         ("tests/data/dcgm/*diag*.txt",), "dcgmi diag -r LEVEL"),
    Kind("dcgmi-discovery", "mfctl.hosts.dcgmi:parse_discovery", "dcgmi discovery -l: GPU ids, names, PCI bus ids, UUIDs",
         "DCGM 3.x", rx(r"^\s*\|\s*GPU ID\s*\|\s*Device Information\s*\|", 85),
         ("tests/data/dcgm/discovery*.txt",), "dcgmi discovery -l"),
    # --- NCCL, training, GEMM ---------------------------------------------------------------------
    Kind("nccl-tests", "mfctl.hosts.nccl_tests:parse_perf", "nccl-tests *_perf result tables (busbw per size)",
         "nccl-tests 2.x old and new columns; srun/mpirun prefixes",
         rx(r"#\s+size\s+count\s+type|out-of-place\s+in-place|#\s*Avg bus bandwidth|^\S*?#\s*nThread \d+ nGpus \d+", 85),
         ("tests/data/nccl-tests/*.txt",), "all_reduce_perf -b 1K -e 256M -f 2 -g 8"),
    Kind("nccl-debug", "mfctl.hosts.nccl_log:parse_debug",
         "NCCL_DEBUG=INFO/WARN logs: init (version, plugin, network, IB/RoCE devices, GID index, ranks), NET/IB "
         "async events, QP completion errors (status=12 retry exceeded …), timeouts, per host/process/GPU",
         "NCCL 2.4 (2019 wording), 2.10.3, 2.18-2.2x (status=/localGid wording); PyTorch ProcessGroupNCCL watchdog",
         best(rx(r"[\w.\-]+:\d+:\d+ \[\d+\] (?:\S+:\d+ )?NCCL (?:INFO|WARN)", 60),
              rx(r"Watchdog caught collective operation timeout", 60)),
         ("tests/data/nccl-debug/*.txt", "tests/data/nccl-tests/nccl-debug-*.txt"),
         "NCCL_DEBUG=INFO all_reduce_perf … (or any NCCL program)"),
    Kind("train-log", "mfctl.hosts.trainlog:parse_train_log", "Megatron / DeepSpeed training log iteration lines",
         "Megatron-LM / Megatron-Core (2022-2024), Megatron-DeepSpeed (TFLOPs:), Megatron-LLM; DeepSpeed 0.7+ "
         "step and OVERFLOW lines",
         best(rx(r"iteration\s+\d+\s*/\s*\d+\s*\|", 85), rx(r"\[Rank \d+\] step=\d+, skipped=\d+", 80),
              rx(r"\[(?:deepspeed|deepscale)\] OVERFLOW! Rank \d+ Skipping step", 75)),
         ("tests/data/train-logs/*.txt",), "a Megatron / DeepSpeed training log"),
    Kind("gemm-bench", "mfctl.hosts.gemm:parse_gemm", "mfctl-gemm-bench: M N K time_us TFLOP/s per shape",
         "mfctl's own tool", rx(r"\A(?:\s*\d+ \d+ \d+ \d+(?:\.\d+)? \S+\s*\n?)+\Z", 40, 0),
         ("tests/data/seeds/gemm-bench-*.txt",), "mfctl-gemm-bench"),
    # --- kernel, PCIe, services, routing sysctls ----------------------------------------------------
    Kind("dmesg-xid", "mfctl.hosts.dmesg:parse_xids", "kernel log NVRM Xid lines (XID, PCI address, time stamp)",
         "NVIDIA kernel module 4xx-5xx wording", rx(r"NVRM: Xid \(PCI:", 80),
         ("tests/data/seeds/dmesg-*.txt",), "dmesg --level=err,warn"),
    Kind("uptime", "mfctl.hosts.dmesg:parse_uptime", "/proc/uptime: seconds since boot",
         "Linux /proc/uptime", rx(r"\A\s*\d+(?:\.\d+)? \d+(?:\.\d+)?\s*\Z", 40, 0),
         ("tests/data/seeds/proc-uptime*.txt",), "cat /proc/uptime"),
    Kind("lsmod", "mfctl.hosts.gpudirect:parse_lsmod", "lsmod: the loaded module names",
         "kmod lsmod", rx(r"\A\s*Module\s+Size\s+Used by", 95, 0), ("tests/data/seeds/lsmod-*.txt",), "lsmod"),
    Kind("lspci", "mfctl.hosts.gpudirect:parse_lspci", "lspci -D -vvv: ACS control and MaxReadReq per device",
         "pciutils 3.x", rx(r"\A[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7] ", 80, 0),
         ("tests/data/seeds/lspci-*.txt",), "lspci -D -vvv"),
    Kind("systemctl-show", "mfctl.hosts.gpudirect:parse_unit", "systemctl show -p ActiveState,UnitFileState UNIT",
         "systemd 2xx", rx(r"^ActiveState=", 85),
         ("tests/data/seeds/systemctl-show-*.txt",), "systemctl show -p ActiveState,UnitFileState UNIT"),
    Kind("sysfs-grep", "mfctl.hosts.roce:parse_grep", "grep -Hs . PATH…: sysfs/procfs file values by path",
         "GNU grep -H", rx(r"\A(?:/(?:sys|proc)/[^:\n]+:[^\n]*\n?)+\Z", 60, 0),
         ("tests/data/seeds/sysfs-grep-*.txt",), "grep -Hs . /sys/class/net/IF/ecn/…"),
]

BY_NAME: dict[str, Kind] = {k.name: k for k in KINDS}


def names() -> list[str]:
    return [k.name for k in KINDS]


def get(name: str) -> Kind:
    """The kind ``name``; KeyError naming the known kinds when there is none."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"no parser kind {name!r}; one of: {', '.join(names())}") from None


def score(text: str) -> list[tuple[int, str]]:
    """``(score, kind)`` for every kind whose detector matches ``text``, best first (ties: the
    order of :data:`KINDS`). A detector that fails counts as no match."""
    text = clean(text)
    out = []
    for i, k in enumerate(KINDS):
        try:
            s = k.detect(text)
        except Exception:  # noqa: BLE001 - a broken detector must not break recognition of the others
            s = 0
        if s > 0:
            out.append((s, -i, k.name))
    return [(s, n) for s, _, n in sorted(out, reverse=True)]


def detect(text: str) -> str | None:
    """The kind of ``text`` (the best :func:`score`), or None when no detector matches."""
    found = score(text)
    return found[0][1] if found else None


@dataclass
class Parsed:
    kind: str
    detected: bool  #: the kind was recognised from the text (not named by the caller)
    result: Any
    candidates: list[tuple[int, str]] = field(default_factory=list)  #: (score, kind) when detected


def parse(kind: str | None, text: str | bytes, **options: Any) -> Parsed:
    """Parse ``text`` (normalised by :func:`~mfctl.hosts.textin.clean`) with the parser ``kind``,
    or the kind :func:`detect` recognises. Raises ParseError from the parser, or naming the known
    kinds when ``kind`` is None and none is recognised; KeyError for an unknown ``kind``."""
    text = clean(text)
    cands: list[tuple[int, str]] = []
    detected = kind is None
    if kind is None:
        cands = score(text)
        if not cands:
            first = next((ln.strip() for ln in text.split("\n") if ln.strip()), "")
            raise ParseError("mfctl parse", 1 if first else None,
                             "the output of a known tool (name its kind: mfctl parse --list)", first)
        kind = cands[0][1]
    k = get(kind)
    extra = {o: v for o, v in options.items() if v is not None}
    bad = [o for o in extra if o not in k.options]
    if bad:
        raise TypeError(f"kind {k.name!r} takes no option {bad[0]!r}")
    return Parsed(k.name, detected, k.function()(text, **extra), cands)


def to_json(x: Any) -> Any:
    """A parser's result as JSON data: dataclasses field by field plus their public properties
    (``RdmaPort.active``, ``DiagResult.failed``), tuples and sets as lists (sets sorted), dict keys
    as strings, non-finite floats as None (JSON has no NaN). The same shape as the golden files."""
    import dataclasses
    import math

    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        out = {f.name: to_json(getattr(x, f.name)) for f in dataclasses.fields(x)}
        for name in dir(type(x)):
            if not name.startswith("_") and isinstance(getattr(type(x), name), property):
                try:
                    out[name] = to_json(getattr(x, name))
                except Exception:  # noqa: BLE001 - a derived fact that cannot be computed is unknown
                    out[name] = None
        return out
    if hasattr(x, "model_dump"):
        return x.model_dump(mode="json")
    if isinstance(x, dict):
        return {str(k): to_json(v) for k, v in x.items()}
    if isinstance(x, (set, frozenset)):
        return [to_json(v) for v in sorted(x, key=str)]
    if isinstance(x, (list, tuple)):
        return [to_json(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if x is None or isinstance(x, (str, bool, int, float)):
        return x
    return str(x)
