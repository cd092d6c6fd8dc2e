"""Issue 35 (mutmut on plan/running_training.py): every field of what the recognition returns.

The gates print and act on a Trainer's pid, command, owner, process group, GPUs, members, kind,
unit and state, so each test builds the container view, its process list and the node read, and
compares whole Trainer objects (dataclass equality), not only a kind or a count.
"""

from __future__ import annotations

from pvegpu.plan.running_training import (
    GPU_PROCESS,
    HAND,
    NEIGHBOUR,
    UNKNOWN,
    Trainer,
    held_by_pid,
    neighbours,
    running_training,
    unreadable,
)
from pvegpu.plan.starts_training import under, unit_runs_training

UNIT = "dflash-train.service"
SCRIPT = "/data/dflash/train.py"
MATCH = {"script": SCRIPT, "workdir": "/data/dflash", "paths": ["/root/venv", "/data/dflash"]}
GPUS = [{"index": i, "uuid": f"GPU-{i}"} for i in range(4)]
SESSION = "0::/lxc/200/ns/user.slice/user-0.slice/session-3.scope"
USERS = "0::/lxc/200/ns/system.slice/users-train.service"
NODE_APPS_ERR = (
    "the node's GPU processes could not be read (`nvidia-smi --query-compute-apps=pid` on the "
    "node failed)"
)


def ct(procs, units=(), unit_active="inactive", **more):
    live = {"unit_active": unit_active, "units": list(units), **more.pop("live", {})}
    return {"exists": True, "status": "running", "live": live, "processes": procs, **more}


def node(*apps):
    return {"gpus": GPUS, "compute_apps": list(apps)}


def proc(pid, ppid, argv, cgroup=SESSION, pgid=None):
    return {
        "pid": pid,
        "ppid": ppid,
        "argv": argv,
        "cwd": "/data/dflash",
        "cgroup": cgroup,
        "pgid": pgid,
    }


def app(pid, gpu, cgroup, argv=None, name=None):
    found = {"pid": pid, "gpu_uuid": f"GPU-{gpu}", "cgroup": cgroup, "used_mib": 9}
    if argv is not None:
        found["argv"] = argv
    if name is not None:
        found["name"] = name
    return found


# ---- running_training ------------------------------------------------------------------------


def test_a_hand_started_training_and_a_gpu_process_with_every_field():
    procs = [
        proc(50, 1, ["python", "train.py"], pgid=50),
        proc(51, 50, ["python", "train.py"], pgid=50),
        proc(70, 1, ["jupyter-kernel"], cgroup=USERS, pgid=69),
    ]
    found = running_training(
        200, ct(procs), node(app(51, 2, SESSION), app(70, 3, USERS)), UNIT, MATCH
    )
    assert found == [
        Trainer(50, "python train.py", HAND, False, 50, (2,), (50, 51)),
        Trainer(
            70,
            "jupyter-kernel",
            "users-train.service",
            False,
            69,
            (3,),
            (70,),
            GPU_PROCESS,
            "users-train.service",
        ),
    ]


def test_a_gpu_process_the_scan_missed_is_its_own_group_from_its_node_row():
    row = app(90, 1, USERS, argv=["python", "serve.py"])
    row["pgid"] = 88
    found = running_training(200, ct([]), node(row), UNIT, MATCH)
    assert found == [
        Trainer(
            90,
            "python serve.py",
            "users-train.service",
            False,
            88,
            (1,),
            (90,),
            GPU_PROCESS,
            "users-train.service",
        )
    ]
    # a pid on two GPUs is one group holding both
    rows = [app(90, 1, SESSION, argv=["python", "serve.py"]), app(90, 0, SESSION)]
    assert running_training(200, ct([]), node(*rows), UNIT, MATCH) == [
        Trainer(90, "python serve.py", HAND, False, None, (0, 1), (90,), GPU_PROCESS)
    ]


def test_a_missed_row_without_argv_is_named_by_a_question_mark():
    found = running_training(200, ct([]), node(app(90, 1, SESSION)), UNIT, MATCH)
    assert found == [Trainer(90, "?", HAND, False, None, (1,), (90,), GPU_PROCESS)]


