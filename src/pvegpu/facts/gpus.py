"""Strict parsers for what NVIDIA's tools print, shared by the verification facts.

Probes run ``nvidia-smi`` remotely and return its raw stdout, stderr and exit status inside their
JSON document; these functions turn that into data on the controller, so every odd shape real
nodes print is unit-tested here (tests/unit/test_verify_parsers.py):

- ``--format=csv,noheader,nounits`` rows, ``", "``-separated; a value the GPU or driver does not
  report is ``[N/A]`` (older drivers: ``N/A``), ``[Not Supported]``, ``[Insufficient
  Permissions]`` (e.g. per-process memory inside a container), ``[Unknown Error]`` or
  ``[GPU is lost]`` -> None;
- no GPUs: ``No devices were found`` (exit 6); no driver: ``NVIDIA-SMI has failed because it
  couldn't communicate with the NVIDIA driver ...`` (exit 9); userspace and kernel module of
  different versions: ``Failed to initialize NVML: Driver/library version mismatch`` (exit 18);
- no compute processes: empty output, exit 0.

>>> parse_gpu_rows("0, NVIDIA H200, GPU-5a1e, 143771, [N/A], 00000000:18:00.0, 580.95.05, 9.0",
...                ["index", "name", "uuid", "memory.total", "memory.free", "pci.bus_id",
...                 "driver_version", "compute_cap"])[0]["memory_free_mib"] is None
True
"""

from __future__ import annotations

import csv
import io
import re

from pyinfra.api.exceptions import FactProcessError

#: What nvidia-smi prints for a value it cannot give (with and without brackets).
NOT_AVAILABLE = re.compile(
    r"^\[?(N/A|Not Supported|Insufficient Permissions|Unknown Error|GPU is lost|Not Found|"
    r"Requires Persistence Mode|Unknown)\]?$",
    re.I,
)

#: The query the verification asks of nvidia-smi (node and container), in this order.
GPU_QUERY = [
    "index",
    "name",
    "uuid",
    "memory.total",
    "memory.free",
    "pci.bus_id",
    "driver_version",
    "compute_cap",
]
#: ``process_name`` is free text nvidia-smi prints unquoted (a comma in it is not escaped), so it
#: comes last and a row is split at most ``len(APP_QUERY) - 1`` times.
APP_QUERY = ["pid", "used_memory", "gpu_uuid", "process_name"]

_KEYS = {
    "index": "index",
    "name": "name",
    "uuid": "uuid",
    "gpu_uuid": "gpu_uuid",
    "memory.total": "memory_total_mib",
    "memory.free": "memory_free_mib",
    "memory.used": "memory_used_mib",
    "used_memory": "used_mib",
    "pci.bus_id": "pci_bus_id",
    "driver_version": "driver_version",
    "compute_cap": "compute_cap",
    "pid": "pid",
    "process_name": "name",
}
_INTS = {
    "index",
    "memory.total",
    "memory.free",
    "memory.used",
    "used_memory",
    "pid",
}


def smi_value(cell: str, field: str):
    """One CSV cell: None when nvidia-smi could not give it, an int for counters, else the text.

    >>> smi_value("[N/A]", "memory.total"), smi_value(" 143771 ", "memory.total")
    (None, 143771)
    >>> smi_value("143771 MiB", "memory.total")   # without nounits
    143771
    """
    cell = cell.strip()
    if not cell or NOT_AVAILABLE.match(cell):
        return None
    if field in _INTS:
        m = re.fullmatch(r"(\d+)(?:\s*MiB)?", cell)
        if not m:
            raise FactProcessError(f"nvidia-smi: {field}={cell!r} is not a number")
        return int(m.group(1))
    return cell


def _rows(text: str, fields: list[str]) -> list[dict]:
    rows = []
    for line_no, cells in enumerate(csv.reader(io.StringIO(text), skipinitialspace=True), 1):
        if not cells or all(not c.strip() for c in cells):
            continue
        if len(cells) != len(fields):
            raise FactProcessError(
                f"nvidia-smi: line {line_no} has {len(cells)} values, expected {len(fields)} "
                f"({','.join(fields)}): {','.join(cells)!r}"
            )
        rows.append(
            {_KEYS.get(f, f.replace(".", "_")): smi_value(c, f) for f, c in zip(fields, cells)}
        )
    return rows


def parse_gpu_rows(text: str, fields: list[str] = GPU_QUERY) -> list[dict]:
    """Rows of ``nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits``."""
    return _rows(text, fields)


