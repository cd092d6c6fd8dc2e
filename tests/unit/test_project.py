"""Project-level consistency: docs, pins and defaults stay in step."""

import doctest
import importlib
import pkgutil
import re
from importlib.metadata import version
from pathlib import Path

import pytest

import pvegpu
from pvegpu.settings import data_keys, defaults

ROOT = Path(__file__).resolve().parents[2]


def test_every_variable_is_documented_in_the_variables_table():
    table = (ROOT / "docs" / "variables.md").read_text()
    missing = [k for k in defaults() if f"| `{k}` |" not in table]
    assert not missing


def test_every_variable_is_a_settings_field():
    fields = set(data_keys())
    assert set(defaults()) == fields


def test_ci_installs_the_locked_uv():
    pin = re.search(r"UV_VERSION=(\S+)", (ROOT / ".ci/setup").read_text()).group(1)
    assert pin == version("uv") == defaults()["uv_version"]


def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci/run").read_text().strip().splitlines()[-1]
    assert f"```sh\n{ci}\n```" in readme


MODULES = [
    m.name for m in pkgutil.walk_packages(pvegpu.__path__, "pvegpu.") if ".probes." not in m.name
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0


def test_no_two_test_files_share_a_basename():
    """pytest imports test files by basename under the rootdir (no packages): two files of the
    same name in tests/unit and tests/e2e stop the whole run at collection."""
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []
