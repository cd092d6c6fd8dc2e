"""The verification's comparison functions: behaviours the mutation run (bench/mutation.py)
found unpinned. Problem texts are asserted whole: each is the one line a person acts on."""

import sys

import pytest

from pvegpu.plan.unit import training_matcher
from pvegpu.verification import (
    FX_RACE,
    Problem,
    Verdict,
    app_argv,
    arch_covers,
    cleared_at_start,
    pin_seeds,
    process_owner,
    required_closure,
    torch_problems,
)
from tests.unit.test_verify_checks import compile_doc, run
from tests.unit.verify_facts import ct_facts, node_facts, settings

UNIT = "dflash-train.service"


# --- torch_problems (the python env stage's check of a new venv) --------------------------------


def runtime(**over):
    rt = {
        "present": True,
        "python": "/root/venvs/b1/bin/python",
        "version": "2.11.0+cu130",
        "cuda": "13.0",
        "available": True,
        "device_count": 8,
        "import_error": None,
    }
    return {**rt, **over}


def test_torch_problems_of_a_good_runtime_is_empty():
    assert torch_problems(runtime(), "2.11.0", "cu130", "13.0", 8) == []


@pytest.mark.parametrize(
    "rt, expected",
    [
        ({}, ["torch runtime could not be read (container not reachable): run deploy.py"]),
        (
            runtime(present=False),
            ["no venv python at /root/venvs/b1/bin/python: run deploy.py to build the venv"],
        ),
        (
            runtime(import_error="ImportError: libcudnn.so.9"),
            [
                "torch does not import in /root/venvs/b1/bin/python (ImportError: libcudnn.so.9): "
                "run deploy.py --data rebuild=venv"
            ],
        ),
        (
            runtime(version="2.11.0+cu128", cuda="12.8"),
            [
                "torch is 2.11.0+cu128, expected 2.11.0+cu130: run deploy.py (it rebuilds the venv "
                "for torch_variant=cu130)",
                "torch.version.cuda is 12.8, expected 13.0 for cu130",
            ],
        ),
        (
            runtime(available=False, init_error="CUDA driver initialization failed"),
            [
                "CUDA is not available to torch (CUDA driver initialization failed): check the "
                "driver parity and the GPU passthrough (run deploy.py)"
            ],
        ),
        (
            runtime(available=False),
            [
                "CUDA is not available to torch (no reason given): check the driver parity and the "
                "GPU passthrough (run deploy.py)"
            ],
        ),
        (
            runtime(device_count=7),
            [
                "torch sees 7 GPUs, expected 8: check the passthrough of every /dev/nvidiaN to the "
                "container"
            ],
        ),
    ],
)
def test_torch_problems_one_line_each(rt, expected):
    assert torch_problems(rt, "2.11.0", "cu130", "13.0", 8) == expected


# --- the CUDA init fix ---------------------------------------------------------------------------


def cuda_fix(error):
    ct = ct_facts()
    ct["torch"].update(available=False, device_count=0, devices=[], init_error=error)
    (problem,) = [p for p in run(ct=ct).problems if p.check == "CUDA init"]
    return problem.fix


EXACT = "run deploy.py: it installs the node driver's exact userspace into the container"
NO_DRIVER = (
    "run deploy.py: CT 200 needs libcuda.so.1 from the node driver's .run installer and "
    "/dev/nvidiactl passed through"
)
UVM = (
    "pass /dev/nvidia-uvm through to CT 200 (on the node: nvidia-modprobe -u -c 0), then run "
    "deploy.py"
)


@pytest.mark.parametrize(
    "error, fix",
    [
        (
            "The NVIDIA driver on your system is too old (found version 12080).",
            "upgrade the node's NVIDIA driver to >= 580.65.06, then run deploy.py (matches the "
            "container's userspace), or set torch_variant to a build the driver supports",
        ),
        ("CUDA driver version mismatch", EXACT),
        ("cudaGetDeviceCount returned 803", EXACT),
        ("system has unsupported display driver / cuda driver combination", EXACT),
        ("Found no NVIDIA driver on your system.", NO_DRIVER),
        ("no NVIDIA driver is loaded", NO_DRIVER),
        ("CUDA unknown error - this may be due to an incorrectly set up environment", UVM),
        ("cuInit returned 999", UVM),
        (
            "out of memory",
            "check the driver parity and the GPU passthrough of CT 200: run deploy.py",
        ),
    ],
)
def test_cuda_init_fix_by_error(error, fix):
    assert cuda_fix(error) == fix