def test_trainings_are_sorted_by_root_pid_and_units_follow_with_their_state():
    procs = [proc(80, 1, ["python", "train.py"]), proc(40, 1, ["python", SCRIPT])]
    units = [
        {
            "id": "b.service",
            "active": "activating",
            "sub": "auto-restart",
            "exec": [["/root/venv/bin/python", SCRIPT, "--y"], ["/bin/true"]],
            "wd": None,
        },
        {"id": "a.service", "active": "deactivating", "exec": [["torchrun", "t.py"]], "wd": None},
        {"id": "c.service", "active": "reloading", "sub": "", "exec": None, "wd": "/data/dflash"},
        {"id": "d.service", "active": "active", "exec": [["torchrun", "t.py"]], "wd": None},
    ]
    # a GPU process the scan missed, with a lower pid than the groups: sorted in
    found = running_training(200, ct(procs, units), node(app(10, 0, SESSION)), UNIT, MATCH)
    assert found == [
        Trainer(10, "?", HAND, False, None, (0,), (10,), GPU_PROCESS),
        Trainer(40, f"python {SCRIPT}", HAND, members=(40,)),
        Trainer(80, "python train.py", HAND, members=(80,)),
        Trainer(
            None,
            f"/root/venv/bin/python {SCRIPT} --y",
            "b.service",
            unit="b.service",
            state="activating (auto-restart)",
        ),
        Trainer(None, "torchrun t.py", "a.service", unit="a.service", state="deactivating"),
    ]
    # a unit with no ExecStart read runs nothing known
    units[2]["exec"] = []
    units[2]["active"] = "reloading"
    assert running_training(200, ct([], units[2:3]), node(), UNIT, MATCH) == []


def test_a_unit_is_skipped_when_it_is_ours_or_already_a_groups_owner_not_only_both():
    procs = [proc(60, 1, ["python", "train.py"], cgroup=USERS)]
    unit = {"id": "users-train.service", "active": "activating", "exec": [["torchrun", "t.py"]]}
    ours = {"id": UNIT, "active": "activating", "exec": [["torchrun", "t.py"]]}
    later = {"id": "z.service", "active": "activating", "exec": [["torchrun", "t.py"]]}
    found = running_training(200, ct(procs, [ours, unit, later]), node(), UNIT, MATCH)
    assert found == [
        Trainer(
            60, "python train.py", "users-train.service", members=(60,), unit="users-train.service"
        ),
        Trainer(None, "torchrun t.py", "z.service", unit="z.service", state="activating"),
    ]


def test_pvegpus_own_unit_running_with_no_process_seen_is_one_trainer():
    found = running_training(200, ct([], unit_active="activating"), node(), UNIT, MATCH)
    assert found == [Trainer(None, UNIT, UNIT, True, unit=UNIT)]


def test_a_state_that_could_not_be_read_is_one_unknown_trainer_with_every_reason():
    view = {"exists": True, "status": "running", "live": {"units": None}, "processes": None}
    found = running_training(200, view, {"compute_apps": None}, UNIT, MATCH)
    assert found == [
        Trainer(None, "?", "?", kind=UNKNOWN, reason="; ".join(unreadable(200, view, {})))
    ]
    assert found[0].reason == (
        "CT 200's units could not be read (systemctl: check `pct exec 200 -- systemctl status`); "
        "CT 200's processes could not be read on the node (no list); " + NODE_APPS_ERR
    )


# ---- unreadable --------------------------------------------------------------------------------


def test_each_unreadable_part_is_named_with_its_own_error():
    view = {
        "status": "running",
        "live": {"units": None, "units_error": "Failed to connect to bus"},
        "processes": None,
        "processes_error": "pct exec timed out",
    }
    assert unreadable(200, view, {"compute_apps": []}) == [
        "CT 200's units could not be read (Failed to connect to bus: check `pct exec 200 -- "
        "systemctl status`)",
        "CT 200's processes could not be read on the node (pct exec timed out)",
    ]
    assert (
        unreadable(
            201, {"status": "stopped", "live": {"units": []}, "processes": []}, {"compute_apps": []}
        )
        == []
    )
    assert unreadable(201, {"status": None}, {}) == [
        "CT 201's status could not be read (`pct status 201` on the node)"
    ]


# ---- neighbours --------------------------------------------------------------------------------


def test_neighbours_unreadable_is_one_unknown_and_no_neighbour():
    found = neighbours(200, {"compute_apps": None, "gpus": GPUS}, [0])
    # (its reason is left out: it names the container's status, not the node's GPU processes
    # that could not be read; see docs/dev/mutation.md)
    assert [(t.pid, t.command, t.started_by, t.kind, t.gpus, t.members) for t in found] == [
        (None, "?", "?", UNKNOWN, (), ())
    ]
    assert found[0].reason


