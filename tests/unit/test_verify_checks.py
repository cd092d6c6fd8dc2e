"""Every comparison of the verification, on facts shaped like the real ones (pure: no hosts)."""

import copy

import pytest

from pvegpu.locks import parse_pins
from pvegpu.plan.unit import digest, render_build_env, render_unit, training_matcher
from pvegpu.settings import SettingsError
from pvegpu.verification import (
    FX_RACE,
    arch_covers,
    cleared_at_start,
    is_own_process,
    is_training_command,
    package_drift,
    required_closure,
    verify,
)
from tests.unit.verify_facts import UUID, ct_facts, node_facts, settings


def run(s=None, node=None, ct=None, **kw):
    return verify(
        s or settings(),
        node if node is not None else node_facts(),
        ct if ct is not None else ct_facts(),
        where="CT 200 on n1",
        vmid=200,
        node_name="n1",
        unit="dflash-train.service",
        **kw,
    )


def checks_of(v):
    return [p.check for p in v.problems]


def test_happy_path_has_no_problem_and_eight_rows_with_roles():
    v = run()
    assert v.ok, v.lines()
    assert [r["role"] for r in v.rows] == ["target"] * 5 + ["drafter"] * 3
    assert all(r["status"] == "ok" for r in v.rows)
    assert v.summary["driver_node"] == "580.95.05" and v.summary["device_count"] == 8


def test_seven_gpus_passed_through():
    v = run(ct=ct_facts(gpus=[0, 1, 2, 4, 5, 6, 7]))
    assert checks_of(v) == ["GPU count", "GPU 7 (drafter)"]
    assert "found 7 (node GPU 3 not passed through)" in v.lines()[0]
    assert {"gpu": None, "node_gpu": 3}.items() <= next(
        r for r in v.rows if r["status"] == "not passed through"
    ).items()
    assert next(r for r in v.rows if r["gpu"] == 3)["node_gpu"] == 4
    assert next(r for r in v.rows if r["gpu"] == 7)["status"] == "missing"


def test_driver_too_old_for_the_variant():
    v = run(node=node_facts(driver="575.57.08"), ct=ct_facts(libcuda="575.57.08"))
    assert checks_of(v) == ["driver for cu130"]
    line = v.lines()[0]
    assert "expected >= 580.65.06 (CUDA 13.0); found 575.57.08 on node n1" in line
    assert "upgrade the node's NVIDIA driver" in line


def test_reduced_driver_is_a_warning_only():
    v = run(
        s=settings(torch_variant="cu128"),
        node=node_facts(driver="550.54.15"),
        ct=ct_facts(version="2.11.0+cu128", cuda="12.8", libcuda="550.54.15"),
    )
    assert v.ok, v.lines()
    assert "compatibility mode" in v.warnings[0]


def test_cu128_installed_while_cu130_expected():
    v = run(ct=ct_facts(version="2.11.0+cu128", cuda="12.8"))
    assert checks_of(v) == ["torch build"]  # the CUDA version and package lines would repeat it
    assert v.lines()[0].startswith("torch build: expected 2.11.0+cu130; found 2.11.0+cu128")


def test_torch_cuda_mismatch_with_the_right_label():
    v = run(ct=ct_facts(cuda="12.9"))
    assert checks_of(v) == ["torch CUDA"]


def test_stale_process_on_gpu6():
    app = {
        "pid": 4242,
        "name": "python3",
        "gpu_uuid": "GPU-" + UUID.format(6),
        "used_mib": 20000,
        "cmdline": "python3 train_old.py",
    }
    v = run(node=node_facts(apps=[app]))
    assert checks_of(v) == ["GPU 6 (drafter) free"]
    assert "pid 4242 (python3 train_old.py) holding 20000 MiB" in v.lines()[0]
    assert "kill 4242" in v.lines()[0]
    assert next(r for r in v.rows if r["gpu"] == 6)["status"] == "held by pid 4242"


