"""bench/hand_mutants.py stays applicable: each mutant's old text is in its file exactly once and
each test it names exists, so a rework of the code it mutates updates the list instead of leaving
a mutant that silently never runs."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# loaded by path: bench/ on sys.path would shadow other top-level names (bench/run.py, ...)
_spec = importlib.util.spec_from_file_location("hand_mutants", ROOT / "bench" / "hand_mutants.py")
hand_mutants = importlib.util.module_from_spec(_spec)
sys.modules["hand_mutants"] = hand_mutants  # dataclasses look their module up while defining
_spec.loader.exec_module(hand_mutants)
MUTANTS = hand_mutants.MUTANTS


@pytest.mark.parametrize("m", MUTANTS, ids=[m.name for m in MUTANTS])
def test_each_hand_mutant_applies_once_and_names_tests_that_exist(m):
    text = (ROOT / m.path).read_text()
    if "__mutmut_" in text:  # under bench/mutation.py: mutmut keeps a copy of each function
        pytest.skip(f"{m.path} is instrumented by mutmut")
    assert text.count(m.old) == 1, f"{m.name}: update its old text to {m.path} as it is now"
    for test in m.tests:
        path, _, name = test.partition("::")
        assert (ROOT / path).is_file(), test
        if name:
            defined = {
                n.name
                for n in ast.walk(ast.parse((ROOT / path).read_text()))
                if isinstance(n, ast.FunctionDef)
            }
            assert name in defined, test


def test_the_names_are_unique():
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)
