"""The data dir is one managed mpN entry: edited when data_dir_node or data_dir_ct changes, never
duplicated beside the old one (issue 11: a second mp1 appeared beside mp0)."""

import pytest

from pvegpu.operations.proxmox import settings_args
from pvegpu.settings import Settings, defaults

BASE = {"cores": "32", "memory": "262144", "swap": "0", "onboot": "1", "protection": "1"}


def args(config, **over):
    return settings_args({**BASE, **config}, Settings.from_data({**defaults(), **over}).container)


@pytest.mark.parametrize(
    "over, want",
    [
        ({}, []),
        ({"data_dir_ct": "/data2"}, ["--mp0", "/tank/dflash,mp=/data2,backup=0"]),
        ({"data_dir_node": "/tank/other"}, ["--mp0", "/tank/other,mp=/data,backup=0"]),
    ],
)
def test_the_data_mount_is_edited_in_place(over, want):
    assert args({"mp0": "/tank/dflash,mp=/data,backup=0"}, **over) == want


def test_a_storage_volume_at_another_key_is_never_taken_over():
    config = {"mp0": "local-lvm:vm-200-disk-1,mp=/data", "mp1": "/tank/dflash,mp=/old,backup=0"}
    assert args(config) == ["--mp1", "/tank/dflash,mp=/data,backup=0"]
    assert args({"mp0": "local-lvm:vm-200-disk-1,mp=/scratch"}) == [
        "--mp1",
        "/tank/dflash,mp=/data,backup=0",
    ]
