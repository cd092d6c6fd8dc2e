"""What counts as a running training (pvegpu.plan.running_training, pvegpu.plan.process_tree):
recognised by what it holds and runs, whoever launched it, and fail closed. Each container is
given as the node probe reads it: every process of its cgroup with node pid, ppid, session,
argv, cwd (as the container names it) and cgroup; its units as its systemd shows them."""

from __future__ import annotations

import pytest

from pvegpu.plan.process_tree import groups, is_launcher, is_starter, runs_script
from pvegpu.plan.running_training import (
    GPU_PROCESS,
    HAND,
    TRAINING,
    UNKNOWN,
    Trainer,
    blocking,
    other_units,
    others,
    running_training,
    summary_line,
    waiting_line,
)

UNIT = "dflash-train.service"
SCRIPT = "/data/dflash/train.py"
MATCH = {
    "script": SCRIPT,
    "module": None,
    "workdir": "/data/dflash",
    "paths": ["/root/venv", "/root/venvs", "/data/dflash"],
}
PY = "/root/venv/bin/python"
SESSION = "0::/lxc/200/ns/user.slice/user-0.slice/session-3.scope"
GPUS = [{"index": i, "uuid": f"GPU-{i}"} for i in range(8)]


def p(pid, ppid, argv, cwd="/root", cgroup=SESSION, sid=None, state="S", ct_pid=None):
    return {
        "pid": pid,
        "ppid": ppid,
        "pgid": pid,
        "sid": sid or pid,
        "state": state,
        "argv": argv,
        "cwd": cwd,
        "cgroup": cgroup,
        "ct_pid": ct_pid,
    }


INIT = p(100, 90, ["/sbin/init"], cwd="/", cgroup="0::/lxc/200/ns/init.scope", ct_pid=1)
LOGIN = p(101, 100, ["-bash"], sid=101)


def app(pid, gpu, cgroup=SESSION, argv=()):
    return {"pid": pid, "gpu_uuid": f"GPU-{gpu}", "argv": list(argv), "cgroup": cgroup}


def ct(procs, units=(), active="inactive", **live):
    return {
        "exists": True,
        "status": "running",
        "live": {"unit_active": active, "units": list(units), **live},
        "processes": [INIT, *procs],
    }


def node(*apps):
    return {"gpus": GPUS, "compute_apps": list(apps)}


def find(container, nodedoc=None, match=MATCH):
    return running_training(200, container, nodedoc or node(), UNIT, match)


def torchrun_tree(launcher_argv, cwd="/data/dflash", n=8, worker_argv=None):
    """A launcher started from a login shell, with n workers each its own session (torchrun's
    start_new_session), each holding GPU i."""
    procs = [LOGIN, p(200, 101, launcher_argv, cwd=cwd, sid=101)]
    apps = []
    for i in range(n):
        procs.append(p(300 + i, 200, worker_argv or [PY, "-u", "train.py"], cwd=cwd))
        apps.append(app(300 + i, i))
    return procs, apps


@pytest.mark.parametrize(
    "launcher",
    [
        [PY, "/root/venv/bin/torchrun", "--nproc_per_node=8", "train.py"],
        ["/root/venv/bin/torchrun", "--nproc-per-node", "8", "train.py"],
        [PY, "-m", "torch.distributed.run", "--nproc_per_node=8", "train.py"],
        ["/opt/conda/bin/python3.11", "/opt/conda/bin/accelerate", "launch", "train.py"],
        ["/root/venv/bin/deepspeed", "train.py"],
    ],
)
def test_a_launcher_and_its_workers_are_one_training_named_by_the_launcher(launcher):
    procs, apps = torchrun_tree(launcher)
    (t,) = find(ct(procs), node(*apps))
    assert (t.pid, t.kind, t.started_by, t.ours) == (200, TRAINING, HAND, False)
    assert t.members == (200, *range(300, 308)) and t.gpus == tuple(range(8))
    assert t.named == "pid 200, started by hand, 9 processes"
    assert t.unit is None  # a tree under a login: stopped by signals, no unit to stop


