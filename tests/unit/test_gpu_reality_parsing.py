"""bench/gpu_reality_report.py: how the real-GPU check reads its captures (shapes of real
nvidia-smi output, utkuozdemir/nvidia_gpu_exporter's H200 capture) and what it flags."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from pvegpu.facts.probe import probe_source

ROOT = Path(__file__).resolve().parents[2]
# loaded by path: bench/ on sys.path would shadow other top-level names
_spec = importlib.util.spec_from_file_location(
    "gpu_reality_report", ROOT / "bench" / "gpu_reality_report.py"
)
rep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rep)

# --help-query-gpu / --help-query-compute-apps as driver 590.48.01 prints them (abridged)
HELP_GPU = """List of valid properties to query for the switch "--query-gpu":

"timestamp"
The timestamp of when the query was made in format "YYYY/MM/DD HH:MM:SS.msec".

"name" or "gpu_name"
The official product name of the GPU. This is an alphanumeric string. For all products.

"persistence_mode"
A flag that indicates whether persistence mode is enabled for the GPU. Value is either \
"Enabled" or "Disabled".

Section about fabric properties

"fabric.state"
Current state of GPU fabric registration process.
"""
HELP_APPS = """List of valid properties to query for the switch "--query-compute-apps":

"pid"
Process ID of the compute application

"used_gpu_memory" or "used_memory"
Amount memory used on the device by the context.
"""


def test_the_help_lists_give_every_field_and_alias_and_nothing_else():
    assert rep.help_fields(HELP_GPU) == {
        "timestamp",
        "name",
        "gpu_name",
        "persistence_mode",
        "fabric.state",
    }
    assert rep.help_fields(HELP_APPS) == {"pid", "used_gpu_memory", "used_memory"}


def test_the_product_queries_are_found_in_the_probes_sources():
    sources = {n: probe_source(n) for n in ("node_state", "verification", "training_leftovers")}
    found = rep.product_queries(sources)
    assert ("gpu", ("uuid", "fabric.state", "fabric.status")) in found
    assert {kind for kind, _ in found} == {"gpu", "compute-apps"}


def test_a_context_is_sized_from_its_own_rows_and_memory_used():
    run = {
        "pid": 4242,
        "before": {"stdout": "GPU-a, 0\nGPU-b, 0\n"},
        "after": {"stdout": "GPU-a, 531\nGPU-b, 531\n"},
        "apps": {"stdout": "4242, 524, GPU-a\n4242, 524, GPU-b\n77, 9000, GPU-b\n"},
    }
    sizes = rep.context_sizes(run)
    assert [(s["uuid"], s["apps_used_mib"], s["delta_mib"]) for s in sizes] == [
        ("GPU-a", 524, 531),
        ("GPU-b", 524, 531),
    ]
    # a container that does not see its own pid (no NVML pid-namespace mapping): no row
    assert rep.context_sizes({**run, "pid": 1})[0]["apps_used_mib"] is None


def test_proc_devices_gives_the_nvidia_majors():
    text = (
        "Character devices:\n  1 mem\n195 nvidia-frontend\n195 nvidia\n508 nvidia-uvm\n\n"
        "Block devices:\n259 blkext\n"
    )
    assert rep.nvidia_devices(text) == {"nvidia-frontend": 195, "nvidia": 195, "nvidia-uvm": 508}


def test_a_surprise_is_flagged_in_the_markdown():
    steps = {
        "torch": {"nvml_first": 8, "cuda_count": 7},
        "contexts": {"no_context": {"pid": 5, "primary": [True], "own_rows": []}},
        "queries": {
            "queries": [{"kind": "gpu", "fields": ["x"], "rc": 2, "unknown": ["x"]}],
            "values": {"fabric.state": ["[N/A]"]},
        },
    }
    checks = {c["name"]: c for c in rep.checks(steps)}
    assert checks["device counts"]["ok"] is False
    assert checks["no-context path"]["ok"] is False
    assert checks["pvegpu's nvidia-smi queries"]["ok"] is False
    assert checks["fabric.state / fabric.status"]["ok"] is False  # [N/A] is not what GPUs print
    text = rep.markdown(
        {"date": "2026-12-04", "verdict": "a real NVIDIA GPU answers", "checks": rep.checks(steps)}
    )
    row = "| device counts | torch.cuda.device_count() (NVML first) = cudaGetDeviceCount |"
    assert row + " 8 / 7 | **NO** |" in text
