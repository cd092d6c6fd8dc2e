"""The TypedDicts of pvegpu.documents name exactly the keys the probes print (read from each
probe's source: the module-level ``doc = {...}``, with ``**helper()`` entries expanded)."""

from __future__ import annotations

import ast
from importlib import resources

import pytest

from pvegpu import documents


def printed_keys(probe: str) -> set[str]:
    """The keys of the document ``probe`` prints (its module-level ``doc = {...}`` literal)."""
    tree = ast.parse(resources.files("pvegpu.probes").joinpath(f"{probe}.py").read_text())
    helpers = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    (literal,) = [
        n.value
        for n in tree.body
        if isinstance(n, ast.Assign)
        and [ast.unparse(t) for t in n.targets] == ["doc"]
        and isinstance(n.value, ast.Dict)
    ]
    keys = set()
    for key, value in zip(literal.keys, literal.values):
        if key is None:  # **helper(): the keys of the dict the helper returns
            returned = [
                r.value
                for r in ast.walk(helpers[value.func.id])
                if isinstance(r, ast.Return) and isinstance(r.value, ast.Dict)
            ]
            keys |= {k.value for r in returned for k in r.keys}
        else:
            keys.add(key.value)
    return keys


# The parsed views the controller adds to the verification probe's answer (facts.verification).
SHAPED = {"gpus", "gpu_error", "driver"}


@pytest.mark.parametrize(
    "probe, doc, added",
    [
        ("node_state", documents.NodeStateDoc, set()),
        ("ct_state", documents.ContainerStateDoc, set()),
        ("verification", documents.ContainerVerificationDoc, SHAPED),
    ],
)
def test_documents_name_the_keys_the_probes_print(probe, doc, added):
    assert set(doc.__annotations__) == printed_keys(probe) | added
