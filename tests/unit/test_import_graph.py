"""No import cycle anywhere in the pvegpu package (issue 13): the graph is built from the source
with ``ast``, counting every import (module level, inside functions, under ``TYPE_CHECKING``)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def module_files(src: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` under ``src``, by dotted name (packages by their own name)."""
    found = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported_names(path: Path, name: str, is_package: bool) -> set[str]:
    """Every dotted name an ``import`` anywhere in the file can load (relative ones resolved);
    ``from x import y`` names ``x.y`` as well (a submodule, when there is one)."""
    package = name if is_package else name.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[: len(base) - node.level + 1] if node.level else []
            target = ".".join([*base, *([node.module] if node.module else [])])
            names.add(target)
            names.update(f"{target}.{alias.name}" for alias in node.names)
    return names


def import_graph(src: Path, package: str) -> dict[str, set[str]]:
    """Module -> the package's modules it imports; importing ``a.b.c`` also runs ``a`` and
    ``a.b`` (their ``__init__``), so those count as edges too, except the importer's own parent
    packages: Python has already started those before the importer runs, so a submodule that
    imports a sibling (``from .verdict import Verdict``) does not cycle through its package."""
    files = module_files(src, package)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        edges = set()
        for target in imported_names(path, name, path.name == "__init__.py"):
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                prefix = ".".join(parts[:i])
                own_parent = name.startswith(prefix + ".")
                if prefix in files and prefix != name and not own_parent:
                    edges.add(prefix)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in sorted(graph):
        if state.get(root):
            continue
        path, stack = [root], [iter(sorted(graph[root]))]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def test_the_pvegpu_package_has_no_import_cycle():
    graph = import_graph(SRC, "pvegpu")
    assert len(graph) > 40 and graph["pvegpu.operations.python_env"], "the graph was not read"
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_a_cycle_through_a_function_level_import_is_found(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "ops").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "ops" / "__init__.py").write_text("")
    (pkg / "ops" / "env.py").write_text("def f():\n    from . import checks\n")
    (pkg / "ops" / "checks.py").write_text("from ..util import x\n")
    (pkg / "util.py").write_text("import pkg.ops.env as e\n")
    assert find_cycle(import_graph(tmp_path, "pkg")) == [
        "pkg.ops.checks",
        "pkg.util",
        "pkg.ops.env",
        "pkg.ops.checks",
    ]


def test_an_acyclic_package_passes_and_submodules_resolve(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\nfrom .c import name\n")
    (pkg / "b.py").write_text("from pkg import c\n")
    (pkg / "c.py").write_text("import os\nname = 1\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.a"] == {"pkg.b", "pkg.c"} and graph["pkg.c"] == set()
    assert find_cycle(graph) is None


def test_a_package_init_importing_its_submodules_is_not_a_cycle(tmp_path):
    """``pkg/__init__.py`` re-exports ``pkg.v``, which imports its sibling ``pkg.w``: Python has
    started ``pkg`` before ``pkg.v`` runs, so that is no cycle; ``pkg.w`` importing ``pkg.x``,
    a module outside its parents that imports ``pkg.w`` back, is one."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .v import name\n")
    (pkg / "v.py").write_text("from .w import name\n")
    (pkg / "w.py").write_text("name = 1\n")
    (pkg / "x.py").write_text("")
    assert find_cycle(import_graph(tmp_path, "pkg")) is None
    (pkg / "w.py").write_text("from . import x\nname = 1\n")
    (pkg / "x.py").write_text("from .w import name\n")
    assert find_cycle(import_graph(tmp_path, "pkg")) == ["pkg.w", "pkg.x", "pkg.w"]
