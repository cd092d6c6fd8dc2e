"""Settings parts (pvegpu.settings): behaviours the mutation run (bench/mutation.py on
src/pvegpu/settings/) found unpinned, pinned through Settings.from_data, the parts' problems()
and the kinds: every error line word for word, and the edges of each range."""

import pytest

from pvegpu.settings import (
    ContainerSettings,
    GpuSettings,
    PythonEnvSettings,
    RunPolicy,
    Settings,
    SettingsError,
    SiteSettings,
    TorchSettings,
    TrainingSettings,
    VerificationSettings,
    defaults,
)
from pvegpu.settings.kinds import (
    Part,
    flag,
    gpu_list,
    integer,
    mapping,
    optional_text,
    path_shape_problem,
    read_part,
    setting,
    text,
    text_list,
)
from pvegpu.settings.placement import in_tree, placement_problems

FIX = ": fix it in group_data/all.py or --data"


def make(**over):
    return Settings.from_data({**defaults(), **over})


def lines(**over):
    """The error lines of the defaults with ``over``, or [] when they pass."""
    try:
        make(**over)
    except SettingsError as e:
        return str(e).splitlines()
    return []


# --- kinds --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kind, raw",
    [
        (gpu_list, [True]),
        (gpu_list, [1.0]),
        (gpu_list, "01"),
        (gpu_list, None),
        (text_list, [b"x"]),
        (text_list, {"a": 1}),
        (flag, 2),
        (flag, -1),
        (flag, "true"),
        (flag, 1.0),
        (integer, 1.5),
        (integer, None),
        (mapping, "a"),
        (mapping, [("a", 1)]),
        (text, {}),
        (text, []),
    ],
)
def test_each_kind_refuses_what_it_cannot_hold(kind, raw):
    with pytest.raises(ValueError):
        kind("k", raw)


def test_each_kinds_refusal_is_exactly_one_line():
    def refusal(kind, raw):
        with pytest.raises(ValueError) as e:
            kind("gk", raw)
        return str(e.value)

    assert refusal(gpu_list, [1.0]) == (
        "gk=[1.0] must be a list of GPU indices: write it like [0, 1, 2]"
    )
    assert refusal(text_list, [1]) == (
        'gk=[1] must be a list of strings: write it like ["transformers==5.6.0"]'
    )
    assert refusal(flag, 2) == "gk=2 must be a boolean: use true or false"
    assert refusal(integer, "3") == "gk='3' must be an integer: write a whole number"
    assert refusal(mapping, 3) == (
        'gk=3 must be a mapping: write it like {"cu130": {"token_budget": 49152}}'
    )
    assert refusal(text, [1]) == "gk=[1] must be a string: write a plain value"


def test_each_kind_returns_the_type_of_its_field():
    assert flag("k", 1) is True and flag("k", 0) is False and flag("k", False) is False
    assert gpu_list("k", [3, 1]) == (3, 1) and isinstance(gpu_list("k", [3]), tuple)
    assert text_list("k", ("a==1",)) == ("a==1",) and text_list("k", "a==1") == ("a==1",)
    assert integer("k", -3) == -3
    assert text("k", 5) == "5" and text("k", "x") == "x" and text("k", ("a",)) == "('a',)"
    assert optional_text("k", "x") == "x" and optional_text("k", 0) == "0"
    assert mapping("k", {}) == {}


def test_a_setting_carries_its_key_kind_place_and_strictness():
    meta = dict(setting("k", text).metadata)
    assert meta == {"key": "k", "kind": text, "where": None, "strict": False}
    meta = dict(setting("k", integer, where="ct", strict=True).metadata)
    assert meta == {"key": "k", "kind": integer, "where": "ct", "strict": True}


def test_a_part_without_checks_has_no_problems():
    assert Part().problems() == []


