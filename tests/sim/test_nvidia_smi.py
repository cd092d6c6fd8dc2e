"""The nvidia-smi double and /proc/driver/nvidia against captured real output.

Sources (docs/real-tools.md): nvidia-smi's own field lists and output of driver 590.48.01
(utkuozdemir/nvidia_gpu_exporter internal/captures/linux-x86_64__nvidia-h200__590.48.01.txt);
the rejection of an unknown field (CoHDI/composable-resource-operator#37: stdout
`Field "device_minor" is not a valid field to query.` + empty line, stderr empty, exit 2);
/proc/driver/nvidia/gpus/<bus>/information (NVIDIA/open-gpu-kernel-modules
kernel-open/nvidia/nv-procfs.c).
"""

from pathlib import Path

import pytest

from sim.fixtures import sim_node  # noqa: F401
from sim.simctl import gpu_information
from tests.sim.test_node import make_ct, pct

FIELDS = Path(__file__).resolve().parents[2] / "sim" / "nvidia-smi-fields"
REAL_GPU = [f for f in (FIELDS / "query-gpu-fields.txt").read_text().split() if f]
REAL_APPS = [f for f in (FIELDS / "query-compute-apps-fields.txt").read_text().split() if f]
INFO_KEYS = [
    "Model",
    "IRQ",
    "GPU UUID",
    "Video BIOS",
    "Bus Type",
    "DMA Size",
    "DMA Mask",
    "Bus Location",
    "Device Minor",
    "GPU Firmware",
    "GPU Excluded",
]


@pytest.fixture
def reverse(sim_node):  # noqa: F811
    """4 GPUs whose minors run against PCI order: nvidia-smi's GPU 0 is /dev/nvidia3."""
    return sim_node(gpus=4, minor_order="reverse")


def smi(node, *args):
    return node.run(["nvidia-smi", *args])


@pytest.mark.parametrize("bad", ["minor_number", "device_minor", "cuda_version", "Index"])
def test_an_unknown_field_is_rejected_like_the_real_tool(reverse, bad):
    rejected = (2, f'Field "{bad}" is not a valid field to query.\n\n', "")
    r = smi(reverse, f"--query-gpu=index,{bad},name", "--format=csv")
    assert (r.returncode, r.stdout, r.stderr) == rejected
    r = smi(reverse, f"--query-compute-apps=pid,{bad}", "--format=csv")
    assert (r.returncode, r.stdout, r.stderr) == rejected


# `--help-query-compute-apps` of driver 590.48.01 (the capture; the same in 595 and 610): 8 names
# and the aliases `name` (process_name) and `used_memory` (used_gpu_memory).
COMPUTE_APPS = [
    "timestamp",
    "gpu_name",
    "gpu_bus_id",
    "gpu_serial",
    "gpu_uuid",
    "pid",
    "process_name",
    "name",
    "used_gpu_memory",
    "used_memory",
]
# `--help-query-accounted-apps`'s own fields (and aliases): not valid for --query-compute-apps.
ACCOUNTED_ONLY = [
    "gpu_utilization",
    "gpu_util",
    "mem_utilization",
    "mem_util",
    "max_memory_usage",
    "vgpu_instance",
    "time",
    "is_running",
]


def test_compute_apps_accepts_its_own_fields_and_rejects_accounted_apps_ones(reverse):
    assert sorted(REAL_APPS) == sorted(COMPUTE_APPS)
    for bad in ACCOUNTED_ONLY:
        r = smi(reverse, f"--query-compute-apps=pid,{bad}", "--format=csv")
        rejected = (2, f'Field "{bad}" is not a valid field to query.\n\n', "")
        assert (r.returncode, r.stdout, r.stderr) == rejected


def test_every_real_field_is_accepted_and_unmodelled_ones_are_na(reverse):
    r = smi(reverse, "--query-gpu=" + ",".join(REAL_GPU), "--format=csv,noheader")
    assert r.returncode == 0, r.stdout
    rows = [line.split(", ") for line in r.stdout.splitlines()]
    assert len(rows) == 4 and all(len(row) == len(REAL_GPU) for row in rows)
    cell = dict(zip(REAL_GPU, rows[0]))
    assert cell["ecc.mode.current"] == "[N/A]" and cell["index"] == "0"
    assert cell["memory.total"] == "143771 MiB" and cell["power.draw"] == "75.42 W"
    r = smi(reverse, "--query-compute-apps=" + ",".join(REAL_APPS), "--format=csv")
    assert r.returncode == 0 and r.stdout.count(", ") == len(REAL_APPS) - 1


def test_aliases_print_the_canonical_header_with_units(reverse):
    r = smi(
        reverse,
        "--query-gpu=gpu_name,gpu_bus_id,clocks.gr,memory.used,temperature.gpu",
        "--format=csv",
        "-i",
        "0",
    )
    assert r.stdout == (
        "name, pci.bus_id, clocks.current.graphics [MHz], memory.used [MiB], "
        "temperature.gpu\nNVIDIA H200, 00000000:18:00.0, [N/A], 0 MiB, 32\n"
    )
    pid = reverse.spawn_gpu_process(2, ["/usr/bin/python3", "x.py"], used_mib=2566)
    r = smi(reverse, "--query-compute-apps=pid,name,used_memory,gpu_bus_id", "--format=csv")
    assert r.stdout == (
        "pid, process_name, used_gpu_memory [MiB], gpu_bus_id\n"
        f"{pid}, /usr/bin/python3, 2566 MiB, 00000000:3A:00.0\n"
    )
    reverse.kill_gpu_process(pid)


