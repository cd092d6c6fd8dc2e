"""verify()'s pipeline (pvegpu/verification): behaviours the mutation run (bench/mutation.py)
found unpinned. The summary, the table rows and the problem lines are asserted whole: the JSON
report and the table print them, and each line is what a person acts on."""

import pytest

from pvegpu.plan.unit import training_matcher
from pvegpu.verification import FX_RACE, cleared_at_start, verify
from tests.unit.test_verify_checks import run
from tests.unit.verify_facts import UUID, ct_facts, node_facts, settings

UNIT = "dflash-train.service"
H200 = "NVIDIA H200"


def test_summary_of_a_healthy_container_whole():
    v = run()
    assert v.summary == {
        "torch": "2.11.0+cu130",
        "torch_expected": "2.11.0+cu130",
        "cuda": "13.0",
        "cudnn": 91300,
        "nccl": "2.27.7",
        "arch_list": ["sm_80", "sm_90", "sm_100", "sm_120"],
        "available": True,
        "init_error": None,
        "device_count": 8,
        "expected_gpu_count": 8,
        "target_gpus": [0, 1, 2, 3, 4],
        "drafter_gpus": [5, 6, 7],
        "driver_node": "580.95.05",
        "driver_container": {
            "libcuda": "580.95.05",
            "libnvidia_ml": "580.95.05",
            "module": "580.95.05",
            "smi": None,
        },
        "node_gpu_count": 8,
        "container_gpus": None,
        "container_gpu_error": None,
        "compute_apps": [],
        "unit_active": None,
        "restart_pending": [],
        "venv": "/root/venv",
        "venv_real": "/root/venvs/torch-2.11.0-cu130",
        "packages": {
            "missing": [],
            "extra": [],
            "wrong": [],
            "basis": "its pins and their dependencies (no lock)",
        },
        "compile": None,
        "toolchain": {
            "cc": "/usr/bin/gcc",
            "cc_version": "12.2.0",
            "python_include": "/usr/include/python3.11",
            "python_h": True,
        },
        "verify_level": "basic",
    }


def test_summary_without_any_facts_whole():
    v = verify(settings(), {}, {}, where="CT 200 on n1", vmid=200)
    assert v.summary == {
        "torch": None,
        "torch_expected": "2.11.0+cu130",
        "cuda": None,
        "cudnn": None,
        "nccl": None,
        "arch_list": [],
        "available": False,
        "init_error": None,
        "device_count": None,
        "expected_gpu_count": 8,
        "target_gpus": [0, 1, 2, 3, 4],
        "drafter_gpus": [5, 6, 7],
        "driver_node": None,
        "driver_container": {},
        "node_gpu_count": None,
        "container_gpus": None,
        "container_gpu_error": None,
        "compute_apps": [],
        "unit_active": None,
        "restart_pending": [],
        "venv": None,
        "venv_real": None,
        "packages": None,
        "compile": None,
        "toolchain": None,
        "verify_level": "basic",
    }
    assert v.rows == []
    assert v.lines() == [
        "node facts: expected readable facts of node the node; found none (not reachable); "
        "fix: check SSH to the node",
        "container facts: expected CT 200 answers; found no answer; fix: start CT 200 "
        "(pct start 200) or run deploy.py",
    ]


def test_summary_carries_the_facts_it_was_given():
    ct = ct_facts()
    ct.update(gpus=[{"index": 0}], gpu_error="boom", compile={"threads": []})
    ct["torch"]["init_error"] = "none really"
    apps = [{"pid": 7, "gpu_uuid": "GPU-" + UUID.format(9), "used_mib": 5}]
    v = run(
        s=settings(verify_level="compile"),
        node=node_facts(apps=apps),
        ct=ct,
        lock={"torch": "2.11.0+cu130"},
        lock_source="locks/a.txt",
    )
    s = v.summary
    assert (s["container_gpus"], s["container_gpu_error"], s["compile"]) == (
        [{"index": 0}],
        "boom",
        {"threads": []},
    )
    assert (s["init_error"], s["compute_apps"], s["verify_level"]) == (
        "none really",
        apps,
        "compile",
    )
    assert s["packages"] == {"missing": [], "extra": [], "wrong": [], "basis": "locks/a.txt"}


def test_a_device_row_whole():
    assert run().rows[0] == {
        "gpu": 0,
        "node_gpu": 0,
        "name": H200,
        "uuid": UUID.format(0),
        "total_mib": 143771,
        "free_mib": 143771,
        "capability": "9.0",
        "role": "target",
        "status": "ok",
    }


