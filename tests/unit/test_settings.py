import pytest

from pvegpu.settings import Settings, SettingsError, defaults


def make(**over):
    return Settings.from_data({**defaults(), **over})


def test_defaults_are_valid_and_select_cu130():
    s = make()
    assert s.torch_pin == "torch==2.11.0+cu130"
    assert s.torch_index_url == "https://download.pytorch.org/whl/cu130"
    assert s.build_venv == "/root/venvs/torch-2.11.0-cu130"
    assert s.compile_cache_dir == "/data/cache/torch-2.11.0-cu130"


def test_one_variable_swaps_the_variant():
    s = make(torch_variant="cu128")
    assert s.torch_pin == "torch==2.11.0+cu128"
    assert s.torch_index_url.endswith("/cu128")
    assert s.training_value("token_budget") == defaults()["token_budget"]
    assert make().training_value("token_budget") == defaults()["variant_overrides"]["cu130"]["token_budget"]


@pytest.mark.parametrize(
    "over, fragment",
    [
        ({"torch_variant": "cu129"}, "torch_variant='cu129' is not a known variant"),
        ({"torch_version": 2.11}, "torch_version='2.11' is not a full X.Y.Z version"),
        ({"target_gpus": [0, 1, 5], "drafter_gpus": [5, 6]}, "overlap on [5]"),
        ({"drafter_gpus": [5, 6, 8]}, "drafter_gpus has GPU 8, outside 0..7"),
        ({"token_budget": 0, "variant_overrides": {}}, "token_budget=0 (for cu128) must be a positive integer"),
        ({"rebuild": "everything"}, "rebuild='everything' is unknown"),
        ({"training_requirements": ["transformers>=5"]}, "is not an exact pin"),
        ({"training_requirements": ["torch==2.11.0"]}, "pins torch"),
        ({"package_index_url": "pypi"}, "package_index_url='pypi' is not a URL"),
        ({"target_gpus": "0,1"}, "target_gpus='0,1' must be a list of GPU indices"),
        ({"venv_path": "venv"}, "venv_path='venv' must be an absolute path"),
    ],
)
def test_bad_values_fail_with_one_line_naming_value_and_fix(over, fragment):
    with pytest.raises(SettingsError) as e:
        make(**over)
    lines = str(e.value).splitlines()
    assert any(fragment in line for line in lines), lines
    assert all(":" in line for line in lines)


def test_every_problem_is_reported_at_once():
    with pytest.raises(SettingsError) as e:
        make(torch_variant="cu129", torch_version="2.11")
    assert len(str(e.value).splitlines()) == 2


def test_missing_variable_names_the_defaults_file():
    data = defaults()
    del data["venv_path"]
    with pytest.raises(SettingsError, match="venv_path is not set: define it in group_data/all.py"):
        Settings.from_data(data)