def test_read_part_reads_every_field_and_names_each_missing_one():
    values, errors = read_part(RunPolicy, {"restart_training": 1}.get)
    assert values == {"rebuild": None, "restart_training": True}
    assert errors == [
        "deploy_lock_wait_s is not set: define it in group_data/all.py or pass "
        "--data deploy_lock_wait_s=...",
        "progress_interval_s is not set: define it in group_data/all.py or pass "
        "--data progress_interval_s=...",
        "extra_data_keys is not set: define it in group_data/all.py or pass "
        "--data extra_data_keys=...",
        "adopt is not set: define it in group_data/all.py or pass --data adopt=...",
        "destroy_volumes is not set: define it in group_data/all.py or pass "
        "--data destroy_volumes=...",
    ]
    values, errors = read_part(VerificationSettings, {"verify_level": 3}.get)
    assert (values, errors) == ({"level": "3", "report": None}, [])


def test_from_data_reads_attributes_of_an_object_without_get():
    class HostData:
        pass

    data = HostData()
    for key, value in defaults().items():
        setattr(data, key, value)
    data.torch_variant = "cu128"
    assert Settings.from_data(data).torch.variant == "cu128"
    del data.ct_cores
    with pytest.raises(SettingsError) as e:
        Settings.from_data(data)
    assert str(e.value) == (
        "ct_cores is not set: define it in group_data/all.py or pass --data ct_cores=..."
    )


def test_paths_by_where():
    s = make()
    assert s.python_env.paths() == {
        "python_interpreter": "/usr/bin/python3",
        "venv_path": "/root/venv",
        "venvs_dir": "/root/venvs",
        "uv_cache_dir": "/root/.cache/uv",
    }
    assert s.container.paths() == {"data_dir_node": "/tank/dflash", "data_dir_ct": "/data"}
    assert s.container.paths("ct") == {"data_dir_ct": "/data"}
    assert s.container.paths("node") == {"data_dir_node": "/tank/dflash"}
    assert s.gpus.paths("ct") == {} and s.gpus.paths("node") == {"nvidia_installer_dir": "/root"}
    assert s.policy.paths() == {}


def test_items_are_each_field_with_its_value_in_order():
    p = RunPolicy("venv", True, 5, 10)
    assert [(f.name, v) for f, v in p.items()] == [
        ("rebuild", "venv"),
        ("restart_training", True),
        ("lock_wait_s", 5),
        ("progress_interval_s", 10),
        ("extra_keys", ()),
        ("adopt", False),
        ("destroy_volumes", False),
    ]


@pytest.mark.parametrize(
    "over, line",
    [
        (
            {"venvs_dir": "/root/a b/../venvs"},
            "venvs_dir='/root/a b/../venvs' is not normalised: write /root/venvs" + FIX,
        ),
        (
            {"venvs_dir": "/root/a b"},
            "venvs_dir='/root/a b' has a character outside letters, digits and / . _ - + @" + FIX,
        ),
        (
            {"venvs_dir": "venvs"},
            "venvs_dir='venvs' must be an absolute path: start it with /" + FIX,
        ),
        ({"data_dir_node": "/"}, "data_dir_node='/' is the root directory /" + FIX),
        (
            {"training_script": "/data/t\n.py"},
            "training_script='/data/t\\n.py' contains a newline or "
            "control character: remove it" + FIX,
        ),
        (
            {"ct_features": "nesting=1\x7f"},
            "ct_features='nesting=1\\x7f' contains a newline or control character: remove it",
        ),
        (
            {"passthrough_extra_devices": ["nvidia-caps\n"]},
            "passthrough_extra_devices=('nvidia-caps\\n',) contains a newline or control "
            "character: remove it",
        ),
    ],
)
def test_field_problems_word_for_word(over, line):
    assert line in lines(**over)


def test_a_path_problem_comes_before_the_character_rule():
    assert path_shape_problem("/a b/") == "is not normalised: write /a b"
    assert path_shape_problem("a b") == "must be an absolute path: start it with /"
    assert path_shape_problem("/A-z_0.9+@/x") is None


def test_strict_fields_leave_their_characters_to_the_part():
    # training_unit_name is strict: only the part's own rule, no control-character line
    assert lines(training_unit_name="a\nb") == [
        "training_unit_name='a\\nb' is not a valid unit name: use letters, digits, - _ . @ "
        "(not first)"
    ]


