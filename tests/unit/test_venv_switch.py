"""The switch of the live venv (issue 15): every link pvegpu points somewhere new is replaced by one
rename() of a temporary link, so the live path is never absent; never `rm` + `ln -s`."""

from __future__ import annotations

import copy
import shlex
import subprocess

import pytest

from pvegpu.operations import python_env
from pvegpu.settings import Settings, defaults


def switch_commands(monkeypatch, s: Settings, state: dict) -> list[list[str]]:
    """The shell commands ``venv_promoted`` and then (after verify) ``live_build_and_unit``'s
    switch run for ``state``, each split into argv."""
    cmds, update = python_env.promotion(state, s.torch, s.python_env)
    state = copy.deepcopy(state)
    if update:
        update(state)
    more, _ = python_env.live_switch(state, s.torch, s.python_env, now=0)
    assert cmds + more
    return [shlex.split(c) for c in cmds + more]


def settings_in(tmp_path) -> Settings:
    return Settings.from_data(
        {**defaults(), "venv_path": str(tmp_path / "venv"), "venvs_dir": str(tmp_path / "venvs")}
    )


STATES = {
    "first build": lambda s: {"venvs": {f"{s.torch.build_name}.next": {}}, "venv_link": None},
    "swap to a built variant": lambda s: {
        "venvs": {
            s.torch.build_name: {
                "link": f"{s.torch.build_name}.b1",
                "real": f"{s.torch.build_name}.b1",
            }
        },
        "venv_link": f"{s.python_env.venvs_dir}/torch-2.11.0-cu128",
    },
    "repair of the live build": lambda s: {
        "venvs": {
            s.torch.build_name: {
                "link": f"{s.torch.build_name}.b1",
                "real": f"{s.torch.build_name}.b1",
            },
            f"{s.torch.build_name}.next": {},
        },
        "venv_link": s.build_venv,
    },
}


@pytest.mark.parametrize("case", sorted(STATES))
def test_links_are_switched_by_one_rename_of_a_temporary_link(monkeypatch, tmp_path, case):
    s = settings_in(tmp_path)
    commands = switch_commands(monkeypatch, s, STATES[case](s))
    links = {s.python_env.venv_path, s.build_venv}
    for argv in commands:
        assert argv[0] != "rm", argv
        if argv[0] == "ln":
            assert argv[-1].endswith(".pvegpu-tmp"), argv  # only ever a temporary link is made
        if argv[-1] in links:
            # the only command that changes a live link: rename() its temporary link over it
            assert argv[:2] == ["mv", "-T"] and argv[-2] == argv[-1] + ".pvegpu-tmp", argv


def test_a_first_build_is_promoted_and_made_live(monkeypatch, tmp_path):
    s = settings_in(tmp_path)
    (tmp_path / "venvs" / f"{s.torch.build_name}.next" / "bin").mkdir(parents=True)
    commands = switch_commands(monkeypatch, s, STATES["first build"](s))
    script = " && ".join(" ".join(shlex.quote(a) for a in argv) for argv in commands)
    subprocess.run(["sh", "-c", script], check=True)
    assert (tmp_path / "venv").resolve() == tmp_path / "venvs" / f"{s.torch.build_name}.b1"
    assert sorted(p.name for p in (tmp_path / "venvs").iterdir()) == [
        s.torch.build_name,
        f"{s.torch.build_name}.b1",
    ]


def test_a_promoted_build_carries_its_training_settings_before_its_link_points_at_it(tmp_path):
    """The build's link (which the unit reaches through venv_path) never points at a build
    without its settings file: the file is written into the new build before the link moves."""
    s = settings_in(tmp_path)
    build = s.torch.build_name
    (tmp_path / "venvs" / f"{build}.next" / "bin").mkdir(parents=True)
    state = {"venvs": {f"{build}.next": {}}, "venv_link": None}
    cmds, update = python_env.promotion(state, s.torch, s.python_env, "TOKEN_BUDGET=7\n")
    moves_link = next(
        i
        for i, c in enumerate(cmds)
        if c.startswith("mv -T") and c.endswith(shlex.quote(s.build_venv))
    )
    writes = next(i for i, c in enumerate(cmds) if ".pvegpu-train.env" in c)
    assert writes < moves_link, cmds
    subprocess.run(["sh", "-c", " && ".join(cmds)], check=True)
    assert (tmp_path / "venvs" / build / ".pvegpu-train.env").read_text() == "TOKEN_BUDGET=7\n"
    assert (tmp_path / "venvs" / build).resolve() == tmp_path / "venvs" / f"{build}.b1"
    update(state)
    assert state["venvs"][build]["train_env"] == state["venvs"][f"{build}.b1"]["train_env"]
