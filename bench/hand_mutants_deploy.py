"""Hand mutants (bench/hand_mutants.py) of the deploy's gates, rebuilds, preflight, adoption, boot
starters, held GPUs, process trees and stops; loaded by path, plain data.
"""

# (name, file, old text, new text, why, the fast tests that must catch it)
SLIPS = "tests/unit/test_hand_slips.py"

MUTANTS = [
    (
        "rebuild-venv-gate-state",
        "src/pvegpu/operations/rebuild.py",
        'if not policy.restart_training and container_state().get("unit_active") in RUNNING:',
        'if not policy.restart_training and container_state().get("unit_active") == "active":',
        "membership become equality: rebuild=venv passes while pvegpu's unit is deactivating "
        "(writing its checkpoint)",
        ("tests/unit/test_training_gates.py",),
    ),
    (
        "rebuild-container-wrong-ct",
        "src/pvegpu/operations/rebuild.py",
        "    trainers = running_here(host, vmid, unit)\n",
        "    trainers = running_here(host, unit=unit)\n",
        "a missing argument: the rebuild=container gate asks about the node host, not the "
        "container it is about to destroy, and finds nothing",
        ("tests/unit/test_training_gates.py",),
    ),
    (
        "rebuild-container-own-unit",
        "src/pvegpu/operations/rebuild.py",
        "if any(t.ours for t in trainers) and not policy.restart_training:",
        "if any(t.ours for t in others(trainers)) and not policy.restart_training:",
        "others(trainers) for trainers: pvegpu's running unit no longer stops rebuild=container",
        ("tests/unit/test_training_gates.py",),
    ),
    (
        "preflight-restart-refuse-or-wait",
        "src/pvegpu/startup/container_preflight.py",
        "if blocker and not settings.policy.restart_training and not others(trainers):",
        "if blocker and not settings.policy.restart_training:",
        "a dropped clause: a restart that a user's training blocks is refused at preflight "
        "instead of waiting (the rest of the deploy never runs)",
        ("tests/unit/test_preflight_consents.py",),
    ),
    (
        "preflight-adopt-flag",
        "src/pvegpu/startup/container_preflight.py",
        'if ct.get("exists") and not is_ours(ct) and not settings.policy.adopt:',
        'if ct.get("exists") and not is_ours(ct) and not settings.policy.restart_training:',
        "the wrong consent: restart_training=true adopts a container pvegpu did not make",
        ("tests/unit/test_preflight_consents.py",),
    ),
    (
        "preflight-destroy-volumes-flag",
        "src/pvegpu/startup/container_preflight.py",
        "if volumes and not settings.policy.destroy_volumes:",
        "if volumes and not settings.policy.adopt:",
        "the wrong consent: adopt=true lets rebuild=container destroy storage-backed volumes",
        ("tests/unit/test_preflight_consents.py",),
    ),
    (
        "adoption-plan-no-match",
        "src/pvegpu/startup/adoption_plan.py",
        "foreign = others(running_training(int(vmid), ct, state, unit, match))",
        "foreign = others(running_training(int(vmid), ct, state, unit))",
        "a missing argument: a training that holds no GPU yet is not in the adoption plan",
        ("tests/unit/test_preflight_consents.py",),
    ),
    (
        "boot-starters-earlier-unit",
        "src/pvegpu/plan/adoption.py",
        '    own = {unit, *(live.get("other_units") or {})}\n    found = []',
        "    own = {unit}\n    found = []",
        "pvegpu's unit under an earlier name left out: it counts as a second trainer at boot",
        ("tests/unit/test_preflight_consents.py",),
    ),
    (
        "data-keys-one-run-tuple",
        "src/pvegpu/startup/data_keys.py",
        'ONE_RUN_KEYS = ("rebuild", "restart_training", "adopt", "destroy_volumes")',
        'ONE_RUN_KEYS = ("rebuild", "restart_training", "adopt")',
        "a key left out of a tuple: destroy_volumes=true in group_data stays on every run",
        ("tests/unit/test_data_keys.py",),
    ),
    (
        "data-keys-extra-keys-string",
        "src/pvegpu/startup/data_keys.py",
        "    if isinstance(raw, str):\n        raw = [raw]\n",
        "",
        "an accepted form dropped: extra_data_keys as one string no longer declares its key",
        ("tests/unit/test_recognition_slips.py",),
    ),
    (
        "held-gpu-apps-unreadable",
        "src/pvegpu/probes/training_held.py",
        "if used is None or apps is None:",
        "if used is None:",
        "a dropped or clause: with compute-apps unreadable a context is made on a GPU a "
        "process of this container holds",
        ("tests/unit/test_recognition_slips.py",),
    ),
    (
        "held-gpu-no-figure-idle",
        "src/pvegpu/probes/training_held.py",
        "int(used) if used.strip().isdigit() else None",
        "int(used) if used.strip().isdigit() else 0",
        "fail open: a GPU whose memory figure is [N/A] counts as idle and takes a context",
        ("tests/unit/test_recognition_slips.py",),
    ),
    (
        "tree-script-basename",
        "src/pvegpu/plan/process_tree.py",
        'if word.startswith("-") or not word.endswith(os.path.basename(script)):',
        'if word.startswith("-") or word != os.path.basename(script):',
        "endswith become equality: ./train.py and the absolute path are no longer the script",
        ("tests/unit/test_recognition_slips.py",),
    ),
    (
        "tree-launcher-module",
        "src/pvegpu/plan/process_tree.py",
        '        "torch.distributed.run",\n',
        "",
        "a module left out: python -m torch.distributed.run is no launcher and is not held",
        ("tests/unit/test_recognition_slips.py",),
    ),
    (
        "running-unreadable-fail-open",
        "src/pvegpu/plan/running_training.py",
        '        return [Trainer(None, "?", "?", kind=UNKNOWN, reason="; ".join(why))]',
        "        return []",
        "fail open: a container whose state could not be read runs nothing",
        ("tests/unit/test_recognition_slips.py",),
    ),
    (
        "running-cgroup-anchor",
        "src/pvegpu/plan/cgroup_origin.py",
        r'm = re.search(rf"/lxc(?:\.payload)?[./]{vmid}(/.*|$)", path)',
        r'm = re.search(rf"/lxc(?:\.payload)?[./]{vmid}(.*)", path)',
        "a lost anchor: CT 200's GPU process is CT 20's training",
        ("tests/unit/test_recognition_slips.py",),
    ),
    (
        "toolchain-apt-and",
        "src/pvegpu/plan/toolchain.py",
        "apt-get -q update; apt-get -q install",
        "apt-get -q update && apt-get -q install",
        "&& for ;: one apt source down (update fails) and the compiler is never installed",
        ("tests/unit/test_preflight_consents.py",),
    ),
    (
        "disk-min-free-not-estimate",
        "src/pvegpu/startup/site_preflight.py",
        "if free_kib is None or free_kib >= need_gib(min_free_gib) * KIB_PER_GIB:",
        "if free_kib is None or free_kib >= min_free_gib * KIB_PER_GIB:",
        "the floor for the estimate: a root disk with min_free_gib free but less than a build "
        "needs passes",
        ("tests/unit/test_preflight_consents.py",),
    ),
    (
        "lock-wrong-level",
        "src/pvegpu/startup/site_preflight.py",
        'lock = (ct.get("config") or {}).get("lock")',
        'lock = ct.get("lock")',
        "the wrong level of the read: a locked container passes the preflight",
        ("tests/unit/test_preflight_consents.py",),
    ),
    (
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
    (
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
    (
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
    (
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
    (
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
    (
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
    (
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
