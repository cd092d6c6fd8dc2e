"""Typed, validated view of a host's data. Every bad value fails here, before any change.

Defaults live only in group_data/all.py; ``defaults()`` reads them for callers outside pyinfra.

>>> s = Settings.from_data({**defaults(), "torch_variant": "cu128"})
>>> s.torch_pin, s.torch_index_url
('torch==2.11.0+cu128', 'https://download.pytorch.org/whl/cu128')
>>> Settings.from_data({**defaults(), "torch_variant": "cu129"})  # doctest: +NORMALIZE_WHITESPACE
Traceback (most recent call last):
...
pvegpu.settings.SettingsError: torch_variant='cu129' is not a known variant: set torch_variant to
one of cu128, cu130
"""

from __future__ import annotations

import re
import runpy
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from pyinfra.api.exceptions import PyinfraError

from .guard import OWN_DIRS, PROXMOX_DIRS, is_within, overlaps, path_problem, system_dir
from .paths import GROUP_DATA
from .variants import VARIANTS, Variant

VERSION_RE = re.compile(r"^\d+\.\d+\.\d+$")
PIN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.+!_-]+$")
UNIT_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,199}$")
# Paths end up in shell commands, Proxmox property strings and the systemd unit: only characters
# none of them treats specially (no space, quote, $, %, \\, ',', '=', ';'), so no escaping can fail.
SAFE_PATH_RE = re.compile(r"^/[A-Za-z0-9._+@/-]*$")
# PYTORCH_CUDA_ALLOC_CONF: key:value pairs split by ",", e.g. roundup_power2_divisions:[256:1,512:2]
ALLOC_CONF_RE = re.compile(r"^[A-Za-z0-9_.:,\[\]]*$")
# RFC 1123 host name (what pct's dns-name format accepts, with RFC 1123's label and name lengths).
HOST_LABEL_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
# Paths in the container and on the node (the rest of the path settings are controller paths).
CT_PATHS = (
    "python_interpreter",
    "venv_path",
    "venvs_dir",
    "uv_cache_dir",
    "data_dir_ct",
    "training_script",
    "training_workdir",
    "dataset_dir",
    "checkpoint_dir",
)
NODE_PATHS = ("data_dir_node", "nvidia_installer_dir")
# Where pvegpu deletes (builds) or replaces (the live link): kept apart from data and each other.
DELETE_REACH = ("venv_path", "venvs_dir", "uv_cache_dir")
# Trees no mount point and no data dir may be in (their contents are the operating system's).
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib*", "/proc", "/run", "/sbin", "/sys", "/usr")
# pct's ranges (pve-container src/PVE/LXC/Config.pm): cores 1..8192, memory >= 16 MiB, swap >= 0.
CT_RANGES = {"ct_cores": (1, 8192), "ct_memory_mib": (16, None), "ct_swap_mib": (0, None)}
# Training settings a variant may override (variant_overrides).
OVERRIDABLE = ("token_budget", "max_batch_size")


class SettingsError(PyinfraError):
    """One line per bad value, each naming the value and the fix."""