def test_neighbours_on_the_training_gpus_with_every_field():
    apps = [
        app(9, 5, "0::/lxc/201/ns/init.scope"),  # a GPU the node does not list
        app(8, 0, "0::/lxc/201/ns/system.slice/train.service", argv=["python", "t.py"]),
        app(8, 2, "0::/lxc/201/ns/system.slice/train.service", argv=["python", "t.py"]),
        app(7, 1, "0::/lxc/200/ns/system.slice/own.service"),  # this container's
        app(6, 3, "0::/system.slice/x.service", name="xserver"),  # not a training GPU
        app(5, 0, "0::/system.slice/ollama.service", name="ollama"),
        app(4, 2, "", argv=[]),
        app(3, 0, "0::/lxc.payload.202/user.slice/session-1.scope", argv=["python", "e.py"]),
    ]
    assert neighbours(200, node(*apps), [0, 1, 2]) == [
        Trainer(3, "python e.py", "CT 202 (started by hand)", gpus=(0,), kind=NEIGHBOUR),
        Trainer(4, "?", "the node", gpus=(2,), kind=NEIGHBOUR),
        Trainer(5, "ollama", "the node", gpus=(0,), kind=NEIGHBOUR),
        Trainer(8, "python t.py", "CT 201 (train.service)", gpus=(0, 2), kind=NEIGHBOUR),
    ]


def test_a_neighbour_with_no_cgroup_read_is_the_nodes():
    row = {"pid": 4, "gpu_uuid": "GPU-0", "name": "x"}
    assert neighbours(200, node(row), [0]) == [
        Trainer(4, "x", "the node", gpus=(0,), kind=NEIGHBOUR)
    ]


# ---- held_by_pid, unit_runs_training, under ----------------------------------------------------


def test_held_by_pid_keeps_this_containers_rows_after_others_and_gpus_it_cannot_name():
    apps = [
        app(5, 0, "0::/lxc/201/ns/init.scope"),
        {"pid": 6, "gpu_uuid": "GPU-0"},
        app(7, 1, SESSION),
        app(7, 9, SESSION),
        {"gpu_uuid": "GPU-0", "cgroup": SESSION},
    ]
    held, rows = held_by_pid(200, node(*apps))
    assert held == {7: (1,)}
    assert rows == [apps[2], apps[3]]
    assert held_by_pid(200, node(app(7, 9, SESSION))) == ({7: ()}, [app(7, 9, SESSION)])


def test_a_units_script_is_found_relative_to_its_working_directory():
    unit = {"exec": [["/usr/bin/python3", "train.py"]], "wd": "/data/dflash"}
    assert unit_runs_training(unit, {"script": SCRIPT, "paths": []})
    assert not unit_runs_training({**unit, "wd": None}, {"script": SCRIPT, "paths": []})
    # a relative wrapper in the training dir, against the working directory
    rel = {"exec": [["/bin/sh", "run.sh"]], "wd": "/data/dflash"}
    assert unit_runs_training(rel, {"script": None, "workdir": "/data/dflash"})
    assert not unit_runs_training(
        {**rel, "wd": "/srv"}, {"script": None, "workdir": "/data/dflash"}
    )


def test_a_unit_running_a_launcher_is_a_training_whatever_its_paths():
    assert unit_runs_training({"exec": [["/usr/local/bin/torchrun", "x.py"]]}, {})
    assert not unit_runs_training({"exec": [["/usr/bin/sleep", "9"]]}, {})


def test_a_program_or_an_option_under_the_venvs_is_no_training():
    unit = {"exec": [["/usr/bin/env", "-/root/venv/x"]], "wd": "/"}
    assert not unit_runs_training(unit, {"paths": ["/root/venv"], "workdir": "/-"})
    notebook = {"exec": [["/root/venv/bin/python", "/root/venv/bin/jupyter-lab"]], "wd": "/-"}
    assert not unit_runs_training(notebook, {"paths": ["/root/venv"], "workdir": "/-"})


def test_under_strips_only_trailing_slashes():
    assert under("/root/venv/bin/python", "/root/venv/")
    assert under("/root/venv", "/root/venv//")
    assert under("/root/venvX/bin", "/root/venvX/")
    assert under("/root/venvX/bin", "/root/venvX")
    assert not under("/data/x", "/data/x ")
