"""Settings (pvegpu.settings): behaviours the mutation run (bench/mutation.py, a partial run)
found unpinned: the system-tree test behind data_dir_ct/node paths and load_all's one error."""

import pytest

import pvegpu.plan.unit
from pvegpu.settings import SettingsError, defaults
from pvegpu.settings.placement import in_tree as _in_tree
from pvegpu.startup.all_settings import load_all


@pytest.mark.parametrize(
    "path, inside",
    [
        ("/lib64/x", True),
        ("/lib/modules", True),
        ("/libx32", True),
        ("/usr/share", True),
        ("/lin", False),
        ("/li", False),
        ("/data/lib", False),
        ("/data", False),
    ],
)
def test_a_star_tree_covers_every_sibling_and_what_lies_below(path, inside):
    assert _in_tree(path, ("/usr", "/lib*")) is inside


def test_load_all_lists_every_problem_of_every_host_in_one_error(monkeypatch):
    class Bad:
        name, data = "@pct/127.0.0.1/200", {**defaults(), "torch_version": "latest"}

    class Good:
        name, data = "@pct/127.0.0.1/201", defaults()

    seen = []
    monkeypatch.setattr(
        pvegpu.plan.unit,
        "unit_problems",
        lambda s: seen.append(s.torch.variant) or ["bad unit: fix it"],
    )
    with pytest.raises(SettingsError) as e:
        load_all([Bad(), Good()])
    lines = str(e.value).splitlines()
    assert lines[0] == "bad settings, nothing was changed:"
    assert lines[1].startswith("@pct/127.0.0.1/200: torch_version='latest'")
    assert lines[-1] == "@pct/127.0.0.1/201: bad unit: fix it"
    assert seen == [defaults()["torch_variant"]]  # the bad host's unit is not rendered


def test_load_all_returns_each_hosts_settings(monkeypatch):
    class Good:
        name, data = "@pct/127.0.0.1/200", defaults()

    monkeypatch.setattr(pvegpu.plan.unit, "unit_problems", lambda s: [])
    assert load_all([Good()])["@pct/127.0.0.1/200"].torch.variant == defaults()["torch_variant"]