def test_integers_and_flags_are_not_searched_for_control_characters():
    p = RunPolicy(None, False, 10, 10)
    assert p.field_problems() == [] and p.problems() == []


# --- placement ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "path, trees, inside",
    [
        ("/usr", ("/usr",), True),
        ("/usr/lib", ("/usr",), True),
        ("/usrx", ("/usr",), False),
        ("/lib", ("/lib*",), True),
        ("/lib64/x/y", ("/lib*",), True),
        ("/data", ("/lib*",), False),
        ("/x/lib", ("/lib*",), False),
        ("/etc", ("/usr", "/etc"), True),
        ("/etc", (), False),
        ("/var/lib/vz/x", ("/lib*", "/var/lib/vz"), True),
    ],
)
def test_in_tree(path, trees, inside):
    assert in_tree(path, trees) is inside


REACH = {"venv_path": "/root/venv", "venvs_dir": "/root/venvs", "uv_cache_dir": "/root/.cache/uv"}


def test_placement_of_the_defaults_is_fine():
    assert placement_problems("/data", "/tank/dflash", REACH) == []


def test_a_system_data_dir_is_one_line_and_is_not_also_an_overlap():
    assert placement_problems("/root", "/tank/dflash", REACH) == [
        "data_dir_ct='/root' is a system directory of the container (the mount would hide it): "
        "use a directory of its own, e.g. /data"
    ]
    assert placement_problems("/lib64/d", "/tank/dflash", REACH)[0].startswith(
        "data_dir_ct='/lib64/d' is a system directory of the container"
    )
    assert len(placement_problems("/var/lib/pvegpu/d", "/tank/dflash", REACH)) == 1


def test_each_reach_path_word_for_word():
    reach = {"venv_path": "/srv", "venvs_dir": "/data/v", "uv_cache_dir": "/root/.cache/uv"}
    assert placement_problems("/data", "/tank/dflash", reach) == [
        "venv_path='/srv' is a system directory: use a directory of its own, e.g. the default "
        "/root/venv",
        "venvs_dir='/data/v' overlaps data_dir_ct='/data' (a rebuild could reach the data): keep "
        "them apart (defaults: venvs_dir=/root/venvs, data_dir_ct=/data)",
    ]
    reach = {"venv_path": "/root/venv", "venvs_dir": "/root/venvs", "uv_cache_dir": "/data"}
    assert placement_problems("/data/x", "/tank/dflash", reach) == [
        "uv_cache_dir='/data' overlaps data_dir_ct='/data/x' (a rebuild could reach the data): "
        "keep them apart (defaults: uv_cache_dir=/root/.cache/uv, data_dir_ct=/data)"
    ]


def test_mutual_overlaps_each_pair_once_and_not_beside_a_system_dir():
    reach = {"venv_path": "/srv/v", "venvs_dir": "/srv/v/b", "uv_cache_dir": "/srv/v/b/c"}
    assert placement_problems("/data", "/tank/dflash", reach) == [
        "venv_path='/srv/v' and venvs_dir='/srv/v/b' overlap (deleting one would reach the "
        "other): keep them apart, e.g. venv_path=/root/venv venvs_dir=/root/venvs",
        "venv_path='/srv/v' and uv_cache_dir='/srv/v/b/c' overlap (deleting one would reach the "
        "other): keep them apart, e.g. venv_path=/root/venv uv_cache_dir=/root/.cache/uv",
        "venvs_dir='/srv/v/b' and uv_cache_dir='/srv/v/b/c' overlap (deleting one would reach the "
        "other): keep them apart, e.g. venvs_dir=/root/venvs uv_cache_dir=/root/.cache/uv",
    ]
    for reach in (
        {"venv_path": "/srv", "venvs_dir": "/srv/v", "uv_cache_dir": "/root/.cache/uv"},
        {"venv_path": "/srv/v", "venvs_dir": "/srv", "uv_cache_dir": "/root/.cache/uv"},
    ):
        assert [
            e for e in placement_problems("/data", "/tank/dflash", reach) if "overlap" in e
        ] == []


