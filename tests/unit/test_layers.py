"""The layers of src/pvegpu import one way, downward (docs/dev/development.md, "How the code is laid
out"): a module may import its own layer and the layers below it, never one above. The graph is
the import-cycle test's (every import, relative ones resolved)."""

from __future__ import annotations

import pytest
from test_import_graph import SRC, import_graph

LAYERS = [
    "startup",  # deploy_context.begin, preflight, fleet, settings of all hosts, node lock
    "operations",  # pyinfra operations: the only code that changes a host
    "output",  # the report and the end-of-run summary
    "run",  # the run context and the cached node/container reads
    "verification",  # pure verdicts
    "plan",  # pure planners
    "facts",  # pyinfra facts: run a probe, parse its output into a document
    "probes",  # scripts run on the node or in the container (import only their prelude)
    "connectors",  # the @pct connector
    "locks",  # uv lock plans and pins
    "settings",  # validated settings
    "base",  # paths, documents, digests, guard, variants, quick_exit, refusal, version
]
ALLOWED_UPWARD = {
    # The node probe lists the installer's tools it looks for; the table lives with its planner.
    ("pvegpu.facts.proxmox", "pvegpu.plan"),
    ("pvegpu.facts.proxmox", "pvegpu.plan.installer_tools"),
}


def layer_of(module: str) -> str:
    """``pvegpu.plan.unit`` -> ``plan``; a top-level module (``pvegpu.guard``) -> ``base``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or parts[1] in LAYERS else "base"


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs where the importer's layer is below the imported one's."""
    found = []
    for module, targets in graph.items():
        for target in targets - {"pvegpu"}:
            if module != "pvegpu" and LAYERS.index(layer_of(module)) > LAYERS.index(
                layer_of(target)
            ):
                found.append((module, target))
    return sorted(found)


def test_every_module_is_in_a_layer():
    for module in import_graph(SRC, "pvegpu"):
        if module != "pvegpu":
            assert layer_of(module) in LAYERS, module


def test_the_layers_import_only_downward():
    upward = set(upward_imports(import_graph(SRC, "pvegpu"))) - ALLOWED_UPWARD
    assert not upward, "imports against the layer order: " + ", ".join(
        f"{a} -> {b}" for a, b in sorted(upward)
    )


@pytest.mark.parametrize(
    "module, target",
    [("pvegpu.plan.unit", "pvegpu.run.run_context"), ("pvegpu.guard", "pvegpu.settings.kinds")],
)
def test_an_upward_import_is_found(module, target):
    assert upward_imports({module: {target}}) == [(module, target)]
