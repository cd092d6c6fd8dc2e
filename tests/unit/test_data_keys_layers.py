"""Issue 35 (mutmut on startup/data_keys.py): the data layers a key is read from.

Each "off" value of a one-run key outside --data passes, any other value is refused once however
many hosts share it; an unknown key in two layers is named once, from the highest; the keys of
a host's own connector are known; ``extra_data_keys`` in every form the data may hold.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pyinfra.api import Inventory

from pvegpu.settings import SettingsError, defaults
from pvegpu.startup.all_settings import load_all
from pvegpu.startup.data_keys import one_run_lines, own_keys, unknown_keys

OFF = [None, False, "", "false", "False", "0", 0]


def inventory(override=None, pve_hosts=None, all_data=None, names=("n1",)):
    return Inventory(
        (list(names), {**defaults(), **(all_data or {})}),
        override_data=override or {},
        pve_hosts=([(n, {}) for n in names], pve_hosts or {}),
    )


@pytest.mark.parametrize("off", OFF)
def test_every_off_value_of_a_one_run_key_passes_outside_data(off):
    keys = ("rebuild", "restart_training", "adopt", "destroy_volumes")
    inv = inventory(pve_hosts=dict.fromkeys(keys, off), all_data=dict.fromkeys(keys, off))
    assert one_run_lines(list(inv)) == []


@pytest.mark.parametrize("value", ["FALSE", "no", "1", 1, True, "off", "XXXX"])
def test_any_other_value_of_a_one_run_key_outside_data_is_refused(value):
    inv = inventory(pve_hosts={"adopt": value})
    assert one_run_lines(list(inv)) == [
        f"adopt={value} (group_data/pve_hosts.py): a one-run decision, taken from --data only; "
        f"remove it there and pass --data adopt={value} to the run that needs it"
    ]


def test_a_one_run_key_shared_by_many_hosts_is_one_line_per_layer():
    inv = inventory(pve_hosts={"rebuild": "container"}, names=("n1", "n2", "n3"))
    assert one_run_lines(list(inv)) == [
        "rebuild=container (group_data/pve_hosts.py): a one-run decision, taken from --data "
        "only; remove it there and pass --data rebuild=container to the run that needs it"
    ]


def test_a_one_run_key_in_any_hosts_own_data_is_refused_not_only_the_first_hosts():
    """The fleet file's entry of the second node holds ``rebuild: container``: left there, it
    would destroy that node's container on every deploy."""
    inv = Inventory(
        (["n1", "n2"], defaults()),
        pve_hosts=([("n1", {}), ("n2", {"rebuild": "container"})], {}),
    )
    assert one_run_lines(list(inv)) == [
        "rebuild=container (the fleet file or inventory): a one-run decision, taken from --data "
        "only; remove it there and pass --data rebuild=container to the run that needs it"
    ]
    with pytest.raises(SettingsError, match=r"rebuild=container \(the fleet file"):
        load_all(list(inv))


def test_an_unknown_key_in_two_layers_is_named_once_from_the_highest():
    inv = inventory(override={"zzkey": 1}, pve_hosts={"zzkey": 2}, all_data={"zzkey": 3})
    assert unknown_keys(next(iter(inv))) == [("zzkey", "--data")]
    inv = inventory(pve_hosts={"zzkey": 2, "zzother": 1}, all_data={"zzkey": 3})
    assert unknown_keys(next(iter(inv))) == [
        ("zzkey", "group_data/pve_hosts.py"),
        ("zzother", "group_data/pve_hosts.py"),
    ]


class _ConnectorData:
    zz_special: str


class _Connector:
    data_cls = _ConnectorData


def test_the_keys_of_the_hosts_own_connector_are_known():
    host = SimpleNamespace(data={"zz_special": "x", "zz_typo": 1}, connector_cls=_Connector)
    assert unknown_keys(host) == [("zz_typo", None)]
    host.connector_cls = None
    assert unknown_keys(host) == [("zz_special", None), ("zz_typo", None)]
    del host.connector_cls
    assert unknown_keys(host) == [("zz_special", None), ("zz_typo", None)]


@pytest.mark.parametrize(
    ("raw", "keys"),
    [
        (None, set()),
        ("my_key", {"my_key"}),
        (["a", "b", 3], {"a", "b"}),
        (("a",), {"a"}),
        ({"a": 1}, set()),
        (7, set()),
    ],
)
def test_own_keys_from_every_form_extra_data_keys_may_hold(raw, keys):
    data = {} if raw is None else {"extra_data_keys": raw}
    assert own_keys(SimpleNamespace(data=data)) == keys
