"""The training systemd unit in the container: rendered, enabled, started when not running."""

from __future__ import annotations

import hashlib

from pyinfra import host
from pyinfra.api import operation

from ..settings import Settings
from ..unit import render_unit
from .python_env import container_state
from .util import note, write_file_command


def unit_path(settings: Settings) -> str:
    return f"/etc/systemd/system/{settings.training_unit_name}.service"


@operation()
def unit_installed(settings: Settings):
    """Write the rendered unit when it differs and reload systemd.

    .. code:: python

        training.unit_installed(name="Install dflash-train.service", settings=s)
    """
    text = render_unit(settings)
    state = container_state(settings)
    if state.get("unit_digest") == hashlib.sha256(text.encode()).hexdigest():
        return
    yield write_file_command(unit_path(settings), text, mode="0644")
    yield "systemctl daemon-reload"


@operation()
def unit_running(settings: Settings):
    """Enable the unit and start it when it is not running. Never restarts a running unit.

    .. code:: python

        training.unit_running(name="Start dflash-train.service", settings=s)
    """
    name = f"{settings.training_unit_name}.service"
    state = container_state(settings)
    if state.get("unit_enabled") != "enabled":
        yield f"systemctl enable {name}"
    if state.get("unit_active") not in ("active", "activating", "reloading"):
        yield f"systemctl start {name}"


__all__ = ["unit_installed", "unit_running", "note"]