def test_own_training_process_is_not_stale_and_its_memory_counts_as_free():
    app = {
        "pid": 9,
        "name": "python",
        "gpu_uuid": "GPU-" + UUID.format(0),
        "used_mib": 143000,
        "cmdline": "/root/venv/bin/python /data/dflash/train.py",
        "cgroup": "0::/lxc/200/ns/system.slice/dflash-train.service",
    }
    ct = ct_facts()
    ct["torch"]["devices"][0]["free_mib"] = 771
    assert run(node=node_facts(apps=[app]), ct=ct).ok
    app2 = dict(app, cgroup="0::/lxc/201/ns/system.slice/dflash-train.service")
    assert checks_of(run(node=node_facts(apps=[app2]), ct=ct)) == [
        "GPU 0 (target) free",
        "GPU 0 (target) memory",
    ]


def test_process_on_a_gpu_that_is_not_for_training_is_a_warning():
    s = settings(target_gpus=[0, 1, 2, 3], drafter_gpus=[5, 6, 7])
    app = {
        "pid": 5,
        "name": "x",
        "gpu_uuid": "GPU-" + UUID.format(4),
        "used_mib": 10,
        "cmdline": "x",
    }
    v = run(s=s, node=node_facts(apps=[app]))
    assert v.ok and "not a training GPU" in v.warnings[0]


def test_low_free_memory():
    v = run(ct=ct_facts(free=512))
    assert checks_of(v) == [
        f"GPU {i} ({'target' if i < 5 else 'drafter'}) memory" for i in range(8)
    ]
    assert ">= 1024 MiB free (min_free_gpu_mib); found 512 MiB free" in v.lines()[0]


def test_cuda_init_error_is_reported_with_its_reason_and_fix():
    ct = ct_facts()
    ct["torch"].update(
        available=False,
        device_count=0,
        devices=[],
        init_error="Found no NVIDIA driver on your system.",
    )
    ct["driver"] = {"libcuda": None, "libnvidia_ml": None, "smi": None, "module": "580.95.05"}
    v = run(ct=ct)
    assert checks_of(v) == ["driver parity", "CUDA init"]
    assert "found CUDA error: Found no NVIDIA driver" in v.lines()[1]
    assert "libcuda.so.1" in v.lines()[1]
    assert all(r["status"].startswith("not visible") for r in v.rows)


@pytest.mark.parametrize(
    "error, fix",
    [
        (
            "Error 803: system has unsupported display driver / cuda driver combination",
            "exact userspace",
        ),
        (
            "The NVIDIA driver on your system is too old (found version 12080).",
            "upgrade the node's",
        ),
        ("CUDA unknown error - this may be due to an incorrectly set up environment", "nvidia-uvm"),
    ],
)
def test_cuda_init_fixes(error, fix):
    ct = ct_facts()
    ct["torch"].update(available=False, device_count=0, devices=[], init_error=error)
    assert fix in run(ct=ct).lines()[0]


def test_driver_parity_mismatch():
    v = run(ct=ct_facts(libcuda="575.57.08"))
    assert checks_of(v) == ["driver parity"]
    assert "found libcuda 575.57.08, libnvidia-ml 575.57.08 in CT 200" in v.lines()[0]


def test_torch_import_error_and_missing_venv():
    ct = ct_facts()
    ct["torch"] = {"import_error": "ModuleNotFoundError: No module named 'torch'"}
    assert checks_of(run(ct=ct))[0] == "torch import"
    ct = ct_facts()
    ct.update(present=False, torch=None, packages=None, pip_check=None)
    assert checks_of(run(ct=ct)) == ["venv"]


def test_identity_model_memory_and_arch():
    ct = ct_facts()
    ct["torch"]["devices"][1]["uuid"] = "deadbeef"
    ct["torch"]["devices"][2]["name"] = "NVIDIA H100 80GB HBM3"
    ct["torch"]["devices"][3]["total_mib"] = 81559
    ct["torch"]["devices"][4]["capability"] = "12.0"
    ct["torch"]["arch_list"] = ["sm_80", "sm_90"]
    v = run(ct=ct)
    assert checks_of(v) == ["GPU 1 identity", "GPU 2 model", "GPU 3 memory", "GPU 4 arch"]
    ct["torch"]["devices"][3]["total_mib"] = 143771 - 1000  # within tolerance
    assert "GPU 3 memory" not in checks_of(run(ct=ct))


