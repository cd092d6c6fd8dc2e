"""The Python environment in the container: uv, the interpreter, the venvs and uv's cache.

>>> p = PythonEnvSettings("0.9.5", "/usr/bin/python3", None, "/root/venv", "/root/venvs/", 2,
...                       "/root/.cache/uv")
>>> p.build_venv("torch-2.11.0-cu130"), p.problems()
('/root/venvs/torch-2.11.0-cu130', ["venvs_dir='/root/venvs/' is not normalised: write \
/root/venvs: fix it in group_data/all.py or --data"])
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .kinds import Part, integer, optional_text, setting, text
from .torch import VERSION_RE


@dataclass(frozen=True)
class PythonEnvSettings(Part):
    """``uv_version``, ``python_interpreter``, ``python_version``, ``venv_path``, ``venvs_dir``,
    ``keep_venvs`` and ``uv_cache_dir`` (group_data/all.py, "python env in the container")."""

    uv_version: str = setting("uv_version", text)
    interpreter: str = setting("python_interpreter", text, where="ct")
    version: str | None = setting("python_version", optional_text)
    venv_path: str = setting("venv_path", text, where="ct")
    venvs_dir: str = setting("venvs_dir", text, where="ct")
    keep_venvs: int = setting("keep_venvs", integer)
    uv_cache_dir: str = setting("uv_cache_dir", text, where="ct")

    def build_venv(self, build_name: str) -> str:
        """Where the build ``build_name`` (``TorchSettings.build_name``) lives."""
        return f"{self.venvs_dir.rstrip('/')}/{build_name}"

    def problems(self) -> list[str]:
        errs = self.field_problems()
        if self.version is not None and not re.match(r"^3\.\d+$", self.version):
            errs.append(
                f"python_version={self.version!r} is not a Python version: write it as X.Y "
                "(e.g. 3.11, what the container's python_interpreter is), or leave it unset to "
                "follow the container's Python"
            )
        if not VERSION_RE.match(self.uv_version or ""):
            errs.append(
                f"uv_version={self.uv_version!r} is not X.Y.Z: leave it to group_data (the locked "
                "uv)"
            )
        if self.keep_venvs < 1:
            errs.append(
                f"keep_venvs={self.keep_venvs} must be >= 1: the selected build is always kept"
            )
        return errs
