"""What the product asks of the real NVIDIA tools exists in them, and the device minors come from
the kernel module, joined to nvidia-smi's rows by PCI bus id (never by index).

The real field lists are nvidia-smi's own `--help-query-gpu` / `--help-query-compute-apps`
(driver 590.48.01, captured in utkuozdemir/nvidia_gpu_exporter internal/captures/), copied into
sim/nvidia-smi-fields/; the double answers from the same files.
"""

import ast
import os
import re
from pathlib import Path

import pytest

from pvegpu.facts.probe import probe_source

ROOT = Path(__file__).resolve().parents[2]
FIELDS = ROOT / "sim" / "nvidia-smi-fields"
PRODUCT = [
    *sorted((ROOT / "src" / "pvegpu").rglob("*.py")),
    *sorted((ROOT / "tasks").glob("*.py")),
    ROOT / "deploy.py",
    ROOT / "verify.py",
]
QUERY_ARG = re.compile(r"--query-(gpu|compute-apps)=([A-Za-z0-9_.,]+)")
QUERY_LIST = re.compile(r"^(GPU|APP)_(FIELDS|QUERY)$")


def real_fields(kind):
    return {
        line.strip()
        for line in (FIELDS / f"query-{kind}-fields.txt").read_text().splitlines()
        if line.strip()
    }


def product_queries():
    """(kind, field, where) of every field the product's code asks nvidia-smi for: literal
    `--query-...=a,b` arguments and the GPU_/APP_ FIELDS/QUERY lists joined into them."""
    found = []
    for path in PRODUCT:
        text = path.read_text()
        for m in QUERY_ARG.finditer(text):
            found += [(m.group(1), f, path.name) for f in m.group(2).split(",") if f]
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.List):
                for target in node.targets:
                    m = isinstance(target, ast.Name) and QUERY_LIST.match(target.id)
                    if m:
                        kind = "gpu" if m.group(1) == "GPU" else "compute-apps"
                        found += [(kind, ast.literal_eval(e), path.name) for e in node.value.elts]
    return found


def test_every_field_the_product_queries_is_a_real_nvidia_smi_field():
    queries = product_queries()
    # the collector sees every query site (node probe, verification, leftovers), so it can fail
    assert {where for _, _, where in queries} >= {
        "node_state.py",
        "gpus.py",
        "training_leftovers.py",
    }
    assert {("gpu", "pci.bus_id"), ("compute-apps", "gpu_uuid")} <= {(k, f) for k, f, _ in queries}
    bad = [(k, f, w) for k, f, w in queries if f not in real_fields(k)]
    assert bad == []


def test_the_real_lists_have_no_minor_field():
    assert not {f for f in real_fields("gpu") if "minor" in f}


# ------------------------------------------------------------------ the node probe's minors


def probe_functions():
    """The node probe's functions and constants, without running the probe."""
    tree = ast.parse(probe_source("node_state"))
    keep = [
        n
        for n in tree.body
        if isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef))
        or isinstance(n, ast.Assign)
        and all(isinstance(t, ast.Name) and t.id.isupper() and t.id != "A" for t in n.targets)
    ]
    ns = {}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "node_state", "exec"), ns)
    return ns


def information(minor, bus):
    """A /proc/driver/nvidia/gpus/<bus>/information as nv-procfs.c prints it."""
    return (
        f"Model: \t\t NVIDIA H200\nIRQ:   \t\t 200\nGPU UUID: \t GPU-x\n"
        f"Video BIOS: \t 96.00.a5.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\n"
        f"DMA Mask: \t 0xfffffffffffff\nBus Location: \t {bus}\nDevice Minor: \t {minor}\n"
        f"GPU Firmware: \t 580.95.05\nGPU Excluded:\t No\n"
    )


@pytest.mark.parametrize(
    "a, b",
    [
        ("00000000:83:00.0", "0000:83:00.0"),
        ("00000000:DB:00.0", "0000:db:00.0"),
        ("0000:1a:00.0", "1A:00.0"),
    ],
)
def test_pci_bus_ids_join_across_spellings(a, b):
    pci_key = probe_functions()["pci_key"]
    assert pci_key(a) == pci_key(b) is not None
    assert pci_key("00000000:83:00.0") != pci_key("00000000:83:00.1")
    assert pci_key("not a bus") is None


