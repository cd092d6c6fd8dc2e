"""Issue 35 (mutmut on plan/takeover.py): the role of every member of a group to stop, and the
stop probe's whole argument dict.

Wrappers two levels above the trainer, a helper shell below a worker, a launcher whose worker
runs its very argv, processes with no ppid read, a ppid cycle in the read (a reused pid), and the
root taken when nothing runs the script: each asserted as the full list of {pid, start, role}.
"""

from __future__ import annotations

from pvegpu.plan.restart_hint import restart_hint
from pvegpu.plan.running_training import HAND, Trainer
from pvegpu.plan.takeover import roles, stop_args, stop_groups

SCRIPT = "/d/t.py"


def p(pid, ppid, argv, start=None):
    return {"pid": pid, "ppid": ppid, "argv": argv, "cwd": "/d", "start": start or pid * 10}


def role_of(found):
    return {m["pid"]: m["role"] for m in found}


def test_every_wrapper_above_a_trainer_is_a_launcher_not_only_its_parent():
    procs = [
        p(2, 1, ["/bin/bash", "run.sh"]),
        p(3, 2, ["/usr/bin/nice", "-n", "19", "/bin/sh", "go.sh"]),
        p(4, 3, ["python", "t.py"]),
    ]
    assert roles((2, 3, 4), procs, {}, SCRIPT) == [
        {"pid": 2, "start": 20, "role": "launcher"},
        {"pid": 3, "start": 30, "role": "launcher"},
        {"pid": 4, "start": 40, "role": "worker"},
    ]


def test_a_forked_copy_below_a_helper_of_a_worker_stays_a_helper():
    # the trainer (4) runs a shell (5) that runs a copy of the trainer's very argv (6)
    procs = [
        p(4, 1, ["python", "t.py"]),
        p(5, 4, ["/bin/sh", "-c", "cc1plus x.cpp"]),
        p(6, 5, ["python", "t.py"]),
    ]
    assert roles((4, 5, 6), procs, {4: (0,)}, SCRIPT) == [
        {"pid": 4, "start": 40, "role": "worker"},
        {"pid": 5, "start": 50, "role": "launcher"},
        {"pid": 6, "start": 60, "role": "helper"},
    ]


def test_a_launcher_is_one_even_when_the_process_below_runs_its_very_argv():
    argv = ["torchrun", "--nproc_per_node=1", "t.py"]
    procs = [p(2, 1, argv), p(3, 2, argv)]
    assert role_of(roles((2, 3), procs, {3: (0,)}, SCRIPT)) == {2: "launcher", 3: "worker"}


def test_a_member_with_no_ppid_read_has_no_parent_even_beside_a_process_1():
    procs = [p(1, 0, ["/bin/bash", "run.sh"]), p(5, None, ["python", "t.py"])]
    assert roles((1, 5), procs, {}, SCRIPT) == [
        {"pid": 1, "start": 10, "role": "helper"},
        {"pid": 5, "start": 50, "role": "worker"},
    ]
    procs[1] = {**procs[1], "ppid": 0}
    assert role_of(roles((1, 5), procs, {}, SCRIPT)) == {1: "helper", 5: "worker"}
    two = [p(1, 0, ["python", "t.py"]), p(5, None, ["python", "t.py"])]
    assert role_of(roles((1, 5), two, {}, SCRIPT)) == {1: "worker", 5: "worker"}


def test_a_wrapper_with_no_ppid_read_ends_the_climb_beside_a_process_1():
    procs = [
        p(1, 0, ["/bin/bash", "run.sh"]),
        p(3, None, ["sh", "-c", "exec python t.py"]),
        p(5, 3, ["python", "t.py"]),
    ]
    assert role_of(roles((1, 3, 5), procs, {}, SCRIPT)) == {
        1: "helper",
        3: "launcher",
        5: "worker",
    }
    procs[0] = p(1, 0, ["python", "t.py"])
    assert role_of(roles((1, 3, 5), procs, {}, SCRIPT)) == {
        1: "worker",
        3: "launcher",
        5: "worker",
    }


def test_a_ppid_cycle_in_the_read_ends_and_the_first_member_is_what_to_end():
    # 20 and 21 name each other as parent (a pid reused between reads); 20 runs the script too
    procs = [
        p(30, 20, ["python", "t.py"]),
        p(20, 21, ["python", "t.py"]),
        p(21, 20, ["/bin/bash", "run.sh"]),
    ]
    assert roles((21, 30, 20), procs, {}, SCRIPT) == [
        {"pid": 21, "start": 210, "role": "worker"},
        {"pid": 30, "start": 300, "role": "helper"},
        {"pid": 20, "start": 200, "role": "helper"},
    ]


def test_with_nothing_running_the_script_any_more_the_root_is_the_worker():
    procs = [p(2, 1, ["/bin/bash", "run.sh"]), p(3, 2, ["sleep", "60"])]
    assert roles((2, 3), procs, {}, SCRIPT) == [
        {"pid": 2, "start": 20, "role": "worker"},
        {"pid": 3, "start": 30, "role": "helper"},
    ]
    assert roles((9, 2, 3), procs, {}, SCRIPT)[0] == {"pid": 2, "start": 20, "role": "worker"}
    assert roles((9,), procs, {}, SCRIPT) == []


def test_stop_args_are_the_whole_dict_the_probe_reads():
    t = Trainer(
        2, "/bin/bash run.sh", HAND, pgid=2, gpus=(1, 3), members=(2, 3), unit="users.service"
    )
    procs = [p(2, 1, ["/bin/bash", "run.sh"]), p(3, 2, ["python", "t.py"])]
    # no GPU held: only the script tells the worker from its wrapper
    assert stop_args(200, t, procs, {}, SCRIPT, 900, "/var/log/pvegpu/takeover.log") == {
        "vmid": 200,
        "members": [
            {"pid": 2, "start": 20, "role": "launcher"},
            {"pid": 3, "start": 30, "role": "worker"},
        ],
        "unit": "users.service",
        "unit_uid": None,
        "timeout_s": 900,
        "log": "/var/log/pvegpu/takeover.log",
        "gpus": [1, 3],
        "command": "/bin/bash run.sh",
    }


def test_restart_hint_runs_a_hand_started_training_from_the_root_when_its_cwd_is_unknown():
    t = Trainer(2, "python t.py --resume", HAND)
    assert restart_hint(201, t, [], None, None).text() == (
        "pct exec 201 -- sh -c 'cd / && nohup python t.py --resume >/dev/null 2>&1 &'"
    )
    empty_cwd = [{"pid": 2, "cwd": ""}]
    assert restart_hint(201, t, empty_cwd, None, None).text() == (
        restart_hint(201, t, [], None, None).text()
    )


def test_two_members_naming_each_other_as_parent_end_the_walk():
    """A parent loop (20 <-> 21, a reused pid caught mid-read) above the worker: roles() ends and
    the trainer is still the worker (a loop once hung the takeover's planning)."""
    from pvegpu.plan.takeover import roles

    procs = [
        {"pid": 20, "ppid": 21, "argv": ["bash", "a.sh"], "start": 1},
        {"pid": 21, "ppid": 20, "argv": ["bash", "run.sh"], "start": 2},
        {"pid": 30, "ppid": 20, "argv": ["python", "/data/t.py"], "start": 3},
    ]
    found = {r["pid"]: r["role"] for r in roles((20, 21, 30), procs, {}, "/data/t.py")}
    assert found[30] == "worker"
    assert set(found) == {20, 21, 30}


def test_neighbours_unknown_says_the_nodes_gpu_processes_could_not_be_read():
    from pvegpu.plan.running_training import UNKNOWN, neighbours

    (t,) = neighbours(200, {"gpus": [{"index": 0, "uuid": "GPU-a"}], "compute_apps": None}, [0])
    assert t.kind == UNKNOWN
    assert t.reason.startswith("the node's GPU processes could not be read"), t.reason


def test_process_trees_are_stopped_together_and_their_workers_signalled_at_once():
    """Ranks a script started one by one (each its own tree, started by hand) are one stop:
    one probe run whose workers all get SIGTERM before any wait (a checkpoint that needs
    collectives cannot finish rank by rank); a unit is stopped on its own."""
    ranks = [
        Trainer(2, "python t.py --rank=0", HAND, gpus=(0,), members=(2,)),
        Trainer(3, "python t.py --rank=1", HAND, gpus=(1,), members=(3,)),
    ]
    unit = Trainer(4, "python t.py", "t.service", members=(4,), unit="t.service")
    groups = stop_groups([ranks[0], unit, ranks[1]])
    assert [[t.pid for t in g] for g in groups] == [[2, 3], [4]]
    procs = [p(2, 1, ["python", "t.py"]), p(3, 1, ["python", "t.py"])]
    args = stop_args(200, groups[0], procs, {}, SCRIPT, 900, "/var/log/x.log")
    assert [(m["pid"], m["role"]) for m in args["members"]] == [(2, "worker"), (3, "worker")]
    assert args["gpus"] == [0, 1] and args["unit"] is None
