"""Hand-written mutants: the slips mutmut's operators never make, kept beside bench/mutation.py.

    nice -n 19 uv run python bench/hand_mutants.py [NAME ...] [--list] [--fast]

mutmut swaps operators and constants one token at a time; it never drops a regex anchor, turns a
membership test into an equality, ignores a failure it was told about or checks the wrong one of
two paths, yet those are the slips that cost users data, a running training or a wrong verdict
(issue 25). Each mutant below is (name, file, old text, new text, why, the fast tests that must
catch it). The script copies the project to ``mutants/hand/`` (git-ignored), applies each mutant
alone there, runs its tests against the copy (``PYTHONPATH`` puts the copy's ``src`` first),
restores the file, and prints killed/total with every survivor. It asserts nothing and is not
part of the test run; a survivor is a behaviour to pin with a test (tests/unit/test_hand_slips.py
holds the first ones). Add a mutant whenever a slip of this kind is found by other means.

``--fast`` judges each mutant by the whole of ``tests/unit`` (not only its listed tests; two
xdist workers, stop at the first failure) and names the first fast test that failed, so every
mutant on the list must be caught without a booted node (issue 35; docs/dev/hand-mutants.md).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = ROOT / "mutants" / "hand"
SLIPS = "tests/unit/test_hand_slips.py"
FAST = "tests/unit"
FAILED = re.compile(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", re.M)
ASSERTION = re.compile(r"^E +(\S.*)$", re.M)


@dataclass(frozen=True)
class HandMutant:
    name: str
    path: str
    old: str
    new: str
    why: str
    tests: tuple[str, ...]


MUTANTS = [
    HandMutant(
        "guard-anchor",
        "src/pvegpu/guard.py",
        r"(\.b\d+|\.building|\.next|\.pvegpu-tmp)?$",
        r"(\.b\d+|\.building|\.next|\.pvegpu-tmp)?",
        "a lost $: a user's directory that only starts like a build "
        "(torch-2.11.0-cu130-mydata) passes the delete guard",
        (
            f"{SLIPS}::test_a_name_that_only_starts_like_a_build_is_refused",
            f"{SLIPS}::test_the_guarded_delete_leaves_a_directory_that_only_starts_like_a_build",
        ),
    ),
    HandMutant(
        "guard-nested-build",
        "src/pvegpu/guard.py",
        "and parent == venvs_dir\n",
        "and is_within(parent, venvs_dir)\n",
        "equality become containment: a build-like name anywhere below venvs_dir "
        "(venvs/mydata/torch-2.11.0-cu130) passes the delete guard",
        (f"{SLIPS}::test_a_build_name_below_another_directory_of_venvs_dir_is_refused",),
    ),
    HandMutant(
        "restart-gate-equality",
        "src/pvegpu/plan/passthrough.py",
        'if live.get("unit_active") in RUNNING:',
        'if live.get("unit_active") == "active":',
        "membership become equality: a unit activating, reloading or deactivating (writing its "
        "checkpoint) no longer blocks a container restart",
        (f"{SLIPS}::test_the_restart_gate_refuses_while_the_unit_runs_in_any_state",),
    ),
    HandMutant(
        "running-states",
        "src/pvegpu/plan/unit.py",
        'RUNNING = ("active", "activating", "reloading", "deactivating")',
        'RUNNING = ("active",)',
        "the running states shrunk to one: every gate built on them lets a stopping unit through",
        (SLIPS, "tests/unit/test_operation_tables.py"),
    ),
    HandMutant(
        "leftovers-survivors-ignored",
        "src/pvegpu/operations/leftovers.py",
        'return not doc["remaining"]',
        "return True",
        "an ignored result: the unit starts beside a process that survived SIGKILL and still "
        "holds GPU memory",
        (
            f"{SLIPS}::test_clearing_leftovers_fails_on_any_doubt",
            f"{SLIPS}::test_the_unit_is_not_started_when_clearing_leftovers_fails",
        ),
    ),
    HandMutant(
        "leftovers-error-ignored",
        "src/pvegpu/operations/leftovers.py",
        'if not status or doc.get("error"):',
        "if not status:",
        "an ignored error: the probe could not look (nvidia-smi failed) and the unit starts anyway",
        (f"{SLIPS}::test_clearing_leftovers_fails_on_any_doubt",),
    ),
    HandMutant(
        "node-lock-released",
        "src/pvegpu/startup/node_lock.py",
        '"exec cat >/dev/null",',
        '"exec cat /dev/null",',
        "the holder reads /dev/null, not its channel: the lock is dropped at once and two deploys "
        "interleave (caught before only when two concurrent deploys happened to collide)",
        (f"{SLIPS}::test_the_lock_holder_keeps_the_flock_until_its_channel_closes",),
    ),
    HandMutant(
        "runtime-check-old-build",
        "src/pvegpu/operations/python_env.py",
        'python=f"{python_env.build_venv(torch.build_name)}.next/bin/python",',
        'python=f"{python_env.build_venv(torch.build_name)}/bin/python",',
        "swapped paths: the old build is checked instead of the new .next (caught before only "
        "because a first build has no old build to check)",
        (f"{SLIPS}::test_the_runtime_check_fails_a_broken_next_build_beside_a_good_old_one",),
    ),
    HandMutant(
        "data-keys-own-prefix",
        "src/pvegpu/startup/data_keys.py",
        "key.startswith(OWN_PREFIX)",
        "OWN_PREFIX in key",
        "prefix become membership: a typo containing x_ (max_batch_sise) passes as the user's own",
        ("tests/unit/test_data_keys.py",),
    ),
    HandMutant(
        "data-keys-override-layer",
        "src/pvegpu/startup/data_keys.py",
        '    yield "--data", inventory.get_override_data()\n',
        "",
        "a layer left out: a typo on the command line (--data torch_varient=cu128) passes",
        ("tests/unit/test_data_keys.py",),
    ),
    # --- issue 35: the takeover, the gates, the probes' parsers and the preflights ------------
    HandMutant(
        "takeover-own-unit-foreign",
        "src/pvegpu/operations/takeover.py",
        "foreign = others(running_here(host, vmid, unit))",
        "foreign = running_here(host, vmid, unit)",
        "others() dropped: the takeover stops pvegpu's own unit as if it were a user's training",
        ("tests/unit/test_takeover.py",),
    ),
    HandMutant(
        "takeover-unverified-build",
        "src/pvegpu/operations/takeover.py",
        "if verified_here(host.state, host.name, vmid) is False:",
        "if verified_here(host.state, host.name, vmid) is None:",
        "the wrong one of False/None: a build that failed verification still takes the "
        "running training over",
        ("tests/unit/test_takeover.py",),
    ),
    HandMutant(
        "takeover-starters-membership",
        "src/pvegpu/operations/takeover.py",
        "units = [u for u in units if u not in {t.unit for t in foreign}]",
        "units = [u for u in units if u in {t.unit for t in foreign}]",
        "membership turned around: an enabled unit that would start a second trainer at boot "
        "is left enabled",
        ("tests/unit/test_takeover.py",),
    ),
    HandMutant(
        "takeover-roles-held-dropped",
        "src/pvegpu/plan/takeover.py",
        '"members": [m for t in trainers for m in roles(t.members, procs, held, script)],',
        '"members": [m for t in trainers for m in roles(t.members, procs, {}, script)],',
        "a missing argument: a worker that holds a GPU but runs another command is no worker, "
        "so it gets no SIGTERM and no time to checkpoint",
        ("tests/unit/test_takeover.py",),
    ),
    HandMutant(
        "takeover-roles-wrapper",
        "src/pvegpu/plan/takeover.py",
        "if is_launcher(argv) or m not in seeds:",
        "if is_launcher(argv):",
        "a dropped or clause: a bash run.sh loop is not held and starts the trainer again",
        ("tests/unit/test_takeover.py",),
    ),
    HandMutant(
        "stop-probe-term-before-cont",
        "src/pvegpu/probes/training_stop.py",
        'send(by_role["worker"] + by_role["helper"], signal.SIGCONT)\n'
        'stopped = send(by_role["worker"], signal.SIGTERM)\n',
        'stopped = send(by_role["worker"], signal.SIGTERM)\n'
        'send(by_role["worker"] + by_role["helper"], signal.SIGCONT)\n',
        "SIGTERM before SIGCONT: a worker paused with ctrl-Z is told to stop while it cannot "
        "act, its launcher's forwarding races the continue",
        ("tests/unit/test_stop_probe.py",),
    ),
    HandMutant(
        "stop-probe-start-field",
        "src/pvegpu/probes/ct_processes.py",
        '"start": int(fields[19]),',
        '"start": int(fields[20]),',
        "a wrong /proc/<pid>/stat field (23, vsize, for 22, starttime): no member is ever "
        "the same process, nothing is signalled and the takeover reports success",
        ("tests/unit/test_stop_probe.py",),
    ),
    HandMutant(
        "stop-probe-unit-no-term",
        "src/pvegpu/probes/training_stop.py",
        'stopped = send(by_role["worker"], signal.SIGTERM)\n',
        'stopped = [] if unit else send(by_role["worker"], signal.SIGTERM)\n',
        "a unit that is the training gets no SIGTERM of the probe's: its own stop signals its "
        "trainer's DataLoader workers with it (KillMode=control-group) or no one but the main "
        "process (transient, user, KillMode=process), and the checkpoint is lost",
        ("tests/unit/test_stop_probe.py",),
    ),
    HandMutant(
        "node-probe-pgid-field",
        "src/pvegpu/probes/ct_processes.py",
        '"pgid": int(fields[2]),',
        '"pgid": int(fields[3]),',
        "a wrong /proc/<pid>/stat field: the process group is the session (the takeover "
        "signals a group by it)",
        ("tests/unit/test_node_probe_processes.py",),
    ),
    HandMutant(
        "node-probe-monitor",
        "src/pvegpu/probes/ct_processes.py",
        'if not mine.search(cgroup) or "/lxc.monitor" in cgroup:',
        "if not mine.search(cgroup):",
        "a dropped or clause: lxc's monitor process is listed as one of the container's",
        ("tests/unit/test_node_probe_processes.py",),
    ),
    HandMutant(
        "node-probe-cgroup-anchor",
        "src/pvegpu/probes/ct_processes.py",
        r'LXC_CGROUP = r"/lxc(?:\.payload)?[./]{vmid}(?:/|$)"',
        r'LXC_CGROUP = r"/lxc(?:\.payload)?[./]{vmid}"',
        "a lost anchor: CT 20's read lists CT 200's processes",
        ("tests/unit/test_node_probe_processes.py",),
    ),
    HandMutant(
        "gate-fresh-ignored",
        "src/pvegpu/operations/training_gate.py",
        "if not fresh and full and vmid in entry.request.vmids:",
        "if full and vmid in entry.request.vmids:",
        "a dropped clause: the check after the takeover reads the cached pre-takeover state",
        ("tests/unit/test_training_gates.py",),
    ),
    HandMutant(
        "gate-consent-defers-all",
        "src/pvegpu/operations/training_gate.py",
        "if consent and all(t.kind == TRAINING for t in trainers) and not after:",
        "if consent and not after:",
        "a dropped clause: with restart_training=true a change under a GPU process or an "
        "unreadable state is deferred to a takeover that never stops those, and not recorded",
        ("tests/unit/test_training_gates.py",),
    ),
    HandMutant(
        "venv-switch-own-unit",
        "src/pvegpu/operations/training.py",
        "foreign = others(running_here(host, unit=unit_name, fresh=True)) if switch else []",
        "foreign = running_here(host, unit=unit_name, fresh=True) if switch else []",
        "others() dropped: the venv switch waits for pvegpu's own unit forever",
        ("tests/unit/test_training_gates.py",),
    ),
    HandMutant(
        "unit-start-boot-starter",
        "src/pvegpu/operations/training.py",
        '        wait_for(host, None, f"systemctl enable {unit}", [boot])\n'
        "        enable = False\n",
        '        wait_for(host, None, f"systemctl enable {unit}", [boot])\n',
        "a dropped line: the unit is enabled beside an @reboot cron line that starts a second "
        "trainer at the next boot",
        ("tests/unit/test_training_gates.py",),
    ),
    HandMutant(
        "unit-start-consent-neighbour",
        "src/pvegpu/operations/training.py",
        "if settings.policy.restart_training and foreign[0].kind == TRAINING:",
        "if settings.policy.restart_training:",
        "a dropped clause: with consent, another container's process on a training GPU fails "
        "the host instead of waiting",
        ("tests/unit/test_running_training.py",),
    ),
    HandMutant(
        "rebuild-venv-gate-state",
        "src/pvegpu/operations/rebuild.py",
        'if not policy.restart_training and container_state().get("unit_active") in RUNNING:',
        'if not policy.restart_training and container_state().get("unit_active") == "active":',
        "membership become equality: rebuild=venv passes while pvegpu's unit is deactivating "
        "(writing its checkpoint)",
        ("tests/unit/test_training_gates.py",),
    ),
    HandMutant(
        "rebuild-container-wrong-ct",
        "src/pvegpu/operations/rebuild.py",
        "    trainers = running_here(host, vmid, unit)\n",
        "    trainers = running_here(host, unit=unit)\n",
        "a missing argument: the rebuild=container gate asks about the node host, not the "
        "container it is about to destroy, and finds nothing",
        ("tests/unit/test_training_gates.py",),
    ),
    HandMutant(
        "rebuild-container-own-unit",
        "src/pvegpu/operations/rebuild.py",
        "if any(t.ours for t in trainers) and not policy.restart_training:",
        "if any(t.ours for t in others(trainers)) and not policy.restart_training:",
        "others(trainers) for trainers: pvegpu's running unit no longer stops rebuild=container",
        ("tests/unit/test_training_gates.py",),
    ),
    HandMutant(
        "preflight-restart-refuse-or-wait",
        "src/pvegpu/startup/container_preflight.py",
        "if blocker and not settings.policy.restart_training and not others(trainers):",
        "if blocker and not settings.policy.restart_training:",
        "a dropped clause: a restart that a user's training blocks is refused at preflight "
        "instead of waiting (the rest of the deploy never runs)",
        ("tests/unit/test_preflight_consents.py",),
    ),
    HandMutant(
        "preflight-adopt-flag",
        "src/pvegpu/startup/container_preflight.py",
        'if ct.get("exists") and not is_ours(ct) and not settings.policy.adopt:',
        'if ct.get("exists") and not is_ours(ct) and not settings.policy.restart_training:',
        "the wrong consent: restart_training=true adopts a container pvegpu did not make",
        ("tests/unit/test_preflight_consents.py",),
    ),
    HandMutant(
        "preflight-destroy-volumes-flag",
        "src/pvegpu/startup/container_preflight.py",
        "if volumes and not settings.policy.destroy_volumes:",
        "if volumes and not settings.policy.adopt:",
        "the wrong consent: adopt=true lets rebuild=container destroy storage-backed volumes",
        ("tests/unit/test_preflight_consents.py",),
    ),
    HandMutant(
        "adoption-plan-no-match",
        "src/pvegpu/startup/adoption_plan.py",
        "foreign = others(running_training(int(vmid), ct, state, unit, match))",
        "foreign = others(running_training(int(vmid), ct, state, unit))",
        "a missing argument: a training that holds no GPU yet is not in the adoption plan",
        ("tests/unit/test_preflight_consents.py",),
    ),
    HandMutant(
        "boot-starters-earlier-unit",
        "src/pvegpu/plan/adoption.py",
        '    own = {unit, *(live.get("other_units") or {})}\n    found = []',
        "    own = {unit}\n    found = []",
        "pvegpu's unit under an earlier name left out: it counts as a second trainer at boot",
        ("tests/unit/test_preflight_consents.py",),
    ),
    HandMutant(
        "data-keys-one-run-tuple",
        "src/pvegpu/startup/data_keys.py",
        'ONE_RUN_KEYS = ("rebuild", "restart_training", "adopt", "destroy_volumes")',
        'ONE_RUN_KEYS = ("rebuild", "restart_training", "adopt")',
        "a key left out of a tuple: destroy_volumes=true in group_data stays on every run",
        ("tests/unit/test_data_keys.py",),
    ),
    HandMutant(
        "data-keys-extra-keys-string",
        "src/pvegpu/startup/data_keys.py",
        "    if isinstance(raw, str):\n        raw = [raw]\n",
        "",
        "an accepted form dropped: extra_data_keys as one string no longer declares its key",
        ("tests/unit/test_recognition_slips.py",),
    ),
    HandMutant(
        "held-gpu-apps-unreadable",
        "src/pvegpu/probes/training_held.py",
        "if used is None or apps is None:",
        "if used is None:",
        "a dropped or clause: with compute-apps unreadable a context is made on a GPU a "
        "process of this container holds",
        ("tests/unit/test_recognition_slips.py",),
    ),
    HandMutant(
        "held-gpu-no-figure-idle",
        "src/pvegpu/probes/training_held.py",
        "int(used) if used.strip().isdigit() else None",
        "int(used) if used.strip().isdigit() else 0",
        "fail open: a GPU whose memory figure is [N/A] counts as idle and takes a context",
        ("tests/unit/test_recognition_slips.py",),
    ),
    HandMutant(
        "tree-script-basename",
        "src/pvegpu/plan/process_tree.py",
        'if word.startswith("-") or not word.endswith(os.path.basename(script)):',
        'if word.startswith("-") or word != os.path.basename(script):',
        "endswith become equality: ./train.py and the absolute path are no longer the script",
        ("tests/unit/test_recognition_slips.py",),
    ),
    HandMutant(
        "tree-launcher-module",
        "src/pvegpu/plan/process_tree.py",
        '        "torch.distributed.run",\n',
        "",
        "a module left out: python -m torch.distributed.run is no launcher and is not held",
        ("tests/unit/test_recognition_slips.py",),
    ),
    HandMutant(
        "running-unreadable-fail-open",
        "src/pvegpu/plan/running_training.py",
        '        return [Trainer(None, "?", "?", kind=UNKNOWN, reason="; ".join(why))]',
        "        return []",
        "fail open: a container whose state could not be read runs nothing",
        ("tests/unit/test_recognition_slips.py",),
    ),
    HandMutant(
        "running-cgroup-anchor",
        "src/pvegpu/plan/cgroup_origin.py",
        r'm = re.search(rf"/lxc(?:\.payload)?[./]{vmid}(/.*|$)", path)',
        r'm = re.search(rf"/lxc(?:\.payload)?[./]{vmid}(.*)", path)',
        "a lost anchor: CT 200's GPU process is CT 20's training",
        ("tests/unit/test_recognition_slips.py",),
    ),
    HandMutant(
        "toolchain-apt-and",
        "src/pvegpu/plan/toolchain.py",
        "apt-get -q update; apt-get -q install",
        "apt-get -q update && apt-get -q install",
        "&& for ;: one apt source down (update fails) and the compiler is never installed",
        ("tests/unit/test_preflight_consents.py",),
    ),
    HandMutant(
        "disk-min-free-not-estimate",
        "src/pvegpu/startup/site_preflight.py",
        "if free_kib is None or free_kib >= need_gib(min_free_gib) * KIB_PER_GIB:",
        "if free_kib is None or free_kib >= min_free_gib * KIB_PER_GIB:",
        "the floor for the estimate: a root disk with min_free_gib free but less than a build "
        "needs passes",
        ("tests/unit/test_preflight_consents.py",),
    ),
    HandMutant(
        "lock-wrong-level",
        "src/pvegpu/startup/site_preflight.py",
        'lock = (ct.get("config") or {}).get("lock")',
        'lock = ct.get("lock")',
        "the wrong level of the read: a locked container passes the preflight",
        ("tests/unit/test_preflight_consents.py",),
    ),
    HandMutant(
        "fabric-failed-registered",
        "src/pvegpu/plan/boot.py",
        'return "registered" if row.get("status") == FABRIC_SUCCESS else "failed"',
        'return "registered"',
        "a GPU whose registration Completed with a failure status counts as registered",
        (
            "tests/unit/test_preflight_consents.py",
            "tests/unit/test_boot_units.py::test_the_wait_reads_every_real_fabric_answer_as_the_preflight_does",
        ),
    ),
    # --- issue 41: the slips the fast tests missed, each run for real (sh, the stop probe) ----
    HandMutant(
        "stop-probe-exec-dashdash",
        "src/pvegpu/probes/training_stop.py",
        'base = ["pct", "exec", str(A["vmid"]), "--"]',
        'base = ["pct", "exec", str(A["vmid"])]',
        "a lost --: pct reads --now as its own option, the unit is never stopped nor disabled "
        "(a second trainer at the next boot) and the takeover fails",
        (
            "tests/unit/test_stop_probe_slips.py::"
            "test_a_unit_that_is_the_training_is_stopped_and_disabled_by_its_systemd_in_the_container",
        ),
    ),
    HandMutant(
        "stop-probe-cont-workers-only",
        "src/pvegpu/probes/training_stop.py",
        '\nsend(by_role["worker"] + by_role["helper"], signal.SIGCONT)\n',
        '\nsend(by_role["worker"], signal.SIGCONT)\n',
        "helpers left out of SIGCONT: a training paused with ctrl-Z keeps its DataLoader "
        "workers stopped, the worker waits on them and is SIGKILLed after the timeout",
        (
            "tests/unit/test_stop_probe_slips.py::"
            "test_a_training_paused_with_ctrl_z_gets_its_helpers_continued_too",
        ),
    ),
    HandMutant(
        "boot-starters-cron-unquoted",
        "src/pvegpu/plan/adoption.py",
        "{shlex.quote(path)} {shlex.quote(line)}",
        "{shlex.quote(path)} {line}",
        "a lost quote: the @reboot line is run by sh (its && and redirections) instead of "
        "being commented out",
        (
            "tests/unit/test_takeover.py::"
            "test_the_reboot_line_is_commented_out_by_a_real_shell_and_the_rest_of_the_file_kept",
        ),
    ),
    HandMutant(
        "data-keys-one-run-first-host",
        "src/pvegpu/startup/data_keys.py",
        "    lines: list[str] = []\n    for host in hosts:\n",
        "    lines: list[str] = []\n    for host in list(hosts)[:1]:\n",
        "the first host's data only: a fleet entry of another node holding rebuild: container "
        "applies on every deploy",
        (
            "tests/unit/test_data_keys_layers.py::"
            "test_a_one_run_key_in_any_hosts_own_data_is_refused_not_only_the_first_hosts",
        ),
    ),
    HandMutant(
        "torchrun-stop-own-pid",
        "templates/training.service.j2",
        '[ "$$2" = "$$m" ] && w="$$w $$p"',
        '[ "$$p" = "$$m" ] || w="$$w $$p"',
        "the launcher's-children filter loosened to every pid but the launcher's: the torchrun "
        "ExecStop SIGTERMs itself, systemd goes on to its own stop and torchrun's 30 s SIGKILL "
        "cuts every checkpoint",
        (
            "tests/unit/test_training_command_settings.py::"
            "test_the_torchrun_stop_waits_for_the_workers_checkpoint_and_never_signals_itself",
        ),
    ),
    HandMutant(
        "hotplug-shutdown-unit-first",
        "src/pvegpu/operations/proxmox.py",
        "yield StringCommand(hotplug_shell(vmid, args, blocker, down))",
        "yield StringCommand(hotplug_shell(vmid, args, blocker))",
        "a missing argument: a failed hot-plug shuts the container down without stopping "
        "pvegpu's unit first under its own TimeoutStopSec (the checkpoint is cut)",
        (
            "tests/unit/test_operation_tables.py::"
            "test_a_failed_hotplug_stops_pvegpus_unit_before_the_container_shuts_down",
        ),
    ),
]


def scratch_copy() -> Path:
    """The project's tracked and untracked-but-not-ignored files, copied to SCRATCH."""
    if SCRATCH.exists():
        shutil.rmtree(SCRATCH)
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file() and not rel.startswith("mutants/"):
            (SCRATCH / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, SCRATCH / rel)
    return SCRATCH