# --- concurrent compile ---------------------------------------------------------------------------


def compile_problems(doc, version="2.11.0+cu130"):
    ct = ct_facts(version=version)
    ct["compile"] = doc
    return [
        p
        for p in run(s=settings(verify_level="compile"), ct=ct).problems
        if p.check == "concurrent torch.compile"
    ]


def failing(gpus, error="CUDA error: an illegal memory access"):
    doc = compile_doc()
    for t in doc["threads"]:
        if t["gpu"] in gpus:
            t.update(ok=False, error=error)
    return doc


LOCK_FIX = (
    "torch's FX-tracing flag is process-wide: run one training process per GPU, or "
    "compile under a lock and warm each device in turn before training"
)


def test_compile_error_problem():
    assert compile_problems(compile_doc(error="ImportError: x")) == [
        Problem(
            "concurrent torch.compile",
            "flex_attention compiles in the venv",
            "ImportError: x",
            "run deploy.py --data rebuild=venv",
        )
    ]


def test_compile_race_names_the_build_that_raced_and_what_the_serial_retry_showed():
    race = compile_doc(race=True)
    found = (
        f"FX-tracing race on GPU 1, 2, 3, 4, 5, 6, 7 with torch 2.11.0+cu128: RuntimeError: "
        f"Detected that you are using {FX_RACE}"
    )
    expected = "flex_attention compiles from 8 threads at once (one per GPU, as the trainer does)"
    (p,) = compile_problems(race, version="2.11.0+cu128")
    assert (p.expected, p.found) == (expected, found)
    assert p.fix == (
        LOCK_FIX + "; compiling under a lock, one device at a time, worked here in 0.2 s"
    )
    race["serial"] = {"ok": False, "error": "RuntimeError: boom"}
    assert (
        compile_problems(race)[0].fix == LOCK_FIX + "; compiling under a lock also failed: "
        "RuntimeError: boom"
    )
    race["serial"] = None
    assert compile_problems(race)[0].fix == LOCK_FIX


def test_compile_failures_name_the_first_gpu_and_count_the_rest():
    assert compile_problems(failing({2})) == [
        Problem(
            "concurrent torch.compile",
            "flex_attention compiles on all 8 GPUs",
            "GPU 2: CUDA error: an illegal memory access",
            "check the GPU and the torch build (run the check again with -v for the facts)",
        )
    ]
    assert compile_problems(failing({2, 5}))[0].found == (
        "GPU 2: CUDA error: an illegal memory access (+1 more)"
    )
    doc = failing({2, 5, 6})
    doc["serial"] = {"ok": True, "seconds": 3.5}
    (p,) = compile_problems(doc)
    assert p.found == "GPU 2: CUDA error: an illegal memory access (+2 more)"
    assert p.fix.endswith(
        "for the facts); compiling under a lock, one device at a time, worked here in 3.5 s"
    )


def test_compile_fallback_problem():
    doc = compile_doc(fallback=["flex_attention called without torch.compile()"])
    assert compile_problems(doc) == [
        Problem(
            "concurrent torch.compile",
            "compiled kernels (no eager fallback)",
            "fell back: flex_attention called without torch.compile()",
            "fix the compile (TORCH_LOGS=graph_breaks,recompiles in the trainer) before a long run",
        )
    ]


# --- rows and the report document ----------------------------------------------------------------


def test_a_node_gpu_not_passed_through_is_a_row_of_its_own():
    v = run(ct=ct_facts(gpus=[0, 1, 2, 4, 5, 6, 7]))
    (row,) = [r for r in v.rows if r["gpu"] is None]
    assert row == {
        "gpu": None,
        "node_gpu": 3,
        "name": "NVIDIA H200",
        "uuid": node_facts()["gpus"][3]["uuid"],
        "total_mib": 143771,
        "free_mib": None,
        "capability": None,
        "role": "-",
        "status": "not passed through",
    }


