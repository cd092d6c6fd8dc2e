"""A training is what holds the GPUs or runs the training script, however it was launched: on a
CT 200 made by hand (its own venv at /root/venv, raw lxc GPU lines, 16 cores), a training started
by torchrun (8 workers, each its own session, each holding its GPU), by ``python -m
torch.distributed.run``, by a relative ``python train.py`` typed in the data dir (still loading:
no GPU yet), by a ``bash run.sh`` loop, and the users' own unit between restarts; a neighbour
container's training on a GPU CT 200 trains on; a container whose view cannot be read. For each,
a plain deploy and verify.py leave every process (same pids), the venv (same inode), the GPUs
the training holds (no CUDA context of pvegpu's there: the torch double's contexts.log) and the
data untouched, and say what waits. A training started while the deploy builds is seen before
the switch. One node per profile is shared by the module (the scenarios run one after another).
"""

from __future__ import annotations

import json
import re

import pytest

from sim.__main__ import seed_training_code, site_data
from sim.fixtures import check_host, skip_without_real_systemd
from sim.index import PackageIndex
from sim.node import SimNode
from tests.e2e.conftest import Site
from tests.e2e.test_adopt import handmade_ct, wait_for

CKPT = "/data/checkpoints"
TRAIN = f"train.py --checkpoint-dir {CKPT}"
VENV_PY = "/root/venv/bin/python"
BUILD = "/root/venvs/torch-2.11.0-cu130"
HOLD = "/var/lib/pve-sim/exec-hold/200"  # sim hook: pct exec 200 fails until it is removed


@pytest.fixture(scope="module", params=["pve8", "pve9"])
def handmade(request, wheelhouse, tmp_path_factory):
    skip_without_real_systemd()
    check_host("systemd")
    tmp = tmp_path_factory.mktemp(f"handmade-{request.param}")
    with (
        PackageIndex(wheelhouse.torch_index(), wheelhouse.pypi()) as index,
        SimNode(tmp / "node", ct_init="systemd", profile=request.param) as node,
    ):
        seed_training_code(node)
        data = site_data(index, tmp / "locks")
        # adopted once (it was made by hand): the tag lets later plain deploys change it
        site = Site(
            node, index, [*data, "--data", "training_requirements=[]", "--data", "adopt=true"]
        )
        handmade_ct(site)
        # workers' CUDA contexts are listed as compute processes while they live (as NVML does)
        node.torch_config(register_contexts=True)
        yield site


def ct_processes(site) -> dict[int, str]:
    """Container pid -> command line of every process of CT 200."""
    out = site.ct(
        "sh",
        "-c",
        "for p in /proc/[0-9]*; do echo \"${p#/proc/} $(tr '\\0' ' ' < $p/cmdline)\"; done",
    ).stdout
    found = {}
    for line in out.splitlines():
        pid, _, cmd = line.partition(" ")
        if pid.isdigit() and cmd.strip():
            found[int(pid)] = cmd.strip()
    return found


def training_pids(site) -> list[int]:
    """Container pids of every process of the trainings these tests start."""
    marks = ("train.py", "run.sh", "torchrun", "torch.distributed.run")
    return sorted(p for p, cmd in ct_processes(site).items() if any(m in cmd for m in marks))


def contexts_on(site, gpus) -> int:
    """CUDA contexts the torch double recorded on ``gpus`` so far."""
    text = site.node.run(["cat", "/var/lib/pve-sim/gpu/contexts.log"]).stdout
    return sum(1 for line in text.splitlines() if line and json.loads(line)["gpu_index"] in gpus)


def snapshot(site, gpus) -> dict:
    conf = site.node.read("/etc/pve/lxc/200.conf").split("\n[")[0]
    return {
        "pids": training_pids(site),
        "venv": site.ct("stat", "-c", "%i %F", "/root/venv").stdout.strip(),
        "contexts": contexts_on(site, gpus),
        "data": site.node.run(
            ["sh", "-c", "cd /tank/dflash && find . -type f | sort | xargs -r sha256sum"]
        ).stdout,
        "config": conf,
        "ours": site.ct("systemctl", "is-active", "dflash-train.service").stdout.strip(),
    }


