"""A consented takeover stops exactly the trainers, whatever runs them, and keeps their
checkpoints: the trainer (with its DataLoader-like helpers, sim/trainer.py) of a users' unit with
the default KillMode, of one with KillMode=process whose trainer is a shell's child, of a
transient unit (`systemd-run --unit=train`), of a unit of root's own
user manager (`systemd-run --user`), and ranks started one by one as separate trees, each gets
SIGTERM first and writes its checkpoint. Beside them a Jupyter server (a training launched from
it), TensorBoard and a checkpoint-upload timer live under the venv and the training dir: none of
them is stopped, disabled or masked. One adopted CT 200, shared by the module.
"""

from __future__ import annotations

import shlex

import pytest

from tests.e2e import test_takeover_launchers as launchers  # a module: its tests stay there
from tests.e2e.test_adopt import CKPT_NODE, ckpt_files, trainers, wait_for
from tests.e2e.test_takeover_launchers import started, taken_over
from tests.e2e.test_trainings_recognised import TRAIN, VENV_PY, start

# the adopted CT 200 of the takeover tests (a node of this module's own) and its per-test reset
adopted, site = launchers.adopted, launchers.site

UNIT = "dflash-train.service"
USER_ENV = "XDG_RUNTIME_DIR=/run/user/0"
JUPYTER = f"""\
import subprocess, sys, time
# a stand-in notebook server: a "kernel" ran `!python train.py` (a child of the server)
subprocess.Popen([{VENV_PY!r}, "train.py", "--checkpoint-dir", "/data/checkpoints"],
                 cwd="/data/dflash")
time.sleep(100000)
"""
SERVICES = {
    "jupyter.service": "[Service]\nWorkingDirectory=/data/dflash\n"
    f"ExecStart={VENV_PY} /root/venv/bin/jupyter-lab --ip=0.0.0.0\n"
    "[Install]\nWantedBy=multi-user.target\n",
    "tensorboard.service": "[Service]\n"
    "ExecStart=/root/venv/bin/tensorboard --logdir /data/dflash/runs\n"
    "[Install]\nWantedBy=multi-user.target\n",
    "upload.service": f"[Service]\nExecStart={VENV_PY} /data/dflash/upload.py\n",
    "upload.timer": "[Timer]\nOnBootSec=1h\n[Install]\nWantedBy=timers.target\n",
}


def checkpoint_s(site, seconds: int) -> None:
    site.node.run(["sh", "-c", f"echo {seconds} > {CKPT_NODE}/checkpoint_s"], check=True)


def one_new_trainer(site, known=()) -> int:
    found = wait_for("the trainer", lambda: set(started(site)) - set(known))
    return found.pop()


def unit_state(site, unit, *, user=False) -> str:
    argv = ["sh", "-c", f"{USER_ENV} systemctl --user is-active {unit}"] if user else None
    out = site.ct(*(argv or ["systemctl", "is-active", unit])).stdout
    return out.strip()


@pytest.fixture
def no_train_unit(site):
    """No train.service of the system's or root's manager left for the next test."""
    yield
    site.ct("sh", "-c", f"{USER_ENV} systemctl --user stop train.service; systemctl stop train")
    site.ct("sh", "-c", "rm -f /etc/systemd/system/train.service && systemctl daemon-reload")
    site.ct("systemctl", "reset-failed")


@pytest.mark.parametrize(
    "kind", ["default KillMode", "KillMode=process", "transient", "user manager"]
)
def test_a_unit_that_is_the_training_gets_sigterm_first_and_keeps_its_checkpoint(
    site, kind, no_train_unit
):
    checkpoint_s(site, 5)
    command = f"{VENV_PY} {TRAIN}"
    if kind in ("default KillMode", "KillMode=process"):
        # KillMode=process: its main process is a shell, the trainer its child, which systemd's
        # own stop would never signal
        service = (
            f"ExecStart={command}\n"
            if kind == "default KillMode"
            else f"KillMode=process\nExecStart=/bin/bash -c '{command}; echo trainer ended'\n"
        )
        site.node.ct_run(
            200,
            ["sh", "-c", "cat > /etc/systemd/system/train.service"],
            input=f"[Service]\nWorkingDirectory=/data/dflash\n{service}"
            "[Install]\nWantedBy=multi-user.target\n",
            check=True,
        )
        site.ct("systemctl", "daemon-reload")
        assert site.ct("systemctl", "enable", "--now", "train.service").returncode == 0
    elif kind == "transient":
        run = site.ct(
            "systemd-run", "--unit=train", "--working-directory=/data/dflash", *command.split()
        )
        assert run.returncode == 0, run.stderr
    else:
        assert site.ct("systemctl", "start", "user@0.service").returncode == 0
        run = site.ct(
            "sh",
            "-c",
            f"{USER_ENV} systemd-run --user --unit=train --working-directory=/data/dflash "
            + command,
        )
        assert run.returncode == 0, run.stderr
    trainer = one_new_trainer(site)
    run = taken_over(site, ["stop train.service: SIGTERM to its workers"])
    assert ckpt_files(site, "checkpoint") == [f"checkpoint-{trainer}"], run.output[-6000:]
    assert "DataLoader worker" not in site.ct("journalctl", "--no-pager", "-o", "cat").stdout
    assert unit_state(site, "train.service", user=kind == "user manager") != "active"
    wait_for("the unit's trainer", lambda: trainers(site), done=lambda t: len(t) == 1)


