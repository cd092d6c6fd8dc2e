"""The settings parts (pvegpu.settings): coercion by field metadata, one line per bad value,
the parts callers reach, and the run context's one fact-cache rule."""

import pytest

from pvegpu.run.node_read import Request, covers
from pvegpu.run.run_context import FactCache, run_context
from pvegpu.settings import Settings, SettingsError, data_keys, defaults
from pvegpu.settings.kinds import (
    flag,
    gpu_list,
    integer,
    mapping,
    optional_text,
    path_shape_problem,
    text,
    text_list,
)


def make(**over):
    return Settings.from_data({**defaults(), **over})


@pytest.mark.parametrize(
    "kind, raw, value",
    [
        (gpu_list, [0, 1], (0, 1)),
        (gpu_list, (2,), (2,)),
        (gpu_list, [], ()),
        (text_list, "a==1", ("a==1",)),
        (text_list, ["a==1", "b==2"], ("a==1", "b==2")),
        (flag, True, True),
        (flag, 0, False),
        (flag, 1, True),
        (integer, 7, 7),
        (integer, 0, 0),
        (mapping, {"cu130": {}}, {"cu130": {}}),
        (optional_text, "", None),
        (optional_text, "none", None),
        (optional_text, "None", None),
        (optional_text, "null", None),
        (optional_text, "venv", "venv"),
        (optional_text, 5, "5"),
        (text, "x", "x"),
        (text, 2.5, "2.5"),
    ],
)
def test_each_kind_coerces_what_data_can_hold(kind, raw, value):
    assert kind("k", raw) == value


@pytest.mark.parametrize(
    "kind, raw, line",
    [
        (gpu_list, "0,1", "k='0,1' must be a list of GPU indices: write it like [0, 1, 2]"),
        (gpu_list, [0, True], "k=[0, True] must be a list of GPU indices: write it like [0, 1, 2]"),
        (gpu_list, [0, "1"], "k=[0, '1'] must be a list of GPU indices"),
        (text_list, [1], 'k=[1] must be a list of strings: write it like ["transformers==5.6.0"]'),
        (text_list, 3, "k=3 must be a list of strings"),
        (flag, 2, "k=2 must be a boolean: use true or false"),
        (flag, "yes", "k='yes' must be a boolean: use true or false"),
        (integer, True, "k=True must be an integer: write a whole number"),
        (integer, "3", "k='3' must be an integer: write a whole number"),
        (integer, 2.0, "k=2.0 must be an integer"),
        (mapping, [1], 'k=[1] must be a mapping: write it like {"cu130": {"token_budget": 49152}}'),
        (text, {"a": 1}, "k={'a': 1} must be a string: write a plain value"),
        (text, [1], "k=[1] must be a string: write a plain value"),
    ],
)
def test_each_kind_refuses_with_one_line_naming_key_value_and_fix(kind, raw, line):
    with pytest.raises(ValueError) as e:
        kind("k", raw)
    assert str(e.value).startswith(line)


def test_a_missing_optional_setting_is_none_and_a_missing_other_one_is_named():
    data = defaults()
    del data["ct_template"], data["ct_cores"]
    with pytest.raises(SettingsError) as e:
        Settings.from_data(data)
    assert str(e.value) == (
        "ct_cores is not set: define it in group_data/all.py or pass --data ct_cores=..."
    )
    data["ct_cores"] = 4
    assert Settings.from_data(data).container.template is None


def test_type_errors_of_every_part_come_together_before_any_cross_check():
    with pytest.raises(SettingsError) as e:
        make(torch_variant="cu129", keep_venvs="2", ct_cores="x", verify_report=None)
    assert str(e.value).splitlines() == [
        "keep_venvs='2' must be an integer: write a whole number",
        "ct_cores='x' must be an integer: write a whole number",
    ]