def test_node_side_problems():
    node = node_facts()
    node["gpus"], node["gpu_error"] = None, ["NVIDIA-SMI has failed"]
    assert checks_of(run(node=node)) == ["node GPUs"]
    assert checks_of(run(node=node_facts(gpus=7)))[0] == "node GPU count"
    node = node_facts()
    node["driver_version"] = None
    assert checks_of(run(node=node))[0] == "node driver"
    assert checks_of(run(node={}))[0] == "node facts"
    assert checks_of(run(ct={}))[0] == "container facts"


def test_overlapping_roles_fail_in_the_settings():
    with pytest.raises(SettingsError, match=r"target_gpus and drafter_gpus overlap on \[5\]"):
        settings(target_gpus=[0, 1, 2, 3, 4, 5])


# --- venv vs its lock ---------------------------------------------------------------------------
def test_package_drift_against_a_lock():
    lock = parse_pins(
        "torch==2.11.0+cu130 \\\n    --hash=sha256:00\nfilelock==3.20.0\n    # via torch\n"
    )
    installed = {
        "torch": {"version": "2.11.0+cu130"},
        "Filelock": {"version": "3.19.0"},
        "sglang_junk": {"version": "0.1"},
    }
    missing, extra, wrong = package_drift(installed, settings(), lock)
    assert (missing, extra, wrong) == ([], ["sglang-junk==0.1"], [("filelock", "3.20.0", "3.19.0")])
    v = run(ct=ct_facts(packages=installed), lock=lock, lock_source="locks/cu130.lock")
    assert checks_of(v) == ["venv packages"]
    assert v.lines()[0].startswith(
        "venv packages: expected exactly locks/cu130.lock; found wrong "
        "filelock 3.19.0 (want 3.20.0); extra sglang-junk==0.1"
    )


def test_package_drift_without_lock_uses_the_dependency_closure():
    s = settings(training_requirements=["transformers==5.6.0"])
    installed = {
        "torch": {
            "version": "2.11.0+cu130",
            "requires": ["filelock", "nvidia-nccl-cu13; platform_system == 'Linux'"],
        },
        "filelock": {"version": "3.20.0", "requires": []},
        "nvidia-nccl-cu13": {"version": "2.27.7", "requires": []},
        "transformers": {
            "version": "5.6.0",
            "requires": ["tokenizers>=0.22", "pytest; extra == 'testing'"],
        },
        "tokenizers": {"version": "0.22.1", "requires": []},
        "pytest": {"version": "8.0.0", "requires": []},
        "pip": {"version": "25.0", "requires": []},
    }
    missing, extra, wrong = package_drift(installed, s, None)
    assert (missing, extra, wrong) == ([], ["pytest==8.0.0"], [])
    del installed["transformers"]
    assert package_drift(installed, s, None)[0] == ["transformers==5.6.0"]


def test_required_closure_follows_requested_extras():
    inst = {
        "a": {"requires": ["b[x]"]},
        "b": {"requires": ["c; extra == 'x'", "d; extra == 'y'"]},
        "c": {"requires": []},
        "d": {"requires": []},
    }
    assert required_closure(inst, {"a": set()}) == {"a", "b", "c"}


def test_pip_check_failure_and_missing_uv():
    ct = ct_facts()
    ct["pip_check"] = {
        "rc": 1,
        "output": "Checked 2 packages in 1ms\nThe package `transformers` "
        "requires `tokenizers>=0.22`, but it's not installed",
    }
    v = run(ct=ct)
    assert checks_of(v) == ["venv dependencies"]
    assert "requires `tokenizers>=0.22`" in v.lines()[0]
    ct["pip_check"] = None
    v = run(ct=ct)
    assert v.ok and "uv pip check not run" in v.warnings[0]


# --- concurrent compile ---------------------------------------------------------------------------
def compile_doc(race=False, fallback=(), error=None, serial_ok=True):
    threads = [
        {
            "gpu": i,
            "ok": not (race and i > 0),
            "seconds": 0.2,
            "error": f"RuntimeError: Detected that you are using {FX_RACE}. This is not "
            "supported at the moment."
            if race and i > 0
            else None,
        }
        for i in range(8)
    ]
    return {
        "ok": not race and not fallback,
        "error": error,
        "race": race,
        "fallback": list(fallback),
        "threads": threads,
        "gpus": list(range(8)),
        "seconds": 0.25,
        "serial": ({"ok": serial_ok, "seconds": 0.2} if race else None),
    }