def test_rows_of_a_missing_training_gpu_and_an_unpassed_node_gpu_whole():
    v = run(ct=ct_facts(gpus=range(7)))
    assert v.rows[-2:] == [
        {
            "gpu": 7,
            "node_gpu": None,
            "name": None,
            "uuid": None,
            "total_mib": None,
            "free_mib": None,
            "capability": None,
            "role": "drafter",
            "status": "missing",
        },
        {
            "gpu": None,
            "node_gpu": 7,
            "name": H200,
            "uuid": "GPU-" + UUID.format(7),
            "total_mib": 143771,
            "free_mib": None,
            "capability": None,
            "role": "-",
            "status": "not passed through",
        },
    ]


def test_node_rows_when_cuda_is_unavailable_whole():
    ct = ct_facts()
    ct["torch"].update(available=False, init_error="CUDA unknown error")
    v = run(ct=ct)
    assert len(v.rows) == 8
    assert v.rows[3] == {
        "gpu": None,
        "node_gpu": 3,
        "name": H200,
        "uuid": "GPU-" + UUID.format(3),
        "total_mib": 143771,
        "free_mib": None,
        "capability": None,
        "role": "-",
        "status": "not visible (CUDA unavailable)",
    }


# --- one scenario per problem and warning: every line asserted whole ------------------------------


def ct_with(**torch):
    ct = ct_facts()
    ct["torch"].update(torch)
    return ct


def device(ct, n, **over):
    ct["torch"]["devices"][n].update(over)
    return ct


def stopped_unit(ct):
    ct["unit"] = {"active": "inactive", "started": None, "built": None}
    return ct


def app(pid, gpu, **over):
    return {"pid": pid, "gpu_uuid": "GPU-" + UUID.format(gpu), **over}


TRAIN = ["/root/venv/bin/python", "/data/dflash/train.py"]
# left in the training unit's cgroup after it stopped: what the unit stage clears
UNIT_CG = f"0::/lxc/200/ns/system.slice/{UNIT}"
LEFTOVER = [app(21, 1, used_mib=70000, argv=TRAIN, cmdline=" ".join(TRAIN), cgroup=UNIT_CG)]
# a copy of the training started by hand in the container: a training pvegpu did not start
BY_HAND = [
    app(
        21,
        1,
        used_mib=70000,
        argv=TRAIN,
        cmdline=" ".join(TRAIN),
        cgroup="0::/lxc/200/ns/user.slice/user-0.slice/session-3.scope",
    )
]
OTHERS = [
    app(11, 1, used_mib=500, name="python", cgroup="0::/lxc/201/ns/user.slice"),
    app(12, 2, used_mib=None, cgroup="0::/lxc/200/ns/user.slice"),
    app(13, 3, used_mib=0, cmdline="python x.py"),
    app(14, 9, used_mib=7, cmdline="x"),
    app(15, 4, used_mib=9, cgroup=f"0::/lxc/200/ns/system.slice/{UNIT}"),
]


def uncounted_devices():
    ct = ct_facts(gpus=range(7))
    del ct["torch"]["device_count"]
    return ct


def node_with_gpu2_memory(mib):
    node = node_facts()
    node["gpus"][2]["memory_total_mib"] = mib
    return node


def running_unit_with_pending_restart():
    ct = ct_facts()
    ct["unit"] = {"active": "active", "started": "an older start record", "built": None}
    return ct


def odd_packages():
    ct = ct_facts(
        packages={
            "torch": {"version": "2.11.0+cu128", "requires": []},
            "junk": {"version": "1", "requires": []},
        }
    )
    ct["pip_check"] = {
        "rc": 1,
        "output": "Checked 3 packages in 1ms\na 1 has requirement b>2\n\nc\nd\ne",
    }
    return ct


def pip_check_of(result):
    ct = ct_facts()
    ct["pip_check"] = result
    return ct


def compile_race_without_version():
    ct = ct_with(version=None)
    ct["compile"] = {
        "race": True,
        "threads": [
            {"gpu": 0, "ok": True},
            {"gpu": 1, "ok": False, "error": "RuntimeError: " + FX_RACE},
        ],
    }
    return ct


def container_without_pip_check():
    ct = ct_facts()
    ct["pip_check"] = None
    ct["gpu_error"] = "Failed to initialize NVML: Driver/library version mismatch"
    return ct


def userspace_of(version):
    ct = ct_facts(libcuda=version)
    ct["driver"]["smi"] = version
    return ct


def venv_missing():
    ct = ct_facts()
    ct["present"] = False
    return ct


def node_smi_failed():
    node = node_facts()
    node.update(gpus=None, gpu_error=[])
    return node