def run_tests(copy: Path, tests: tuple[str, ...], fast: bool = False) -> tuple[int, str, str]:
    """(pytest's exit status, the first test that failed or "", its first ``E`` line or ""):
    ``tests`` (none: all of tests/unit), or with ``fast`` all of tests/unit on two workers."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(copy / "src"), str(copy)]),
        PYTHONDONTWRITEBYTECODE="1",
    )
    argv = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-rf"]
    # test_hand_mutants.py checks that each old text is in its file: it would "kill" them all
    argv += (
        [FAST, "-n", "2", f"--ignore={FAST}/test_hand_mutants.py"]
        if fast
        else list(tests or (FAST,))
    )
    done = subprocess.run(argv, cwd=copy, env=env, capture_output=True, text=True)
    first, why = FAILED.search(done.stdout), ASSERTION.search(done.stdout)
    return done.returncode, first.group(1) if first else "", why.group(1)[:160] if why else ""


def judge(copy: Path, m: HandMutant, fast: bool = False) -> tuple[str, str, str]:
    """("killed", the test that failed, its first E line), ("survived", "", ""), or (why the
    mutant could not be judged, "", "")."""
    target = copy / m.path
    original = target.read_text()
    if original.count(m.old) != 1:
        return f"not applied: the old text is in {m.path} {original.count(m.old)} times", "", ""
    target.write_text(original.replace(m.old, m.new))
    try:
        rc, first, why = run_tests(copy, m.tests, fast)
    finally:
        target.write_text(original)
    # with -x, xdist ends an interrupted run with exit 2: a failure it names is still a kill
    killed = rc == 1 or (rc == 2 and first)
    verdict = "killed" if killed else "survived" if rc == 0 else f"tests could not run ({rc})"
    return verdict, first, why


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="print the mutants, run nothing")
    parser.add_argument(
        "--fast",
        action="store_true",
        help="judge each mutant by all of tests/unit and name the first test that kills it",
    )
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]
    if args.list:
        for m in chosen:
            print(f"{m.name}: {m.path}: - {m.old.strip()} + {m.new.strip()}\n    {m.why}")
        return 0
    copy = scratch_copy()
    listed = tuple(sorted({t for m in chosen for t in m.tests}))
    rc, first, _ = run_tests(copy, listed, args.fast)
    if rc != 0:
        why = first or f"pytest exit {rc}"
        print(f"the unmutated copy fails its tests ({why}): fix them first")
        return 1
    killed = 0
    if args.fast:
        print("| mutant | first fast test that failed | its first E line |\n|---|---|---|")
    for m in chosen:
        verdict, first, why = judge(copy, m, args.fast)
        killed += verdict == "killed"
        if args.fast:
            mark = first if verdict == "killed" else "SURVIVED" if verdict == "survived" else ""
            shown = why.replace("|", "\\|").replace("`", "'")
            print(f"| {m.name} | {mark or 'ERROR: ' + verdict} | `{shown}` |", flush=True)
            continue
        mark = (
            "killed  "
            if verdict == "killed"
            else "SURVIVED"
            if verdict == "survived"
            else "ERROR   "
        )
        print(
            f"{mark} {m.name} ({m.path}): {m.why}" + ("" if mark != "ERROR   " else f": {verdict}"),
            flush=True,
        )
    print(f"hand mutants: {killed}/{len(chosen)} killed" + (" by tests/unit" if args.fast else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