@pytest.mark.parametrize(
    "node, bad",
    [
        ("/var/lib/vz", True),
        ("/var/lib/vz/d", True),
        ("/etc/pve", True),
        ("/usr/d", True),
        ("/lib64", True),
        ("/root", True),
        ("/tank/d", False),
        ("/var/lib/vzx", False),
        ("/srv/d", False),
        ("/root/d", False),
    ],
)
def test_data_dir_node(node, bad):
    errs = placement_problems("/data", node, REACH)
    assert errs == (
        [
            f"data_dir_node={node!r} is a system directory of the node (it would be bind-mounted "
            "into the container): use a data directory, e.g. /tank/dflash"
        ]
        if bad
        else []
    )


def test_settings_place_each_reach_path_by_its_own_key():
    assert lines(venv_path="/data/venv") == [
        "venv_path='/data/venv' overlaps data_dir_ct='/data' (a rebuild could reach the data): "
        "keep them apart (defaults: venv_path=/root/venv, data_dir_ct=/data)"
    ]
    assert lines(uv_cache_dir="/data/uv") == [
        "uv_cache_dir='/data/uv' overlaps data_dir_ct='/data' (a rebuild could reach the data): "
        "keep them apart (defaults: uv_cache_dir=/root/.cache/uv, data_dir_ct=/data)"
    ]
    assert lines(data_dir_node="/etc") == [
        "data_dir_node='/etc' is a system directory of the node (it would be bind-mounted into "
        "the container): use a data directory, e.g. /tank/dflash"
    ]


def test_part_problems_come_before_placement_problems():
    assert lines(verify_level="x", venvs_dir="/data/v") == [
        "verify_level='x' is unknown: use basic or compile",
        "venvs_dir='/data/v' overlaps data_dir_ct='/data' (a rebuild could reach the data): "
        "keep them apart (defaults: venvs_dir=/root/venvs, data_dir_ct=/data)",
    ]


def test_a_malformed_path_of_any_part_skips_placement():
    for over in ({"nvidia_installer_dir": "x"}, {"data_dir_node": "x"}, {"checkpoint_dir": "x"}):
        errs = lines(venvs_dir="/data/v", **over)
        assert len(errs) == 1 and "must be an absolute path" in errs[0], errs


# --- Settings (joins, copies, defaults) ---------------------------------------------------------
def test_joined_values_strip_a_trailing_slash():
    s = make().changed(data_dir_ct="/mnt/d/", venvs_dir="/v/", torch_variant="cu128")
    assert s.compile_cache_dir == "/mnt/d/cache/torch-2.11.0-cu128"
    assert s.build_venv == "/v/torch-2.11.0-cu128"
    assert s.training_value("max_batch_size") == 64
    assert make().training_value("max_batch_size") == 48


def test_parts_are_each_part_in_order():
    s = make()
    assert [type(p) for p in s.parts()] == [
        TorchSettings,
        PythonEnvSettings,
        GpuSettings,
        ContainerSettings,
        RunPolicy,
        VerificationSettings,
        TrainingSettings,
        SiteSettings,
    ]


def test_defaults_read_a_project_dirs_group_data(tmp_path):
    (tmp_path / "group_data").mkdir()
    (tmp_path / "group_data" / "all.py").write_text("_hidden = 1\nct_cores = 3\n")
    assert defaults(tmp_path) == {"ct_cores": 3}
    assert defaults(str(tmp_path)) == {"ct_cores": 3}
    assert "_installed_version" not in defaults() and defaults()["ct_cores"] == 32


# --- torch --------------------------------------------------------------------------------------
def test_torch_lines_word_for_word():
    assert lines(
        torch_variant="cu129",
        torch_version="2.11",
        torch_index_base="ftp://x",
        training_requirements=["a>=1", "Torch==2.11.0", "torch[opt]==2"],
        locks_dir=" ",
    ) == [
        "torch_variant='cu129' is not a known variant: set torch_variant to one of cu128, cu130",
        "torch_version='2.11' is not a full X.Y.Z version: set torch_version=2.11.0 (the install "
        "pins torch==<version>+<variant> exactly)",
        "torch_index_base='ftp://x' is not a URL: set it to an http(s) index, e.g. a local mirror",
        "training_requirements entry 'a>=1' is not an exact pin: write it as name==version",
        "training_requirements entry 'Torch==2.11.0' pins torch: remove it, torch comes from "
        "torch_version and torch_variant",
        "training_requirements entry 'torch[opt]==2' pins torch: remove it, torch comes from "
        "torch_version and torch_variant",
        "locks_dir is empty: set it to the directory of <variant>.in/.lock (default locks)",
    ]


