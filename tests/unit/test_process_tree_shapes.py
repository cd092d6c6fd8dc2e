"""Issue 35 (mutmut on plan/process_tree.py): the shapes of process trees the groups come from.

Nested roots (a training started from a shell a training's wrapper runs), ppid cycles (a read
that saw a pid reused), processes with no cgroup or no ppid, the container's init, login shells'
flags and the words of ``sh -c`` texts: each asserted through the full output (every Group field,
every word), not only a count.
"""

from __future__ import annotations

from pvegpu.plan.process_tree import (
    Group,
    descendants,
    groups,
    is_launcher,
    is_starter,
    program,
    root_of,
    runs_script,
    training_like,
    words,
)

SCRIPT = "/data/dflash/train.py"
CG = "0::/lxc/200/ns/user.slice/user-0.slice/session-3.scope"


def proc(pid, ppid, argv, cgroup=CG, **more):
    return {"pid": pid, "ppid": ppid, "argv": argv, "cwd": "/data/dflash", "cgroup": cgroup, **more}


def nested_roots():
    """A wrapper (50, under the container's init) runs a trainer (60) and a tmux (20) in which a
    second trainer (30) runs: 30's root is itself (below a starter), 50's group holds it too. A
    third, unrelated trainer (70) runs under sshd (71) under init, with a lower depth order than
    its pid order suggests. Procs listed inner root first."""
    return [
        proc(30, 20, ["python", "train.py"]),
        proc(70, 71, ["python", "-u", "train.py"]),
        proc(71, 72, ["sshd: root@pts/1"]),
        proc(72, 73, ["/usr/sbin/sshd", "-D"]),
        proc(73, 5, ["/usr/bin/login"]),
        proc(20, 50, ["tmux: server"]),
        proc(50, 5, ["/bin/bash", "run.sh"]),
        proc(60, 50, ["python", "train.py"]),
        proc(5, 0, ["/sbin/init"], ct_pid=1),
    ]


def test_an_outer_root_claims_a_nested_root_whatever_the_order_of_the_list():
    assert groups(nested_roots(), {}, SCRIPT) == [
        Group(50, (50, 20, 30, 60), (), True, True),
        Group(70, (70,), (), True, False),
    ]


def test_groups_come_sorted_by_root_pid_not_by_depth():
    procs = nested_roots()
    procs[1] = proc(40, 71, ["python", "-u", "train.py"])  # lower pid than the outer root 50
    assert [g.root for g in groups(procs, {40: (1,)}, SCRIPT)] == [40, 50]
    assert groups(procs, {40: (1,)}, SCRIPT)[0] == Group(40, (40,), (1,), True, False)


def test_the_containers_init_ends_the_climb_as_the_top_of_the_group():
    procs = [proc(5, 0, ["/sbin/init"], ct_pid=1), proc(9, 5, ["python", "train.py"])]
    assert groups(procs, {}, SCRIPT) == [Group(9, (9,), (), True, True)]
    # init is never a seed, even when its command would be one
    init_like = [proc(5, 0, ["python", "train.py"], ct_pid=1)]
    assert groups(init_like, {5: (0,)}, SCRIPT) == []


def test_a_process_with_container_pid_2_is_no_init():
    procs = [
        proc(5, 0, ["/sbin/init"], ct_pid=1),
        proc(8, 5, ["/bin/bash", "run.sh"], ct_pid=2),
        proc(9, 8, ["python", "train.py"], ct_pid=3),
    ]
    assert groups(procs, {}, SCRIPT) == [Group(8, (8, 9), (), True, True)]


def test_processes_with_no_cgroup_read_share_one_and_climb_together():
    procs = [
        {"pid": 8, "ppid": 3, "argv": ["/bin/bash", "run.sh"], "cwd": "/data/dflash"},
        {"pid": 9, "ppid": 8, "argv": ["python", "train.py"], "cwd": "/data/dflash"},
    ]
    assert root_of(9, {p["pid"]: p for p in procs}) == (8, True)
    procs[0]["cgroup"] = None
    procs[1]["cgroup"] = ""
    assert root_of(9, {p["pid"]: p for p in procs}) == (8, True)