SCENARIOS = {
    "device count from the device list": lambda: dict(ct=uncounted_devices()),
    "torch reports more devices than it lists": lambda: dict(ct=ct_with(device_count=9)),
    "memory 2% off is tolerated": lambda: dict(
        node=node_with_gpu2_memory(100000), ct=device(ct_facts(), 2, total_mib=98000)
    ),
    "memory over 2% off": lambda: dict(
        node=node_with_gpu2_memory(100000), ct=device(ct_facts(), 2, total_mib=97999)
    ),
    "another model; a newer minor runs on its major's cubin": lambda: dict(
        ct=device(device(ct_facts(), 1, name="NVIDIA H100"), 4, capability="12.1")
    ),
    "arch of a newer GPU": lambda: dict(
        ct=device(ct_with(arch_list=["sm_80", "sm_90"]), 3, capability="10.0")
    ),
    "unreadable device and unknown UUID": lambda: dict(
        ct=device(device(ct_facts(), 0, error="cudaErrorUnknown"), 6, uuid=None)
    ),
    "processes of others, unit stopped": lambda: dict(
        node=node_facts(apps=OTHERS), ct=stopped_unit(ct_facts())
    ),
    "leftover, unit stopped, verify.py": lambda: dict(
        node=node_facts(apps=LEFTOVER), ct=stopped_unit(device(ct_facts(), 1, free_mib=1000))
    ),
    "leftover, unit stopped, deploying": lambda: dict(
        node=node_facts(apps=LEFTOVER),
        ct=stopped_unit(device(ct_facts(), 1, free_mib=1000)),
        deploying=True,
    ),
    "a copy by hand beside a running unit with a pending restart": lambda: dict(
        node=node_facts(apps=BY_HAND), ct=running_unit_with_pending_restart()
    ),
    "a stray process beside a running unit with a pending restart": lambda: dict(
        node=node_facts(apps=[app(31, 2, used_mib=5, cmdline="python x.py")]),
        ct=running_unit_with_pending_restart(),
    ),
    "a process on a node GPU the container does not have": lambda: dict(
        node=node_facts(apps=[app(41, 7, used_mib=3, cmdline="python y.py")]),
        ct=ct_facts(gpus=range(7)),
    ),
    "a cleared leftover, then another process": lambda: dict(
        node=node_facts(apps=[*LEFTOVER, app(42, 3, used_mib=1, cmdline="python z.py")]),
        ct=stopped_unit(ct_facts()),
        deploying=True,
    ),
    "the unit's own memory counts as free": lambda: dict(
        node=node_facts(
            apps=[
                app(51, 5, used_mib=12, cgroup=f"0::/lxc/200/ns/system.slice/{UNIT}"),
                app(52, 5, used_mib=12, cgroup=f"0::/lxc/200/ns/system.slice/{UNIT}"),
                app(53, 5, used_mib=None, cgroup=f"0::/lxc/200/ns/system.slice/{UNIT}"),
            ]
        ),
        ct=device(device(ct_facts(), 5, free_mib=1000), 6, free_mib=999),
    ),
    "one short with the unit's own memory": lambda: dict(
        node=node_facts(
            apps=[
                app(51, 5, used_mib=12, cgroup=f"0::/lxc/200/ns/system.slice/{UNIT}"),
                app(52, 5, used_mib=12, cgroup=f"0::/lxc/200/ns/system.slice/{UNIT}"),
            ]
        ),
        ct=device(ct_facts(), 5, free_mib=999),
    ),
    "free memory unknown on one GPU, low on a later one": lambda: dict(
        ct=device(device(ct_facts(), 0, free_mib=None), 5, free_mib=1000)
    ),
    "pip check failed without output": lambda: dict(ct=pip_check_of({"rc": 2, "output": None})),
    "torch build differs": lambda: dict(ct=ct_with(version="2.11.0+cu128", cuda="12.8")),
    "two node GPUs not passed through": lambda: dict(ct=ct_facts(gpus=range(6))),
    "a device with a UUID the node does not list": lambda: dict(
        ct=device(ct_facts(), 6, uuid="5a1e9999-0000")
    ),
    "torch counts fewer devices than it lists": lambda: dict(ct=ct_with(device_count=7)),
    "unknown memory of an own process counts as nothing": lambda: dict(
        node=node_facts(
            apps=[
                app(51, 5, used_mib=12, cgroup=f"0::/lxc/200/ns/system.slice/{UNIT}"),
                app(52, 5, used_mib=11, cgroup=f"0::/lxc/200/ns/system.slice/{UNIT}"),
                app(53, 5, used_mib=None, cgroup=f"0::/lxc/200/ns/system.slice/{UNIT}"),
            ]
        ),
        ct=device(ct_facts(), 5, free_mib=1000),
    ),
    "packages missing, wrong and extra against a lock": lambda: dict(
        ct=ct_facts(
            packages={
                "torch": {"version": "2.11.0+cu130", "requires": []},
                **{
                    n: {"version": v, "requires": []}
                    for n, v in (("c", "2"), ("d", "2"), ("e", "1"), ("f", "1"))
                },
            }
        ),
        lock={"torch": "2.11.0+cu130", "a": "1", "b": "1", "c": "1", "d": "1"},
        lock_source="locks/x.txt",
    ),
    "compile check not run": lambda: dict(s=settings(verify_level="compile")),
    "compile race with an unreadable torch version": lambda: dict(
        s=settings(verify_level="compile"), ct=compile_race_without_version()
    ),
    "free memory low": lambda: dict(ct=device(ct_facts(), 5, free_mib=1023)),
    "free memory just enough": lambda: dict(ct=device(ct_facts(), 5, free_mib=1024)),
    "packages and pip check": lambda: dict(ct=odd_packages()),
    "no uv pip check, nvidia-smi mismatch in the container": lambda: dict(
        ct=container_without_pip_check()
    ),
    "no libcuda": lambda: dict(ct=ct_facts(libcuda=None)),
    "userspace differs": lambda: dict(ct=userspace_of("580.82.07")),
    "no venv": lambda: dict(ct=venv_missing()),
    "torch import error": lambda: dict(ct=ct_with(import_error="ImportError: libx")),
    "torch CUDA differs": lambda: dict(ct=ct_with(cuda="12.8")),
    "CUDA init without reason": lambda: dict(
        ct=ct_with(available=False, devices=[], device_count=0)
    ),
    "node nvidia-smi failed without output": lambda: dict(node=node_smi_failed()),
    "no node driver": lambda: dict(node=node_facts(driver=None)),
    "node GPU count": lambda: dict(node=node_facts(gpus=9)),
    "driver too old": lambda: dict(node=node_facts(driver="570.86.10", gpus=8)),
    "reduced driver": lambda: dict(
        s=settings(torch_variant="cu128"),
        node=node_facts(driver="560.35.03"),
        ct=ct_facts(version="2.11.0+cu128", cuda="12.8"),
    ),
}