def test_compile_race_names_the_race_and_the_workarounds():
    s = settings(verify_level="compile")
    ct = ct_facts()
    ct["compile"] = compile_doc(race=True)
    v = run(s=s, ct=ct)
    assert checks_of(v) == ["concurrent torch.compile"]
    line = v.lines()[0]
    assert "FX-tracing race on GPU 1, 2, 3, 4, 5, 6, 7 with torch 2.11.0+cu130" in line
    assert (
        "one training process per GPU" in line
        and "compile under a lock and warm each device" in line
    )
    assert "worked here in 0.2 s" in line


def test_compile_clean_fallback_error_and_not_run():
    s = settings(verify_level="compile")
    ct = ct_facts()
    ct["compile"] = compile_doc()
    assert run(s=s, ct=ct).ok
    ct["compile"] = compile_doc(
        fallback=[
            "flex_attention called without torch.compile() - this "
            "will use an unfused implementation"
        ]
    )
    assert "fell back: flex_attention called without torch.compile()" in run(s=s, ct=ct).lines()[0]
    ct["compile"] = compile_doc(
        error="cannot import torch.compile / flex_attention: ImportError: x"
    )
    assert "cannot import" in run(s=s, ct=ct).lines()[0]
    ct["compile"] = None
    v = run(s=s, ct=ct)
    assert v.ok and "compile check not run" in v.warnings[0]
    # basic level ignores a compile document entirely
    ct["compile"] = compile_doc(race=True)
    assert run(ct=copy.deepcopy(ct)).ok


# --- helpers ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "cap, archs, expected",
    [
        ("9.0", ["sm_80", "sm_90"], "sm_90"),
        ("8.9", ["sm_80", "sm_86"], "sm_80"),
        ("9.0", ["sm_80", "compute_80"], "compute_80"),
        ("10.0", ["sm_90a"], None),
        ("9.0", ["sm_90a"], "sm_90a"),
        ("12.0", ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100"], None),
        ("[N/A]", ["sm_90"], None),
    ],
)
def test_arch_covers(cap, archs, expected):
    assert arch_covers(cap, archs) == expected


def test_process_in_another_container_or_outside_the_unit():
    base = {
        "pid": 7,
        "name": "python",
        "gpu_uuid": "GPU-" + UUID.format(2),
        "used_mib": 5000,
        "cmdline": "python bench.py",
    }
    other = run(
        node=node_facts(apps=[dict(base, cgroup="0::/lxc/201/ns/user.slice/session.scope")])
    )
    assert "pid 7 in CT 201 (python bench.py)" in other.lines()[0]
    assert "also in use by CT 201" in other.lines()[0] and "kill" not in other.lines()[0]
    manual = run(
        node=node_facts(apps=[dict(base, cgroup="0::/lxc/200/ns/user.slice/session-3.scope")])
    )
    assert "pid 7 in CT 200 (outside dflash-train.service)" in manual.lines()[0]
    assert "kill 7" in manual.lines()[0]
    v1 = (
        "12:pids:/lxc/200/ns/system.slice/dflash-train.service\n"
        "0::/lxc/200/ns/system.slice/dflash-train.service"
    )
    assert run(node=node_facts(apps=[dict(base, cgroup=v1)])).ok


def test_is_own_process_needs_container_and_unit():
    unit = "dflash-train.service"
    assert is_own_process({"cgroup": "0::/lxc/200/ns/system.slice/dflash-train.service"}, 200, unit)
    assert not is_own_process({"cgroup": "0::/lxc/200/ns/user.slice/session-1.scope"}, 200, unit)
    assert not is_own_process(
        {"cgroup": "0::/lxc/2000/ns/system.slice/dflash-train.service"}, 200, unit
    )
    assert not is_own_process(
        {"cgroup": "0::/lxc/200/ns/system.slice/dflash-train.service"}, 200, None
    )


# ---- leftover training processes: what the training unit stage clears before it starts the unit
TRAIN_ARGV = ["/root/venv/bin/python", "/data/dflash/train.py", "--resume"]
UNIT_CG = "0::/lxc/200/ns/system.slice/dflash-train.service"
HAND_CG = "0::/lxc/200/ns/user.slice/user-0.slice/session-3.scope"
CLEARS_FIX = "run deploy.py: it clears leftover training processes before it starts the unit"