def start(site, command: str) -> None:
    """Start ``command`` in /data/dflash detached from the pct exec that starts it (its parent
    becomes the container's init), as `pct exec 200 -- bash -c '... &'` users do."""
    site.ct("sh", "-c", f"cd /data/dflash && setsid nohup {command} >/dev/null 2>&1 </dev/null &")


def root_node_pid(site, needle: str) -> int:
    pid = wait_for(
        f"a process running {needle!r}",
        lambda: next((p for p, c in ct_processes(site).items() if needle in c), None),
        done=lambda p: p is not None,
    )
    return site.node.node_pid(200, pid)


def stop_all(site) -> None:
    """End every process these tests started (by pid), and wait until none is left."""
    site.node.run(["rm", "-f", HOLD])
    for pid in training_pids(site):
        site.ct("sh", "-c", f"kill -9 {pid}")
    wait_for("the trainings to end", lambda: training_pids(site), done=lambda p: p == [])


def check_untouched(site, gpus, before, waits: str):
    """A plain deploy and verify.py leave the training as it is, and the deploy says what waits."""
    run = site.deploy()
    after = snapshot(site, gpus)
    assert after == before, run.output[-6000:]
    assert waits in run.output, run.output[-6000:]
    check = site.pyinfra("verify.py")
    assert snapshot(site, gpus) == before, check.output[-6000:]
    return run, check


def test_a_training_started_while_the_deploy_builds_is_seen_before_the_switch(handmade):
    site = handmade
    before = snapshot(site, [])
    release = site.index.hold("torch-")
    with site.deploy_streaming("progress_interval_s=1") as run:
        try:
            run.wait_for(f"building {BUILD}.next: ", timeout=600)
            start(site, f"{VENV_PY} {TRAIN}")
            root = root_node_pid(site, "train.py")
        finally:
            release.set()
        done = run.finish()
    try:
        assert done.rc == 0, done.output[-6000:]
        # the build was made beside it; the hand-made venv is still live, no unit started
        assert site.ct("test", "-d", f"{BUILD}").returncode == 0
        assert site.ct("stat", "-c", "%i %F", "/root/venv").stdout == before["venv"] + "\n"
        assert site.ct("systemctl", "is-active", "dflash-train.service").stdout.strip() != "active"
        # (its DataLoader-like helpers may or may not be forked yet when it is read)
        assert (
            f"the switch of /root/venv to torch-2.11.0-cu130 waits for the running training "
            f"(pid {root}, started by hand" in done.output
        ), done.output[-6000:]
    finally:
        stop_all(site)


@pytest.mark.parametrize(
    ("launch", "needle", "gpus", "members"),
    [
        (
            f"/root/venv/bin/torchrun --nproc_per_node=8 --standalone {TRAIN}",
            "torchrun",
            range(8),
            25,  # the launcher, 8 workers, 2 DataLoader-like helpers each
        ),
        (
            f"{VENV_PY} -m torch.distributed.run --nproc_per_node=2 --standalone {TRAIN}",
            "-m torch",
            range(2),
            7,
        ),
        (f"{VENV_PY} {TRAIN}", "train.py", [], 3),
        ("bash run.sh", "run.sh", [3], 4),
    ],
    ids=["torchrun", "m-torch-distributed-run", "relative-python", "bash-loop"],
)
def test_a_training_however_launched_is_left_alone_by_deploy_and_verify(
    handmade, launch, needle, gpus, members
):
    site = handmade
    site.node.run(
        ["sh", "-c", "cat > /tank/dflash/dflash/run.sh"],
        input=f"while true; do LOCAL_RANK=3 {VENV_PY} {TRAIN}; sleep 1; done\n",
        check=True,
    )
    try:
        start(site, launch)
        root = root_node_pid(site, needle)
        wait_for("every member", lambda: len(training_pids(site)), done=lambda n: n >= members)
        if gpus:  # each worker has made its context (it records its start after)
            wait_for("the workers' GPUs", lambda: contexts_on(site, gpus), lambda n: n >= len(gpus))
        before = snapshot(site, gpus)
        assert len(before["pids"]) == members, before
        more = f", {members} processes" if members > 1 else ""
        run, check = check_untouched(
            site,
            gpus,
            before,
            f"waits for the running training (pid {root}, started by hand{more})",
        )
        assert f"pid {root}, started by hand{more}): rerun with --data restart_training=true" in (
            run.output
        )
        for gpu in gpus:  # verify.py names why it made no context there
            why = rf"GPU {gpu}: (compute process of this container \(pid \d+\)|\d+ MiB in use)"
            assert re.search(why, check.output), check.output[-4000:]
    finally:
        stop_all(site)


