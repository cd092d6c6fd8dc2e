"""Verification beside a running training (issue 24): with the training unit running and its
processes holding every GPU nearly full (or one GPU in EXCLUSIVE_PROCESS mode), verify.py and a
variant swap without restart pass and make no CUDA context on those GPUs: the torch double's
record of contexts (contexts.log) and the node's nvidia-smi memory are unchanged. A CUDA context
there would be refused by the runtime (out of memory; busy) or take the memory the trainer's next
allocation needs. verify_level=compile refuses in one line.

The training's GPU processes are spawned on the node in the unit's cgroup (as the node sees a
container unit's processes, sim.node.spawn_gpu_process); the unit itself really runs in CT 200.
"""

from __future__ import annotations

import json

from tests.e2e.test_verify import problem_lines, verify_unchanged

UNIT = "dflash-train.service"
UNIT_CGROUP = f"0::/lxc/200/ns/system.slice/{UNIT}"
TRAINING = ["/root/venv/bin/python", "/data/dflash/train.py"]
TOTAL_MIB = 143771  # the sim's H200
CONTEXT_MIB = 500


def contexts(node) -> list[dict]:
    """Every CUDA context the torch double made on this node (its record)."""
    text = node.run(["sh", "-c", "cat /var/lib/pve-sim/gpu/contexts.log 2>/dev/null"]).stdout
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def memory(node) -> str:
    """The node's nvidia-smi view of every GPU's memory and compute mode."""
    return node.run(
        [
            "nvidia-smi",
            "--query-gpu=index,memory.used,memory.free,compute_mode",
            "--format=csv,noheader",
        ],
        check=True,
    ).stdout


def apps(node) -> list[str]:
    out = node.run(
        ["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader"],
        check=True,
    ).stdout
    return sorted(out.splitlines())


def unchanged(node, before):
    assert contexts(node) == before["contexts"], "a CUDA context was made beside the training"
    assert memory(node) == before["memory"] and apps(node) == before["apps"]


def snapshot(node) -> dict:
    return {"contexts": contexts(node), "memory": memory(node), "apps": apps(node)}


def test_verify_and_a_swap_make_no_context_beside_the_training(deployed):
    site, node = deployed, deployed.node
    node.torch_config(register_contexts=True, context_mib=CONTEXT_MIB)
    assert site.ct("systemctl", "is-active", UNIT).stdout.strip() == "active"
    # the trainer holds all 8 GPUs (a context on each, listed by nvidia-smi) and its processes
    # fill them, each with less free than one context takes
    assert len(apps(node)) == 8
    for g in range(8):
        node.spawn_gpu_process(g, TRAINING, TOTAL_MIB - 2 * CONTEXT_MIB + 100, cgroup=UNIT_CGROUP)
    before = snapshot(node)
    assert "Default" in before["memory"] and len(before["apps"]) == 16
    assert all(line.split(", ")[2] == "400 MiB" for line in before["memory"].splitlines())

    run = verify_unchanged(site)
    assert run.rc == 0, "\n".join(problem_lines(run)) or run.stderr[-4000:]
    assert "VERIFIED CT 200 on 127.0.0.1" in run.stderr
    assert (
        "GPU 0, 1, 2, 3, 4, 5, 6, 7: free MiB from nvidia-smi, name/total/capability from "
        "cudaGetDeviceProperties; no CUDA context made"
    ) in run.stderr
    unchanged(node, before)

    # verify_level=compile is a check for a stopped stack: refused, in one line
    run = verify_unchanged(site, "verify_level=compile")
    assert run.rc != 0
    assert [line for line in problem_lines(run) if "torch.compile" in line] == [
        "concurrent torch.compile: expected a stopped training stack (verify_level=compile "
        "compiles on every GPU); found refused: a running training holds 8 GPU(s) here; fix: "
        "stop the training first (a checkpoint, then `systemctl stop` its unit), or run "
        "deploy.py --data verify_level=compile --data restart_training=true: it stops the "
        "training first and starts it again after"
    ]
    unchanged(node, before)

    # a variant swap without restart: the new build is checked and verified beside the training
    swap = site.deploy("torch_variant=cu128")
    assert swap.rc == 0, swap.output[-4000:]
    assert f"{UNIT} keeps running; restart pending" in swap.output
    unchanged(node, before)


