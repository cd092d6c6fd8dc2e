"""What one verification compares: a container's facts, its node's, the settings, and the values
several checks derive from them (the GPU roles, the node GPUs by UUID, the CUDA devices torch
sees, the training unit's state).

>>> from pvegpu.settings import Settings, defaults
>>> f = Inputs(Settings.from_data(defaults()), {"gpus": [{"uuid": "GPU-AB", "index": 3}]}, {},
...            vmid=200)
>>> f.torch_wanted, f.role_of[5], f.by_uuid["ab"]["index"], f.available
('2.11.0+cu130', 'drafter', 3, False)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from ..facts.gpus import normalize_uuid
from ..plan.unit import RUNNING, clears_leftovers, training_matcher, unit_plan
from ..settings import Settings


def roles(settings: Settings) -> dict[int, str]:
    """CUDA index -> ``target`` / ``drafter`` (as the trainer numbers GPUs inside the container).

    >>> from pvegpu.settings import defaults
    >>> roles(Settings.from_data(defaults()))[5]
    'drafter'
    """
    found = {i: "target" for i in settings.gpus.targets}
    found.update({i: "drafter" for i in settings.gpus.drafters})
    return found


@dataclass(frozen=True)
class UnitState:
    """The training unit's state as the checks of compute processes need it.

    ``active`` None: unknown (e.g. no container facts). ``running``: its processes are its own;
    ``clears``: the training unit stage clears leftover training processes before it starts it.
    """

    active: str | None = None
    running: bool | None = None
    pending: list[str] = field(default_factory=list)
    clears: bool = False


@dataclass(frozen=True)
class Inputs:
    """The facts and settings of one verification (see :func:`pvegpu.verification.verify`)."""

    settings: Settings
    node: dict
    ct: dict
    vmid: int
    node_name: str = "the node"
    lock: dict[str, str] | None = None
    lock_source: str | None = None
    unit: str | None = None
    deploying: bool = False
    waiting: tuple[str, ...] = ()

    @cached_property
    def torch_wanted(self) -> str:
        return f"{self.settings.torch.version}+{self.settings.torch.variant}"

    @cached_property
    def role_of(self) -> dict[int, str]:
        return roles(self.settings)

    @property
    def runtime(self) -> dict | None:
        """The container's torch runtime fact (None without container facts)."""
        return self.ct.get("torch") if self.ct else None

    @cached_property
    def by_uuid(self) -> dict[str | None, dict]:
        """The node's GPUs by normalized UUID."""
        gpus = self.node.get("gpus") or []
        return {normalize_uuid(g.get("uuid")): g for g in gpus if g.get("uuid")}

    @cached_property
    def available(self) -> bool:
        """CUDA is available to the venv's torch (it imports, and reported so)."""
        if not self.ct or not self.ct.get("present"):
            return False
        rt = self.ct["torch"]  # the probe reads torch whenever the venv's python is present
        if rt.get("import_error"):
            return False
        return bool(rt.get("available"))

    @cached_property
    def devices(self) -> list[dict]:
        """The CUDA devices the venv's torch sees (none when CUDA is not available)."""
        return list((self.runtime or {}).get("devices") or []) if self.available else []

    @cached_property
    def unit_state(self) -> UnitState:
        unit_doc = (self.ct or {}).get("unit")
        if not isinstance(unit_doc, dict) or unit_doc.get("active") is None:
            return UnitState()
        active, pending = unit_plan(
            self.settings, unit_doc["active"], unit_doc.get("started"), unit_doc.get("built")
        )
        clears = clears_leftovers(self.settings, active, pending)
        return UnitState(active, active in RUNNING, pending, clears)

    @cached_property
    def matcher(self) -> dict:
        return training_matcher(self.settings)
