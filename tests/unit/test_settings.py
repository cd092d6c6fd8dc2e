import pytest

from pvegpu.settings import Settings, SettingsError, defaults


def make(**over):
    return Settings.from_data({**defaults(), **over})


def test_defaults_are_valid_and_select_cu130():
    s = make()
    assert s.torch.pin == "torch==2.11.0+cu130"
    assert s.torch.index_url == "https://download.pytorch.org/whl/cu130"
    assert s.build_venv == "/root/venvs/torch-2.11.0-cu130"
    assert s.compile_cache_dir == "/data/cache/torch-2.11.0-cu130"


def test_one_variable_swaps_the_variant():
    s = make(torch_variant="cu128")
    assert s.torch.pin == "torch==2.11.0+cu128"
    assert s.torch.index_url.endswith("/cu128")
    assert s.training_value("token_budget") == defaults()["token_budget"]
    assert (
        make().training_value("token_budget")
        == defaults()["variant_overrides"]["cu130"]["token_budget"]
    )


@pytest.mark.parametrize(
    "over, fragment",
    [
        ({"torch_variant": "cu129"}, "torch_variant='cu129' is not a known variant"),
        ({"torch_version": 2.11}, "torch_version='2.11' is not a full X.Y.Z version"),
        ({"target_gpus": [0, 1, 5], "drafter_gpus": [5, 6]}, "overlap on [5]"),
        ({"drafter_gpus": [5, 6, 8]}, "drafter_gpus has GPU 8, outside 0..7"),
        (
            {"token_budget": 0, "variant_overrides": {}},
            "token_budget=0 (for cu128) must be a positive integer",
        ),
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


@pytest.mark.parametrize(
    "over, line",
    [
        ({"venvs_dir": "/data"}, "venvs_dir='/data' overlaps data_dir_ct='/data'"),
        ({"venvs_dir": "/data/venvs"}, "venvs_dir='/data/venvs' overlaps data_dir_ct='/data'"),
        (
            {"uv_cache_dir": "/data/.cache/uv"},
            "uv_cache_dir='/data/.cache/uv' overlaps data_dir_ct",
        ),
        (
            {"data_dir_ct": "/root/venvs"},
            "venvs_dir='/root/venvs' overlaps data_dir_ct='/root/venvs'",
        ),
        ({"venv_path": "/root"}, "venv_path='/root' is a system directory"),
        ({"venvs_dir": "/usr"}, "venvs_dir='/usr' is a system directory"),
        ({"uv_cache_dir": "/etc"}, "uv_cache_dir='/etc' is a system directory"),
        # inside a system tree: the switch would move /usr/bin or /etc/ssh aside (issue 11 item 1)
        ({"venv_path": "/usr/bin"}, "venv_path='/usr/bin' is a system directory"),
        ({"venv_path": "/etc/ssh"}, "venv_path='/etc/ssh' is a system directory"),
        ({"venvs_dir": "/usr/local/venvs"}, "venvs_dir='/usr/local/venvs' is a system directory"),
        ({"uv_cache_dir": "/lib64/uv"}, "uv_cache_dir='/lib64/uv' is a system directory"),
        ({"venvs_dir": "/"}, "venvs_dir='/' is the root directory"),
        (
            {"venv_path": "/root/venvs/live"},
            "venv_path='/root/venvs/live' and venvs_dir='/root/venvs' overlap",
        ),
        (
            {"uv_cache_dir": "/root/venvs/cache"},
            "venvs_dir='/root/venvs' and uv_cache_dir='/root/venvs/cache' overlap",
        ),
        (
            {"venvs_dir": "/root/venvs/"},
            "venvs_dir='/root/venvs/' is not normalised: write /root/venvs",
        ),
        ({"venvs_dir": "/root/x/../venvs"}, "is not normalised: write /root/venvs"),
        ({"venvs_dir": "//root/venvs"}, "is not normalised: write /root/venvs"),
        ({"data_dir_ct": "/root"}, "data_dir_ct='/root' is a system directory of the container"),
        (
            {"data_dir_ct": "/usr/local"},
            "data_dir_ct='/usr/local' is a system directory of the container",
        ),
        ({"data_dir_ct": "/opt/pvegpu/d"}, "data_dir_ct='/opt/pvegpu/d' is a system directory"),
        ({"data_dir_ct": "/data,ro=1"}, "data_dir_ct='/data,ro=1' contains ','"),
        ({"data_dir_ct": "/data=x"}, "data_dir_ct='/data=x' has a character outside"),
        ({"data_dir_node": "/etc"}, "data_dir_node='/etc' is a system directory of the node"),
        ({"data_dir_node": "/"}, "data_dir_node='/' is the root directory"),
        ({"data_dir_node": "/etc/pve/data"}, "data_dir_node='/etc/pve/data' is a system directory"),
        ({"data_dir_node": "/var/lib/vz"}, "data_dir_node='/var/lib/vz' is a system directory"),
        ({"data_dir_node": "/lib64"}, "data_dir_node='/lib64' is a system directory"),
        ({"data_dir_node": "/root"}, "data_dir_node='/root' is a system directory"),
        ({"data_dir_node": "/tank/dflash,ro=1"}, "data_dir_node='/tank/dflash,ro=1' contains ','"),
        ({"data_dir_node": "/tank/d\nx"}, "data_dir_node='/tank/d\\nx' contains a newline"),
        ({"ct_hostname": "x;id $(id)"}, "ct_hostname='x;id $(id)' is not a valid host name"),
        ({"ct_hostname": "-x"}, "ct_hostname='-x' is not a valid host name"),
        ({"ct_hostname": "a" * 64}, "is not a valid host name"),
        ({"ct_memory_mib": 1}, "ct_memory_mib=1 is outside pct's range >= 16"),
        ({"ct_swap_mib": -1}, "ct_swap_mib=-1 is outside pct's range >= 0"),
        ({"ct_cores": 0}, "ct_cores=0 is outside pct's range 1..8192"),
        ({"ct_cores": 8193}, "ct_cores=8193 is outside pct's range 1..8192"),
        ({"ct_net0": "name=eth0\nlxc.x=1"}, "ct_net0='name=eth0\\nlxc.x=1' contains a newline"),
        ({"training_unit_name": "-x"}, "training_unit_name='-x' is not a valid unit name"),
    ],
)
def test_container_and_path_rules(over, line):
    with pytest.raises(SettingsError) as e:
        make(**over)
    lines = str(e.value).splitlines()
    assert len(lines) == 1 and line in lines[0], lines


@pytest.mark.parametrize(
    "over",
    [
        {"ct_memory_mib": 16, "ct_swap_mib": 0, "ct_cores": 8192},
        {"ct_hostname": "gpu-01.lab.example"},
        {"data_dir_node": "/root/data", "nvidia_installer_dir": "/root"},
        {
            "data_dir_ct": "/mnt/data",
            "training_script": "/mnt/data/t.py",
            "training_workdir": "/mnt/data",
        },
        {"venvs_dir": "/srv/venvs", "venv_path": "/srv/venv", "uv_cache_dir": "/srv/uv-cache"},
        {
            "pytorch_cuda_alloc_conf": "expandable_segments:True,"
            "roundup_power2_divisions:[256:1,512:2]"
        },
    ],
)
def test_reasonable_values_pass(over):
    make(**over)
