"""The unit runs the user's own command: a torchrun DDP run with its own flags on 8 GPUs (real
systemd in CT 200, the torch double's torchrun), and a one-GPU node.

torchrun: the deploy converges and verifies with 8 workers, each getting the command's arguments
exactly as written (a space, `$HOME`, `%h`); a no-op and a variant swap leave every worker
running (the swap's restart is pending); a consented restart lets every worker finish a
checkpoint that takes longer than torchrun's own 30 s before SIGKILL (the unit's ExecStop holds
the launcher), then 8 new workers run from the new build. With torch 2.12 (its launcher's wait is
TORCH_ELASTIC_SHUTDOWN_TIMEOUT) the stop never holds the launcher, and every worker, helpers and
all, still checkpoints.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from sim.trainer import TRAINER
from sim.wheels import build_torch_wheels
from tests.e2e.conftest import systemd_site
from tests.e2e.test_adopt import CKPT_NODE, TRAIN_NODE, ckpt_files, wait_for

UNIT = "dflash-train.service"
DDP = (
    'training_command=["{script}", "--checkpoint-dir", "{checkpoint_dir}", "--run-name", '
    '"ddp run $HOME %h", "--world={gpu_count}"]'
)
TORCHRUN = ("training_launcher=torchrun", DDP, "target_gpus=[0,1,2,3,4,5,6,7]", "drafter_gpus=[]")
OWN_FLAGS = ["--checkpoint-dir", "/data/checkpoints", "--run-name", "ddp run $HOME %h", "--world=8"]


def workers(site) -> dict[int, dict]:
    """Container pid -> the argv and rank variables each worker recorded at its start."""
    found = {}
    for name in ckpt_files(site, "started"):
        lines = site.node.read(f"{CKPT_NODE}/{name}").splitlines()
        found[int(name.split("-")[1])] = json.loads(lines[1]) if len(lines) > 1 else {}
    return found


def alive(site, pids) -> list[int]:
    return [p for p in pids if site.ct("test", "-d", f"/proc/{p}").returncode == 0]


@pytest.fixture(scope="module")
def torchrun_site(wheelhouse, tmp_path_factory):
    with systemd_site(wheelhouse, tmp_path_factory.mktemp("torchrun")) as site:
        site.node.torch_config(register_contexts=True)  # each worker's context on the node's GPUs
        yield site


def checkpointed_then_new_workers(site, started, count: int) -> dict:
    """After a consented restart: every old worker's checkpoint written (the checkpoint time
    reset), then ``count`` new workers: theirs (pid -> record)."""
    assert sorted(ckpt_files(site, "checkpoint")) == sorted(f"checkpoint-{p}" for p in started)
    site.node.run(["rm", "-f", f"{CKPT_NODE}/checkpoint_s"], check=True)
    return wait_for(
        f"{count} new workers",
        lambda: {p: w for p, w in workers(site).items() if p not in started},
        done=lambda w: len(w) == count,
    )


def test_a_torchrun_unit_converges_survives_a_swap_and_lets_every_worker_checkpoint(
    torchrun_site,
):
    site = torchrun_site
    first = site.deploy(*TORCHRUN)
    assert first.rc == 0, first.output[-6000:]
    assert "pvegpu: 127.0.0.1: converged and verified" in first.output
    started = wait_for("8 workers", lambda: workers(site), done=lambda w: len(w) == 8)
    assert sorted(int(w["LOCAL_RANK"]) for w in started.values()) == list(range(8))
    assert all(w["argv"] == OWN_FLAGS for w in started.values()), started
    main = site.ct("systemctl", "show", "-p", "MainPID", "--value", UNIT).stdout.strip()
    cmdline = site.ct("cat", f"/proc/{main}/cmdline").stdout.split("\0")
    assert cmdline[1:6] == [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        "--nproc-per-node=8",
    ]

    again = site.deploy(*TORCHRUN)
    assert again.rc == 0 and again.changed == 0, again.output[-6000:]
    swap = site.deploy(*TORCHRUN, "torch_variant=cu128")
    assert swap.rc == 0, swap.output[-6000:]
    assert "the training's restart is pending" in swap.output, swap.output[-3000:]
    assert sorted(alive(site, started)) == sorted(started)  # nothing restarted
    assert ckpt_files(site, "stopping") == []

    # 35 s per checkpoint, beyond the 30 s after which torchrun SIGKILLs its workers
    site.node.run(["sh", "-c", f"echo 35 > {CKPT_NODE}/checkpoint_s"], check=True)
    restart = site.deploy(*TORCHRUN, "torch_variant=cu128", "restart_training=true")
    assert restart.rc == 0, restart.output[-6000:]
    new = checkpointed_then_new_workers(site, started, 8)
    assert all(w["argv"] == OWN_FLAGS for w in new.values())
    link = site.ct("readlink", "/root/venv").stdout.strip()
    assert link.endswith("torch-2.11.0-cu128"), link


@pytest.fixture(scope="module")
def torchrun_2_12_site(wheelhouse, tmp_path_factory):
    """A site whose loopback index serves the torch double as 2.12.0 (every variant)."""
    tmp = tmp_path_factory.mktemp("torchrun-2.12")
    house = dataclasses.replace(wheelhouse, torch=build_torch_wheels(tmp / "wheels", "2.12.0"))
    with systemd_site(house, tmp) as site:
        site.node.torch_config(register_contexts=True)
        yield site


def launcher_state(site, pid: int) -> str:
    """The state letter of the launcher (T: stopped), "" once it is gone."""
    out = site.ct("sh", "-c", f"sed 's/.*) //' /proc/{pid}/stat 2>/dev/null | cut -c1")
    return out.stdout.strip()


def test_with_torch_2_12_a_restart_never_holds_the_launcher(torchrun_2_12_site):
    """A consented restart of a torch 2.12 torchrun unit whose workers have DataLoader-like
    helpers: the unit's stop holds nothing (no SIGSTOP in it; the launcher, sampled while the
    workers checkpoint, is never stopped), every worker's checkpoint is written (no helper was
    signalled by anyone but its worker), and one launcher with 2 new workers runs afterwards."""
    site = torchrun_2_12_site
    two = ("training_launcher=torchrun", DDP, "target_gpus=[0,1]", "drafter_gpus=[]")
    first = site.deploy(*two, "torch_version=2.12.0")
    assert first.rc == 0, first.output[-6000:]
    unit = site.ct("cat", f"/etc/systemd/system/{UNIT}").stdout
    assert "ExecStop=" in unit and "kill -STOP" not in unit, unit
    started = wait_for("2 workers", lambda: workers(site), done=lambda w: len(w) == 2)
    assert all(w["argv"][-1] == "--world=2" for w in started.values()), started
    launcher = int(site.ct("systemctl", "show", "-p", "MainPID", "--value", UNIT).stdout)
    site.node.run(["sh", "-c", f"echo 8 > {CKPT_NODE}/checkpoint_s"], check=True)
    states = []
    changed = 'training_env={"RUN": "2"}'  # a change of the build's settings: a restart pending
    with site.deploy_streaming(
        *two, "torch_version=2.12.0", changed, "restart_training=true"
    ) as run:
        begun = lambda: ckpt_files(site, "stopping") or run.process.poll() is not None  # noqa: E731
        wait_for("the checkpoints to begin (or the deploy to end)", begun, timeout=600)
        while (state := launcher_state(site, launcher)) and run.process.poll() is None:
            states.append(state)
        done = run.finish(timeout=600)
    assert done.rc == 0, done.output[-6000:]
    assert states and "T" not in states, states  # sampled while the workers checkpointed
    new = checkpointed_then_new_workers(site, started, 2)
    main = int(site.ct("systemctl", "show", "-p", "MainPID", "--value", UNIT).stdout)
    assert main not in (0, launcher) and sorted(alive(site, started)) == []
    assert sorted(alive(site, new)) == sorted(new)


@pytest.mark.parametrize("node_options", [{"gpus": 1}])
def test_a_one_gpu_node_runs_a_one_gpu_script(site):
    one = (
        "expected_gpu_count=1",
        "target_gpus=[0]",
        "drafter_gpus=[]",
        'training_command=["{script}", "--checkpoint-dir", "{checkpoint_dir}", "--gpus", "{gpus}"]',
    )
    site.node.run(["sh", "-c", f"cat > {TRAIN_NODE}"], input=TRAINER, check=True)
    run = site.deploy(*one)
    assert run.rc == 0, run.output[-6000:]
    assert "pvegpu: 127.0.0.1: converged and verified" in run.output
    unit = site.node.ct_run(200, ["cat", f"/etc/systemd/system/{UNIT}"]).stdout
    assert "Environment=CUDA_VISIBLE_DEVICES=0\n" in unit
    (record,) = wait_for("the trainer", lambda: workers(site)).values()
    assert record["argv"] == ["--checkpoint-dir", "/data/checkpoints", "--gpus", "0"]
    again = site.deploy(*one)
    assert again.rc == 0 and again.changed == 0, again.output[-4000:]
    # the preview of a changed command shows the command as it will run, old -> new
    changed = [*one[:3], one[3].replace('"{gpus}"]', '"{gpus}", "--lr", "3e-4 warm"]')]
    preview = site.deploy(*changed, yes=False)
    assert (
        "+set -- /data/dflash/train.py --checkpoint-dir /data/checkpoints --gpus 0 --lr "
        "'3e-4 warm'" in preview.output
    ), preview.output[-4000:]
    assert "-set -- /data/dflash/train.py --checkpoint-dir /data/checkpoints --gpus 0\n" in (
        preview.output
    )
