"""Fact parsers of the verification, on the output shapes real nodes print (nvidia-smi CSV with
[N/A] and friends, no GPUs, no driver, NVML mismatch, old drivers without compute_cap)."""

import pytest
from pyinfra.api.exceptions import FactProcessError

from pvegpu.facts.gpus import (
    GPU_QUERY,
    library_version,
    module_version,
    normalize_uuid,
    parse_app_rows,
    parse_gpu_rows,
    parse_smi,
    smi_error,
)
from pvegpu.facts.verification import shape

# nvidia-smi --query-gpu=index,name,uuid,memory.total,memory.free,pci.bus_id,driver_version,
# compute_cap --format=csv,noheader,nounits on an 8x H200 node (580 driver).
H200 = (
    "\n".join(
        f"{i}, NVIDIA H200, GPU-5a1e{i}{i}{i}{i}-5157-4e4f-9d1a-0c0ffee0000{i}, 143771, 143156, "
        f"00000000:{bus}:00.0, 580.95.05, 9.0"
        for i, bus in enumerate(["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"])
    )
    + "\n"
)


def test_eight_h200_rows():
    rows = parse_gpu_rows(H200)
    assert len(rows) == 8
    assert rows[3] == {
        "index": 3,
        "name": "NVIDIA H200",
        "uuid": "GPU-5a1e3333-5157-4e4f-9d1a-0c0ffee00003",
        "memory_total_mib": 143771,
        "memory_free_mib": 143156,
        "pci_bus_id": "00000000:5D:00.0",
        "driver_version": "580.95.05",
        "compute_cap": "9.0",
    }


@pytest.mark.parametrize(
    "cell",
    [
        "[N/A]",
        "N/A",
        "[Not Supported]",
        "[Insufficient Permissions]",
        "[Unknown Error]",
        "[GPU is lost]",
        "",
    ],
)
def test_unavailable_values_are_none(cell):
    line = f"0, NVIDIA H100 80GB HBM3, GPU-1, 81559, {cell}, 00000000:18:00.0, 570.86.10, {cell}"
    row = parse_gpu_rows(line)[0]
    assert row["memory_free_mib"] is None and row["compute_cap"] is None
    assert row["memory_total_mib"] == 81559


def test_units_without_nounits_still_parse():
    row = parse_gpu_rows(
        "0, NVIDIA H200, GPU-1, 143771 MiB, 100 MiB, 00000000:18:00.0, 580.95.05, 9.0"
    )[0]
    assert (row["memory_total_mib"], row["memory_free_mib"]) == (143771, 100)


def test_header_line_is_rejected_not_misread():
    with pytest.raises(FactProcessError, match="index"):
        parse_gpu_rows(
            "index, name, uuid, memory.total [MiB], memory.free [MiB], pci.bus_id, "
            "driver_version, compute_cap\n" + H200
        )


def test_wrong_column_count_is_rejected():
    with pytest.raises(FactProcessError, match="has 3 values, expected 8"):
        parse_gpu_rows("0, NVIDIA H200, GPU-1\n")


def test_compute_apps_shapes():
    text = (
        "4242, 20000, GPU-5a1e6666-5157-4e4f-9d1a-0c0ffee00006, /usr/bin/python3\n"
        "777, [N/A], GPU-5a1e0000-5157-4e4f-9d1a-0c0ffee00000, [Not Found]\n"
        "778, [Insufficient Permissions], GPU-5a1e0000-5157-4e4f-9d1a-0c0ffee00000, python\n"
    )
    apps = parse_app_rows(text)
    assert apps[0] == {
        "pid": 4242,
        "name": "/usr/bin/python3",
        "used_mib": 20000,
        "gpu_uuid": "GPU-5a1e6666-5157-4e4f-9d1a-0c0ffee00006",
    }
    assert apps[1]["name"] is None and apps[1]["used_mib"] is None
    assert apps[2]["used_mib"] is None
    assert parse_app_rows("") == [] and parse_app_rows("\n") == []