def test_a_gpu_in_exclusive_process_mode_beside_the_training(deployed):
    """One GPU in EXCLUSIVE_PROCESS mode, the trainer on it (a second context there is refused:
    busy) and on every other GPU with room to spare: verify.py and a swap make no context."""
    site, node = deployed, deployed.node
    node.torch_config(register_contexts=True, context_mib=CONTEXT_MIB)
    node.configure(compute_modes={"3": "Exclusive_Process"})
    for g in range(8):
        node.spawn_gpu_process(g, TRAINING, 40000, cgroup=UNIT_CGROUP)
    before = snapshot(node)
    assert before["memory"].splitlines()[3].endswith("Exclusive_Process")

    run = verify_unchanged(site)
    assert run.rc == 0, "\n".join(problem_lines(run)) or run.stderr[-4000:]
    unchanged(node, before)
    swap = site.deploy("torch_variant=cu128")
    assert swap.rc == 0, swap.output[-4000:]
    unchanged(node, before)


def test_with_the_training_stopped_every_gpu_is_verified_in_a_context(deployed):
    """As before: no training runs, so the probe's torch measures each GPU in its own context."""
    site, node = deployed, deployed.node
    node.torch_config(register_contexts=True, context_mib=CONTEXT_MIB)
    site.ct("systemctl", "stop", UNIT)
    run = verify_unchanged(site)
    assert "free MiB from nvidia-smi" not in run.stderr
    assert sorted({c["gpu_index"] for c in contexts(node)}) == list(range(8))
    assert apps(node) == []  # the probe's contexts ended with it


def unit_main_pid(site) -> int:
    return int(site.ct("systemctl", "show", "-p", "MainPID", "--value", UNIT).stdout.strip())


def test_compile_with_consent_stops_the_training_first_and_starts_it_again(deployed):
    """deploy.py --data verify_level=compile --data restart_training=true beside a training that
    holds every GPU nearly full: the unit is stopped first (its trainer exits and frees the
    GPUs), the compile check runs on free GPUs in CUDA contexts, then the unit starts again:
    exactly one trainer, a new one. Without consent the same deploy is refused (one line) and
    the trainer keeps running."""
    site, node = deployed, deployed.node
    node.torch_config(register_contexts=True, context_mib=CONTEXT_MIB)
    trainer = unit_main_pid(site)
    assert trainer > 0
    # the unit's own trainer holds all 8 GPUs: a context on each, listed by its node pid
    assert {line.split(", ")[0] for line in apps(node)} == {str(node.node_pid(200, trainer))}
    assert len(apps(node)) == 8

    refused = site.deploy("verify_level=compile")
    assert refused.rc != 0 and "concurrent torch.compile" in refused.output
    assert unit_main_pid(site) == trainer

    before = len(contexts(node))
    run = site.deploy("verify_level=compile", "restart_training=true")
    assert run.rc == 0, run.output[-6000:]
    assert f"{UNIT}: stopping it (its checkpoint first) for verify_level=compile" in run.output
    assert len(contexts(node)) > before  # the compile check ran, in contexts on free GPUs
    again = unit_main_pid(site)
    assert again > 0 and again != trainer
    assert site.ct("systemctl", "is-active", UNIT).stdout.strip() == "active"
    # the old trainer's GPUs were freed; only the new one holds them
    assert {line.split(", ")[0] for line in apps(node)} == {str(node.node_pid(200, again))}

    # a verification that fails after the stop starts the unit again at once (on the build the
    # live venv still points at): a consented compile check never leaves no training running
    for g in range(8):
        node.register_gpu_process(node.node_pid(200, again), g, TOTAL_MIB - 2 * CONTEXT_MIB + 100)
    failed = site.deploy("verify_level=compile", "restart_training=true", "min_free_gpu_mib=999999")
    assert failed.rc != 0, failed.output[-6000:]
    assert "min_free_gpu_mib" in failed.output or "free" in failed.output
    third = unit_main_pid(site)
    assert third > 0 and third != again
    assert site.ct("systemctl", "is-active", UNIT).stdout.strip() == "active"