def gpu_app(pid, gpu, argv, cgroup=None, used=1000):
    app = {
        "pid": pid,
        "name": argv[0],
        "gpu_uuid": "GPU-" + UUID.format(gpu),
        "used_mib": used,
        "cmdline": " ".join(argv),
        "argv": list(argv),
    }
    if cgroup is not None:
        app["cgroup"] = cgroup
    return app


def ct_with_unit(active, s=None, pending=False, free=None):
    """Container facts with the training unit's state; a running unit's start record matches what
    a start now would run unless ``pending``."""
    s = s or settings()
    ct = ct_facts()
    if free is not None:
        ct["torch"]["devices"][1]["free_mib"] = free
    unit_digest = digest(render_unit(s)) if not pending else "0" * 64
    env = f"env {digest(render_build_env(s))}  -\n"
    started = (
        f"unit {unit_digest}  -\nvenv {s.build_venv}\nbuilt 17\n{env}"
        if active == "active"
        else None
    )
    ct["unit"] = {"active": active, "started": started, "built": 17}
    return ct


@pytest.mark.parametrize(
    "argv, cgroup, cleared",
    [
        # the training command outside the unit is a training pvegpu did not start (it waits,
        # or the takeover stops it with consent), a process of the node is never pvegpu's
        (TRAIN_ARGV, None, False),
        (TRAIN_ARGV, "0::/lxc/200/ns/user.slice/session-3.scope", False),
        (["/root/venvs/torch-2.11.0-cu130.b1/bin/python", *TRAIN_ARGV[1:]], None, False),
        (TRAIN_ARGV, UNIT_CG, True),  # left in the unit's cgroup
        (["/root/venv/bin/python", "-c", "spawn_main()"], UNIT_CG, True),  # a worker of the unit
        (TRAIN_ARGV, "0::/lxc/201/ns/system.slice/dflash-train.service", False),
        (TRAIN_ARGV, "0::/lxc.payload.201/system.slice/dflash-train.service", False),
        (["/usr/bin/python3", "/data/dflash/train.py"], None, False),
        (["/opt/other/bin/python", "/data/dflash/train.py"], None, False),
        (["/root/venv/bin/python", "/root/notebook.py"], None, False),
        (["/root/venv/bin/python"], None, False),
    ],
)
def test_what_the_training_unit_stage_clears(argv, cgroup, cleared):
    app = gpu_app(1, 0, argv, cgroup)
    assert (
        cleared_at_start(app, 200, "dflash-train.service", training_matcher(settings())) is cleared
    )


def test_training_command_from_the_space_joined_cmdline_when_argv_is_missing():
    m = training_matcher(settings())
    assert is_training_command(TRAIN_ARGV, m)
    app = gpu_app(1, 0, TRAIN_ARGV, UNIT_CG)
    del app["argv"]
    assert cleared_at_start(app, 200, "dflash-train.service", m)
    v = run(node=node_facts(apps=[gpu_app(1, 0, TRAIN_ARGV, HAND_CG)]), ct=ct_with_unit("active"))
    assert "training process pvegpu did not start 1 in CT 200" in v.lines()[0]


@pytest.mark.parametrize("cgroup", [UNIT_CG])
def test_leftover_of_a_stopped_unit_is_a_warning_in_the_deploy_a_problem_in_verify(cgroup):
    # The leftover holds 143000 MiB of GPU 1: only 500 MiB are free while it lives.
    app = gpu_app(4242, 1, TRAIN_ARGV, cgroup, used=143000)
    for active in ("inactive", "failed"):
        ct = ct_with_unit(active, free=500)
        deploy = run(node=node_facts(apps=[app]), ct=ct, deploying=True)
        assert deploy.ok, deploy.lines()  # neither stale nor short of memory: it is cleared
        assert deploy.warnings == [
            "leftover training process 4242 on GPU 1: cleared before the unit starts"
        ]
        assert next(r for r in deploy.rows if r["gpu"] == 1)["status"] == (
            "leftover pid 4242 (cleared before start)"
        )
        assert deploy.summary["unit_active"] == active
        only = run(node=node_facts(apps=[app]), ct=ct)
        assert checks_of(only) == ["GPU 1 (target) free", "GPU 1 (target) memory"]
        line = only.lines()[0]
        assert "found leftover training process 4242" in line and "holding 143000 MiB" in line
        assert line.endswith("fix: " + CLEARS_FIX)