def test_a_process_with_no_ppid_read_is_a_top_root_even_beside_a_process_1():
    by_pid = {
        1: {"pid": 1, "ppid": 0, "argv": ["/usr/sbin/sshd", "-D"], "cgroup": CG},
        9: {"pid": 9, "argv": ["python", "train.py"], "cgroup": CG},
    }
    assert root_of(9, by_pid) == (9, True)
    by_pid[9]["ppid"] = None
    assert root_of(9, by_pid) == (9, True)


def test_a_ppid_cycle_ends_the_climb_at_the_last_new_process():
    # a read that saw pids reused: 20 and 21 name each other as parent
    procs = [
        proc(30, 20, ["python", "train.py"]),
        proc(20, 21, ["/bin/bash", "run.sh"]),
        proc(21, 20, ["/bin/bash", "loop.sh"]),
    ]
    assert root_of(30, {p["pid"]: p for p in procs}) == (21, False)
    assert groups(procs, {}, SCRIPT) == [Group(21, (21, 20, 30), (), True, False)]


def test_descendants_follow_a_cycle_once_and_keep_every_branch():
    procs = [
        {"pid": 12, "ppid": 11},
        {"pid": 10, "ppid": 11},
        {"pid": 11, "ppid": 10},
        {"pid": 13, "ppid": 10},
    ]
    assert descendants(10, procs) == [10, 11, 12, 13]


def test_descendants_of_process_1_leave_out_processes_with_no_ppid():
    procs = [{"pid": 1, "ppid": 0}, {"pid": 5}, {"pid": 6, "ppid": None}, {"pid": 7, "ppid": 1}]
    assert descendants(1, procs) == [1, 7]


def test_interactive_and_login_shell_flags_keep_a_shell_a_starter():
    for flags in (["-i"], ["-l"], ["--login"], ["--noprofile"], ["-l", "--noprofile", "-i"]):
        assert is_starter(["/bin/bash", *flags]), flags
    assert not is_starter(["/bin/bash", "-I"])
    assert not is_starter(["/bin/bash", "--LOGIN"])
    assert not is_starter([])
    assert not is_starter(["python", "train.py"])


def test_program_is_the_name_before_the_first_colon():
    assert program("a:b:c") == "a"
    assert program("/usr/bin/sshd:x:y z") == "sshd"
    assert program("Xorg") == "Xorg"
    assert program("-Xvnc :1") == "Xvnc"
    assert program("--bash") == "bash"
    assert program("   ") == ""


def test_a_launcher_module_needs_its_name_after_dash_m():
    assert is_launcher(["python3", "-m", "torch.distributed.run"])
    assert is_launcher(["python3", "-mtorch.distributed.run"])
    assert not is_launcher(["python3", "-m"])
    assert not is_launcher(["python3", "-u", "-m"])
    assert not is_launcher([])
    # a one-letter module is a module, not a flag: what follows it is its argument
    assert not is_launcher(["python", "-mx", "torchrun"])
    assert is_launcher(["python", "-u", "/root/venv/bin/torchrun", "t.py"])
    assert not is_launcher(["bash", "torchrun"])


def test_no_script_runs_nothing_and_options_are_never_the_script():
    assert not runs_script(["python", "train.py"], "/data/dflash", None)
    assert not runs_script(["python", "train.py"], "/data/dflash", "")
    # an option that happens to name the script's path is an option
    assert not runs_script(["python", "-/../train.py"], "/data/dflash", SCRIPT)
    assert runs_script(["python", "../dflash/train.py"], "/data/dflash", SCRIPT)
    # a path that is not the script's file name (a trailing slash) is not the script
    assert not runs_script(["python", "/data/dflash/train.py/"], None, SCRIPT)


def test_a_launcher_without_the_script_is_training_like():
    assert training_like({"argv": ["torchrun", "--nproc_per_node=2", "x.py"]}, None)
    assert training_like({"argv": ["python", "-m", "torch.distributed.run", "x.py"]}, None)
    assert not training_like({"argv": ["python", "x.py"]}, None)
    assert not training_like({}, SCRIPT)


def test_words_keep_every_argument_and_add_the_words_of_each_text():
    assert words(["sh", "-c", "cd /d && python train.py"]) == [
        "-c",
        "cd /d && python train.py",
        "cd",
        "/d",
        "&&",
        "python",
        "train.py",
    ]
    # an unbalanced quote: split at blanks instead
    assert words(["sh", "-c", "echo 'a b", "x y"]) == [
        "-c",
        "echo 'a b",
        "echo",
        "'a",
        "b",
        "x y",
        "x",
        "y",
    ]
