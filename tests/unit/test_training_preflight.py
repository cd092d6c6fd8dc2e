"""The prepare-time check of the training script and working directory: where each path is looked
for, and one clear line per problem."""

from pvegpu.facts.training import PathKinds
from pvegpu.settings import Settings, defaults
from pvegpu.startup.training_preflight import (
    node_path,
    node_training_paths,
    path_problems,
    training_path_problems,
)


def settings(**over):
    return Settings.from_data({**defaults(), **over})


def test_paths_under_the_data_dir_are_looked_for_on_the_node():
    s = settings()
    assert node_path(s, "/data") == "/tank/dflash"
    assert node_path(s, "/data/dflash/train.py") == "/tank/dflash/dflash/train.py"
    assert node_path(s, "/database/train.py") is None
    assert node_path(s, "/root/train.py") is None


def test_present_script_and_workdir_pass():
    kinds = {"/tank/dflash/dflash/train.py": "file", "/tank/dflash/dflash": "directory"}
    assert path_problems(settings(), kinds, {}, "n1", 200) == []


def test_missing_or_wrong_kind_is_one_line_each_naming_value_and_fix():
    kinds = {"/tank/dflash/dflash/train.py": "directory"}
    lines = path_problems(settings(), kinds, {}, "n1", 200)
    assert lines == [
        "n1: training_script=/data/dflash/train.py is a directory (node path "
        "/tank/dflash/dflash/train.py): put the training script at /tank/dflash/dflash/train.py on "
        "the node (CT 200 sees /tank/dflash at /data), or fix training_script",
        "n1: training_workdir=/data/dflash is missing (node path /tank/dflash/dflash): put the "
        "training directory at /tank/dflash/dflash on the node (CT 200 sees /tank/dflash at "
        "/data), or fix training_workdir",
    ]


def test_a_script_outside_the_data_dir_must_already_be_in_the_running_container():
    s = settings(training_script="/root/train.py", training_workdir="/root")
    assert path_problems(s, {}, {"/root/train.py": "file", "/root": "directory"}, "n1", 200) == []
    lines = path_problems(s, {}, {}, "n1", 200)  # the container does not run (or exist) yet
    assert len(lines) == 2
    assert lines[0].startswith(
        "n1: training_script=/root/train.py is missing in CT 200 (or CT 200 does "
        "not run yet): keep it under data_dir_ct=/data (node: /tank/dflash)"
    )


def test_path_kinds_fact_parses_one_line_per_path():
    fact = PathKinds()
    assert "for p in /a '/b c'" in fact.command(["/a", "/b c"])
    assert fact.process(["file /a", "missing /b c", "noise"]) == {"/a": "file", "/b c": "missing"}


class FakeHost:
    def __init__(self, name, data=None, kinds=None):
        self.name, self.data, self.kinds, self.asked = name, data or {}, kinds or {}, []

    def get_fact(self, fact, paths):
        self.asked.append(list(paths))
        return {p: self.kinds.get(p, "missing") for p in paths}


class FakeInventory:
    def __init__(self, *hosts):
        self.hosts = {h.name: h for h in hosts}

    def get_group(self, name, default=None):
        return [h for h in self.hosts.values() if h.name.startswith("@pct/")]

    def get_host(self, name, default=None):
        return self.hosts.get(name, default)


def test_node_paths_come_from_the_preflights_node_read_without_another_command():
    node = FakeHost("n1")
    ct = FakeHost("@pct/n1/200", {"pct_node": "n1", "pct_vmid": 200})
    inv, s = FakeInventory(node, ct), {"@pct/n1/200": settings()}
    paths = node_training_paths(inv, s, "n1")
    assert paths == ["/tank/dflash/dflash/train.py", "/tank/dflash/dflash"]
    kinds = {"n1": {paths[0]: "file", paths[1]: "directory"}}
    assert training_path_problems(inv, s, kinds) == [] and node.asked == []
    # no read of that node (its preflight failed): one command of its own, as before
    assert len(training_path_problems(inv, s)) == 2 and node.asked == [paths]