def test_workers_not_yet_holding_a_gpu_are_a_training_by_the_script_they_run():
    # a run still loading its model: no GPU memory yet, no compute process
    procs, _ = torchrun_tree([PY, "/root/venv/bin/torchrun", "--nproc_per_node=2", "train.py"], n=2)
    (t,) = find(ct(procs))
    assert t.kind == TRAINING and t.pid == 200 and t.gpus == ()


@pytest.mark.parametrize(
    ("argv", "cwd", "runs"),
    [
        ([PY, "train.py"], "/data/dflash", True),
        ([PY, "-u", "./train.py", "--resume"], "/data/dflash", True),
        ([PY, "dflash/train.py"], "/data", True),
        ([PY, "../dflash/train.py"], "/data/x", True),
        (["python3", SCRIPT], "/", True),
        (["sh", "-c", "cd /data/dflash && python train.py"], "/data/dflash", True),
        ([PY, "train.py"], "/root", False),  # another train.py
        ([PY, "eval.py"], "/data/dflash", False),
        ([PY, "-m", "http.server"], "/data/dflash", False),
    ],
)
def test_the_script_is_recognised_absolute_or_relative_to_the_cwd(argv, cwd, runs):
    assert runs_script(argv, cwd, SCRIPT) is runs


def test_a_relative_python_train_py_typed_in_the_data_dir_is_a_training():
    (t,) = find(ct([LOGIN, p(150, 101, ["python", "train.py"], cwd="/data/dflash")]))
    assert (t.pid, t.kind, t.named) == (150, TRAINING, "pid 150, started by hand")


def test_a_wrapper_loop_is_the_root_of_its_trainer():
    procs = [
        LOGIN,
        p(150, 101, ["bash", "run.sh"], cwd="/data/dflash"),
        p(151, 150, [PY, "train.py", "--resume"], cwd="/data/dflash"),
    ]
    (t,) = find(ct(procs), node(app(151, 3)))
    assert (t.pid, t.members, t.gpus, t.command) == (150, (150, 151), (3,), "bash run.sh")


def test_an_orphaned_launcher_under_the_containers_init_is_its_own_root():
    # `pct exec 200 -- bash -c 'cd /data/dflash && nohup torchrun ... &'`: the bash exited
    procs = [
        p(200, 100, [PY, "/root/venv/bin/torchrun", "train.py"], cwd="/data/dflash"),
        p(201, 200, [PY, "-u", "train.py"], cwd="/data/dflash"),
    ]
    (t,) = find(ct(procs))
    assert t.pid == 200 and t.members == (200, 201)


def test_a_trainers_own_children_belong_to_it_and_do_not_split_it():
    # DataLoader workers are forked: same argv as the trainer
    procs = [
        LOGIN,
        p(150, 101, [PY, SCRIPT], cwd="/"),
        p(151, 150, [PY, SCRIPT], cwd="/"),
        p(152, 150, [PY, "-c", "from multiprocessing.spawn import spawn_main"], cwd="/"),
    ]
    (t,) = find(ct(procs), node(app(150, 0)))
    assert t.pid == 150 and t.members == (150, 151, 152)


def test_a_users_unit_is_the_training_and_is_stopped_as_a_unit():
    cg = "0::/lxc/200/ns/system.slice/train.service"
    procs = [p(150, 100, ["/bin/bash", "/data/dflash/run.sh"], cgroup=cg, cwd="/data/dflash")]
    procs.append(p(151, 150, [PY, "train.py"], cgroup=cg, cwd="/data/dflash"))
    (t,) = find(ct(procs), node(app(151, 0, cg)))
    assert (t.pid, t.started_by, t.unit, t.named) == (
        150,
        "train.service",
        "train.service",
        "pid 150, under train.service, 2 processes",
    )
    assert other_units([t]) == ["train.service"]