def test_device_minor_read_from_the_information_file():
    info_minor = probe_functions()["info_minor"]
    assert info_minor(information(12, "0000:18:00.0")) == 12
    # without GSP firmware: `GPU Firmware: \t N/A` from 590.44.01, no line before (nv-procfs.c)
    na = information(12, "0000:18:00.0").replace("580.95.05", "N/A")
    none = "".join(
        line
        for line in information(12, "0000:18:00.0").splitlines(True)
        if not line.startswith("GPU Firmware")
    )
    assert info_minor(na) == info_minor(none) == 12
    assert info_minor("Model: \t\t NVIDIA H200\n") is None


def test_gpu_rows_get_minors_by_bus_id_not_index(tmp_path):
    """Minors in reverse PCI order: nvidia-smi's GPU 0 is /dev/nvidia3 (fails when the probe asks
    nvidia-smi for a minor field or takes the index for the minor)."""
    buses = ["18", "2A", "3A", "5D"]
    for i, bus in enumerate(buses):
        d = tmp_path / f"0000:{bus.lower()}:00.0"
        d.mkdir()
        (d / "information").write_text(information(3 - i, d.name))
    ns = probe_functions()
    ns["PROC_GPUS"] = str(tmp_path)
    fields = ns["GPU_FIELDS"]
    asked = []

    def fake_run(argv, timeout=120):
        asked.append(argv)
        query = argv[1].split("=", 1)[1].split(",")
        if query != fields or any(f not in real_fields("gpu") for f in query):
            return 2, f'Field "{query[-1]}" is not a valid field to query.\n\n', ""
        rows = [
            f"{i}, NVIDIA H200, GPU-{i}, 143771, 00000000:{bus}:00.0, 580.95.05"
            for i, bus in enumerate(buses)
        ]
        return 0, "\n".join(rows) + "\n", ""

    ns["run"] = fake_run
    rows, error, driver = ns["gpus"]()
    assert error == [] and driver == "580.95.05"
    assert [(r["index"], r["minor"]) for r in rows] == [(0, 3), (1, 2), (2, 1), (3, 0)]
    # a GPU the kernel module does not list gets no minor (never a guess)
    (tmp_path / "0000:5d:00.0" / "information").unlink()
    rows, _, _ = ns["gpus"]()
    assert rows[3]["minor"] is None


def test_a_process_whose_name_has_a_comma_is_still_listed():
    """nvidia-smi prints `process_name` unquoted: a name with a comma used to make a fifth value,
    and the node probe dropped the process from leftover handling and verification."""
    pid = os.getpid()  # a live process, so the probe can read its /proc/<pid>/cmdline
    values = {
        "pid": str(pid),
        "process_name": "/opt/run,v2/python",
        "used_memory": "1000",
        "used_gpu_memory": "1000",
        "gpu_uuid": "GPU-5a1e0000-5157-4e4f-9d1a-0c0ffee00000",
    }
    ns = probe_functions()

    def fake_smi(argv, timeout=120):
        query = argv[1].split("=", 1)[1].split(",")
        bad = [f for f in query if f not in real_fields("compute-apps")]
        if bad:
            return 2, f'Field "{bad[0]}" is not a valid field to query.\n\n', ""
        return 0, ", ".join(values[f] for f in query) + "\n", ""

    ns["run"] = fake_smi
    ns["read"] = lambda path: Path(path).read_text()
    apps = ns["compute_apps"]()
    assert [(a["pid"], a["name"], a["used_mib"], a["gpu_uuid"]) for a in apps] == [
        (pid, "/opt/run,v2/python", 1000, values["gpu_uuid"])
    ]


def test_leftover_clearing_numbers_gpus_as_cuda_does_not_by_index():
    """The training GPUs are CUDA numbers (CUDA_DEVICE_ORDER=PCI_BUS_ID in the container); the
    node probe that clears leftovers meets them through each GPU's PCI bus order and UUID, since
    nothing promises nvidia-smi's index follows PCI order (NVML: "no guarantees")."""
    tree = ast.parse(probe_source("training_leftovers"))
    keep = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef))]
    ns: dict = {}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "training_leftovers", "exec"), ns)
    rows = [
        ["0", "GPU-b", "00000000:DB:00.0"],
        ["1", "GPU-a", "00000000:18:00.0"],
        ["2", "GPU-c", "0000:2A:00.0"],
    ]
    assert ns["cuda_numbers"](rows) == {"GPU-a": 0, "GPU-c": 1, "GPU-b": 2}