@pytest.mark.parametrize(
    "over",
    [
        {"torch_version": "2.11.0.1"},
        {"torch_version": "v2.11.0"},
        {"torch_version": "2.11.x"},
        {"torch_index_base": "https://"},
        {"package_index_url": "https://a b"},
        {"package_index_url": "xhttps://a"},
        {"training_requirements": ["a==1 "]},
        {"training_requirements": ["a[b]==1", "-a==1"]},
        {"locks_dir": ""},
    ],
)
def test_torch_refuses(over):
    assert len(lines(**over)) == 1


@pytest.mark.parametrize(
    "over",
    [
        {"torch_index_base": "http://127.0.0.1:8/whl/"},
        {"package_index_url": "file:///srv/simple"},
        {"training_requirements": ["torchvision==0.26.0", "transformers[torch]==5.6.0"]},
        {"training_requirements": "a==1"},
        {"torch_version": "10.0.12"},
    ],
)
def test_torch_accepts(over):
    assert lines(**over) == []


def test_torch_values():
    t = make(torch_index_base="https://mirror/whl/", torch_variant="cu128").torch
    assert t.index_url == "https://mirror/whl/cu128"
    assert t.spec.name == "cu128" and t.build_name == "torch-2.11.0-cu128"


# --- python env ---------------------------------------------------------------------------------
def test_python_env_lines_word_for_word():
    assert lines(python_version="3.1x", uv_version="0.9", keep_venvs=0) == [
        "python_version='3.1x' is not a Python version: write it as X.Y (e.g. 3.11, what the "
        "container's python_interpreter is), or leave it unset to follow the container's Python",
        "uv_version='0.9' is not X.Y.Z: leave it to group_data (the locked uv)",
        "keep_venvs=0 must be >= 1: the selected build is always kept",
    ]


@pytest.mark.parametrize(
    "version, ok",
    [
        ("3.11", True),
        ("3.9", True),
        ("none", True),
        ("2.7", False),
        ("3", False),
        ("3.11.2", False),
        ("x3.11", False),
        ("3.", False),
    ],
)
def test_python_version(version, ok):
    assert (lines(python_version=version) == []) is ok


def test_keep_venvs_one_is_enough_and_an_unset_uv_version_is_one_line():
    assert lines(keep_venvs=1) == []
    env = make().python_env
    part = PythonEnvSettings(None, *[v for f, v in env.items()][1:])
    assert part.problems() == [
        "uv_version=None is not X.Y.Z: leave it to group_data (the locked uv)"
    ]


# --- GPUs ---------------------------------------------------------------------------------------
def test_gpu_lines_word_for_word():
    assert lines(
        expected_gpu_count=0,
        target_gpus=[],
        drafter_gpus=[-1, -1],
        passthrough_extra_devices=["nvidia-uvm"],
        passthrough_mode="auto ",
    ) == [
        "expected_gpu_count=0 must be >= 1: set the number of GPUs on the node",
        "drafter_gpus has GPU -1, outside 0..-1 (expected_gpu_count=0): fix the index or the count",
        "drafter_gpus has GPU -1, outside 0..-1 (expected_gpu_count=0): fix the index or the count",
        "drafter_gpus=[-1, -1] lists a GPU twice: list each once",
        "passthrough_extra_devices entry 'nvidia-uvm' is unknown: use nvidia-modeset or "
        "nvidia-caps",
        "passthrough_mode='auto ' is unknown: use auto, dev or lxc",
        "target_gpus is empty, but training_command uses {target_gpus}: list its GPU indices, "
        "e.g. --data target_gpus=[0,1], or take {target_gpus} out of training_command",
    ]