def outcome(name):
    v = run(**SCENARIOS[name]())
    return {
        "lines": v.lines(),
        "gpu of each": [p.gpu for p in v.problems],
        "warnings": v.warnings,
        "status": {i: r["status"] for i, r in enumerate(v.rows) if r["status"] != "ok"},
    }


EXPECTED = {
    "device count from the device list": {
        "lines": [
            "GPU count: expected 8 GPUs visible to torch (expected_gpu_count); found 7 (node "
            "GPU 7 not passed through); fix: pass every /dev/nvidiaN through to CT 200: run "
            "deploy.py",
            "GPU 7 (drafter): expected CUDA device 7 present in CT 200; found only 7 devices "
            "(0..6); fix: pass the node's GPUs through to CT 200: run deploy.py",
        ],
        "gpu of each": [None, 7],
        "warnings": [],
        "status": {7: "missing", 8: "not passed through"},
    },
    "torch reports more devices than it lists": {
        "lines": [
            "GPU count: expected 8 GPUs visible to torch (expected_gpu_count); found 9; fix: "
            "pass every /dev/nvidiaN through to CT 200: run deploy.py",
        ],
        "gpu of each": [None],
        "warnings": [],
        "status": {},
    },
    "memory 2% off is tolerated": {
        "lines": [],
        "gpu of each": [],
        "warnings": [],
        "status": {},
    },
    "memory over 2% off": {
        "lines": [
            "GPU 2 memory: expected 100000 MiB total (node GPU 2); found 97999 MiB in torch; "
            "fix: check the GPU (MIG mode? nvidia-smi -q on the node)",
        ],
        "gpu of each": [2],
        "warnings": [],
        "status": {2: "memory differs"},
    },
    "another model; a newer minor runs on its major's cubin": {
        "lines": [
            "GPU 1 model: expected NVIDIA H200 (node GPU 1); found NVIDIA H100; fix: check "
            "which GPU is passed through (pct config)",
        ],
        "gpu of each": [1],
        "warnings": [],
        "status": {1: "model differs"},
    },
    "arch of a newer GPU": {
        "lines": [
            "GPU 3 arch: expected sm_100 in the build's arch list; found sm_80 sm_90 for "
            "compute capability 10.0; fix: choose a torch_variant built for this GPU",
        ],
        "gpu of each": [3],
        "warnings": [],
        "status": {3: "sm_100 unsupported"},
    },
    "unreadable device and unknown UUID": {
        "lines": [
            "GPU 0: expected its properties readable by torch; found cudaErrorUnknown; fix: "
            "check the GPU on the node (nvidia-smi -q) and its passthrough",
            "GPU 6 identity: expected a UUID the node's nvidia-smi lists; found no UUID; fix: "
            "check the passthrough maps the node's GPUs (pct config; run deploy.py)",
        ],
        "gpu of each": [0, 6],
        "warnings": [],
        "status": {0: "unreadable", 6: "unknown to node", 8: "not passed through"},
    },
    "processes of others, unit stopped": {
        "lines": [
            "GPU 1 (target) free: expected no compute process but the training unit's; found "
            "pid 11 in CT 201 (python) holding 500 MiB on node GPU 1; fix: node GPU 1 is also "
            "in use by CT 201: stop that workload or pass CT 200 other GPUs (pvegpu never "
            "stops another container's work)",
            "GPU 3 (target) free: expected no compute process but the training unit's; found "
            "pid 13 (python x.py) holding 0 MiB on node GPU 3; fix: if it is left from a "
            "killed run, stop it on node n1: kill 13 (then check nvidia-smi)",
            "GPU 4 (target) free: expected no compute process but the training unit's; found "
            "leftover training process 15 in CT 200 (dflash-train.service, inactive) (?) "
            "holding 9 MiB on node GPU 4; fix: run deploy.py: it clears leftover training "
            "processes before it starts the unit",
        ],
        "gpu of each": [1, 3, 4],
        "warnings": [
            # a process of CT 200 outside the stopped unit is the training running there
            # (issue 20): the unit waits for it, it is no leftover
            "GPU 2 is held by the running training (pid 12, started by hand): "
            "dflash-train.service waits for it; deploy.py --data restart_training=true takes "
            "it over",
            "pid 14 (x) holding 7 MiB on node GPU None, not a training GPU of CT 200",
        ],
        "status": {
            1: "held by pid 11",
            2: "training pid 12 (waiting)",
            3: "held by pid 13",
            4: "held by pid 15",
        },
    },
    "leftover, unit stopped, verify.py": {
        "lines": [
            "GPU 1 (target) free: expected no compute process but the training unit's; found "
            "leftover training process 21 in CT 200 (dflash-train.service, inactive) "
            "(/root/venv/bin/python /data/dflash/train.py) holding 70000 MiB on node GPU 1; fix: "
            "run deploy.py: it clears leftover training processes before it starts the unit",
            "GPU 1 (target) memory: expected >= 1024 MiB free (min_free_gpu_mib); found 1000 "
            "MiB free; fix: free the GPU (see its compute processes: nvidia-smi on the node)",
        ],
        "gpu of each": [1, 1],
        "warnings": [],
        "status": {1: "held by pid 21; low free memory"},
    },
    "leftover, unit stopped, deploying": {
        "lines": [],
        "gpu of each": [],
        "warnings": [
            "leftover training process 21 on GPU 1: cleared before the unit starts",
        ],
        "status": {1: "leftover pid 21 (cleared before start)"},
    },
    "a copy by hand beside a running unit with a pending restart": {
        "lines": [
            "GPU 1 (target) free: expected no compute process but the training unit's; found "
            "training process pvegpu did not start 21 in CT 200 (outside dflash-train.service) "
            "(/root/venv/bin/python /data/dflash/train.py) holding 70000 MiB on node GPU 1; fix: "
            "a second trainer beside the running dflash-train.service: stop it in CT 200 (kill "
            "21 there), or run deploy.py --data restart_training=true (it takes it over: a "
            "graceful stop, once the new build is verified)",
        ],
        "gpu of each": [1],
        "warnings": [],
        "status": {1: "held by pid 21"},
    },
    "a stray process beside a running unit with a pending restart": {
        "lines": [
            "GPU 2 (target) free: expected no compute process but the training unit's; found "
            "pid 31 (python x.py) holding 5 MiB on node GPU 2; fix: if it is left from a "
            "killed run, stop it on node n1: kill 31 (then check nvidia-smi)",
        ],
        "gpu of each": [2],
        "warnings": [],
        "status": {2: "held by pid 31"},
    },
    "a process on a node GPU the container does not have": {
        "lines": [
            "GPU count: expected 8 GPUs visible to torch (expected_gpu_count); found 7 (node "
            "GPU 7 not passed through); fix: pass every /dev/nvidiaN through to CT 200: run "
            "deploy.py",
            "GPU 7 (drafter): expected CUDA device 7 present in CT 200; found only 7 devices "
            "(0..6); fix: pass the node's GPUs through to CT 200: run deploy.py",
        ],
        "gpu of each": [None, 7],
        "warnings": [
            "pid 41 (python y.py) holding 3 MiB on node GPU 7, not a training GPU of CT 200",
        ],
        "status": {7: "missing", 8: "not passed through; pid 41"},
    },
    "a cleared leftover, then another process": {
        "lines": [
            "GPU 3 (target) free: expected no compute process but the training unit's; found "
            "pid 42 (python z.py) holding 1 MiB on node GPU 3; fix: if it is left from a "
            "killed run, stop it on node n1: kill 42 (then check nvidia-smi)",
        ],
        "gpu of each": [3],
        "warnings": [
            "leftover training process 21 on GPU 1: cleared before the unit starts",
        ],
        "status": {1: "leftover pid 21 (cleared before start)", 3: "held by pid 42"},
    },
    "the unit's own memory counts as free": {
        "lines": [
            "GPU 6 (drafter) memory: expected >= 1024 MiB free (min_free_gpu_mib); found 999 "
            "MiB free; fix: free the GPU (see its compute processes: nvidia-smi on the node)",
        ],
        "gpu of each": [6],
        "warnings": [],
        "status": {6: "low free memory"},
    },
    "one short with the unit's own memory": {
        "lines": [
            "GPU 5 (drafter) memory: expected >= 1024 MiB free (min_free_gpu_mib); found 999 "
            "MiB free; fix: free the GPU (see its compute processes: nvidia-smi on the node)",
        ],
        "gpu of each": [5],
        "warnings": [],
        "status": {5: "low free memory"},
    },
    "free memory unknown on one GPU, low on a later one": {
        "lines": [
            "GPU 5 (drafter) memory: expected >= 1024 MiB free (min_free_gpu_mib); found 1000 "
            "MiB free; fix: free the GPU (see its compute processes: nvidia-smi on the node)",
        ],
        "gpu of each": [5],
        "warnings": [],
        "status": {5: "low free memory"},
    },
    "pip check failed without output": {
        "lines": [
            "venv dependencies: expected uv pip check clean; found exit 2; fix: run deploy.py "
            "--data rebuild=venv",
        ],
        "gpu of each": [None],
        "warnings": [],
        "status": {},
    },
    "torch build differs": {
        "lines": [
            "torch build: expected 2.11.0+cu130; found 2.11.0+cu128 in /root/venv; fix: run "
            "deploy.py (switches /root/venv to 2.11.0+cu130; the other build is kept for "
            "rollback)",
        ],
        "gpu of each": [None],
        "warnings": [],
        "status": {},
    },
    "two node GPUs not passed through": {
        "lines": [
            "GPU count: expected 8 GPUs visible to torch (expected_gpu_count); found 6 (node "
            "GPU 6, 7 not passed through); fix: pass every /dev/nvidiaN through to CT 200: run "
            "deploy.py",
            "GPU 6 (drafter): expected CUDA device 6 present in CT 200; found only 6 devices "
            "(0..5); fix: pass the node's GPUs through to CT 200: run deploy.py",
            "GPU 7 (drafter): expected CUDA device 7 present in CT 200; found only 6 devices "
            "(0..5); fix: pass the node's GPUs through to CT 200: run deploy.py",
        ],
        "gpu of each": [None, 6, 7],
        "warnings": [],
        "status": {6: "missing", 7: "missing", 8: "not passed through", 9: "not passed through"},
    },
    "a device with a UUID the node does not list": {
        "lines": [
            "GPU 6 identity: expected a UUID the node's nvidia-smi lists; found 5a1e9999-0000; "
            "fix: check the passthrough maps the node's GPUs (pct config; run deploy.py)",
        ],
        "gpu of each": [6],
        "warnings": [],
        "status": {6: "unknown to node", 8: "not passed through"},
    },
    "torch counts fewer devices than it lists": {
        "lines": [
            "GPU count: expected 8 GPUs visible to torch (expected_gpu_count); found 7; fix: "
            "pass every /dev/nvidiaN through to CT 200: run deploy.py",
            "GPU 7 (drafter): expected CUDA device 7 present in CT 200; found only 7 devices "
            "(0..6); fix: pass the node's GPUs through to CT 200: run deploy.py",
        ],
        "gpu of each": [None, 7],
        "warnings": [],
        "status": {7: "problem"},
    },
    "unknown memory of an own process counts as nothing": {
        "lines": [
            "GPU 5 (drafter) memory: expected >= 1024 MiB free (min_free_gpu_mib); found 1000 "
            "MiB free; fix: free the GPU (see its compute processes: nvidia-smi on the node)",
        ],
        "gpu of each": [5],
        "warnings": [],
        "status": {5: "low free memory"},
    },
    "packages missing, wrong and extra against a lock": {
        "lines": [
            "venv packages: expected exactly locks/x.txt; found missing a==1, b==1; wrong c 2 "
            "(want 1), d 2 (want 1); extra e==1, f==1; fix: run deploy.py (re-syncs the venv), "
            "or deploy.py --data rebuild=venv",
        ],
        "gpu of each": [None],
        "warnings": [],
        "status": {},
    },
    "compile check not run": {
        "lines": [],
        "gpu of each": [],
        "warnings": [
            "compile check not run: CUDA is not available in the venv",
        ],
        "status": {},
    },
    "compile race with an unreadable torch version": {
        "lines": [
            "torch build: expected 2.11.0+cu130; found None in /root/venv; fix: run deploy.py "
            "(switches /root/venv to 2.11.0+cu130; the other build is kept for rollback)",
            "concurrent torch.compile: expected flex_attention compiles from 2 threads at once "
            "(one per GPU, as the trainer does); found FX-tracing race on GPU 1 with torch "
            "2.11.0+cu130: RuntimeError: Detected that you are using FX to symbolically trace "
            "a dynamo-optimized function; fix: torch's FX-tracing flag is process-wide: run "
            "one training process per GPU, or compile under a lock and warm each device in "
            "turn before training",
        ],
        "gpu of each": [None, None],
        "warnings": [],
        "status": {},
    },
    "free memory low": {
        "lines": [
            "GPU 5 (drafter) memory: expected >= 1024 MiB free (min_free_gpu_mib); found 1023 "
            "MiB free; fix: free the GPU (see its compute processes: nvidia-smi on the node)",
        ],
        "gpu of each": [5],
        "warnings": [],
        "status": {5: "low free memory"},
    },
    "free memory just enough": {
        "lines": [],
        "gpu of each": [],
        "warnings": [],
        "status": {},
    },
    "packages and pip check": {
        "lines": [
            "venv packages: expected exactly its pins and their dependencies (no lock); found "
            "wrong torch 2.11.0+cu128 (want 2.11.0+cu130); extra junk==1; fix: run deploy.py "
            "(re-syncs the venv), or deploy.py --data rebuild=venv",
            "venv dependencies: expected uv pip check clean; found a 1 has requirement b>2; c; "
            "d; fix: run deploy.py --data rebuild=venv",
        ],
        "gpu of each": [None, None],
        "warnings": [],
        "status": {},
    },
    "no uv pip check, nvidia-smi mismatch in the container": {
        "lines": [],
        "gpu of each": [],
        "warnings": [
            "nvidia-smi in CT 200: Failed to initialize NVML: Driver/library version mismatch",
            "uv pip check not run (uv not installed in the container)",
        ],
        "status": {},
    },
    "no libcuda": {
        "lines": [
            "driver parity: expected libcuda.so.580.95.05 in CT 200 (= node); found no "
            "libcuda.so.1 in CT 200; fix: run deploy.py (installs "
            "NVIDIA-Linux-x86_64-580.95.05.run --no-kernel-modules in the container)",
        ],
        "gpu of each": [None],
        "warnings": [],
        "status": {},
    },
    "userspace differs": {
        "lines": [
            "driver parity: expected container userspace 580.95.05 (= node's module); found "
            "libcuda 580.82.07, libnvidia-ml 580.82.07, nvidia-smi 580.82.07 in CT 200; fix: "
            "run deploy.py: it installs the node driver's exact userspace",
        ],
        "gpu of each": [None],
        "warnings": [],
        "status": {},
    },
    "no venv": {
        "lines": [
            "venv: expected /root/venv with torch 2.11.0+cu130; found no "
            "/root/venv/bin/python; fix: run deploy.py (it builds the venv and links it)",
        ],
        "gpu of each": [None],
        "warnings": [],
        "status": dict.fromkeys([0, 1, 2, 3, 4, 5, 6, 7], "not visible (CUDA unavailable)"),
    },
    "torch import error": {
        "lines": [
            "torch import: expected import torch works in /root/venv; found ImportError: libx; "
            "fix: run deploy.py --data rebuild=venv",
        ],
        "gpu of each": [None],
        "warnings": [],
        "status": dict.fromkeys([0, 1, 2, 3, 4, 5, 6, 7], "not visible (CUDA unavailable)"),
    },
    "torch CUDA differs": {
        "lines": [
            "torch CUDA: expected torch.version.cuda 13.0 (cu130); found 12.8; fix: run "
            "deploy.py --data rebuild=venv",
        ],
        "gpu of each": [None],
        "warnings": [],
        "status": {},
    },
    "CUDA init without reason": {
        "lines": [
            "CUDA init: expected torch.cuda.is_available() is True; found CUDA error: "
            "is_available() is False, no CUDA device visible; fix: check the driver parity and "
            "the GPU passthrough of CT 200: run deploy.py",
        ],
        "gpu of each": [None],
        "warnings": [],
        "status": dict.fromkeys([0, 1, 2, 3, 4, 5, 6, 7], "not visible (CUDA unavailable)"),
    },
    "node nvidia-smi failed without output": {
        "lines": [
            "node GPUs: expected nvidia-smi on n1 lists the GPUs; found nvidia-smi failed; "
            "fix: fix the node's driver install (nvidia-smi must work on the node)",
        ],
        "gpu of each": [None],
        "warnings": [],
        "status": {},
    },
    "no node driver": {
        "lines": [
            "node driver: expected an NVIDIA driver >= 580.65.06 loaded on n1; found none "
            "(/proc/driver/nvidia/version missing); fix: install the NVIDIA driver >= "
            "580.65.06 on the node and reboot",
        ],
        "gpu of each": [None],
        "warnings": [],
        "status": {},
    },
    "node GPU count": {
        "lines": [
            "node GPU count: expected 8 (expected_gpu_count); found 9 listed by nvidia-smi on "
            "n1; fix: check the GPUs (nvidia-smi -L on the node) or set expected_gpu_count",
        ],
        "gpu of each": [None],
        "warnings": [],
        "status": {8: "not passed through"},
    },
    "driver too old": {
        "lines": [
            "driver for cu130: expected >= 580.65.06 (CUDA 13.0); found 570.86.10 on node n1; "
            "fix: upgrade the node's NVIDIA driver to >= 580.65.06 (then deploy.py matches the "
            "container), or set torch_variant to a build the driver supports",
            "driver parity: expected container userspace 570.86.10 (= node's module); found "
            "libcuda 580.95.05, libnvidia-ml 580.95.05 in CT 200; fix: run deploy.py: it "
            "installs the node driver's exact userspace",
        ],
        "gpu of each": [None, None],
        "warnings": [],
        "status": {},
    },
    "reduced driver": {
        "lines": [
            "driver parity: expected container userspace 560.35.03 (= node's module); found "
            "libcuda 580.95.05, libnvidia-ml 580.95.05 in CT 200; fix: run deploy.py: it "
            "installs the node driver's exact userspace",
        ],
        "gpu of each": [None],
        "warnings": [
            "driver 560.35.03 runs cu128 only in CUDA minor-version compatibility mode "
            "(reduced features); >= 570.26 recommended",
        ],
        "status": {},
    },
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_each_problem_and_warning_whole(name):
    assert outcome(name) == EXPECTED[name]


def test_without_a_unit_name_only_the_training_command_is_cleared():
    m = training_matcher(settings())
    in_ct = {
        "argv": ["/usr/bin/python3", "x.py"],
        "cgroup": "0::/lxc/200/ns/system.slice/x.service",
    }
    assert not cleared_at_start(in_ct, 200, None, m)
    assert not cleared_at_start(in_ct, 200, "", m)
    assert cleared_at_start(in_ct, 200, "x.service", m)


@pytest.mark.parametrize(
    "error, gpus, warned",
    [
        ("Failed to initialize NVML: Driver/library version mismatch", None, True),
        ("Failed to initialize NVML: Driver/library version mismatch", [{"index": 0}], True),
        ("NVIDIA-SMI has failed", None, True),
        ("NVIDIA-SMI has failed", [{"index": 0}], False),  # it listed GPUs: nothing to add
        ("nvidia-smi not installed", None, False),  # the driver parity line says more
    ],
)
def test_container_nvidia_smi_failure_is_a_warning_only_when_it_says_more(error, gpus, warned):
    ct = ct_facts()
    ct.update(gpu_error=error, gpus=gpus)
    assert run(ct=ct).warnings == ([f"nvidia-smi in CT 200: {error}"] if warned else [])


def test_node_nvidia_smi_error_lines_are_joined():
    node = node_facts()
    node.update(gpus=None, gpu_error=["nvidia-smi failed (exit 9):", "No devices were found"])
    (problem,) = run(node=node).problems
    assert problem.found == "nvidia-smi failed (exit 9): No devices were found"


def test_a_device_without_a_role_is_listed_with_a_dash():
    s = settings(target_gpus=[0, 1, 2], drafter_gpus=[3])
    v = run(s=s)
    assert v.ok, v.lines()
    assert [r["role"] for r in v.rows] == ["target"] * 3 + ["drafter"] + ["-"] * 4
