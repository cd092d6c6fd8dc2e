"""Container facts: uv, per-build venvs, the live venv link, the training unit."""

from __future__ import annotations

from .probe import ProbeFact


class ContainerState(ProbeFact):
    """The python env and training unit state of a container, in one command.

    .. code:: python

        state = host.get_fact(ContainerState, uv_bin="/opt/pvegpu/uv-0.13.9/bin/uv",
                              venvs_dir="/root/venvs", venv_path="/root/venv",
                              unit_path="/etc/systemd/system/dflash-train.service",
                              unit_name="dflash-train", cache_dir="/data/cache/torch-2.11.0-cu130")
        state["venvs"]["torch-2.11.0-cu130"]["build"]["torch"]   # '2.11.0+cu130'

    An empty dict means the container could not be entered (it does not exist yet).
    """

    probe = "ct_state"

    def command(self, uv_bin, venvs_dir, venv_path, unit_path=None, unit_name=None, cache_dir=None,
                started_path=None):
        return self.command_for(
            uv_bin=uv_bin, venvs_dir=venvs_dir, venv_path=venv_path, unit_path=unit_path,
            unit_name=unit_name, cache_dir=cache_dir, started_path=started_path,
        )

    @staticmethod
    def default():
        return {}