@pytest.mark.parametrize(
    ("unit", "chain"),
    [
        ("cron.service", [["/usr/sbin/cron", "-f"], ["/usr/sbin/CRON", "-f"]]),
        ("ssh.service", [["sshd: /usr/sbin/sshd -D"], ["sshd: root@pts/0"], ["-bash"]]),
    ],
)
def test_a_unit_that_only_started_a_training_is_never_its_unit(unit, chain):
    cg = f"0::/lxc/200/ns/system.slice/{unit}"
    procs, parent = [], 100
    for i, argv in enumerate(chain):
        procs.append(p(110 + i, parent, argv, cgroup=cg))
        parent = 110 + i
    procs.append(p(150, parent, ["/bin/sh", "-c", f"{PY} {SCRIPT}"], cgroup=cg))
    procs.append(p(151, 150, [PY, SCRIPT], cgroup=cg))
    (t,) = find(ct(procs))
    assert (t.pid, t.started_by, t.unit) == (150, unit, None)
    assert other_units([t]) == []  # cron/ssh are never stopped nor disabled


def test_our_units_launcher_and_workers_are_ours():
    cg = f"0::/lxc/200/ns/system.slice/{UNIT}"
    procs = [p(150, 100, [PY, "/root/venvs/t.b1/bin/torchrun", "train.py"], cgroup=cg)]
    procs += [
        p(151 + i, 150, [PY, "-u", "train.py"], cgroup=cg, cwd="/data/dflash") for i in range(2)
    ]
    found = find(ct(procs, active="active"), node(app(151, 0, cg), app(152, 1, cg)))
    assert [(t.pid, t.ours) for t in found] == [(150, True)]
    assert others(found) == []


@pytest.mark.parametrize("active", ["active", "activating", "reloading", "deactivating"])
def test_our_unit_in_any_running_state_is_a_running_training(active):
    found = find(ct([], active=active))
    assert [(t.pid, t.started_by, t.ours) for t in found] == [(None, UNIT, True)]


@pytest.mark.parametrize("active", ["inactive", "failed"])
def test_our_unit_stopped_is_none(active):
    assert find(ct([], active=active)) == []


@pytest.mark.parametrize(
    ("active", "sub", "counts"),
    [
        ("activating", "auto-restart", True),
        ("activating", "auto-restart-queued", True),
        ("deactivating", "stop-sigterm", True),
        ("reloading", "reload", True),
        ("inactive", "dead", False),
        ("failed", "failed", False),
    ],
)
def test_a_users_unit_between_restarts_is_a_training(active, sub, counts):
    unit = {
        "id": "train.service",
        "active": active,
        "sub": sub,
        "exec": [[PY, "train.py", "--resume"]],
        "wd": "/data/dflash",
    }
    found = find(ct([], units=[unit]))
    if not counts:
        assert found == []
        return
    (t,) = found
    assert (t.pid, t.unit, t.state, t.kind) == (
        None,
        "train.service",
        f"{active} ({sub})",
        TRAINING,
    )
    assert t.named == f"train.service {active} ({sub})"
    assert other_units(found) == ["train.service"]


def test_a_unit_between_restarts_that_runs_a_wrapper_in_the_training_dir_counts():
    unit = {"id": "t.service", "active": "activating", "sub": "auto-restart", "wd": None}
    assert find(ct([], units=[{**unit, "exec": [["/bin/bash", "/data/dflash/run.sh"]]}]))
    assert not find(ct([], units=[{**unit, "exec": [["/usr/sbin/nginx"]]}]))


def test_a_unit_that_only_lives_under_the_venv_or_training_dir_is_no_training():
    """Jupyter, TensorBoard, a checkpoint upload: programs of the venv, files of the training
    dir, and no training (a takeover never stops, disables or masks them)."""
    unit = {"id": "x.service", "active": "activating", "sub": "auto-restart", "wd": "/data/dflash"}
    for argv in (
        [PY, "/root/venv/bin/jupyter-lab", "--ip=0.0.0.0"],
        ["/root/venv/bin/tensorboard", "--logdir", "/data/dflash/runs"],
        [PY, "/data/dflash/upload.py", "--to", "s3://bucket"],
    ):
        assert not find(ct([], units=[{**unit, "exec": [argv]}])), argv
    # the configured training_command's module is one
    train = {**unit, "exec": [[PY, "-m", "dflash.train"]]}
    assert find(ct([], units=[train]), match={**MATCH, "module": "dflash.train"})


