"""Hand mutants (bench/hand_mutants.py) of the delete guard, the gates, the node lock, the data
keys, the takeover and the node's probes; loaded by path, plain data.
"""

# (name, file, old text, new text, why, the fast tests that must catch it)
SLIPS = "tests/unit/test_hand_slips.py"

MUTANTS = [
    (
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
    (
        "guard-nested-build",
        "src/pvegpu/guard.py",
        "and parent == venvs_dir\n",
        "and is_within(parent, venvs_dir)\n",
        "equality become containment: a build-like name anywhere below venvs_dir "
        "(venvs/mydata/torch-2.11.0-cu130) passes the delete guard",
        (f"{SLIPS}::test_a_build_name_below_another_directory_of_venvs_dir_is_refused",),
    ),
    (
        "restart-gate-equality",
        "src/pvegpu/plan/passthrough.py",
        'if live.get("unit_active") in RUNNING:',
        'if live.get("unit_active") == "active":',
        "membership become equality: a unit activating, reloading or deactivating (writing its "
        "checkpoint) no longer blocks a container restart",
        (f"{SLIPS}::test_the_restart_gate_refuses_while_the_unit_runs_in_any_state",),
    ),
    (
        "running-states",
        "src/pvegpu/plan/unit.py",
        'RUNNING = ("active", "activating", "reloading", "deactivating")',
        'RUNNING = ("active",)',
        "the running states shrunk to one: every gate built on them lets a stopping unit through",
        (SLIPS, "tests/unit/test_operation_tables.py"),
    ),
    (
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
    (
        "leftovers-error-ignored",
        "src/pvegpu/operations/leftovers.py",
        'if not status or doc.get("error"):',
        "if not status:",
        "an ignored error: the probe could not look (nvidia-smi failed) and the unit starts anyway",
        (f"{SLIPS}::test_clearing_leftovers_fails_on_any_doubt",),
    ),
    (
        "node-lock-released",
        "src/pvegpu/startup/node_lock.py",
        '"exec cat >/dev/null",',
        '"exec cat /dev/null",',
        "the holder reads /dev/null, not its channel: the lock is dropped at once and two deploys "
        "interleave (caught before only when two concurrent deploys happened to collide)",
        (f"{SLIPS}::test_the_lock_holder_keeps_the_flock_until_its_channel_closes",),
    ),
    (
        "runtime-check-old-build",
        "src/pvegpu/operations/python_env.py",
        'python=f"{python_env.build_venv(torch.build_name)}.next/bin/python",',
        'python=f"{python_env.build_venv(torch.build_name)}/bin/python",',
        "swapped paths: the old build is checked instead of the new .next (caught before only "
        "because a first build has no old build to check)",
        (f"{SLIPS}::test_the_runtime_check_fails_a_broken_next_build_beside_a_good_old_one",),
    ),
    (
        "data-keys-own-prefix",
        "src/pvegpu/startup/data_keys.py",
        "key.startswith(OWN_PREFIX)",
        "OWN_PREFIX in key",
        "prefix become membership: a typo containing x_ (max_batch_sise) passes as the user's own",
        ("tests/unit/test_data_keys.py",),
    ),
    (
        "data-keys-override-layer",
        "src/pvegpu/startup/data_keys.py",
        '    yield "--data", inventory.get_override_data()\n',
        "",
        "a layer left out: a typo on the command line (--data torch_varient=cu128) passes",
        ("tests/unit/test_data_keys.py",),
    ),
    # --- issue 35: the takeover, the gates, the probes' parsers and the preflights ------------
    (
        "takeover-own-unit-foreign",
        "src/pvegpu/operations/takeover.py",
        "foreign = others(running_here(host, vmid, unit))",
        "foreign = running_here(host, vmid, unit)",
        "others() dropped: the takeover stops pvegpu's own unit as if it were a user's training",
        ("tests/unit/test_takeover.py",),
    ),
    (
        "takeover-unverified-build",
        "src/pvegpu/operations/takeover.py",
        "if verified_here(host.state, host.name, vmid) is False:",
        "if verified_here(host.state, host.name, vmid) is None:",
        "the wrong one of False/None: a build that failed verification still takes the "
        "running training over",
        ("tests/unit/test_takeover.py",),
    ),
    (
        "takeover-starters-membership",
        "src/pvegpu/operations/takeover.py",
        "units = [u for u in units if u not in {t.unit for t in foreign}]",
        "units = [u for u in units if u in {t.unit for t in foreign}]",
        "membership turned around: an enabled unit that would start a second trainer at boot "
        "is left enabled",
        ("tests/unit/test_takeover.py",),
    ),
    (
        "takeover-roles-held-dropped",
        "src/pvegpu/plan/takeover.py",
        '"members": [m for t in trainers for m in roles(t.members, procs, held, script)],',
        '"members": [m for t in trainers for m in roles(t.members, procs, {}, script)],',
        "a missing argument: a worker that holds a GPU but runs another command is no worker, "
        "so it gets no SIGTERM and no time to checkpoint",
        ("tests/unit/test_takeover.py",),
    ),
    (
        "takeover-roles-wrapper",
        "src/pvegpu/plan/takeover.py",
        "if is_launcher(argv) or m not in seeds:",
        "if is_launcher(argv):",
        "a dropped or clause: a bash run.sh loop is not held and starts the trainer again",
        ("tests/unit/test_takeover.py",),
    ),
    (
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
    (
        "stop-probe-start-field",
        "src/pvegpu/probes/ct_processes.py",
        '"start": int(fields[19]),',
        '"start": int(fields[20]),',
        "a wrong /proc/<pid>/stat field (23, vsize, for 22, starttime): no member is ever "
        "the same process, nothing is signalled and the takeover reports success",
        ("tests/unit/test_stop_probe.py",),
    ),
    (
        "stop-probe-unit-no-term",
        "src/pvegpu/probes/training_stop.py",
        'stopped = send(by_role["worker"], signal.SIGTERM)\n',
        'stopped = [] if unit else send(by_role["worker"], signal.SIGTERM)\n',
        "a unit that is the training gets no SIGTERM of the probe's: its own stop signals its "
        "trainer's DataLoader workers with it (KillMode=control-group) or no one but the main "
        "process (transient, user, KillMode=process), and the checkpoint is lost",
        ("tests/unit/test_stop_probe.py",),
    ),
    (
        "node-probe-pgid-field",
        "src/pvegpu/probes/ct_processes.py",
        '"pgid": int(fields[2]),',
        '"pgid": int(fields[3]),',
        "a wrong /proc/<pid>/stat field: the process group is the session (the takeover "
        "signals a group by it)",
        ("tests/unit/test_node_probe_processes.py",),
    ),
    (
        "node-probe-monitor",
        "src/pvegpu/probes/ct_processes.py",
        'if not mine.search(cgroup) or "/lxc.monitor" in cgroup:',
        "if not mine.search(cgroup):",
        "a dropped or clause: lxc's monitor process is listed as one of the container's",
        ("tests/unit/test_node_probe_processes.py",),
    ),
    (
        "node-probe-cgroup-anchor",
        "src/pvegpu/probes/ct_processes.py",
        r'LXC_CGROUP = r"/lxc(?:\.payload)?[./]{vmid}(?:/|$)"',
        r'LXC_CGROUP = r"/lxc(?:\.payload)?[./]{vmid}"',
        "a lost anchor: CT 20's read lists CT 200's processes",
        ("tests/unit/test_node_probe_processes.py",),
    ),
    (
        "gate-fresh-ignored",
        "src/pvegpu/operations/training_gate.py",
        "if not fresh and full and vmid in entry.request.vmids:",
        "if full and vmid in entry.request.vmids:",
        "a dropped clause: the check after the takeover reads the cached pre-takeover state",
        ("tests/unit/test_training_gates.py",),
    ),
    (
        "gate-consent-defers-all",
        "src/pvegpu/operations/training_gate.py",
        "if consent and all(t.kind == TRAINING for t in trainers) and not after:",
        "if consent and not after:",
        "a dropped clause: with restart_training=true a change under a GPU process or an "
        "unreadable state is deferred to a takeover that never stops those, and not recorded",
        ("tests/unit/test_training_gates.py",),
    ),
    (
        "venv-switch-own-unit",
        "src/pvegpu/operations/training.py",
        "    trainers, made = change_when_clear(host, change, unit_name)\n"
        "    return made, others(trainers)\n",
        "    trainers, made = change_when_clear(host, change, unit_name)\n"
        "    return made, trainers\n",
        "others() dropped: the venv switch waits for pvegpu's own unit forever",
        ("tests/unit/test_gated_change.py",),
    ),
    (
        "gated-switch-check-ignored",
        "src/pvegpu/probes/ct_gate.py",
        "        return not check.others(found), None\n",
        "        return True, None\n",
        "the node's check answered clear whatever runs: the read's exec switches the live venv "
        "under a training started by hand",
        ("tests/unit/test_gated_change.py",),
    ),
    (
        "change-then-read-set-e",
        "src/pvegpu/run/ct_reads.py",
        '    return f\'(\\n{change}\\n)\\nrc=$?; [ "$rc" -eq 0 ] || exit "$rc"\\n{reads}exit 0\'\n',  # noqa: E501
        '    return f"{{ {change}\\n}} || exit $?\\n{reads}exit 0"\n',
        "the change in a `{ ...; } || exit` list: the shell ignores a build script's `set -e` "
        "there, so a failed build goes on and reports success",
        ("tests/unit/test_ct_reads.py",),
    ),
    (
        "gated-switch-eof-goes",
        "src/pvegpu/probes/ct_gate.py",
        'if [ "$pvegpu_go" = go ]; then\n',
        'if [ "$pvegpu_go" != no ]; then\n',
        "fail open: an exec whose probe ended (or was killed) before its word switches anyway",
        ("tests/unit/test_gated_change.py",),
    ),
    (
        "unit-start-boot-starter",
        "src/pvegpu/operations/training.py",
        '        wait_for(host, None, f"systemctl enable {unit}", [boot])\n'
        "        enable = False\n",
        '        wait_for(host, None, f"systemctl enable {unit}", [boot])\n',
        "a dropped line: the unit is enabled beside an @reboot cron line that starts a second "
        "trainer at the next boot",
        ("tests/unit/test_training_gates.py",),
    ),
    (
        "unit-start-consent-neighbour",
        "src/pvegpu/operations/training.py",
        "if settings.policy.restart_training and foreign[0].kind == TRAINING:",
        "if settings.policy.restart_training:",
        "a dropped clause: with consent, another container's process on a training GPU fails "
        "the host instead of waiting",
        ("tests/unit/test_running_training.py",),
    ),
]