def test_a_process_name_with_commas_keeps_its_row():
    """nvidia-smi prints process_name unquoted: `/opt/run,v2/python` used to split into an extra
    value and the row was refused (or, in the node probe, dropped)."""
    text = "4243, 1000, GPU-5a1e0000-5157-4e4f-9d1a-0c0ffee00000, /opt/run,v2/python, x\n"
    assert parse_app_rows(text) == [
        {
            "pid": 4243,
            "used_mib": 1000,
            "name": "/opt/run,v2/python, x",
            "gpu_uuid": "GPU-5a1e0000-5157-4e4f-9d1a-0c0ffee00000",
        }
    ]
    with pytest.raises(ValueError, match="last field"):
        parse_app_rows(text, ["pid", "process_name", "used_memory", "gpu_uuid"])


@pytest.mark.parametrize(
    "rc, out, expected",
    [
        (6, "No devices were found\n", "no GPUs found"),
        (
            9,
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make "
            "sure that the latest NVIDIA driver is installed and running.\n",
            "no NVIDIA driver reachable",
        ),
        (
            18,
            "Failed to initialize NVML: Driver/library version mismatch\n"
            "NVML library version: 580.95\n",
            "NVML driver/library version mismatch",
        ),
        (2, 'Field "compute_cap" is not a valid field to query.\n', "nvidia-smi failed (exit 2)"),
        (127, "", "nvidia-smi is not installed"),
    ],
)
def test_smi_errors(rc, out, expected):
    assert smi_error(rc, out, "").startswith(expected)


def test_parse_smi_no_devices_is_an_empty_list_not_unknown():
    assert parse_smi({"rc": 6, "stdout": "No devices were found\n", "stderr": ""}) == {
        "rows": [],
        "error": "no GPUs found (nvidia-smi: No devices were found)",
    }
    failed = parse_smi(
        {
            "rc": 9,
            "stdout": "",
            "stderr": "NVIDIA-SMI has failed because it "
            "couldn't communicate with the NVIDIA driver.",
        }
    )
    assert failed["rows"] is None and "no NVIDIA driver" in failed["error"]
    assert parse_smi({"rc": 0, "stdout": H200, "stderr": ""})["rows"][7]["index"] == 7
    with pytest.raises(FactProcessError, match="lacks 'rc'"):
        parse_smi({"stdout": ""})


def test_versions_and_uuids():
    assert (
        module_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.10  Fri Jan 10 2025")
        == "570.86.10"
    )
    assert module_version("") is None and module_version(None) is None
    assert library_version("libcuda.so.580.95.05") == "580.95.05"
    assert library_version("libnvidia-ml.so.575.57.08", "libnvidia-ml") == "575.57.08"
    assert library_version("libcuda.so.1") is None and library_version(None) is None
    assert normalize_uuid("GPU-ABC") == normalize_uuid("abc") == "abc"
    assert normalize_uuid("") is None


def probe_doc(**over):
    doc = {
        "venv": "/root/venv",
        "venv_real": "/root/venvs/torch-2.11.0-cu130",
        "python": "/root/venv/bin/python",
        "present": True,
        "module_text": [
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 2025"
        ],
        "libs": {
            "libcuda.so.1": "libcuda.so.580.95.05",
            "libnvidia-ml.so.1": "libnvidia-ml.so.580.95.05",
        },
        "smi": {"rc": 0, "stdout": H200, "stderr": ""},
        "torch": {"version": "2.11.0+cu130"},
        "compile": None,
        "packages": {},
        "pip_check": None,
    }
    doc.update(over)
    return doc


def test_shape_adds_parsed_views():
    d = shape(probe_doc())
    assert len(d["gpus"]) == 8 and d["gpu_error"] is None
    assert d["driver"] == {
        "libcuda": "580.95.05",
        "libnvidia_ml": "580.95.05",
        "smi": "580.95.05",
        "module": "580.95.05",
    }


def test_shape_is_strict():
    doc = probe_doc()
    del doc["packages"]
    with pytest.raises(FactProcessError, match="missing packages"):
        shape(doc)
    with pytest.raises(FactProcessError, match="torch is not an object"):
        shape(probe_doc(torch=["2.11.0"]))
    # the container's nvidia-smi is only a witness: an odd answer is data, not a failed fact
    odd = shape(
        probe_doc(
            smi={
                "rc": 0,
                "stdout": "Unable to determine the device handle for GPU"
                "0000:5D:00.0: Unknown Error\n" + H200,
                "stderr": "",
            }
        )
    )
    assert odd["gpus"] is None and "has 1 values" in odd["gpu_error"]


def test_query_matches_the_parser():
    assert GPU_QUERY[:3] == ["index", "name", "uuid"]