@pytest.mark.parametrize(
    "over, ok",
    [
        ({"expected_gpu_count": 1, "target_gpus": [0], "drafter_gpus": [0]}, False),
        ({"expected_gpu_count": 2, "target_gpus": [0], "drafter_gpus": [1]}, True),
        ({"expected_gpu_count": 2, "target_gpus": [0], "drafter_gpus": [2]}, False),
        ({"target_gpus": [0, 0], "drafter_gpus": [7]}, False),
        ({"target_gpus": [0], "drafter_gpus": []}, False),
        ({"passthrough_extra_devices": ["nvidia-modeset", "nvidia-caps"]}, True),
        ({"passthrough_mode": "dev"}, True),
        ({"passthrough_mode": "lxc"}, True),
    ],
)
def test_gpu_edges(over, ok):
    assert (lines(**over) == []) is ok


def test_an_overlap_is_one_sorted_line():
    assert lines(target_gpus=[3, 2, 1], drafter_gpus=[1, 3]) == [
        "target_gpus and drafter_gpus overlap on [1, 3]: a GPU is either a target or a drafter"
    ]
    assert lines(target_gpus=[0, 9], drafter_gpus=[1])[0] == (
        "target_gpus has GPU 9, outside 0..7 (expected_gpu_count=8): fix the index or the count"
    )


# --- container ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, ok",
    [
        (".".join(["a" * 63] * 3 + ["a" * 61]), True),  # 253 characters
        (".".join(["a" * 63] * 3 + ["a" * 62]), False),  # 254
        ("a" * 63, True),
        ("a-b", True),
        ("a-", False),
        ("a..b", False),
        ("a_b", False),
        ("9", True),
    ],
)
def test_host_name_lengths_and_labels(name, ok):
    assert (lines(ct_hostname=name) == []) is ok


def test_container_lines_word_for_word():
    assert lines(ct_hostname="a_b", ct_cores=8193, ct_memory_mib=15, ct_swap_mib=-1) == [
        "ct_hostname='a_b' is not a valid host name (RFC 1123: letters, digits and inner '-', "
        "dot-separated labels): e.g. dflash-train",
        "ct_cores=8193 is outside pct's range 1..8192: set a value in range",
        "ct_memory_mib=15 is outside pct's range >= 16: set a value in range",
        "ct_swap_mib=-1 is outside pct's range >= 0: set a value in range",
    ]
    assert lines(ct_cores=1, ct_memory_mib=10**9, ct_swap_mib=10**9) == []


# --- policy, verification -----------------------------------------------------------------------
@pytest.mark.parametrize("wait, ok", [(0, True), (86400, True), (-1, False), (86401, False)])
def test_lock_wait_range(wait, ok):
    expected = (
        []
        if ok
        else [
            f"deploy_lock_wait_s={wait} must be 0..86400: the seconds a deploy waits for another "
            "one on the same node"
        ]
    )
    assert lines(deploy_lock_wait_s=wait) == expected


@pytest.mark.parametrize("every, ok", [(1, True), (3600, True), (0, False), (3601, False)])
def test_progress_interval_range(every, ok):
    expected = (
        []
        if ok
        else [
            f"progress_interval_s={every} must be 1..3600: the seconds between two progress "
            "lines of a long step (default 10)"
        ]
    )
    assert lines(progress_interval_s=every) == expected


def test_policy_and_verification_lines_word_for_word():
    assert lines(rebuild="all", verify_level="full") == [
        "rebuild='all' is unknown: use rebuild=venv or rebuild=container (or leave it unset)",
        "verify_level='full' is unknown: use basic or compile",
    ]
    assert lines(rebuild="container", verify_level="compile") == []
    assert lines(rebuild="none") == []


