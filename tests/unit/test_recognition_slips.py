"""The recognition of trainings and the held-GPU decision where a slip fails open: another
container's numbers, an unreadable compute-apps list, a memory figure nvidia-smi did not print,
extra_data_keys in each accepted form (issue 35)."""

from __future__ import annotations

import pytest

from pvegpu.plan.process_tree import is_launcher, runs_script
from pvegpu.plan.running_training import (
    GPU_PROCESS,
    UNKNOWN,
    container_path,
    held_by_pid,
    neighbours,
    running_training,
)
from pvegpu.probes import training_held as th
from tests.unit.test_data_keys import inventory, lines_of


@pytest.mark.parametrize("other", [20, 2, 2000])
def test_a_container_whose_number_starts_another_s_is_not_it(other):
    cgroup = "0::/lxc/200/ns/user.slice/user-0.slice/session-3.scope"
    assert container_path(cgroup, other) is None
    assert container_path("0::/lxc.payload.200/system.slice/t.service", other) is None
    node = {
        "gpus": [{"index": 0, "uuid": "GPU-0"}],
        "compute_apps": [{"pid": 7, "gpu_uuid": "GPU-0", "argv": ["python"], "cgroup": cgroup}],
    }
    assert held_by_pid(other, node) == ({}, [])
    # CT 200's process on a training GPU of CT ``other`` is a neighbour, not ``other``'s own
    assert [t.started_by for t in neighbours(other, node, [0])] == ["CT 200 (started by hand)"]


def test_a_gpu_process_of_the_container_is_its_own():
    node = {
        "gpus": [{"index": 1, "uuid": "GPU-1"}],
        "compute_apps": [
            {"pid": 7, "gpu_uuid": "GPU-1", "argv": ["jupyter"], "cgroup": "0::/lxc/200/ns/x"}
        ],
    }
    ct = {"exists": True, "status": "running", "live": {"units": []}, "processes": []}
    (t,) = running_training(200, ct, node, "t.service", {})
    assert (t.pid, t.kind, t.gpus) == (7, GPU_PROCESS, (1,))


@pytest.mark.parametrize(
    "ct",
    [
        {"exists": True, "status": None},
        {"exists": True, "status": "running", "live": None, "processes": []},
        {"exists": True, "status": "running", "live": {"units": None}, "processes": []},
        {"exists": True, "status": "running", "live": {"units": []}, "processes": None},
    ],
    ids=["status", "view", "units", "processes"],
)
def test_an_unreadable_state_is_one_unknown_training_never_none(ct):
    (t,) = running_training(200, ct, {"compute_apps": []}, "t.service", {})
    assert t.kind == UNKNOWN and t.reason
    (t,) = running_training(
        200,
        {"exists": True, "status": "running", "live": {"units": []}, "processes": []},
        {"compute_apps": None},
        "t.service",
        {},
    )
    assert t.kind == UNKNOWN


@pytest.mark.parametrize(
    "argv, cwd",
    [
        (["python", "train.py"], "/data/dflash"),
        (["python", "./train.py"], "/data/dflash"),
        (["python", "dflash/train.py"], "/data"),
        (["python", "/data/dflash/train.py"], "/"),
        (["sh", "-c", "cd /data/dflash && python ../dflash/train.py"], "/data/dflash"),
    ],
)
def test_the_script_however_it_is_named(argv, cwd):
    assert runs_script(argv, cwd, "/data/dflash/train.py")
    assert not runs_script(argv, cwd, "/data/other/train.py")


@pytest.mark.parametrize(
    "argv",
    [
        ["python3", "-m", "torch.distributed.run", "--nproc_per_node=2", "t.py"],
        ["python", "-mtorch.distributed.run", "t.py"],
        ["/root/venv/bin/python", "-u", "/root/venv/bin/torchrun", "t.py"],
        ["accelerate", "launch", "t.py"],
        ["python", "-m", "accelerate.commands.launch", "t.py"],
        ["deepspeed", "t.py"],
        ["python", "-m", "deepspeed.launcher.runner", "t.py"],
    ],
)
def test_every_launcher_form(argv):
    assert is_launcher(argv)
    assert not is_launcher(["python", "-m", "http.server"])


# --- the held-GPU decision (probes/training_held.py: context_ok is an allowlist) ----------------


def test_no_context_anywhere_when_either_read_failed():
    used = {"a": 0, "b": 0}
    assert th.context_ok(used, {}) == ["a", "b"]
    assert th.context_ok(used, None) == []  # compute-apps unreadable: fail closed
    assert th.context_ok(None, {}) == []


def test_a_gpu_without_a_memory_figure_takes_no_context():
    used = th.used_by_uuid("GPU-A, [N/A]\nGPU-B, 0\nGPU-C, [Unknown Error]\n")
    assert used == {"a": None, "b": 0, "c": None}
    assert th.context_ok(used, {}) == ["b"]
    assert th.held_gpus(False, used) == ["a", "c"]


def test_a_gpu_with_a_process_of_this_container_takes_no_context_even_idle():
    used = {"a": 0, "b": 0}
    assert th.context_ok(used, th.apps_by_uuid("GPU-A, 4242\n", own_pid=99)) == ["b"]
    assert th.context_ok(used, th.apps_by_uuid("GPU-A, 99\n", own_pid=99)) == ["a", "b"]


# --- extra_data_keys in every form the settings accept ------------------------------------------


@pytest.mark.parametrize(
    "declared",
    ["my_key", ["my_key"], ("my_key",), ["other", "my_key"]],
    ids=["string", "list", "tuple", "list-of-two"],
)
@pytest.mark.parametrize("where", ["override", "all_data", "node_data"])
def test_extra_data_keys_in_each_accepted_form_declare_the_key(declared, where):
    layers = {"override": {"my_key": 1}}
    layers[where] = {**layers.get(where, {}), "extra_data_keys": declared}
    inv = inventory(**layers)
    assert lines_of(inv) == []
    assert lines_of(inventory(override={"my_key": 1}))[0].startswith("my_key (--data)")
