"""The torch build: which CUDA variant and version, from which indexes, with which pins.

>>> t = TorchSettings("cu128", "2.11.0", "https://download.pytorch.org/whl/",
...                   "https://pypi.org/simple", (), False, "locks")
>>> t.pin, t.index_url, t.build_name
('torch==2.11.0+cu128', 'https://download.pytorch.org/whl/cu128', 'torch-2.11.0-cu128')
>>> t.launcher_shutdown_timeout
False
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..variants import VARIANTS, Variant
from .kinds import Part, flag, setting, text, text_list

VERSION_RE = re.compile(r"^\d+\.\d+\.\d+$")
PIN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.+!_-]+$")
URL_RE = re.compile(r"^(https?|file)://\S+$")


@dataclass(frozen=True)
class TorchSettings(Part):
    """``torch_*``, ``package_index_url``, ``training_requirements``, ``require_lock`` and
    ``locks_dir`` (group_data/all.py, "torch build")."""

    variant: str = setting("torch_variant", text, strict=True)
    version: str = setting("torch_version", text, strict=True)
    index_base: str = setting("torch_index_base", text)
    package_index_url: str = setting("package_index_url", text)
    requirements: tuple[str, ...] = setting("training_requirements", text_list)
    require_lock: bool = setting("require_lock", flag)
    locks_dir: str = setting("locks_dir", text)

    @property
    def spec(self) -> Variant:
        """The selected variant's row (its CUDA version, index path and driver minimums)."""
        return VARIANTS[self.variant]

    @property
    def pin(self) -> str:
        return f"torch=={self.version}+{self.variant}"

    @property
    def index_url(self) -> str:
        return f"{self.index_base.rstrip('/')}/{self.spec.index_path}"

    @property
    def build_name(self) -> str:
        """Name of the selected build's venv and compile cache, e.g. ``torch-2.11.0-cu130``."""
        return f"torch-{self.version}-{self.variant}"

    @property
    def launcher_shutdown_timeout(self) -> bool:
        """Whether this torch's torchrun waits ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` (or
        ``--shutdown-timeout``) before it SIGKILLs the workers it signalled: torch 2.12 on; a
        fixed 30 s before (torch/distributed/launcher/api.py, ``LaunchConfig.shutdown_timeout``).
        """
        major_minor = tuple(int(n) for n in re.findall(r"\d+", self.version)[:2])
        return major_minor >= (2, 12)

    def problems(self) -> list[str]:
        errs = self.field_problems()
        if self.variant not in VARIANTS:
            errs.append(
                f"torch_variant={self.variant!r} is not a known variant: "
                f"set torch_variant to one of {', '.join(sorted(VARIANTS))}"
            )
        if not VERSION_RE.match(self.version):
            errs.append(
                f"torch_version={self.version!r} is not a full X.Y.Z version: "
                "set torch_version=2.11.0 (the install pins torch==<version>+<variant> exactly)"
            )
        for key, url in (
            ("torch_index_base", self.index_base),
            ("package_index_url", self.package_index_url),
        ):
            if not URL_RE.match(url):
                errs.append(
                    f"{key}={url!r} is not a URL: set it to an http(s) index, e.g. a local mirror"
                )
        errs.extend(self._pin_problems())
        if not self.locks_dir.strip():
            errs.append(
                "locks_dir is empty: set it to the directory of <variant>.in/.lock (default locks)"
            )
        return errs

    def _pin_problems(self) -> list[str]:
        errs = []
        for pin in self.requirements:
            if not PIN_RE.match(pin):
                errs.append(
                    f"training_requirements entry {pin!r} is not an exact pin: write it as "
                    "name==version"
                )
            elif re.match(r"^torch(\[|==)", pin, re.I):
                errs.append(
                    f"training_requirements entry {pin!r} pins torch: remove it, torch comes from "
                    "torch_version and torch_variant"
                )
        return errs