def test_ranks_started_one_by_one_are_stopped_together(site):
    checkpoint_s(site, 8)
    for rank in range(2):
        start(site, f"{VENV_PY} {TRAIN} --rank={rank}")
    ranks = wait_for("both ranks", lambda: started(site), done=lambda s: len(s) == 2)
    run = taken_over(site, [])
    assert "all 2 at once" in run.output, run.output[-6000:]
    assert sorted(ckpt_files(site, "checkpoint")) == sorted(f"checkpoint-{r}" for r in ranks)
    # both were stopping before either had finished: SIGTERM reached them at once
    stopping = site.node.run(
        ["sh", "-c", f"cd {CKPT_NODE} && stat -c %Y stopping-* checkpoint-*"], check=True
    ).stdout.split()
    assert max(map(int, stopping[:2])) <= min(map(int, stopping[2:])), stopping


def test_services_that_are_no_training_are_never_stopped_disabled_or_masked(site):
    node = site.node
    for name, text in SERVICES.items():
        node.ct_run(200, ["sh", "-c", f"cat > /etc/systemd/system/{name}"], input=text, check=True)
    node.ct_run(200, ["sh", "-c", "cat > /root/venv/bin/jupyter-lab"], input=JUPYTER, check=True)
    # stand-ins that run for as long as the test: TensorBoard and an upload in progress
    sleeper = f"#!{VENV_PY}\nimport time\ntime.sleep(100000)\n"
    for path in ("/root/venv/bin/tensorboard", "/data/dflash/upload.py"):
        node.ct_run(
            200, ["sh", "-c", f"cat > {path} && chmod +x {path}"], input=sleeper, check=True
        )
    site.ct("systemctl", "daemon-reload")
    for name in ("jupyter.service", "tensorboard.service", "upload.timer"):
        assert site.ct("systemctl", "enable", "--now", name).returncode == 0, name
    assert site.ct("systemctl", "start", "upload.service").returncode == 0  # an upload runs
    checkpoint_s(site, 3)
    trainer = one_new_trainer(site)  # the notebook's training
    try:
        run = taken_over(site, [])
        assert ckpt_files(site, "checkpoint") == [f"checkpoint-{trainer}"], run.output[-6000:]
        for name in ("jupyter.service", "tensorboard.service", "upload.service"):
            assert site.ct("systemctl", "is-active", name).stdout.strip() == "active", name
        for name in ("jupyter.service", "tensorboard.service", "upload.timer"):  # not masked
            assert site.ct("systemctl", "is-enabled", name).stdout.strip() == "enabled", name
    finally:
        for name in ("jupyter.service", "tensorboard.service", "upload.timer", "upload.service"):
            site.ct("systemctl", "disable", "--now", name)


@pytest.mark.parametrize("manager", ["system", "user"])
def test_a_transient_units_restart_hint_starts_it_again_as_it_ran(site, manager, no_train_unit):
    """A transient unit has no file to enable again: when the run fails after its takeover (the
    new trainer dies at import), the hint is a `systemd-run` of the same unit name, from the
    same directory, with the GPUs it was given; run as printed, it starts the trainer again
    under that unit."""
    checkpoint_s(site, 3)
    run_as = "systemd-run --user" if manager == "user" else "systemd-run"
    if manager == "user":
        assert site.ct("systemctl", "start", "user@0.service").returncode == 0
    started_by = site.ct(
        "sh",
        "-c",
        f"{USER_ENV} {run_as} --unit=train --working-directory=/data/dflash "
        f"--setenv=CUDA_VISIBLE_DEVICES=2 {VENV_PY} {TRAIN}",
    )
    assert started_by.returncode == 0, started_by.stderr
    trainer = one_new_trainer(site)
    dies = (
        'training_command=["{script}", "--checkpoint-dir", "{checkpoint_dir}", '
        '"--exit-at-start", "1"]'
    )
    run = site.deploy("restart_training=true", dies, "training_start_watch_s=10")
    assert run.rc != 0 and ckpt_files(site, "checkpoint") == [f"checkpoint-{trainer}"]
    last = run.output.strip().splitlines()[-1]
    hint = last.split("start again with `", 1)[1].split("`", 1)[0]
    assert "systemd-run" in hint and "--unit=train.service" in hint, hint
    site.ct("systemctl", "disable", "--now", UNIT)
    assert site.node.run(shlex.split(hint)).returncode == 0, hint
    again = one_new_trainer(site, known=[trainer])
    assert launchers.started(site)[again].get("CUDA_VISIBLE_DEVICES") == "2"
    assert unit_state(site, "train.service", user=manager == "user") == "active"