@dataclass(frozen=True)
class Settings:
    torch_variant: str
    torch_version: str
    torch_index_base: str
    package_index_url: str
    training_requirements: tuple[str, ...]
    require_lock: bool
    locks_dir: str
    uv_version: str
    python_interpreter: str
    python_version: str | None
    venv_path: str
    venvs_dir: str
    keep_venvs: int
    uv_cache_dir: str
    expected_gpu_count: int
    target_gpus: tuple[int, ...]
    drafter_gpus: tuple[int, ...]
    min_free_gpu_mib: int
    passthrough_extra_devices: tuple[str, ...]
    passthrough_mode: str
    nvidia_installer_dir: str
    ct_template: str | None
    ct_hostname: str
    ct_cores: int
    ct_memory_mib: int
    ct_swap_mib: int
    ct_rootfs: str
    ct_net0: str
    ct_unprivileged: bool
    ct_features: str
    ct_protection: bool
    ct_onboot: bool
    data_dir_node: str
    data_dir_ct: str
    rebuild: str | None
    restart_training: bool
    deploy_lock_wait_s: int
    verify_level: str
    verify_report: str | None
    training_unit_name: str
    training_script: str
    training_workdir: str
    dataset_dir: str
    checkpoint_dir: str
    resume: bool
    token_budget: int
    max_batch_size: int
    training_stop_timeout_s: int
    training_restart_delay_s: int
    training_restart_burst: int
    pytorch_cuda_alloc_conf: str
    variant_overrides: Mapping[str, Mapping[str, Any]]

    # --- derived values ---------------------------------------------------------------------
    @property
    def variant(self) -> Variant:
        return VARIANTS[self.torch_variant]

    @property
    def torch_pin(self) -> str:
        return f"torch=={self.torch_version}+{self.torch_variant}"

    @property
    def torch_index_url(self) -> str:
        return f"{self.torch_index_base.rstrip('/')}/{self.variant.index_path}"

    @property
    def build_name(self) -> str:
        """Name of the selected build's venv and compile cache, e.g. ``torch-2.11.0-cu130``."""
        return f"torch-{self.torch_version}-{self.torch_variant}"

    @property
    def build_venv(self) -> str:
        return f"{self.venvs_dir.rstrip('/')}/{self.build_name}"

    @property
    def compile_cache_dir(self) -> str:
        return f"{self.data_dir_ct.rstrip('/')}/cache/{self.build_name}"

    @property
    def training_gpus(self) -> tuple[int, ...]:
        return tuple(self.target_gpus) + tuple(self.drafter_gpus)

    def training_value(self, key: str) -> Any:
        """A training setting with the selected variant's override merged over the default."""
        override = self.variant_overrides.get(self.torch_variant, {})
        return override.get(key, getattr(self, key))

    # --- construction -----------------------------------------------------------------------
    @classmethod
    def from_data(cls, data: Mapping[str, Any] | Any) -> Settings:
        """Build from host.data (or a dict), raising SettingsError with every problem found."""
        get = data.get if hasattr(data, "get") else (lambda k, d=None: getattr(data, k, d))
        values: dict[str, Any] = {}
        errors: list[str] = []
        for f in fields(cls):
            raw = get(f.name, None)
            if raw is None:
                if not f.type.startswith("str | None"):
                    errors.append(
                        f"{f.name} is not set: define it in group_data/all.py or pass --data "
                        f"{f.name}=..."
                    )
                continue
            try:
                values[f.name] = _coerce(f.name, f.type, raw)
            except ValueError as e:
                errors.append(str(e))
        if not errors:
            values.setdefault("rebuild", None)
            values.setdefault("verify_report", None)
            values.setdefault("python_version", None)
            values.setdefault("ct_template", None)
            settings = cls(**values)
            errors = settings.problems()
        if errors:
            raise SettingsError("\n".join(errors))
        return settings

    def problems(self) -> list[str]:
        """Cross-field checks: each problem is one line naming the bad value and the fix."""
        errs: list[str] = []
        if self.torch_variant not in VARIANTS:
            errs.append(
                f"torch_variant={self.torch_variant!r} is not a known variant: "
                f"set torch_variant to one of {', '.join(sorted(VARIANTS))}"
            )
        if not VERSION_RE.match(self.torch_version):
            errs.append(
                f"torch_version={self.torch_version!r} is not a full X.Y.Z version: "
                "set torch_version=2.11.0 (the install pins torch==<version>+<variant> exactly)"
            )
        for key in ("torch_index_base", "package_index_url"):
            url = getattr(self, key)
            if not re.match(r"^(https?|file)://\S+$", url):
                errs.append(
                    f"{key}={url!r} is not a URL: set it to an http(s) index, e.g. a local mirror"
                )
        for pin in self.training_requirements:
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
        if self.python_version is not None and not re.match(r"^3\.\d+$", self.python_version):
            errs.append(
                f"python_version={self.python_version!r} is not a Python version: write it as X.Y "
                "(e.g. 3.11, what the container's python_interpreter is), or leave it unset to "
                "follow the container's Python"
            )
        if not self.locks_dir.strip():
            errs.append(
                "locks_dir is empty: set it to the directory of <variant>.in/.lock (default locks)"
            )
        if not VERSION_RE.match(self.uv_version or ""):
            errs.append(
                f"uv_version={self.uv_version!r} is not X.Y.Z: leave it to group_data (the locked "
                "uv)"
            )
        errs.extend(self._path_problems())
        if not 0 <= self.deploy_lock_wait_s <= 86400:
            errs.append(
                f"deploy_lock_wait_s={self.deploy_lock_wait_s} must be 0..86400: the "
                "seconds a deploy waits for another one on the same node"
            )
        if self.keep_venvs < 1:
            errs.append(
                f"keep_venvs={self.keep_venvs} must be >= 1: the selected build is always kept"
            )
        if self.expected_gpu_count < 1:
            errs.append(
                f"expected_gpu_count={self.expected_gpu_count} must be >= 1: set the number of "
                "GPUs on the node"
            )
        errs.extend(self._gpu_problems())
        for dev in self.passthrough_extra_devices:
            if dev not in ("nvidia-modeset", "nvidia-caps"):
                errs.append(
                    f"passthrough_extra_devices entry {dev!r} is unknown: use nvidia-modeset or "
                    "nvidia-caps"
                )
        if self.passthrough_mode not in ("auto", "dev", "lxc"):
            errs.append(
                f"passthrough_mode={self.passthrough_mode!r} is unknown: use auto, dev or lxc"
            )
        if self.rebuild not in (None, "venv", "container"):
            errs.append(
                f"rebuild={self.rebuild!r} is unknown: use rebuild=venv or rebuild=container (or "
                "leave it unset)"
            )
        if self.verify_level not in ("basic", "compile"):
            errs.append(f"verify_level={self.verify_level!r} is unknown: use basic or compile")
        if not UNIT_NAME_RE.match(self.training_unit_name):
            errs.append(
                f"training_unit_name={self.training_unit_name!r} is not a valid unit name: "
                "use letters, digits, - _ . @ (not first)"
            )
        if not ALLOC_CONF_RE.match(self.pytorch_cuda_alloc_conf):
            errs.append(
                f"pytorch_cuda_alloc_conf={self.pytorch_cuda_alloc_conf!r} has characters outside "
                "letters, digits and _ . : , [ ]: write it like expandable_segments:True"
            )
        errs.extend(self._container_problems())
        errs.extend(self._control_character_problems())
        for key in ("token_budget", "max_batch_size"):
            for variant in sorted(set(VARIANTS) | set(self.variant_overrides)):
                value = self.variant_overrides.get(variant, {}).get(key, getattr(self, key))
                if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                    errs.append(
                        f"{key}={value!r} (for {variant}) must be a positive integer: fix it in "
                        "group_data/all.py or --data"
                    )
        for variant in self.variant_overrides:
            if variant not in VARIANTS:
                errs.append(
                    f"variant_overrides has unknown variant {variant!r}: use one of "
                    f"{', '.join(sorted(VARIANTS))}"
                )
            for key in self.variant_overrides[variant]:
                if key not in OVERRIDABLE:
                    errs.append(
                        f"variant_overrides[{variant!r}] has unknown key {key!r}: only "
                        f"{', '.join(OVERRIDABLE)} can differ per variant"
                    )
        for key in (
            "training_stop_timeout_s",
            "training_restart_delay_s",
            "training_restart_burst",
        ):
            if getattr(self, key) <= 0:
                errs.append(
                    f"{key}={getattr(self, key)} must be positive: fix it in group_data/all.py or "
                    "--data"
                )
        return errs

    def _path_problems(self) -> list[str]:
        """Paths: well-formed, and placed so that no delete or mount of pvegpu reaches data, the
        system or another of them (one line each)."""
        errs = []
        for key in (*CT_PATHS, *NODE_PATHS):
            path = getattr(self, key)
            problem = path_problem(path)
            if problem is None and not SAFE_PATH_RE.match(path):
                problem = "has a character outside letters, digits and / . _ - + @"
            if problem is None and path == "/":
                problem = "is the root directory /"
            if problem:
                errs.append(f"{key}={path!r} {problem}: fix it in group_data/all.py or --data")
        if errs:
            return errs  # the placement checks below need well-formed paths
        data = self.data_dir_ct
        data_ok = not (system_dir(data) or _in_tree(data, SYSTEM_TREES + OWN_DIRS))
        if not data_ok:
            errs.append(
                f"data_dir_ct={data!r} is a system directory of the container (the mount "
                f"would hide it): use a directory of its own, e.g. /data"
            )
        for key in DELETE_REACH:
            path = getattr(self, key)
            if system_dir(path):
                errs.append(
                    f"{key}={path!r} is a system directory: use a directory of its own, "
                    f"e.g. the default {_DEFAULT_HINT[key]}"
                )
            elif data_ok and overlaps(path, data):
                errs.append(
                    f"{key}={path!r} overlaps data_dir_ct={data!r} (a rebuild could reach "
                    f"the data): keep them apart (defaults: {key}={_DEFAULT_HINT[key]}, "
                    "data_dir_ct=/data)"
                )
        for i, a in enumerate(DELETE_REACH):
            for b in DELETE_REACH[i + 1 :]:
                pa, pb = getattr(self, a), getattr(self, b)
                if overlaps(pa, pb) and not (system_dir(pa) or system_dir(pb)):
                    errs.append(
                        f"{a}={pa!r} and {b}={pb!r} overlap (deleting one would reach "
                        f"the other): keep them apart, e.g. {a}={_DEFAULT_HINT[a]} "
                        f"{b}={_DEFAULT_HINT[b]}"
                    )
        node = self.data_dir_node
        if system_dir(node, PROXMOX_DIRS) or _in_tree(node, SYSTEM_TREES + PROXMOX_DIRS):
            errs.append(
                f"data_dir_node={node!r} is a system directory of the node (it would be "
                "bind-mounted into the container): use a data directory, e.g. "
                "/tank/dflash"
            )
        return errs

    def _container_problems(self) -> list[str]:
        """The container's hostname (RFC 1123) and pct's ranges for cores, memory and swap."""
        errs = []
        name = self.ct_hostname
        if len(name) > 253 or not all(HOST_LABEL_RE.match(label) for label in name.split(".")):
            errs.append(
                f"ct_hostname={name!r} is not a valid host name (RFC 1123: letters, "
                f"digits and inner '-', dot-separated labels): e.g. dflash-train"
            )
        for key, (low, high) in CT_RANGES.items():
            value = getattr(self, key)
            if value < low or (high is not None and value > high):
                span = f"{low}..{high}" if high is not None else f">= {low}"
                errs.append(f"{key}={value} is outside pct's range {span}: set a value in range")
        return errs

    def _control_character_problems(self) -> list[str]:
        """No string setting may carry a newline or control character (one line could become
        two in a unit file, a config line or a command)."""
        errs = []
        for f in fields(self):
            value = getattr(self, f.name)
            values = value if isinstance(value, tuple) else (value,)
            if f.name in (*CT_PATHS, *NODE_PATHS, *STRICT_STRINGS):
                continue  # checked more strictly elsewhere
            if any(isinstance(v, str) and CONTROL_RE.search(v) for v in values):
                errs.append(
                    f"{f.name}={value!r} contains a newline or control character: remove it"
                )
        return errs

    def _gpu_problems(self) -> list[str]:
        errs = []
        for key in ("target_gpus", "drafter_gpus"):
            gpus = getattr(self, key)
            if not gpus:
                errs.append(f"{key} is empty: list its GPU indices, e.g. --data {key}=[0,1]")
            for i in gpus:
                if i < 0 or i >= self.expected_gpu_count:
                    errs.append(
                        f"{key} has GPU {i}, outside 0..{self.expected_gpu_count - 1} "
                        f"(expected_gpu_count={self.expected_gpu_count}): fix the index or the "
                        "count"
                    )
            if len(set(gpus)) != len(gpus):
                errs.append(f"{key}={list(gpus)} lists a GPU twice: list each once")
        overlap = sorted(set(self.target_gpus) & set(self.drafter_gpus))
        if overlap:
            errs.append(
                f"target_gpus and drafter_gpus overlap on {overlap}: a GPU is either a target or a "
                "drafter"
            )
        return errs


CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
# String settings with a character rule of their own (no control character passes it).
STRICT_STRINGS = (
    "pytorch_cuda_alloc_conf",
    "training_unit_name",
    "ct_hostname",
    "torch_version",
    "torch_variant",
)
_DEFAULT_HINT = {
    "venv_path": "/root/venv",
    "venvs_dir": "/root/venvs",
    "uv_cache_dir": "/root/.cache/uv",
}


def _in_tree(path: str, trees) -> bool:
    """``path`` is one of ``trees`` or below one (an entry ending in ``*`` is a prefix)."""
    for tree in trees:
        if tree.endswith("*"):
            first = path.split("/")[1] if path.count("/") else path
            if ("/" + first).startswith(tree[:-1]):
                return True
        elif is_within(path, tree):
            return True
    return False


def _coerce(name: str, typ: Any, raw: Any) -> Any:
    """Convert a data value (possibly a --data string) to the field's type, or raise ValueError."""
    t = str(typ)
    if t.startswith("tuple[int"):
        if not isinstance(raw, (list, tuple)) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in raw
        ):
            raise ValueError(
                f"{name}={raw!r} must be a list of GPU indices: write it like [0, 1, 2]"
            )
        return tuple(raw)
    if t.startswith("tuple[str"):
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, (list, tuple)) or not all(isinstance(i, str) for i in raw):
            raise ValueError(
                f'{name}={raw!r} must be a list of strings: write it like ["transformers==5.6.0"]'
            )
        return tuple(raw)
    if t == "bool":
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, int) and raw in (0, 1):
            return bool(raw)
        raise ValueError(f"{name}={raw!r} must be a boolean: use true or false")
    if t == "int":
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise ValueError(f"{name}={raw!r} must be an integer: write a whole number")
        return raw
    if t.startswith("Mapping"):
        if not isinstance(raw, Mapping):
            raise ValueError(
                f"{name}={raw!r} must be a mapping: write it like "
                f'{{"cu130": {{"token_budget": 49152}}}}'
            )
        return raw
    if t.startswith("str | None"):
        if raw in ("", "none", "None", "null"):
            return None
        return str(raw)
    if isinstance(raw, (dict, list)):
        raise ValueError(f"{name}={raw!r} must be a string: write a plain value")
    return str(raw)


def defaults(project_dir: str | Path | None = None) -> dict[str, Any]:
    """The variables of group_data/all.py (the project's one defaults file) as a dict."""
    all_py = Path(project_dir) / "group_data" / "all.py" if project_dir else GROUP_DATA
    namespace = runpy.run_path(str(all_py))
    return {k: v for k, v in namespace.items() if not k.startswith("_")}
