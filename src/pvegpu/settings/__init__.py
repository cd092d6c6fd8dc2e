"""Typed, validated view of a host's data, in parts grouped as group_data/all.py groups them.
Every bad value fails here, before any change.

Defaults live only in group_data/all.py; ``defaults()`` reads them for callers outside pyinfra.
An operation takes the parts it uses (``settings.torch``, ``settings.gpus``, ...).

>>> s = Settings.from_data({**defaults(), "torch_variant": "cu128"})
>>> s.torch.pin, s.torch.index_url
('torch==2.11.0+cu128', 'https://download.pytorch.org/whl/cu128')
>>> Settings.from_data({**defaults(), "torch_variant": "cu129"})  # doctest: +NORMALIZE_WHITESPACE
Traceback (most recent call last):
...
pvegpu.settings.SettingsError: torch_variant='cu129' is not a known variant: set torch_variant to
one of cu128, cu130
"""

from __future__ import annotations

import dataclasses
import runpy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ..paths import GROUP_DATA
from ..refusal import Refused
from .command import command_problems
from .container import ContainerSettings
from .gpus import GpuSettings
from .kinds import Part, key_of, path_shape_problem, read_part
from .placement import placement_problems
from .policy import RunPolicy
from .python_env import PythonEnvSettings
from .site import SiteSettings
from .torch import TorchSettings
from .training import TrainingSettings
from .verification import VerificationSettings

__all__ = [
    "ContainerSettings",
    "GpuSettings",
    "PythonEnvSettings",
    "RunPolicy",
    "Settings",
    "SettingsError",
    "SiteSettings",
    "TorchSettings",
    "TrainingSettings",
    "VerificationSettings",
    "data_keys",
    "defaults",
]


class SettingsError(Refused):
    """One line per bad value, each naming the value and the fix (printed as they are, no
    traceback and no place in pvegpu's code: :class:`pvegpu.refusal.Refused`)."""


@dataclass(frozen=True)
class Settings:
    """One host's settings: one part per group of group_data/all.py."""

    torch: TorchSettings
    python_env: PythonEnvSettings
    gpus: GpuSettings
    container: ContainerSettings
    policy: RunPolicy
    verification: VerificationSettings
    training: TrainingSettings
    site: SiteSettings

    # --- values that join two parts ---------------------------------------------------------
    @property
    def build_venv(self) -> str:
        """The selected build's venv, e.g. ``/root/venvs/torch-2.11.0-cu130``."""
        return self.python_env.build_venv(self.torch.build_name)

    @property
    def compile_cache_dir(self) -> str:
        """The selected build's compile cache on the data dir."""
        return f"{self.container.data_dir_ct.rstrip('/')}/cache/{self.torch.build_name}"

    def training_value(self, key: str) -> Any:
        """A training setting with the selected variant's override merged over the default."""
        return self.training.value(key, self.torch.variant)

    # --- construction -----------------------------------------------------------------------
    @classmethod
    def from_data(cls, data: Mapping[str, Any] | Any) -> Settings:
        """Build from host.data (or a dict), raising SettingsError with every problem found."""
        get = data.get if hasattr(data, "get") else (lambda k, d=None: getattr(data, k, d))
        values: dict[str, dict[str, Any]] = {}
        errors: list[str] = []
        for name, part in PARTS.items():
            values[name], errs = read_part(part, get)
            errors.extend(errs)
        if not errors:
            settings = cls(**{name: PARTS[name](**v) for name, v in values.items()})
            errors = settings.problems()
        if errors:
            raise SettingsError("\n".join(errors))
        return settings

    def parts(self) -> Iterator[Part]:
        for name in PARTS:
            yield getattr(self, name)

    def problems(self) -> list[str]:
        """Each part's checks, then where its paths lie against each other's (those need every
        path well-formed): each problem one line naming the bad value and the fix."""
        errs = [line for part in self.parts() for line in part.problems()]
        t, g = self.training, self.gpus
        errs += command_problems(t.command, t.env, t.launcher, g.targets, g.drafters)
        if any(path_shape_problem(p) for part in self.parts() for p in part.paths().values()):
            return errs
        env = self.python_env
        reach = {"venv_path": env.venv_path, "venvs_dir": env.venvs_dir}
        reach["uv_cache_dir"] = env.uv_cache_dir
        c = self.container
        return errs + placement_problems(c.data_dir_ct, c.data_dir_node, reach)

    def changed(self, **values: Any) -> Settings:
        """A copy with settings replaced by data key, unvalidated (for tests and planners):
        ``settings.changed(keep_venvs=1)``."""
        parts = {name: getattr(self, name) for name in PARTS}
        for key, value in values.items():
            name, attr = FIELD_OF[key]
            parts[name] = dataclasses.replace(parts[name], **{attr: value})
        return Settings(**parts)

    def value(self, key: str) -> Any:
        """The value of data key ``key``, for lines and reports that name settings by key.

        >>> Settings.from_data(defaults()).value("torch_variant")
        'cu130'
        """
        part, attr = FIELD_OF[key]
        return getattr(getattr(self, part), attr)


PARTS: dict[str, Any] = {
    "torch": TorchSettings,
    "python_env": PythonEnvSettings,
    "gpus": GpuSettings,
    "container": ContainerSettings,
    "policy": RunPolicy,
    "verification": VerificationSettings,
    "training": TrainingSettings,
    "site": SiteSettings,
}
#: Each data key's part and field: "torch_variant" -> ("torch", "variant").
FIELD_OF = {key_of(f): (name, f.name) for name, part in PARTS.items() for f in fields(part)}


def data_keys() -> list[str]:
    """Every data key Settings reads, in group_data/all.py's order."""
    return list(FIELD_OF)


def defaults(project_dir: str | Path | None = None) -> dict[str, Any]:
    """The variables of group_data/all.py (the project's one defaults file) as a dict."""
    all_py = Path(project_dir) / "group_data" / "all.py" if project_dir else GROUP_DATA
    namespace = runpy.run_path(str(all_py))
    return {k: v for k, v in namespace.items() if not k.startswith("_")}
