"""Issue 25: the slips mutmut's operators never make (a lost anchor, equality for membership, an
ignored failure, a lock released at once, a check of the wrong path), each pinned by a fast test
through the public function that keeps the promise. bench/hand_mutants.py applies each slip alone
and runs the tests named there: every one must fail.

1. the delete guard refuses names that only start like a build, and the guarded delete leaves them;
2. the restart gate refuses for every running state of the unit;
3. clearing leftovers fails (so the unit is not started) on survivors, an error, a failed status;
4. the node lock's holder keeps the flock until its channel (stdin) closes;
5. the runtime check runs on the new ``<build>.next``, not the older build beside it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from types import SimpleNamespace

import pytest
from pyinfra.api import FunctionCommand
from pyinfra.connectors.util import CommandOutput, OutputLine

from pvegpu.guard import UnsafeDelete, delete_command, delete_refusal, remove_tree
from pvegpu.operations import checks, python_env, training
from pvegpu.plan.passthrough import restart_blocker
from pvegpu.settings import Settings, defaults
from pvegpu.startup import node_lock

S = Settings.from_data(defaults())
UNIT = "dflash-train.service"

# ---- 1. the delete guard: a build's name, the whole name and nothing after it ------------------

LOOK_ALIKES = [
    "torch-2.11.0-cu130-mydata",
    "torch-2.11.0-cu130.bak",
    "torch-2.11.0-cu130.b2.old",
    "torch-2.11.0-cu130_ckpt",
    "torch-2.11.0-cu130.next.keep",
    "torch-2.11.0-cu130.b2x",
]


@pytest.mark.parametrize("name", LOOK_ALIKES)
def test_a_name_that_only_starts_like_a_build_is_refused(name):
    assert delete_refusal(f"/root/venvs/{name}", "/root/venvs")
    with pytest.raises(UnsafeDelete, match="refusing to delete"):
        delete_command([f"/root/venvs/{name}"], venvs_dir="/root/venvs")


@pytest.mark.parametrize("name", LOOK_ALIKES)
def test_the_guarded_delete_leaves_a_directory_that_only_starts_like_a_build(tmp_path, name):
    venvs = tmp_path / "venvs"
    victim = venvs / name
    victim.mkdir(parents=True)
    (victim / "checkpoint.pt").write_text("a week of training")
    with pytest.raises(UnsafeDelete):
        remove_tree(str(victim), venvs_dir=str(venvs))
    assert (victim / "checkpoint.pt").read_text() == "a week of training"
    build = venvs / "torch-2.11.0-cu130.b2"  # the real build beside it may go
    build.mkdir()
    remove_tree(str(build), venvs_dir=str(venvs))
    assert not build.exists() and victim.exists()


def test_a_build_name_below_another_directory_of_venvs_dir_is_refused(tmp_path):
    venvs = tmp_path / "venvs"
    victim = venvs / "mydata" / "torch-2.11.0-cu130"
    victim.mkdir(parents=True)
    assert delete_refusal(str(victim), str(venvs))
    with pytest.raises(UnsafeDelete):
        remove_tree(str(victim), venvs_dir=str(venvs))
    assert victim.exists()


# ---- 2. the restart gate: every running state blocks, only a stopped unit lets it pass -----------


@pytest.mark.parametrize("active", ["active", "activating", "reloading", "deactivating"])
def test_the_restart_gate_refuses_while_the_unit_runs_in_any_state(active):
    line = restart_blocker(200, UNIT, {"unit_active": active}, ["dev0 changed"])
    assert line and f"{UNIT} is running" in line and "restart_training=true" in line


@pytest.mark.parametrize("active", ["inactive", "failed", "unknown"])
def test_the_restart_gate_lets_a_stopped_unit_restart(active):
    assert restart_blocker(200, UNIT, {"unit_active": active}, ["dev0 changed"]) is None


def test_the_restart_gate_refuses_when_the_unit_could_not_be_read():
    assert "could not be read" in restart_blocker(200, UNIT, None, ["dev0 changed"])


# ---- 3. clearing leftovers: any doubt fails it, and then the unit is not started ---------------


class Node:
    """The node host the clearing runs on: answers with ``status`` and ``stdout``/``stderr``."""

    def __init__(self, status, stdout=(), stderr=()):
        self.answer = (
            status,
            CommandOutput(
                [OutputLine("stdout", line) for line in stdout]
                + [OutputLine("stderr", line) for line in stderr]
            ),
        )
        self.commands = []

    def run_shell_command(self, command):
        self.commands.append(str(command))
        return self.answer


class CtHost:
    name = "@pct/n1/200"

    def __init__(self, node):
        self.data = {"pct_node": "n1", "pct_vmid": 200}
        self.inventory = SimpleNamespace(get_host=lambda name, default=None: node)
        self.logged = []

    def log_styled(self, text, **kwargs):
        self.logged.append(text)


def leftovers(killed=(), foreign=(), remaining=(), **extra):
    return [
        json.dumps(
            {
                "killed": list(killed),
                "foreign": list(foreign),
                "remaining": list(remaining),
                **extra,
            }
        )
    ]


STUCK = {"pid": 4242, "gpus": [0], "argv": ["python", "/data/dflash/train.py"]}
FAILING = {
    "a process survived SIGKILL": (
        Node(True, leftovers(killed=[STUCK], remaining=[STUCK])),
        "survived SIGKILL",
    ),
    "the probe reports an error": (
        Node(True, leftovers(error="nvidia-smi failed")),
        "nvidia-smi failed",
    ),
    "the probe's command failed": (
        Node(False, stderr=["pct: container 200 not running"]),
        "container 200 not running",
    ),
    "the probe printed no document": (
        Node(True, ["Traceback (most recent call last):"]),
        "no JSON document",
    ),
}


def run_like_pyinfra(commands, ct_host) -> list[str]:
    """The commands of one operation as pyinfra runs them (pyinfra/api/operations.py: each in
    turn, a FunctionCommand through its ``execute``; the first whose status ``is False`` ends the
    operation): the shell commands that ran."""
    ran = []
    for command in commands:
        if isinstance(command, FunctionCommand):
            status = command.execute(None, ct_host, {})
        else:
            ran.append(str(command))
            status = True
        if status is False:
            break
    return ran


def started(monkeypatch, node) -> tuple[list[str], CtHost]:
    """What a deploy runs for a stopped unit when the clearing meets ``node``."""
    ct = CtHost(node)
    monkeypatch.setattr(
        training, "container_state", lambda: {"unit_active": "inactive", "unit_enabled": "enabled"}
    )
    monkeypatch.setattr(training, "host", ct)
    monkeypatch.setattr(training, "watched", lambda settings: iter(()))  # its own tests
    return run_like_pyinfra(list(training.unit_running._inner(settings=S)), ct), ct


@pytest.mark.parametrize("case", list(FAILING))
def test_clearing_leftovers_fails_on_any_doubt(case):
    node, said = FAILING[case]
    ct = CtHost(node)
    assert training.clear_leftovers_command(S).execute(None, ct, {}) is False
    assert node.commands, "the clearing never asked the node"
    assert any(said in line for line in ct.logged), ct.logged


@pytest.mark.parametrize("case", list(FAILING))
def test_the_unit_is_not_started_when_clearing_leftovers_fails(monkeypatch, case):
    ran, ct = started(monkeypatch, FAILING[case][0])
    assert not any("systemctl start" in c for c in ran), ran


def test_a_clean_clearing_starts_the_unit(monkeypatch):
    gone = {"pid": 7, "gpus": [1], "argv": ["python", "/data/dflash/train.py"]}
    ran, ct = started(monkeypatch, Node(True, leftovers(killed=[gone])))
    assert ran[-1] == f"systemctl reset-failed {UNIT}; systemctl start {UNIT}"
    assert any("ended leftover training process 7" in line for line in ct.logged)


def test_clearing_fails_when_the_node_is_not_in_the_inventory():
    ct = CtHost(None)
    assert training.clear_leftovers_command(S).execute(None, ct, {}) is False


# ---- 4. the node lock: held until the holder's stdin closes -----------------------------------


@pytest.mark.skipif(not shutil.which("flock"), reason="needs flock (util-linux)")
def test_the_lock_holder_keeps_the_flock_until_its_channel_closes(tmp_path, monkeypatch):
    lock, holder = tmp_path / "deploy.lock", tmp_path / "deploy.holder"
    monkeypatch.setattr(node_lock, "LOCK", str(lock))
    monkeypatch.setattr(node_lock, "HOLDER", str(holder))
    monkeypatch.setattr(node_lock, "STOP_LOCK", str(tmp_path / "stop.lock"))
    monkeypatch.setattr(node_lock, "STOP_HOLDER", str(tmp_path / "stop.holder"))
    script = node_lock.holder_script(0, "pyinfra inventory.py deploy.py")
    script = script.replace("mkdir -p /run/lock", f"mkdir -p {tmp_path}")
    assert "/run/lock" not in script
    taken = ["flock", "-n", str(lock), "true"]
    proc = subprocess.Popen(
        ["sh", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "LOCKED"
        # the channel is open: the lock is held, whatever happens on the holder's side meanwhile
        assert subprocess.run(taken).returncode == 1
        assert proc.poll() is None
        assert "pyinfra inventory.py deploy.py" in holder.read_text()
        assert subprocess.run(taken).returncode == 1
    finally:
        proc.stdin.close()  # the channel closes: the holder reads EOF, the kernel drops the lock
        proc.wait()
    assert subprocess.run(taken).returncode == 0


@pytest.mark.skipif(not shutil.which("flock"), reason="needs flock (util-linux)")
def test_a_deploy_waits_for_a_takeovers_stop_that_outlived_its_deploy(tmp_path, monkeypatch):
    """The stop process of an interrupted deploy's takeover holds the stop lock while the
    checkpoints are written: the next deploy's holder waits for it, naming it, and refuses when
    its wait runs out (it never signals a checkpoint in progress a second time)."""
    for name in ("LOCK", "HOLDER", "STOP_LOCK", "STOP_HOLDER"):
        monkeypatch.setattr(node_lock, name, str(tmp_path / name.lower()))
    (tmp_path / "stop_holder").write_text("the takeover's stop of CT 200's training (pid 7)\n")
    stop = subprocess.Popen(["flock", str(tmp_path / "stop_lock"), "sleep", "60"])
    try:
        while subprocess.run(["flock", "-n", str(tmp_path / "stop_lock"), "true"]).returncode == 0:
            subprocess.run(["sleep", "0.02"], check=True)
        script = node_lock.holder_script(0, "pyinfra inventory.py deploy.py")
        script = script.replace("mkdir -p /run/lock", f"mkdir -p {tmp_path}")
        done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30)
        assert done.returncode == node_lock.BUSY_EXIT
        assert done.stdout.splitlines() == [
            "WAIT the takeover's stop of CT 200's training (pid 7)",
            "BUSY the takeover's stop of CT 200's training (pid 7)",
        ]
    finally:
        stop.kill()
        stop.wait()


# ---- 5. the runtime check: on the new build, not the old one beside it ------------------------

B = S.build_venv  # /root/venvs/torch-2.11.0-cu130
GOOD = {
    "present": True,
    "version": f"{S.torch.version}+{S.torch.variant}",
    "cuda": S.torch.spec.cuda,
    "available": True,
    "device_count": S.gpus.expected_count,
}


def runtime_check(monkeypatch, broken: str, venvs: dict) -> tuple[list, list[str]]:
    """(commands of venv_checked, the pythons it asked) when the build at ``broken`` does not
    import torch and every other one is good."""
    asked = []

    def get_fact(fact, python):
        asked.append(python)
        if python == f"{broken}/bin/python":
            return {"present": True, "python": python, "import_error": "ImportError: libcudart"}
        return {**GOOD, "python": python}

    monkeypatch.setattr(python_env, "container_state", lambda: {"venvs": venvs})
    monkeypatch.setattr(checks, "host", SimpleNamespace(get_fact=get_fact))
    commands = list(
        python_env.venv_checked._inner(torch=S.torch, python_env=S.python_env, gpus=S.gpus)
    )
    return commands, asked


OLD_AND_NEXT = {
    S.torch.build_name: {"link": f"{S.torch.build_name}.b1"},
    f"{S.torch.build_name}.b1": {},
    f"{S.torch.build_name}.next": {},
}


def test_the_runtime_check_fails_a_broken_next_build_beside_a_good_old_one(monkeypatch):
    commands, asked = runtime_check(monkeypatch, f"{B}.next", OLD_AND_NEXT)
    assert asked == [f"{B}.next/bin/python"]
    assert len(commands) == 1 and isinstance(commands[0], FunctionCommand)
    assert commands[0].execute(None, CtHost(None), {}) is False


def test_the_runtime_check_passes_a_good_next_build_beside_a_broken_old_one(monkeypatch):
    commands, asked = runtime_check(monkeypatch, B, OLD_AND_NEXT)
    assert (commands, asked) == ([], [f"{B}.next/bin/python"])


def test_no_runtime_check_without_a_new_build(monkeypatch):
    commands, asked = runtime_check(monkeypatch, B, {S.torch.build_name: {}})
    assert (commands, asked) == ([], [])
