"""Hand-written mutants: the slips mutmut's operators never make, kept beside bench/mutation.py.

    nice -n 19 uv run python bench/hand_mutants.py [NAME ...] [--list]

mutmut swaps operators and constants one token at a time; it never drops a regex anchor, turns a
membership test into an equality, ignores a failure it was told about or checks the wrong one of
two paths, yet those are the slips that cost users data, a running training or a wrong verdict
(issue 25). Each mutant below is (name, file, old text, new text, why, the fast tests that must
catch it). The script copies the project to ``mutants/hand/`` (git-ignored), applies each mutant
alone there, runs its tests against the copy (``PYTHONPATH`` puts the copy's ``src`` first),
restores the file, and prints killed/total with every survivor. It asserts nothing and is not
part of the test run; a survivor is a behaviour to pin with a test (tests/unit/test_hand_slips.py
holds the first ones). Add a mutant whenever a slip of this kind is found by other means.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = ROOT / "mutants" / "hand"
SLIPS = "tests/unit/test_hand_slips.py"


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


def run_tests(copy: Path, tests: tuple[str, ...]) -> int:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(copy / "src"), str(copy)]),
        PYTHONDONTWRITEBYTECODE="1",
    )
    argv = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    return subprocess.run(argv, cwd=copy, env=env, capture_output=True, text=True).returncode


def judge(copy: Path, m: HandMutant) -> str:
    """ "killed", "survived", or why the mutant could not be judged."""
    target = copy / m.path
    original = target.read_text()
    if original.count(m.old) != 1:
        return f"not applied: the old text is in {m.path} {original.count(m.old)} times"
    target.write_text(original.replace(m.old, m.new))
    try:
        rc = run_tests(copy, m.tests)
    finally:
        target.write_text(original)
    return {0: "survived", 1: "killed"}.get(rc, f"tests could not run (pytest exit {rc})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="print the mutants, run nothing")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]
    if args.list:
        for m in chosen:
            print(f"{m.name}: {m.path}: - {m.old.strip()} + {m.new.strip()}\n    {m.why}")
        return 0
    copy = scratch_copy()
    if run_tests(copy, tuple(sorted({t for m in chosen for t in m.tests}))) != 0:
        print("the unmutated copy fails its tests: fix them first")
        return 1
    killed = 0
    for m in chosen:
        verdict = judge(copy, m)
        killed += verdict == "killed"
        mark = (
            "killed  "
            if verdict == "killed"
            else "SURVIVED"
            if verdict == "survived"
            else "ERROR   "
        )
        print(
            f"{mark} {m.name} ({m.path}): {m.why}" + ("" if mark != "ERROR   " else f": {verdict}")
        )
    print(f"hand mutants: {killed}/{len(chosen)} killed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