def test_verdict_document_of_a_failure():
    v = Verdict("CT 200", problems=[Problem("a", "b", "c", "d", gpu=1)], warnings=["w"])
    assert v.as_dict() == {
        "where": "CT 200",
        "verdict": "fail",
        "problems": [
            {
                "check": "a",
                "expected": "b",
                "found": "c",
                "fix": "d",
                "gpu": 1,
                "line": "a: expected b; found c; fix: d",
            }
        ],
        "warnings": ["w"],
        "gpus": [],
        "summary": {},
    }


# --- packages --------------------------------------------------------------------------------


def test_pin_seeds_read_names_any_case_and_their_extras():
    s = settings(
        training_requirements=[
            "PyYAML==6.0.2",
            "transformers[torch,sentencepiece]==5.6.0",
            "accelerate==1.0",
        ]
    )
    assert pin_seeds(s) == {
        "torch": ("2.11.0+cu130", set()),
        "pyyaml": ("6.0.2", set()),
        "transformers": ("5.6.0", {"torch", "sentencepiece"}),
        "accelerate": ("1.0", set()),
    }


def test_closure_goes_on_past_unreadable_extra_only_and_repeated_requirements():
    inst = {
        "a": {"requires": ["!!! not a requirement", "c; extra == 'x'", "b"]},
        "b": {"requires": []},
        "c": {"requires": []},
    }
    assert required_closure(inst, {"a": set()}) == {"a", "b"}
    # one dependency listed twice (one line per python version): the second is already seen
    inst = {
        "x": {"requires": ["w"]},
        "w": {"requires": []},
        "z": {"requires": ["a>=1; python_version < '3.12'", "a>=2; python_version >= '3.12'"]},
        "a": {"requires": []},
    }
    assert required_closure(inst, {"x": set(), "z": set()}) == {"x", "w", "z", "a"}


def test_closure_reads_requirements_without_the_packaging_library(monkeypatch):
    monkeypatch.setitem(sys.modules, "packaging.requirements", None)  # import fails
    inst = {
        "a": {"requires": ["B_x>=1; extra == 'x'", "  c (>=1)", "*"]},
        "b-x": {"requires": []},
        "c": {"requires": []},
    }
    assert required_closure(inst, {"a": set()}) == {"a", "c"}
    assert required_closure(inst, {"a": {"x"}}) == {"a", "b-x", "c"}


# --- whose process is it -------------------------------------------------------------------------


def test_owner_read_from_any_line_of_a_cgroup_v1_file():
    app = {"cgroup": "13:rdma:/\n12:memory:/lxc/201/ns\n0::/"}
    assert process_owner(app, 200, UNIT) == "ct 201"


def test_argv_of_a_process_without_argv_or_cmdline_is_empty():
    assert app_argv({}) == []
    assert app_argv({"cmdline": "python  t.py"}) == ["python", "t.py"]


def test_not_cleared_in_another_container_named_on_a_v1_line():
    m = training_matcher(settings())
    app = {"argv": [m["pythons"][0], m["script"]], "cgroup": "1:name=systemd:/lxc/201\n0::/"}
    assert not cleared_at_start(app, 200, UNIT, m)


def test_a_node_unit_of_the_same_name_is_not_the_containers():
    m = training_matcher(settings())
    app = {"argv": ["/usr/bin/python3", "serve.py"], "cgroup": f"0::/system.slice/{UNIT}"}
    assert not cleared_at_start(app, 200, UNIT, m)


# --- arch coverage ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cap, archs, expected",
    [
        ("9.0", ["gfx90a", "sm_90"], "sm_90"),  # an entry it cannot read is skipped, not the end
        ("9.0", ["compute_90"], "compute_90"),  # PTX of the same capability
        ("9.0", ["compute_100"], None),  # PTX of a newer one does not run
        ("9.0", ["compute_80", "compute_100"], "compute_80"),
        ("9.0", ["compute_90a"], None),  # arch-specific PTX, not this GPU's
    ],
)
def test_arch_covers_ptx(cap, archs, expected):
    assert arch_covers(cap, archs) == expected