def test_a_gpu_process_that_is_no_training_waits_and_is_called_what_it_is():
    argv = [PY, "-m", "ipykernel_launcher", "-f", "/root/.local/k.json"]
    (t,) = find(ct([LOGIN, p(150, 101, argv)]), node(app(150, 2)))
    assert (t.kind, t.what) == (GPU_PROCESS, "a GPU process")
    assert blocking([t], True) == [t]  # consent never covers it
    assert "pvegpu never stops it" in summary_line("n", 1, t)


def test_another_containers_or_the_nodes_gpu_process_is_not_this_containers():
    apps = [
        app(7, 0, "0::/lxc/201/ns/system.slice/x.service"),
        app(8, 1, "0::/system.slice/foo.service"),
        app(9, 2, "0::/lxc.monitor/200"),
        app(10, 3, "0::/lxc/2000/ns/init.scope"),
    ]
    assert find(ct([]), node(*apps)) == []


def test_a_gpu_process_the_scan_did_not_see_still_counts():
    (t,) = find(ct([]), node(app(77, 1, argv=["python3", "x.py"])))
    assert (t.pid, t.gpus, t.kind) == (77, (1,), GPU_PROCESS)


# --- fail closed --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda c, n: c.update(live=None), "CT 200's own view could not be read"),
        (lambda c, n: c.update(processes=None), "CT 200's processes could not be read"),
        (lambda c, n: c["live"].update(units=None), "CT 200's units could not be read"),
        (lambda c, n: n.update(compute_apps=None), "the node's GPU processes could not be read"),
        (lambda c, n: c.update(status="unknown"), "CT 200's status could not be read"),
        (lambda c, n: c.update(status=None), "CT 200's status could not be read"),
    ],
)
def test_what_cannot_be_read_is_a_training_of_unknown_state(change, reason):
    container, nodedoc = ct([]), node()
    change(container, nodedoc)
    (t,) = running_training(200, container, nodedoc, UNIT, MATCH)
    assert t.kind == UNKNOWN and reason in t.reason
    assert others([t]) == [t] and blocking([t], True) == [t]  # consent never covers it
    assert "waits for a training that may run (state unknown: " in waiting_line(200, "x", t)


def test_a_stopped_or_missing_container_runs_nothing():
    assert running_training(200, {"exists": True, "status": "stopped"}, {}, UNIT, MATCH) == []
    assert running_training(200, {"exists": False}, {}, UNIT, MATCH) == []


# --- the pieces ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "starter"),
    [
        (["-bash"], True),
        (["/bin/bash"], True),
        (["bash", "-l"], True),
        (["tmux: server"], True),
        (["SCREEN", "-S", "x"], True),
        (["/usr/sbin/sshd", "-D"], True),
        (["/sbin/init"], True),
        (["bash", "run.sh"], False),
        (["sh", "-c", "python train.py"], False),
        ([PY, "train.py"], False),
    ],
)
def test_starters_are_shells_logins_schedulers_and_multiplexers(argv, starter):
    assert is_starter(argv) is starter


def test_launchers():
    assert is_launcher(["torchrun", "t.py"]) and is_launcher([PY, "-mtorch.distributed.run"])
    assert not is_launcher([PY, "-m", "torch.utils.bottleneck"]) and not is_launcher([PY, "t.py"])
    assert not is_launcher(["/usr/bin/bash", "torchrun.sh"])


def test_the_same_cgroup_bounds_a_group():
    # a scope started under a unit's process (systemd-run --scope): the walk stops at the cgroup
    cg = "0::/lxc/200/ns/system.slice/run-u5.scope"
    procs = [
        p(
            150,
            100,
            ["/usr/bin/python3", "/srv/app.py"],
            cgroup="0::/lxc/200/ns/system.slice/a.service",
        ),
        p(151, 150, [PY, SCRIPT], cgroup=cg),
    ]
    (g,) = groups(procs, {}, SCRIPT)
    assert (g.root, g.members, g.top) == (151, (151,), True)


