"""Mutation testing of the pure modules: a score per module and the surviving mutants.

    nice -n 19 uv run python bench/mutation.py [MODULE ...] [--exclude FUNCTION ...]
                                               [--max-children N] [--no-run] [--hand|--hand-only]

MODULE is a module of ``[tool.mutmut] only_mutate`` in pyproject.toml, by name (``variants``),
dotted name (``pvegpu.variants``) or path (``src/pvegpu/variants.py``); none = all of them.
mutmut (dev group) copies the project to ``mutants/`` (git-ignored), plants one small change at a
time in those modules (``<`` for ``<=``, ``"XXokXX"`` for ``"ok"``, a dropped argument ...) and
runs the unit tests that touch the changed function (tests/unit only: no sim node, no e2e). A
mutant is killed when a test fails (or it runs past mutmut's time limit); one that survives marks
a behaviour no test pins. Every run re-tests the chosen modules' mutants; ``--no-run`` only reports
the last results; ``--exclude verify`` leaves a function (``Class.method`` for a method) out of
both. It asserts nothing and is not part of the test run: it takes minutes.

Score = killed / total per module. Survivors are listed as ``path:line function: - old / + new``;
those explained in bench/mutation-equivalents.md (they cannot change behaviour) are marked ``=``.
``--hand`` adds (``--hand-only`` runs alone) the hand-written mutants of bench/hand_mutants.py: the
slips mutmut's operators cannot make (a lost anchor, equality for membership, an ignored failure,
a swapped path).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import re
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTANTS = ROOT / "mutants"
EQUIVALENTS = ROOT / "bench" / "mutation-equivalents.md"
LOG = MUTANTS / "mutmut-run.log"
# mutmut's exit codes per mutant (mutmut/stats.py); a timeout counts as a kill.
KILLED = {1, 3, 24, -24, 36, 37, 152, 255}
SURVIVED = {0}
NO_TESTS = {5, 33}
NOT_EQUIVALENT = "## Survivors that are not equivalent"
MUTANT_NAME = re.compile(r"pvegpu\.[\w.ǁ]+__mutmut_\d+")


@dataclass
class Survivor:
    name: str
    line: int | None
    function: str
    old: str
    new: str


@dataclass
class ModuleScore:
    path: str
    partial: bool = False  # some functions excluded
    statuses: dict[str, int] = field(default_factory=dict)
    survivors: list[Survivor] = field(default_factory=list)

    @property
    def killed(self) -> int:
        return self.statuses.get("killed", 0)

    @property
    def total(self) -> int:
        return sum(self.statuses.values())

    @property
    def percent(self) -> float:
        return 100.0 * self.killed / self.total if self.total else 0.0


def configured_paths() -> list[str]:
    """The files ``[tool.mutmut] only_mutate`` names, e.g. ``['src/pvegpu/variants.py', ...]``."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(data["tool"]["mutmut"]["only_mutate"])


def module_of(path: str) -> str:
    """``src/pvegpu/variants.py`` -> ``pvegpu.variants`` (mutmut's mutant name prefix; a
    package's ``__init__.py`` is the package: ``pvegpu.settings``)."""
    return path.removeprefix("src/").removesuffix(".py").replace("/", ".").removesuffix(".__init__")


def choose(args: list[str], paths: list[str]) -> list[str]:
    """The configured paths the arguments name, in the order given; exits on an unknown one.

    >>> choose(["variants", "pvegpu.plan.boot"],
    ...        ["src/pvegpu/plan/boot.py", "src/pvegpu/variants.py"])
    ['src/pvegpu/variants.py', 'src/pvegpu/plan/boot.py']
    """
    chosen = []
    for arg in args:
        hits = [p for p in paths if arg in (p, module_of(p), module_of(p).rpartition(".")[2])]
        if not hits:
            known = ", ".join(module_of(p).rpartition(".")[2] for p in paths)
            sys.exit(
                f"bench/mutation.py: {arg!r} is not a mutated module; choose from: {known} "
                "(or add it to [tool.mutmut] only_mutate in pyproject.toml)"
            )
        chosen += [h for h in hits if h not in chosen]
    return chosen or paths


