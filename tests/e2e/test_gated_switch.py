"""The venv switch is made by the read right before it (pvegpu.run.gated): the node read's one
`pct exec` into the container switches the live link only when the gates' check, run on the node
on that very read, finds no training it waits for. A training started by hand while the deploy
builds the new variant is seen there, and the live venv stays; one started before a swap back
too, and that swap makes no change at all."""

from __future__ import annotations

from tests.e2e import test_speed as speed
from tests.e2e.test_adopt import wait_for
from tests.e2e.test_trainings_recognised import ct_processes

CU128, CU130 = "torch-2.11.0-cu128", "torch-2.11.0-cu130"
TRAIN = "/root/venv/bin/python train.py --checkpoint-dir /data/checkpoints"


def start_by_hand(site) -> int:
    """Start the stand-in training from /data/dflash, detached from the pct exec that starts it
    (its parent becomes the container's init): -> its node pid."""
    site.ct("sh", "-c", f"cd /data/dflash && setsid nohup {TRAIN} >/dev/null 2>&1 </dev/null &")
    pid = wait_for("the hand-started training", lambda: hand_pids(site), done=bool)[0]
    return site.node.node_pid(200, pid)


def hand_pids(site) -> list[int]:
    """Container pids of the hand-started training (pvegpu's unit runs the absolute path)."""
    found = ct_processes(site).items()
    return sorted(p for p, cmd in found if cmd.startswith("/root/venv/bin/python train.py"))


def stop_by_hand(site) -> None:
    for pid in hand_pids(site):
        site.ct("sh", "-c", f"kill -9 {pid}")
    wait_for("the hand-started training to end", lambda: hand_pids(site), done=lambda p: p == [])


def live(site) -> str:
    return site.ct("readlink", "-f", "/root/venv").stdout.strip()


def says_the_switch_waits(output: str, build: str, pid: int) -> None:
    """The run's line that the switch to ``build`` waits for the training started by hand."""
    line = f"the switch of /root/venv to {build} waits for the running training (pid {pid}, "
    assert line + "started by hand" in output, output[-6000:]


def test_a_training_started_during_the_build_is_seen_by_the_read_that_would_switch(deployed):
    site = deployed
    before = live(site)
    assert before.startswith(f"/root/venvs/{CU130}.b"), before
    release = site.index.hold("torch-")
    with site.deploy_streaming("torch_variant=cu128", "progress_interval_s=1") as run:
        try:
            run.wait_for(f"building /root/venvs/{CU128}.next: ", timeout=600)
            pid = start_by_hand(site)
        finally:
            release.set()
        done = run.finish()
    try:
        assert done.rc == 0, done.output[-6000:]
        assert site.ct("test", "-d", f"/root/venvs/{CU128}").returncode == 0  # built beside it
        assert live(site) == before, done.output[-6000:]
        says_the_switch_waits(done.output, CU128, pid)
    finally:
        stop_by_hand(site)


def test_a_swap_back_beside_a_training_changes_nothing_in_one_read_more(deployed):
    site = deployed
    assert site.deploy("torch_variant=cu128").rc == 0
    before = live(site)
    pid = start_by_hand(site)
    try:
        run, container, execs, other, node = speed.counted(site)
        why = speed.report("swap back beside a training", container, execs, other, node)
        assert run.rc == 0, run.output[-6000:]
        # the preflight's read, then the gate's (its exec checked, and did not switch)
        assert container == [] and len(execs) == 2 and len(node) == 2 and other == [], why
        assert run.changed == 0, run.output[-6000:]
        assert live(site) == before
        says_the_switch_waits(run.output, CU130, pid)
    finally:
        stop_by_hand(site)
    # once it has ended, the same swap back is made by that read's exec
    run, container, execs, other, node = speed.counted(site)
    assert run.rc == 0 and container == [] and len(execs) == 2, run.output[-6000:]
    assert live(site).startswith(f"/root/venvs/{CU130}.b")
