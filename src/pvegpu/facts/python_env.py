"""Container facts: uv, per-build venvs (packages, locks, users), the live venv link, the unit."""

from __future__ import annotations

from typing import cast

from ..documents import ContainerStateDoc
from .probe import ProbeFact, parse_probe_output


class ContainerState(ProbeFact):
    """The python env and training unit state of a container, in one command.

    .. code:: python

        state = host.get_fact(ContainerState, uv_bin="/opt/pvegpu/uv-0.13.9/bin/uv",
                              venvs_dir="/root/venvs", venv_path="/root/venv",
                              unit_path="/etc/systemd/system/dflash-train.service",
                              unit_name="dflash-train", cache_dir="/data/cache/torch-2.11.0-cu130",
                              python="/usr/bin/python3", uv_cache_dir="/root/.cache/uv")
        state["venv_link"]                                        # '/root/venvs/torch-2.11.0-cu130'
        state["venvs"]["torch-2.11.0-cu130"]["link"]              # 'torch-2.11.0-cu130.b1'
        state["venvs"]["torch-2.11.0-cu130.b1"]["build"]["torch"]  # '2.11.0+cu130'
        state["venvs"]["torch-2.11.0-cu130.b1"]["installed"]      # {'torch': '2.11.0+cu130'}

    An empty dict means the container could not be entered (it does not exist yet).
    """

    probe = "ct_state"

    def command(
        self,
        uv_bin,
        venvs_dir,
        venv_path,
        unit_path=None,
        unit_name=None,
        cache_dir=None,
        started_path=None,
        python=None,
        uv_cache_dir=None,
        locks_cache=None,
        baseline_path=None,
    ):
        return self.command_for(
            uv_bin=uv_bin,
            venvs_dir=venvs_dir,
            venv_path=venv_path,
            unit_path=unit_path,
            unit_name=unit_name,
            cache_dir=cache_dir,
            started_path=started_path,
            python=python,
            uv_cache_dir=uv_cache_dir,
            locks_cache=locks_cache,
            baseline_path=baseline_path,
        )

    def process(self, output) -> ContainerStateDoc:
        return cast(ContainerStateDoc, parse_probe_output(self.probe, list(output)))