# --- training -----------------------------------------------------------------------------------
def test_training_lines_word_for_word():
    assert lines(
        training_unit_name="a b",
        pytorch_cuda_alloc_conf="a=b",
        variant_overrides={"cu129": {"token_budget": 1, "lr": 2}},
        training_stop_timeout_s=0,
        training_restart_delay_s=-1,
        training_restart_burst=0,
    ) == [
        "training_unit_name='a b' is not a valid unit name: use letters, digits, - _ . @ "
        "(not first)",
        "pytorch_cuda_alloc_conf='a=b' has characters outside letters, digits and _ . : , [ ]: "
        "write it like expandable_segments:True",
        "variant_overrides has unknown variant 'cu129': use one of cu128, cu130",
        "variant_overrides['cu129'] has unknown key 'lr': only token_budget, max_batch_size can "
        "differ per variant",
        "training_stop_timeout_s=0 must be positive: fix it in group_data/all.py or --data",
        "training_restart_delay_s=-1 must be positive: fix it in group_data/all.py or --data",
        "training_restart_burst=0 must be positive: fix it in group_data/all.py or --data",
    ]


@pytest.mark.parametrize(
    "overrides, bad",
    [
        ({"cu130": {"token_budget": True}}, ["token_budget=True (for cu130)"]),
        ({"cu130": {"token_budget": "8"}}, ["token_budget='8' (for cu130)"]),
        ({"cu130": {"max_batch_size": 0}}, ["max_batch_size=0 (for cu130)"]),
        ({"cu128": {"max_batch_size": 1.5}}, ["max_batch_size=1.5 (for cu128)"]),
        ({"cu130": {"token_budget": 1, "max_batch_size": 1}}, []),
    ],
)
def test_overrides_must_be_positive_integers(overrides, bad):
    assert lines(variant_overrides=overrides) == [
        f"{b} must be a positive integer: fix it in group_data/all.py or --data" for b in bad
    ]


def test_a_bad_default_is_named_for_each_variant_it_reaches():
    assert lines(max_batch_size=0, variant_overrides={"cu130": {"max_batch_size": 1}}) == [
        "max_batch_size=0 (for cu128) must be a positive integer: fix it in group_data/all.py "
        "or --data"
    ]
    assert lines(token_budget=-1) == [
        "token_budget=-1 (for cu128) must be a positive integer: fix it in group_data/all.py "
        "or --data"
    ]


@pytest.mark.parametrize(
    "name, ok",
    [
        ("_a", True),
        ("a@b.c-d_e", True),
        ("a" * 200, True),
        ("a" * 201, False),
        ("@a", False),
        (".a", False),
        ("a/b", False),
    ],
)
def test_unit_name(name, ok):
    assert (lines(training_unit_name=name) == []) is ok


def test_positive_edges_and_override_value():
    assert (
        lines(training_stop_timeout_s=1, training_restart_delay_s=1, training_restart_burst=1) == []
    )
    t = make().training
    assert t.value("token_budget", "cu130") == 49152
    assert t.value("token_budget", "cu128") == 65536
    assert t.value("max_batch_size", "cu999") == 64


def test_an_unknown_variants_override_is_checked_too_in_variant_order():
    assert lines(
        variant_overrides={"cu129": {"max_batch_size": 0}, "cu128": {"token_budget": 0}}
    ) == [
        "token_budget=0 (for cu128) must be a positive integer: fix it in group_data/all.py "
        "or --data",
        "max_batch_size=0 (for cu129) must be a positive integer: fix it in group_data/all.py "
        "or --data",
        "variant_overrides has unknown variant 'cu129': use one of cu128, cu130",
    ]


def test_joined_values_keep_a_last_letter_that_is_not_a_slash():
    s = make(
        venvs_dir="/srv/venvsX",
        data_dir_ct="/dataX",
        training_script="/dataX/t.py",
        training_workdir="/dataX",
        dataset_dir="/dataX/d",
        checkpoint_dir="/dataX/c",
    )
    assert s.build_venv == "/srv/venvsX/torch-2.11.0-cu130"
    assert s.compile_cache_dir == "/dataX/cache/torch-2.11.0-cu130"
    assert make(torch_index_base="https://m/whlX").torch.index_url == "https://m/whlX/cu130"


def test_one_gpu_is_a_count_the_node_may_have():
    # one GPU cannot be both a target and a drafter, but the count itself is fine
    assert lines(expected_gpu_count=1, target_gpus=[0], drafter_gpus=[0]) == [
        "target_gpus and drafter_gpus overlap on [0]: a GPU is either a target or a drafter"
    ]