def test_what_stays_a_failure_in_the_deploy():
    ct = ct_with_unit("inactive")
    notebook = gpu_app(11, 3, ["/usr/bin/python3", "/root/notebook.py"])
    other_ct = gpu_app(12, 2, TRAIN_ARGV, "0::/lxc/201/ns/system.slice/dflash-train.service")
    v = run(node=node_facts(apps=[notebook, other_ct]), ct=ct, deploying=True)
    assert checks_of(v) == ["GPU 3 (target) free", "GPU 2 (target) free"]
    assert (
        "pid 11 (/usr/bin/python3 /root/notebook.py)" in v.lines()[0] and "kill 11" in v.lines()[0]
    )
    assert "pid 12 in CT 201" in v.lines()[1] and "also in use by CT 201" in v.lines()[1]
    assert v.warnings == []

    # The unit runs, nothing is pending: a second copy of the training beside it is not cleared.
    running = ct_with_unit("active")
    copy_ = gpu_app(13, 1, TRAIN_ARGV, HAND_CG)
    own = gpu_app(14, 0, TRAIN_ARGV, UNIT_CG, used=143000)
    v = run(node=node_facts(apps=[copy_, own]), ct=running, deploying=True)
    assert checks_of(v) == ["GPU 1 (target) free"], v.lines()  # the unit's own process is fine
    assert "training process pvegpu did not start 13" in v.lines()[0]
    assert "kill 13" in v.lines()[0]
    assert v.summary["restart_pending"] == []

    # A restart is pending but not asked for: still a failure, and the fix says how to ask.
    pending = ct_with_unit("active", pending=True)
    v = run(node=node_facts(apps=[copy_, own]), ct=pending, deploying=True)
    assert checks_of(v) == ["GPU 1 (target) free"]
    assert "restart_training=true" in v.lines()[0] and "kill 13" in v.lines()[0]


def test_with_consent_the_copy_beside_the_running_unit_is_taken_over_first():
    s = settings(restart_training=True)
    copy_ = gpu_app(13, 1, TRAIN_ARGV, HAND_CG)
    own = gpu_app(14, 0, TRAIN_ARGV, UNIT_CG, used=143000)
    taken = (
        "GPU 1 is held by a training pvegpu did not start (pid 13, started by hand): taken "
        "over (restart_training=true) before dflash-train.service starts"
    )
    for pending in (True, False):  # consent stops it whether or not the unit restarts
        ct = ct_with_unit("active", s=s, pending=pending)
        v = run(s=s, node=node_facts(apps=[copy_, own]), ct=ct, deploying=True)
        assert v.ok, v.lines()
        assert v.warnings == [taken]
    # verify.py (no deploy follows) names it as a problem
    v = run(s=s, node=node_facts(apps=[copy_, own]), ct=ct_with_unit("active", s=s))
    assert checks_of(v) == ["GPU 1 (target) free"]


def test_a_gpu_process_that_is_no_training_is_never_called_the_running_training():
    """A notebook's kernel on a training GPU is no training restart_training takes over (the
    takeover refuses it): verify.py and a consented deploy name it as what it is."""
    kernel = gpu_app(16, 1, ["/root/venv/bin/python", "-m", "ipykernel_launcher", "-f", "k"])
    kernel["cgroup"] = HAND_CG
    s = settings(restart_training=True)
    for v in (
        run(node=node_facts(apps=[kernel]), ct=ct_with_unit("inactive")),
        run(s=s, node=node_facts(apps=[kernel]), ct=ct_with_unit("inactive", s=s), deploying=True),
    ):
        assert not any("running training" in w or "taken over" in w for w in v.warnings), v
        assert checks_of(v) == ["GPU 1 (target) free"], v.lines()
        assert "ipykernel_launcher" in v.lines()[0]
    trainer = gpu_app(17, 1, ["/root/venv/bin/python", "-u", "train.py"], HAND_CG)
    v = run(node=node_facts(apps=[trainer]), ct=ct_with_unit("inactive"))
    assert v.warnings and "held by the running training (pid 17" in v.warnings[0]