def test_summary_and_waiting_lines_name_the_root_and_the_count():
    t = Trainer(200, "torchrun", HAND, members=(200, 201, 202))
    assert waiting_line(200, "the start of x", t) == (
        "CT 200: the start of x waits for the running training (pid 200, started by hand, "
        "3 processes)"
    )


# --- the takeover's roles (pvegpu.plan.takeover) ------------------------------------------------


def roles_of(procs, held=None):
    from pvegpu.plan.takeover import roles

    (g,) = groups(procs, held or {}, SCRIPT)
    return {m["pid"]: m["role"] for m in roles(g.members, procs, held or {}, SCRIPT)}


def test_roles_torchrun_holds_the_launcher_and_stops_the_workers():
    procs, apps = torchrun_tree([PY, "/root/venv/bin/torchrun", "train.py"], n=2)
    held = {a["pid"]: (a["gpu_uuid"],) for a in apps}
    assert roles_of(procs, held) == {200: "launcher", 300: "worker", 301: "worker"}


def test_roles_a_shell_that_cd_into_the_script_dir_is_a_launcher_not_a_worker():
    # cron's `sh -c 'cd /data/dflash && python train.py'`: the shell names the script as well
    procs = [
        p(140, 100, ["/usr/sbin/cron", "-f"], cgroup="0::/lxc/200/ns/system.slice/cron.service"),
        p(150, 140, ["/bin/sh", "-c", f"cd /data/dflash && {PY} train.py"], cwd="/data/dflash"),
        p(151, 150, [PY, "train.py"], cwd="/data/dflash"),
    ]
    for q in procs[1:]:
        q["cgroup"] = procs[0]["cgroup"]
    assert roles_of(procs) == {150: "launcher", 151: "worker"}


def test_roles_forked_dataloader_workers_are_their_trainers_helpers():
    procs = [
        LOGIN,
        p(150, 101, [PY, SCRIPT], cwd="/"),
        p(151, 150, [PY, SCRIPT], cwd="/"),
        p(152, 150, [PY, SCRIPT], cwd="/"),
    ]
    assert roles_of(procs, {150: (0,)}) == {150: "worker", 151: "helper", 152: "helper"}


def test_roles_a_wrapper_loop_is_held_while_its_trainer_checkpoints():
    procs = [
        LOGIN,
        p(150, 101, ["bash", "run.sh"], cwd="/data/dflash"),
        p(151, 150, [PY, "train.py"], cwd="/data/dflash"),
    ]
    assert roles_of(procs) == {150: "launcher", 151: "worker"}


def test_a_training_launched_from_a_notebook_is_its_own_tree_not_the_notebook_server():
    """`!python train.py` in a Jupyter kernel: the server (jupyter.service) and its other
    kernels keep running; the training is the tree below the kernel, which started it."""
    jupyter = "0::/lxc/200/ns/system.slice/jupyter.service"
    server = p(200, 100, [PY, "/root/venv/bin/jupyter-lab", "--ip=0.0.0.0"], cgroup=jupyter)
    kernel = p(201, 200, [PY, "-m", "ipykernel_launcher", "-f", "k.json"], cgroup=jupyter)
    other = p(202, 200, [PY, "-m", "ipykernel_launcher", "-f", "k2.json"], cgroup=jupyter)
    shell = p(203, 201, ["/bin/sh", "-c", "python train.py"], cwd="/data/dflash", cgroup=jupyter)
    train = p(204, 203, [PY, "train.py"], cwd="/data/dflash", cgroup=jupyter)
    (t,) = find(ct([server, kernel, other, shell, train]))
    assert t.unit is None and t.started_by == "jupyter.service", t
    assert 200 not in t.members and 202 not in t.members and 204 in t.members, t.members