USERS_UNIT = f"""\
[Unit]
Description=dflash training (made by hand), crashing while it loads

[Service]
WorkingDirectory=/data/dflash
ExecStart={VENV_PY} {TRAIN} --exit-at-start 3
Restart=on-failure
RestartSec=1h

[Install]
WantedBy=multi-user.target
"""


def test_the_users_unit_between_restarts_is_a_training(handmade):
    site = handmade
    site.node.ct_run(
        200, ["sh", "-c", "cat > /etc/systemd/system/train.service"], input=USERS_UNIT, check=True
    )
    try:
        assert site.ct("systemctl", "daemon-reload").returncode == 0
        site.ct("systemctl", "enable", "--now", "train.service")
        state = wait_for(
            "train.service between restarts",
            lambda: site.ct(
                "systemctl", "show", "-p", "ActiveState,SubState", "train.service"
            ).stdout.split(),
            done=lambda s: "SubState=auto-restart" in s or "SubState=auto-restart-queued" in s,
        )
        before = snapshot(site, [])
        sub = state[1].split("=")[1]
        check_untouched(
            site,
            [],
            before,
            f"waits for the running training (train.service activating ({sub}))",
        )
        after = site.ct(
            "systemctl", "show", "-p", "ActiveState,SubState,NRestarts", "train.service"
        )
        assert set(state) <= set(after.stdout.split()), after.stdout
    finally:
        site.ct("systemctl", "disable", "--now", "train.service")
        site.ct("rm", "-f", "/etc/systemd/system/train.service")
        site.ct("systemctl", "daemon-reload")
        stop_all(site)


def test_an_unreadable_container_view_is_a_training_that_may_run(handmade):
    site = handmade
    try:
        start(site, f"{VENV_PY} {TRAIN}")
        root_node_pid(site, "train.py")
        # cores as the users set them: the deploy would raise them to ct_cores (32)
        site.node.run(["pct", "set", "200", "--cores", "16"], check=True)
        before = snapshot(site, [])
        site.node.run(
            ["sh", "-c", f"mkdir -p {HOLD.rsplit('/', 1)[0]} && touch {HOLD}"], check=True
        )
        run = site.deploy()
        site.node.run(["rm", "-f", HOLD])
        assert snapshot(site, []) == before, run.output[-6000:]  # config: no pct set either
        assert (
            "waits for a training that may run (state unknown: CT 200's own view could not be "
            "read (pct exec 200 failed or timed out" in run.output
        ), run.output[-6000:]
    finally:
        stop_all(site)


def test_a_neighbours_training_on_a_shared_gpu_keeps_it(handmade):
    """CT 201's training on GPU 2 (the node sees its cgroup): CT 200's deploy stops at the
    verification with that fact, never starts its unit on that GPU nor makes a context there
    (the unit's start would wait for it too: tests/unit/test_training_identity.py)."""
    site = handmade
    pid = site.node.spawn_gpu_process(
        2,
        ["/root/venv/bin/python", "/data/dflash/train.py"],
        used_mib=30000,
        cgroup="0::/lxc/201/ns/system.slice/train.service",
    )
    try:
        before = contexts_on(site, [2])
        run = site.deploy()
        # the verification stops the deploy with the fact: another container's process holds a
        # training GPU of CT 200 (pvegpu never stops it); nothing starts beside it
        assert run.rc != 0
        assert (
            f"GPU 2 (target) free: expected no compute process but the training unit's; found "
            f"pid {pid} in CT 201" in run.output
        ), run.output[-6000:]
        assert "pvegpu never stops another container's work" in run.output
        assert site.ct("systemctl", "is-active", "dflash-train.service").stdout.strip() != "active"
        assert contexts_on(site, [2]) == before, run.output[-4000:]
        check = site.pyinfra("verify.py")
        assert contexts_on(site, [2]) == before, check.output[-4000:]
        assert site.node.run(["test", "-d", f"/proc/{pid}"]).returncode == 0
    finally:
        site.node.kill_gpu_process(pid)
