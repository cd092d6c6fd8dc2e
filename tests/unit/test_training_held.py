"""Verification takes no GPU memory from anyone: which GPUs may take the probe's CUDA context,
decided in the container before its first CUDA call (probes/training_held.py: an allowlist of GPUs
with no memory in use and no compute process, none when nvidia-smi cannot be read) and on the
controller from the node's compute-apps (pvegpu.verification.training_gpus); a GPU without a
context takes its free memory from nvidia-smi and the report says why; verify_level=compile
refuses while any GPU is in use."""

from pvegpu.output.report import table
from pvegpu.probes import training_held as th
from pvegpu.verification.training_gpus import FROM_SMI, held_by_training
from tests.unit.test_verify_checks import run
from tests.unit.verify_facts import UUID, ct_facts, node_facts, settings

UNIT = "dflash-train.service"
MATCHER = {
    "script": "/data/t.py",
    "pythons": ["/root/venv/bin/python"],
    "python_under": ["/root/venvs/"],
}


# ---- in the container (probes/training_held.py)


def test_held_gpus_are_those_in_use_whether_or_not_a_training_runs():
    used = {"ab": 140000, "cd": 0, "ef": th.CONTEXT_FLOOR_MIB - 1, "gh": th.CONTEXT_FLOOR_MIB}
    assert th.held_gpus(True, used) == ["ab", "gh"]
    # a neighbour container's or the node's process shows only as memory in use here
    assert th.held_gpus(False, used) == ["ab", "gh"]
    assert th.held_gpus(False, {"ab": None}) == ["ab"]  # no figure: in use


def test_only_gpus_reported_idle_with_no_process_of_ours_may_take_a_context():
    used = {"ab": 0, "cd": 500, "ef": 3, "gh": None}
    apps = {"ef": [42]}  # this container's own process, not yet holding memory
    assert th.context_ok(used, apps) == ["ab"]
    why = th.held_why(used, apps)
    assert why == {
        "cd": "500 MiB in use (another process, a neighbour container or the node)",
        "ef": "compute process of this container (pid 42)",
        "gh": "memory in use unknown (nvidia-smi printed no figure)",
    }


def test_an_unreadable_nvidia_smi_leaves_no_gpu_to_take_a_context():
    assert th.context_ok(None, {}) == [] and th.context_ok({"ab": 0}, None) == []


def test_the_containers_own_compute_processes_by_uuid():
    text = "GPU-AB, 17\nGPU-AB, 18\nGPU-CD, 99\n\nGPU-EF, [N/A]\n"
    assert th.apps_by_uuid(text, own_pid=99) == {"ab": [17, 18]}
    assert th.apps_by_uuid("") == {}


def test_a_training_runs_when_the_unit_is_running_or_the_command_runs():
    for state in ("active", "activating", "reloading", "deactivating"):
        assert th.training_running(state, [])
    assert th.training_running("inactive", [42]) and th.training_running(None, [7])
    assert not th.training_running("inactive", []) and not th.training_running(None, [])
    assert not th.training_running("failed", [])


def test_the_training_command_is_recognised_as_the_controller_does():
    from pvegpu.verification.processes import is_training_command

    cases = [
        ["/root/venvs/b1/bin/python", "/data/t.py", "--resume"],
        ["/root/venv/bin/python", "/data/t.py"],
        ["/usr/bin/python3", "/data/t.py"],
        ["/root/venvs/b1/bin/python3", "/data/t.py"],
        ["/root/venv/bin/python", "/data/other.py"],
        ["/root/venv/bin/python"],
        [],
    ]
    assert (
        [th.is_training_argv(a, MATCHER) for a in cases]
        == [is_training_command(a, MATCHER) for a in cases]
        == [True, True, False, False, False, False, False]
    )
    assert not th.is_training_argv(["/root/venv/bin/python", "/data/t.py"], None)


def test_training_pids_reads_the_command_lines(tmp_path):
    for pid, argv in {
        "7": ["/root/venv/bin/python", "/data/t.py"],
        "8": ["sleep", "9"],
        "self": ["/root/venv/bin/python", "/data/t.py"],
    }.items():
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (tmp_path / "9").mkdir()  # gone while read: no cmdline
    assert th.training_pids(MATCHER, str(tmp_path)) == [7]
    assert th.training_pids(MATCHER, str(tmp_path / "none")) == []


def test_used_memory_by_uuid_from_nvidia_smi():
    text = "GPU-AB, 140000\nGPU-CD, 0\nGPU-EF, [N/A]\n\ngarbage\n"
    assert th.used_by_uuid(text) == {"ab": 140000, "cd": 0, "ef": None}
    assert th.used_by_uuid(None) == {} and th.short_uuid("5A1E-AB") == "5a1e-ab"
    assert th.short_uuid(None) is None and th.short_uuid("") is None