def test_callers_reach_the_parts():
    s = make(torch_variant="cu128", rebuild="venv", verify_level="compile")
    assert (s.torch.variant, s.torch.spec.cuda, s.torch.pin) == (
        "cu128",
        "12.8",
        "torch==2.11.0+cu128",
    )
    assert s.python_env.interpreter == "/usr/bin/python3" and s.python_env.version is None
    assert s.gpus.training == (0, 1, 2, 3, 4, 5, 6, 7) and s.gpus.expected_count == 8
    assert s.container.data_dir_ct == "/data" and s.container.protection is True
    assert (s.policy.rebuild, s.policy.restart_training, s.policy.lock_wait_s) == (
        "venv",
        False,
        600,
    )
    assert (s.verification.level, s.verification.report) == ("compile", None)
    assert s.training.unit_name == "dflash-train" and s.training_value("max_batch_size") == 64
    assert s.build_venv == "/root/venvs/torch-2.11.0-cu128"


def test_every_data_key_has_one_value_and_changed_replaces_by_key():
    s = make()
    assert data_keys() == list(defaults())  # group_data/all.py's order
    assert {k: s.value(k) for k in ("ct_cores", "verify_level")} == {
        "ct_cores": 32,
        "verify_level": "basic",
    }
    t = s.changed(keep_venvs=1, torch_variant="cu128")
    assert (t.python_env.keep_venvs, t.torch.variant) == (1, "cu128")
    assert (s.python_env.keep_venvs, s.torch.variant) == (2, "cu130")  # frozen: a copy
    with pytest.raises(KeyError):
        s.value("no_such_setting")


@pytest.mark.parametrize(
    "path, problem",
    [
        ("/data", None),
        ("/", "is the root directory /"),
        ("/a b", "has a character outside letters, digits and / . _ - + @"),
        ("/a$b", "has a character outside letters, digits and / . _ - + @"),
    ],
)
def test_path_shape(path, problem):
    assert path_shape_problem(path) == problem


def test_a_control_character_in_free_text_is_one_line_naming_the_coerced_value():
    with pytest.raises(SettingsError) as e:
        make(ct_rootfs="local\tx", training_requirements=["a==1\n"])
    assert str(e.value).splitlines() == [
        "training_requirements=('a==1\\n',) contains a newline or control character: remove it",
        "ct_rootfs='local\\tx' contains a newline or control character: remove it",
    ]


def test_placement_is_skipped_while_a_path_is_malformed():
    with pytest.raises(SettingsError) as e:
        make(venvs_dir="/data", training_script="rel.py")
    assert str(e.value).splitlines() == [
        "training_script='rel.py' must be an absolute path: start it with /: fix it in "
        "group_data/all.py or --data"
    ]


def test_the_fact_cache_serves_while_the_point_holds_and_the_request_fits():
    cache, reads = FactCache(), []

    def read():
        reads.append(1)
        return {"n": len(reads)}

    assert cache.get("k", 0, read, "wide")["n"] == 1
    assert cache.get("k", 0, read, "x", lambda have: have == "wide")["n"] == 1
    assert cache.get("k", 0, read, "x", lambda have: False)["n"] == 2  # does not fit: read
    assert cache.get("k", 1, read)["n"] == 3  # another operation ran: read
    assert cache.get("empty", 1, dict) == {} and "empty" not in cache.entries


def test_remember_outside_execution_drops_the_document():
    cache = FactCache()
    cache.get("k", 0, lambda: {"a": 1})
    cache.remember("k", 0, False, lambda doc: doc.update(a=2))
    assert "k" not in cache.entries
    cache.remember("missing", 0, True, lambda doc: doc.update(a=2))  # nothing to update
    assert cache.entries == {}


def test_one_context_per_run():
    class State:
        pass

    a, b = State(), State()
    assert run_context(a) is run_context(a) and run_context(a) is not run_context(b)
    run_context(a).mode = "verify"
    assert run_context(b).mode == "deploy"


@pytest.mark.parametrize(
    "have, want, fits",
    [
        (Request((200, 201), "full", {"a": 1}), Request((200,), "status", {"a": 1}), True),
        (Request((200,), "status", {"a": 1}), Request((200,), "full", {"a": 1}), False),
        (Request((200,), "full", {"a": 1}), Request((200,), "full", {"a": 2}), False),
        (Request((200,), "none", {}), Request((), "none", None), True),
        (Request((200,), "full", {}, ("/a", "/b")), Request((200,), "full", {}, ("/b",)), True),
    ],
)
def test_a_node_read_covers_what_it_holds(have, want, fits):
    assert covers(have, want) is fits
