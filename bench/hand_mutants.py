"""Hand-written mutants: the slips mutmut's operators never make, kept beside bench/mutation.py.

    nice -n 19 uv run python bench/hand_mutants.py [NAME ...] [--list] [--fast]

mutmut swaps operators and constants one token at a time; it never drops a regex anchor, turns a
membership test into an equality, ignores a failure it was told about or checks the wrong one of
two paths, yet those are the slips that cost users data, a running training or a wrong verdict
(issue 25). Each mutant (bench/hand_mutants_takeover.py, bench/hand_mutants_deploy.py: plain
data) is (name, file, old text, new text, why, the fast tests that must catch it). The script
copies the project to ``mutants/hand/`` (git-ignored), applies each mutant alone there, runs
its tests against the copy (``PYTHONPATH`` puts the copy's ``src`` first),
restores the file, and prints killed/total with every survivor. It asserts nothing and is not
part of the test run; a survivor is a behaviour to pin with a test (tests/unit/test_hand_slips.py
holds the first ones). Add a mutant whenever a slip of this kind is found by other means.

``--fast`` judges each mutant by the whole of ``tests/unit`` (not only its listed tests; two
xdist workers, stop at the first failure) and names the first fast test that failed, so every
mutant on the list must be caught without a booted node (issue 35; docs/dev/hand-mutants.md).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = ROOT / "mutants" / "hand"
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


def load_mutants() -> list[HandMutant]:
    """Every mutant, from the two data files beside this one (loaded by path: bench/ on
    sys.path would shadow other top-level names)."""
    found = []
    for name in ("hand_mutants_takeover", "hand_mutants_deploy", "hand_mutants_ends"):
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        found += [HandMutant(*entry) for entry in module.MUTANTS]
    return found


MUTANTS = load_mutants()


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