def test_unknown_unit_state_keeps_the_unit_cgroup_as_its_own():
    # No unit state (container facts without it): nothing is called a leftover.
    own = gpu_app(14, 0, TRAIN_ARGV, UNIT_CG, used=143000)
    by_hand = gpu_app(15, 1, TRAIN_ARGV)
    v = run(node=node_facts(apps=[own, by_hand]), deploying=True)
    assert checks_of(v) == ["GPU 1 (target) free"] and v.warnings == []
    assert "kill 15" in v.lines()[0]


@pytest.mark.parametrize(
    "toolchain, found",
    [
        (
            {
                "cc": None,
                "cc_version": None,
                "python_include": "/usr/include/python3.11",
                "python_h": True,
            },
            "no C compiler, Python.h in /usr/include/python3.11",
        ),
        (
            {
                "cc": "/usr/bin/gcc",
                "cc_version": "12.2.0",
                "python_include": "/usr/include/python3.11",
                "python_h": False,
            },
            "gcc 12.2.0, no Python.h in /usr/include/python3.11",
        ),
    ],
)
def test_a_container_without_the_compile_toolchain_fails_verification(toolchain, found):
    """Triton builds a C helper at torch.compile's first CUDA kernel (triton/runtime/build.py):
    without a compiler or the venv's Python.h the training, which compiles, cannot run."""
    ct = ct_facts()
    ct["toolchain"] = toolchain
    v = run(ct=ct)
    assert [p.check for p in v.problems] == ["torch.compile toolchain"]
    assert f"found {found}; fix: run deploy.py (it installs gcc" in v.problems[0].line()
    assert run().ok  # gcc and Python.h: no problem


def test_a_toolchain_install_that_waits_for_a_training_is_a_warning_not_a_failure():
    """Where the archive has only a newer libpython3.X-dev, the install waits for the training
    running on that python (the deploy said so): the container lacks Python.h, the new build is
    fine, the run ends true with the wait named; another container's wait changes nothing."""
    ct = ct_facts()
    ct["toolchain"] = {"cc": "/usr/bin/gcc", "python": "python3.11", "python_h": False}
    wait = (
        "CT 200: apt-get install libpython3.11-dev (CT 200's apt sources have no "
        "libpython3.11-dev of its installed python3.11: ...) waits for the running training"
    )
    v = run(ct=ct, waiting=(wait,))
    assert v.ok and any(wait in w for w in v.warnings), v.warnings
    other = wait.replace("CT 200: ", "CT 201: ", 1)
    assert checks_of(run(ct=ct, waiting=(other,))) == ["torch.compile toolchain"]
    assert checks_of(run(ct=ct, waiting=("CT 200: the venv switch waits for x",))) == [
        "torch.compile toolchain"
    ]


def test_a_triton_that_links_with_lcuda_needs_the_libcuda_so_link():
    """Triton compiles a launcher for every new kernel signature while the training runs; before
    triton-lang/triton pull 8668 (3.6) it links them with -lcuda, which needs libcuda.so."""
    ct = ct_facts()
    ct["libs"] = {"libcuda.so.1": "libcuda.so.580.95.05", "libcuda.so": None}
    ct["packages"] = {**ct["packages"], "triton": {"version": "3.5.1", "requires": []}}
    # (triton is not in the test's lock: "venv packages" says so too)
    (tool,) = [p for p in run(ct=ct).problems if p.check == "torch.compile toolchain"]
    assert "ln -s libcuda.so.1 /usr/lib/x86_64-linux-gnu/libcuda.so" in tool.line()
    ct["packages"]["triton"]["version"] = "3.6.0"  # links -l:libcuda.so.1
    assert not [p for p in run(ct=ct).problems if p.check == "torch.compile toolchain"]
    ct["libs"]["libcuda.so"] = "libcuda.so.580.95.05"  # the .run's link
    ct["packages"]["triton"]["version"] = "3.5.1"
    assert not [p for p in run(ct=ct).problems if p.check == "torch.compile toolchain"]