def test_minors_in_reverse_pci_order_everywhere(reverse):
    node = reverse
    rows = smi(node, "--query-gpu=index,pci.bus_id", "--format=csv,noheader").stdout.splitlines()
    assert rows == [
        "0, 00000000:18:00.0",
        "1, 00000000:2A:00.0",
        "2, 00000000:3A:00.0",
        "3, 00000000:5D:00.0",
    ]  # nvidia-smi numbers in PCI order
    for index, bus in enumerate(["18", "2a", "3a", "5d"]):
        text = node.read(f"/proc/driver/nvidia/gpus/0000:{bus}:00.0/information")
        lines = text.splitlines()
        assert [line.split(":", 1)[0].strip() for line in lines] == INFO_KEYS
        assert f"Bus Location: \t 0000:{bus}:00.0" in lines
        assert f"Device Minor: \t {3 - index}" in lines and "GPU Excluded:\t No" in lines
        stat = node.run(["stat", "-c", "%t:%T", f"/dev/nvidia{3 - index}"]).stdout
        assert stat == f"c3:{3 - index:x}\n"
    q = smi(node, "-q").stdout.splitlines()
    minors = [line for line in q if line.startswith("    Minor Number")]
    assert minors == [f"{'    Minor Number':<55}: {m}" for m in (3, 2, 1, 0)]
    assert q[3].index(":") == 55 and q[3].startswith("Timestamp")
    first = smi(node, "-L").stdout.splitlines()[0]
    assert first.startswith("GPU 0: NVIDIA H200 (UUID: GPU-5a1e0000")


@pytest.mark.parametrize(
    "driver, gsp, line",
    [
        ("590.48.01", True, "GPU Firmware: \t 590.48.01"),
        ("590.44.01", False, "GPU Firmware: \t N/A"),
        ("580.142", False, None),
        ("580.95.05", True, "GPU Firmware: \t 580.95.05"),
    ],
)
def test_the_firmware_line_follows_the_driver_release(driver, gsp, line):
    """nv-procfs.c: 590.44.01 on prints `GPU Firmware:` always (`N/A` without GSP firmware);
    before (and the whole 580 branch) only with firmware."""
    gpu = {"name": "NVIDIA H200", "minor": 0, "uuid": "GPU-5a1e0000"}
    text = gpu_information(gpu, "0000:18:00.0", driver, gsp)
    keys = [line.split(":", 1)[0].strip() for line in text.splitlines()]
    assert keys == (INFO_KEYS if line else [k for k in INFO_KEYS if k != "GPU Firmware"])
    assert (line in text.splitlines()) if line else "Firmware" not in text


def test_a_node_without_gsp_firmware_prints_no_firmware_line_before_590(reverse):
    reverse.configure(gsp_firmware=False)
    text = reverse.read("/proc/driver/nvidia/gpus/0000:18:00.0/information")
    assert "GPU Firmware" not in text and "Device Minor: \t 3" in text.splitlines()


def test_a_container_sees_the_gpu_behind_the_minor_it_was_given(reverse):
    node = reverse
    make_ct(node, 200, "--dev0", "/dev/nvidia0", "--dev1", "/dev/nvidiactl")
    run = "/root/NVIDIA-Linux-x86_64-580.95.05.run"
    assert pct(node, "push", "200", run, run).returncode == 0
    assert node.ct_run(200, ["sh", run, "--silent", "--no-kernel-modules"]).returncode == 0
    r = node.ct_run(200, ["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader"])
    assert r.stdout == "00000000:5D:00.0\n"  # /dev/nvidia0 is the last GPU in PCI order
    r = node.ct_run(200, ["nvidia-smi", "--query-gpu=minor_number", "--format=csv"])
    assert (r.returncode, r.stdout) == (
        2,
        'Field "minor_number" is not a valid field to query.\n\n',
    )


def test_the_help_lists_name_every_real_field_once_with_its_aliases(reverse):
    """`--help-query-gpu`/`--help-query-compute-apps`: the title line, then each field quoted,
    its aliases after ` or ` (`"name" or "gpu_name"`); the double has no descriptions."""
    for kind, real in (("gpu", REAL_GPU), ("compute-apps", REAL_APPS)):
        r = smi(reverse, f"--help-query-{kind}")
        assert r.returncode == 0
        lines = r.stdout.splitlines()
        assert lines[0] == f'List of valid properties to query for the switch "--query-{kind}":'
        names = [n for ln in lines if ln.startswith('"') for n in ln.replace('"', "").split(" or ")]
        assert sorted(names) == sorted(real)
    assert '"name" or "gpu_name"' in smi(reverse, "--help-query-gpu").stdout.splitlines()