def test_compile_refuses_while_any_gpu_is_in_use_consent_or_not():
    line = th.compile_refusal(["ab", "cd"], False)
    assert line.startswith("verify_level=compile: refused, 2 GPU(s) in use")
    assert th.compile_refusal(["ab"], True) == th.compile_refusal(["ab"], False)
    assert th.compile_refusal([], False) is None


# ---- on the controller (pvegpu.verification.training_gpus)


def test_held_by_training_maps_the_nodes_processes_to_this_container():
    unit = {"gpu_uuid": "GPU-" + UUID.format(0), "cgroup": f"0::/lxc/200/ns/system.slice/{UNIT}"}
    by_hand = {"gpu_uuid": "GPU-" + UUID.format(1), "cgroup": "0::/lxc/200/ns/user.slice"}
    other_ct = {"gpu_uuid": "GPU-" + UUID.format(2), "cgroup": "0::/lxc/201/ns/user.slice"}
    node = {"gpu_uuid": "GPU-" + UUID.format(3), "cmdline": "python x.py"}
    probe = {
        "gpu_uuid": "GPU-" + UUID.format(4),
        "cgroup": "0::/lxc/200/ns/init.scope",
        "argv": ["/root/venv/bin/python", "-c", "x", "pvegpu-probe"],
    }
    held = held_by_training([unit, by_hand, other_ct, node, probe], 200, UNIT)
    assert held == {UUID.format(0), UUID.format(1)}
    assert held_by_training([], 200, UNIT) == set()


def held_ct(indices, free=None):
    """Container facts whose torch made no context on ``indices`` (a training holds them)."""
    ct = ct_facts()
    for d in ct["torch"]["devices"]:
        if d["index"] in indices:
            d.update(context=False, free_mib=None)
    return ct


def node_with_free(free):
    node = node_facts()
    for g in node["gpus"]:
        g["memory_free_mib"] = free
    return node


def with_smi_rows(ct, free):
    """The container's own nvidia-smi rows (facts.gpus.GPU_QUERY: memory.free, device-wide),
    which the real node read lacks (probes/node_state.py GPU_FIELDS has no memory.free)."""
    ct["gpus"] = [
        {"index": d["index"], "uuid": "GPU-" + d["uuid"], "memory_free_mib": free}
        for d in ct["torch"]["devices"]
    ]
    return ct


def test_a_held_gpu_takes_its_free_memory_from_nvidia_smi_and_says_so():
    v = run(node=node_facts(), ct=with_smi_rows(held_ct({0, 1}), 2000))
    rows = {r["gpu"]: r for r in v.rows}
    assert (rows[0]["free_mib"], rows[0]["memory_from"]) == (2000, FROM_SMI)
    assert rows[2]["free_mib"] == 143771 and "memory_from" not in rows[2]
    assert v.ok, v.lines()
    assert table(v)[-3:] == [
        " GPU 0, 1: free MiB from nvidia-smi, name/total/capability from "
        "cudaGetDeviceProperties; no CUDA context made:",
        "   GPU 0: not reported by nvidia-smi in the container",
        "   GPU 1: not reported by nvidia-smi in the container",
    ]
    ct = with_smi_rows(held_ct({0}), 2000)
    ct["beside_training"] = {"held_why": {UUID.format(0): "3000 MiB in use (x)"}}
    assert table(run(node=node_facts(), ct=ct))[-1] == "   GPU 0: 3000 MiB in use (x)"


def test_a_held_gpu_short_of_memory_is_still_reported():
    """The running training holds the GPUs (the normal state after a deploy): min_free_gpu_mib
    still applies, with the free memory the container's nvidia-smi reports."""
    v = run(node=node_facts(), ct=with_smi_rows(held_ct({5}), 10))
    assert [p.gpu for p in v.problems] == [5] and "10 MiB free" in v.problems[0].found


def test_a_held_gpu_takes_the_nodes_figure_when_the_container_has_none():
    v = run(node=node_with_free(10), ct=held_ct({5}))
    assert [p.gpu for p in v.problems] == [5] and "10 MiB free" in v.problems[0].found


def test_no_footnote_when_every_gpu_had_a_context():
    v = run()
    assert not any("nvidia-smi" in line for line in table(v))


def test_compile_refused_is_one_problem_line():
    ct = ct_facts()
    ct["compile"] = {"refused": th.compile_refusal(["a", "b"], False), "held": ["a", "b"]}
    v = run(s=settings(verify_level="compile"), ct=ct)
    assert v.lines() == [
        "concurrent torch.compile: expected a stopped training stack (verify_level=compile "
        "compiles on every GPU); found refused: a running training holds 2 GPU(s) here; fix: "
        "stop the training first (a checkpoint, then `systemctl stop` its unit), or run "
        "deploy.py --data verify_level=compile --data restart_training=true: it stops the "
        "training first and starts it again after"
    ]
