"""Hand mutants (bench/hand_mutants.py) of what the first deploy, the stops and the end states
added: the toolchain's pin against the archive, the stop probe's order and its locks, the unit's
kill mode, the start watch, the interrupt, the preview's wait and the restart hints; loaded by
path, plain data.
"""

# (name, file, old text, new text, why, the fast tests that must catch it)
MUTANTS = [
    (
        "toolchain-pin-any-archive",
        "src/pvegpu/plan/toolchain.py",
        'return found["installed"] in found.get("archive", [])',
        'return bool(found.get("archive"))',
        "any version in the archive taken for the installed one: the pinned install of a "
        "container whose python is older than its archive fails at apt-get",
        ("tests/unit/test_project.py",),
    ),
    (
        "stop-probe-helpers-first",
        "src/pvegpu/probes/training_stop.py",
        'stopped = send(by_role["worker"], signal.SIGTERM)',
        'stopped = send(by_role["worker"] + by_role["helper"], signal.SIGTERM)',
        "SIGTERM to the DataLoader workers too: they die by anyone's SIGTERM but their parent's, "
        "and the trainer raises before its checkpoint",
        ("tests/unit/test_stop_probe_slips.py",),
    ),
    (
        "stop-probe-sighup",
        "src/pvegpu/probes/training_stop.py",
        "signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the deploy's connection may go; the "
        "stop goes on\n",
        "",
        "the stop dies with the deploy's connection (Ctrl-C, a lost ssh): launchers stay held, "
        "the unit is never stopped",
        (
            "tests/unit/test_stop_probe_slips.py::"
            "test_the_stop_goes_on_when_the_deploys_connection_hangs_up",
        ),
    ),
    (
        "stop-probe-transient-not-loaded",
        "src/pvegpu/probes/training_stop.py",
        "if transient and rc == NOT_LOADED:",
        "if rc == NOT_LOADED:",
        "a unit file's 'not loaded' taken as stopped: a users' unit that systemctl could not "
        "reach passes as stopped and disabled",
        (
            "tests/unit/test_stop_probe_slips.py::"
            "test_a_unit_file_that_systemctl_says_is_not_loaded_fails_the_stop",
        ),
    ),
    (
        "unit-killmode-control-group",
        "templates/training.service.j2",
        "KillMode=mixed",
        "KillMode=control-group",
        "every process of the unit gets SIGTERM: the DataLoader workers die by it and every "
        "consented restart loses the checkpoint",
        ("tests/unit/test_unit_render.py",),
    ),
    (
        "start-watch-restarts-ignored",
        "src/pvegpu/plan/start_watch.py",
        '\'if [ "$s" != active ] || [ "${r:-0}" != 0 ]; then \'',
        "'if [ \"$s\" != active ]; then '",
        "automatic restarts not counted: a trainer that crash-loops and is active again when "
        "read passes the watch",
        ("tests/unit/test_end_states.py",),
    ),
    (
        "start-watch-any-gpu-process",
        "src/pvegpu/plan/start_watch.py",
        '\'while read -r l; do case "$l" in */\' + shlex.quote(unit) + ") seen=$p;; esac; "',
        "'while read -r l; do case \"$l\" in *) seen=$p;; esac; '",
        "any process on a GPU taken for the trainer's (a Jupyter kernel's, a neighbour unit's): "
        "a trainer that never takes its GPUs passes the watch",
        ("tests/unit/test_end_states.py",),
    ),
    (
        "start-watch-unread-passes",
        "src/pvegpu/plan/start_watch.py",
        "'if [ -z \"$d\" ]; then g=unread; '",
        "'if [ -z \"$d\" ]; then g=; '",
        "an nvidia-smi that does not answer taken for an old driver: the watch says the trainer "
        "came up without seeing it on a GPU",
        ("tests/unit/test_end_states.py",),
    ),
    (
        "interrupt-exit-zero",
        "src/pvegpu/startup/interrupt.py",
        "EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}",
        "EXIT = {signal.SIGINT: 0, signal.SIGTERM: 0}",
        "a deploy cut short by Ctrl-C exits 0: scripts and CI take it for converged",
        ("tests/unit/test_end_states.py",),
    ),
    (
        "dry-waits",
        "src/pvegpu/startup/node_lock.py",
        'return "--dry" in (sys.argv if argv is None else argv)',
        "return False",
        "a preview with -y waits up to 600 s behind a running deploy's node lock",
        ("tests/unit/test_project.py",),
    ),
    (
        "hint-secret-kept",
        "src/pvegpu/probes/ct_processes.py",
        "if ENV_KEPT.match(k) and not ENV_SECRET.search(k)}",
        "if ENV_KEPT.match(k)}",
        "a token (HF_TOKEN) read from a trainer's environment goes into the run's last line",
        ("tests/unit/test_restart_hint.py",),
    ),
    (
        "hint-venv-where-it-was",
        "src/pvegpu/plan/restart_hint.py",
        "return [h.text(moved.get((node, h.vmid))) for h in hints]",
        "return [h.text() for h in hints]",
        "the hint names venv_path, which now points at pvegpu's build: the stopped training is "
        "started again on another torch",
        ("tests/unit/test_restart_hint.py",),
    ),
    (
        "hint-transient-any-manager",
        "src/pvegpu/plan/restart_hint.py",
        'transient = [trainer.unit, uid] in ((live or {}).get("transient") or [])',
        'transient = any(trainer.unit == u for u, _ in (live or {}).get("transient") or [])',
        "a transient unit of another manager with the same name makes a unit file's hint a "
        "systemd-run of the wrong manager",
        ("tests/unit/test_restart_hint.py",),
    ),
    (
        "hint-moved-key-host",
        "src/pvegpu/operations/venv_moves.py",
        'key = (node_of_host(host), int(host.data.get("pct_vmid") or 0))',
        'key = (host.name, int(host.data.get("pct_vmid") or 0))',
        "the move recorded under the container's host name: the node's hints never find it",
        ("tests/unit/test_restart_hint.py",),
    ),
]