def function_key(name: str) -> str:
    """mutmut's key of a function or method: ``verify`` -> ``x_verify``, ``A.b`` -> ``xǁAǁb``."""
    cls, _, func = name.rpartition(".")
    return f"xǁ{cls}ǁ{func}" if cls else f"x_{func}"


def mutant_patterns(path: str, exclude: set[str]) -> list[str]:
    """mutmut name patterns for the mutants of ``path``, without the excluded functions' ones."""
    if not exclude:
        return [f"{module_of(path)}.*"]
    keys = function_lines((ROOT / path).read_text())
    return [f"{module_of(path)}.{k}__mutmut_*" for k in keys if k not in exclude]


def run_mutmut(paths: list[str], max_children: int, exclude: set[str]) -> None:
    """Re-test every mutant of ``paths`` (naming them makes mutmut ignore earlier results)."""
    mutmut = Path(sys.executable).parent / "mutmut"
    argv = [str(mutmut), "run", "--max-children", str(max_children)]
    argv += [pattern for p in paths for pattern in mutant_patterns(p, exclude)]
    MUTANTS.mkdir(exist_ok=True)
    print(
        f"running mutmut on {len(paths)} module(s), {max_children} worker(s); log: "
        f"{LOG.relative_to(ROOT)}",
        flush=True,
    )
    with LOG.open("w") as log:
        rc = subprocess.run(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        tail = LOG.read_text(errors="replace").replace("\r", "\n").splitlines()[-20:]
        last = "\n".join(tail)
        sys.exit(f"mutmut failed (exit {rc}); last lines of {LOG}:\n{last}")


def status(code: int | None) -> str:
    if code in KILLED:
        return "killed"
    if code in SURVIVED:
        return "survived"
    if code in NO_TESTS:
        return "no tests"
    return "not checked" if code is None else "suspicious"


def function_lines(source: str) -> dict[str, int]:
    """``{mutmut's function key: line of its def}``: ``x_f`` for a function, ``xǁCǁm`` for a
    method of class C."""
    lines = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines[f"x_{node.name}"] = node.lineno
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines[f"xǁ{node.name}ǁ{item.name}"] = item.lineno
    return lines


def survivor(name: str, spans: dict, mutated: list[str], def_lines: dict) -> Survivor:
    """Where a mutant changes the source and how, from mutmut's copy of the module: ``spans``
    gives each version's line range in ``mutated`` (the orig and the mutant function)."""
    key = name.rpartition(".")[2]
    func = key.rpartition("__mutmut_")[0]
    (o0, o1), (m0, m1) = spans[f"{func}__mutmut_orig"], spans[key]
    # the two copies differ in their def line's name too: compare without mutmut's suffixes
    orig, mutant = (
        [re.sub(r"__mutmut_\w+", "", line) for line in mutated[a - 1 : b]]
        for a, b in ((o0, o1), (m0, m1))
    )
    opcodes = difflib.SequenceMatcher(None, orig, mutant).get_opcodes()
    ops = [op for op in opcodes if op[0] != "equal"]
    _, i1, i2, j1, j2 = ops[0] if ops else ("equal", 0, 0, 0, 0)
    old = " ".join(line.strip() for line in orig[i1:i2]) or "(nothing)"
    new = " ".join(line.strip() for line in mutant[j1:j2]) or "(removed)"
    def_index = next((n for n, line in enumerate(orig) if re.match(r"\s*(async )?def ", line)), 0)
    line = def_lines.get(func)
    return Survivor(
        name,
        None if line is None else line + i1 - def_index,
        func.removeprefix("x_").removeprefix("xǁ").replace("ǁ", "."),
        old,
        new,
    )


def score(path: str, exclude: set[str]) -> ModuleScore:
    """The last results of one module, read from mutmut's files in mutants/."""
    def_lines = function_lines((ROOT / path).read_text())
    result = ModuleScore(path, partial=bool(exclude & set(def_lines)))
    meta = MUTANTS / (path + ".meta")
    if not meta.exists():
        return result
    codes = json.loads(meta.read_text())["exit_code_by_key"]
    spans = json.loads((MUTANTS / (path + ".spans")).read_text())["spans"]
    mutated = (MUTANTS / path).read_text().splitlines()
    for name, code in sorted(codes.items(), key=lambda kv: _natural(kv[0])):
        if name.rpartition(".")[2].rpartition("__mutmut_")[0] in exclude:
            continue
        s = status(code)
        result.statuses[s] = result.statuses.get(s, 0) + 1
        if s not in ("killed", "not checked"):
            result.survivors.append(survivor(name, spans, mutated, def_lines))
    return result


def _natural(name: str):
    head, _, n = name.rpartition("__mutmut_")
    return head, int(n) if n.isdigit() else 0


def known_equivalents() -> set[str]:
    """Mutant names explained in bench/mutation-equivalents.md (before its section of survivors
    that are not equivalent)."""
    if not EQUIVALENTS.exists():
        return set()
    text = EQUIVALENTS.read_text().split(NOT_EQUIVALENT, 1)[0]
    return set(MUTANT_NAME.findall(text))


def report(scores: list[ModuleScore]) -> None:
    equivalents = known_equivalents()
    print(f"\n{'module':<36} {'killed':>6} {'total':>6} {'score':>7} {'equiv.':>6}  other")
    for s in scores:
        eq = sum(1 for v in s.survivors if v.name in equivalents)
        other = ", ".join(f"{k} {n}" for k, n in sorted(s.statuses.items()) if k != "killed")
        shown = f"{s.percent:6.1f}%" if s.total else "    -  "
        label = s.path + (" (part)" if s.partial else "")
        print(f"{label:<36} {s.killed:>6} {s.total:>6} {shown:>7} {eq:>6}  {other}")
    for s in scores:
        if not s.survivors:
            continue
        print(f"\nnot killed in {s.path} (= listed as equivalent in {EQUIVALENTS.name}):")
        for v in s.survivors:
            mark = "=" if v.name in equivalents else " "
            old, new = _window(v.old, v.new)
            print(
                f" {mark} {s.path}:{v.line} {v.function} [{v.name.rpartition('_')[2]}]: "
                f"- {old}  + {new}"
            )


def _window(old: str, new: str, context: int = 24) -> tuple[str, str]:
    """The part of two long lines around where they differ.

    >>> _window("x" * 40 + "old" + "y" * 40, "x" * 40 + "new" + "y" * 40, 3)
    ('...xxxoldyyy...', '...xxxnewyyy...')
    """
    p = len(_common_prefix(old, new))
    q = len(_common_prefix(old[p:][::-1], new[p:][::-1]))
    start = max(0, p - context)

    def cut(text: str) -> str:
        end = min(len(text), len(text) - q + context)
        return ("..." if start else "") + text[start:end] + ("..." if end < len(text) else "")

    return cut(old), cut(new)


def _common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("modules", nargs="*", help="modules to test (default: all configured)")
    parser.add_argument(
        "--max-children",
        type=int,
        default=os.cpu_count() or 1,
        help="parallel test workers (default: the number of CPUs)",
    )
    parser.add_argument("--no-run", action="store_true", help="report the last results only")
    parser.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="FUNCTION",
        help="leave a function (or Class.method) out of the run and the score",
    )
    parser.add_argument(
        "--hand",
        action="store_true",
        help="after mutmut, the hand-written mutants too (bench/hand_mutants.py)",
    )
    parser.add_argument(
        "--hand-only", action="store_true", help="only the hand-written mutants (no mutmut run)"
    )
    args = parser.parse_args(argv)
    if args.hand_only:
        run_hand_mutants()
        return
    paths = choose(args.modules, configured_paths())
    exclude = {function_key(name) for name in args.exclude}
    start = time.monotonic()
    if not args.no_run:
        run_mutmut(paths, args.max_children, exclude)
        print(f"mutmut took {time.monotonic() - start:.0f} s")
    if args.exclude:
        print("excluded: " + ", ".join(args.exclude))
    report([score(p, exclude) for p in paths])
    if args.hand:
        run_hand_mutants()


def run_hand_mutants() -> None:
    """The slips mutmut's operators never make (bench/hand_mutants.py), each applied alone."""
    sys.path.insert(0, str(ROOT / "bench"))
    import hand_mutants

    hand_mutants.main([])


if __name__ == "__main__":
    main()
