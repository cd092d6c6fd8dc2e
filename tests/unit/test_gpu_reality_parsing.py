"""bench/gpu_reality_report.py: how the real-GPU check reads its captures (shapes of real
nvidia-smi output, utkuozdemir/nvidia_gpu_exporter's H200 capture) and what it flags."""

from __future__ import annotations

import doctest
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


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


trc = _load("gpu_reality_torchrun_checks")
# torch 2.13.0+cpu's launcher, as bench/gpu_reality.py found it (abridged --help)
OPTIONS_2_13 = {
    "torch": "2.13.0+cpu",
    "help_rc": 0,
    "help": "usage: torchrun [-h] [--nnodes NNODES] [--signals-to-handle SIGNALS_TO_HANDLE]\n"
    "  --shutdown-timeout SHUTDOWN_TIMEOUT, --shutdown_timeout SHUTDOWN_TIMEOUT\n",
    "found": {
        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": [
            "torch/distributed/launcher/api.py",
            "torch/distributed/run.py",
        ],
        "os.killpg": [
            "torch/distributed/elastic/multiprocessing/subprocess_handler/subprocess_handler.py"
        ],
    },
}


def test_the_bench_modules_examples_hold():
    for module in (rep, trc, _load("gpu_reality_torchrun")):
        assert doctest.testmod(module).failed == 0, module.__name__


def test_torchrun_options_are_read_against_the_release_that_brought_them():
    assert trc.options_check(OPTIONS_2_13)["ok"] is True
    # 2.11: --signals-to-handle (from 2.10) but no shutdown timeout (from 2.12)
    older = {
        **OPTIONS_2_13,
        "torch": "2.11.0",
        "help": "[--signals-to-handle SIGNALS_TO_HANDLE]",
        "found": {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": [], "os.killpg": ["x.py"]},
    }
    assert trc.options_check(older)["ok"] is True
    assert trc.options_check({**older, "torch": "2.12.0"})["ok"] is False
    assert trc.options_check({**older, "torch": "2.9.1"})["ok"] is False
    # a launcher that no longer forwards with os.killpg is a surprise too
    no_killpg = {**OPTIONS_2_13, "found": {**OPTIONS_2_13["found"], "os.killpg": []}}
    assert trc.options_check(no_killpg)["ok"] is False
    assert trc.options_check({"error": "exit 127: python3: not found"})["ok"] is None


def test_the_dataloader_rows_say_who_lost_the_checkpoint():
    # what torch 2.13.0+cpu did (bench/gpu_reality.py --python with it)
    steps = {
        "dataloader": {
            "worker": {
                "rc": 1,
                "exitcodes": [-15, None],
                "raised": "RuntimeError: DataLoader worker (pid(s) 7) exited unexpectedly",
            },
            "group": {
                "rc": 1,
                "exitcodes": [-15, -15],
                "raised": "RuntimeError: DataLoader worker (pid(s) 7, 8) exited unexpectedly",
            },
            "trainer": {"rc": 0, "exitcodes": [0, 0], "checkpoint": True},
        }
    }
    assert [c["ok"] for c in trc.loader_checks(steps)] == [True, True, True]
    steps["dataloader"]["trainer"]["exitcodes"] = [0, -15]
    steps["dataloader"]["worker"]["raised"] = ""  # a trainer that did not notice
    assert [c["ok"] for c in trc.loader_checks(steps)] == [False, True, False]
    skipped = trc.loader_checks({"dataloader": {"skipped": "no real torch: the double"}})
    assert [(c["ok"], c["found"]) for c in skipped] == [(None, "no real torch: the double")] * 3


def test_a_worker_stuck_while_its_launcher_is_held_is_flagged():
    out = {"exit_status": "exit 0", "held_exit_s": 0.4, "launcher_rc": 1, "hold_s": 10.0}
    quick = {**out, "worker": {"process_group": True, "destroy_s": 0.01}}
    stuck = {**quick, "held_exit_s": None, "exit_status": None, "released_exit_s": 1.5}
    check = trc.held_check({"nccl_held": {"default": stuck, "dump_off": quick}})
    assert check["ok"] is False
    assert check["found"].startswith("default: still running 10.0 s held, out 1.5 s after")
    assert trc.held_check({"nccl_held": {"default": quick, "dump_off": quick}})["ok"] is True
    double = {**quick, "worker": {"process_group": False}}
    assert trc.held_check({"nccl_held": {"default": double}})["ok"] is None
    assert trc.held_check({"nccl_held": {"skipped": "no GPU: NCCL needs one"}})["ok"] is None