def parse_app_rows(text: str, fields: list[str] = APP_QUERY) -> list[dict]:
    """Rows of ``nvidia-smi --query-compute-apps=<fields> --format=csv,noheader,nounits``.

    nvidia-smi does not quote ``process_name``: with it as the last field, everything after the
    other fields' commas is the name, commas included.

    >>> parse_app_rows("4242, [Insufficient Permissions], GPU-5a1e, python")
    [{'pid': 4242, 'used_mib': None, 'gpu_uuid': 'GPU-5a1e', 'name': 'python'}]
    >>> parse_app_rows("7, 10, GPU-5a1e, /opt/a,b/python")[0]["name"]
    '/opt/a,b/python'
    >>> parse_app_rows("")
    []
    """
    if "process_name" in fields[:-1]:
        raise ValueError("process_name must be the last field: nvidia-smi does not quote it")
    rows = []
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells = line.split(",", len(fields) - 1)
        if len(cells) != len(fields):
            raise FactProcessError(
                f"nvidia-smi: line {line_no} has {len(cells)} values, expected {len(fields)} "
                f"({','.join(fields)}): {line!r}"
            )
        rows.append(
            {_KEYS.get(f, f.replace(".", "_")): smi_value(c, f) for f, c in zip(fields, cells)}
        )
    return rows


def smi_error(rc: int | None, stdout: str, stderr: str) -> str | None:
    """Why an nvidia-smi call gave no data, as one line (None when it answered).

    >>> smi_error(6, "No devices were found\\n", "")
    'no GPUs found (nvidia-smi: No devices were found)'
    >>> smi_error(18, "Failed to initialize NVML: Driver/library version mismatch\\n", "")
    ... # doctest: +NORMALIZE_WHITESPACE
    'NVML driver/library version mismatch (nvidia-smi: Failed to initialize NVML: Driver/library
    version mismatch)'
    """
    if rc == 0:
        return None
    text = (stderr.strip() or stdout.strip()).splitlines()
    first = text[0].strip() if text else f"exit {rc}, no output"
    if rc is None or rc == 127 or "not found" in first.lower() and "nvidia-smi" in first:
        return "nvidia-smi is not installed"
    if "No devices were found" in first:
        return f"no GPUs found (nvidia-smi: {first})"
    if "version mismatch" in first:
        return f"NVML driver/library version mismatch (nvidia-smi: {first})"
    if "couldn't communicate with the NVIDIA driver" in first:
        return f"no NVIDIA driver reachable (nvidia-smi: {first})"
    return f"nvidia-smi failed (exit {rc}): {first}"


def parse_smi(raw: dict | None, kind: str = "gpus") -> dict:
    """A probe's raw nvidia-smi answer ``{"rc", "stdout", "stderr"}`` -> ``{"rows", "error"}``.

    A failed call is data (``error`` set, ``rows`` None); "no devices" is an empty list with the
    error kept, so callers can tell zero GPUs from an unreadable answer.

    >>> parse_smi({"rc": 6, "stdout": "No devices were found", "stderr": ""})["rows"]
    []
    >>> parse_smi(None)
    {'rows': None, 'error': 'nvidia-smi was not run'}
    """
    if raw is None:
        return {"rows": None, "error": "nvidia-smi was not run"}
    for key in ("rc", "stdout", "stderr"):
        if key not in raw:
            raise FactProcessError(f"nvidia-smi answer lacks {key!r}: {raw!r}")
    error = smi_error(raw["rc"], raw["stdout"], raw["stderr"])
    if error is None:
        rows = parse_gpu_rows(raw["stdout"]) if kind == "gpus" else parse_app_rows(raw["stdout"])
        return {"rows": rows, "error": None}
    if error.startswith("no GPUs found"):
        return {"rows": [], "error": error}
    return {"rows": None, "error": error}


def module_version(text: str | None) -> str | None:
    """The kernel module version in ``/proc/driver/nvidia/version``.

    >>> module_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 2025")
    '580.95.05'
    >>> module_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05"
    ...                "  Release Build")
    '580.95.05'
    """
    m = re.search(r"Kernel Module(?: for [^ ]+)?\s+(\d+(?:\.\d+)+)", text or "")
    return m.group(1) if m else None


def library_version(target: str | None, name: str = "libcuda") -> str | None:
    """The driver version in a resolved library name, e.g. ``libcuda.so.580.95.05``.

    >>> library_version("/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05")
    '580.95.05'
    >>> library_version("libcuda.so.1") is None
    True
    """
    if not target:
        return None
    m = re.search(rf"{re.escape(name)}\.so\.(\d+\.\d+(?:\.\d+)?)$", target.strip())
    return m.group(1) if m else None


def normalize_uuid(uuid: str | None) -> str | None:
    """torch prints a device UUID without nvidia-smi's ``GPU-`` prefix; compare them bare.

    >>> normalize_uuid("GPU-5a1e0000-5157") == normalize_uuid("5a1e0000-5157")
    True
    """
    if not uuid:
        return None
    uuid = uuid.strip().lower()
    return uuid[4:] if uuid.startswith("gpu-") else uuid
