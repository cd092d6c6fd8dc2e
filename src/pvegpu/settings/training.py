"""The training service in the container: its unit, script, data, batch sizes and restarts.

>>> t = TrainingSettings("dflash-train", "/data/t.py", "/data", "/data/d", "/data/c", True,
...                      65536, 64, 900, 30, 5, "expandable_segments:True",
...                      {"cu130": {"token_budget": 49152}})
>>> t.value("token_budget", "cu130"), t.value("token_budget", "cu128")
(49152, 65536)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..variants import VARIANTS
from .kinds import Part, flag, integer, mapping, setting, text, text_list

UNIT_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,199}$")
# PYTORCH_CUDA_ALLOC_CONF: key:value pairs split by ",", e.g. roundup_power2_divisions:[256:1,512:2]
ALLOC_CONF_RE = re.compile(r"^[A-Za-z0-9_.:,\[\]]*$")
# Training settings a variant may override (variant_overrides).
OVERRIDABLE = ("token_budget", "max_batch_size")
POSITIVE = ("training_stop_timeout_s", "training_restart_delay_s", "training_restart_burst")
#: The DFlash trainer's command (group_data/all.py's default of training_command).
DFLASH_COMMAND = (
    "{script}",
    *("--target-gpus", "{target_gpus}", "--drafter-gpus", "{drafter_gpus}"),
    *("--token-budget", "{token_budget}", "--max-batch-size", "{max_batch_size}"),
    *("--dataset-dir", "{dataset_dir}", "--checkpoint-dir", "{checkpoint_dir}", "{resume_flag}"),
)


@dataclass(frozen=True)
class TrainingSettings(Part):
    """``training_*`` (its command, launcher and environment too), ``dataset_dir``,
    ``checkpoint_dir``, ``resume``, ``token_budget``, ``max_batch_size``,
    ``pytorch_cuda_alloc_conf`` and ``variant_overrides`` (group_data/all.py, "training unit")."""

    unit_name: str = setting("training_unit_name", text, strict=True)
    script: str = setting("training_script", text, where="ct")
    workdir: str = setting("training_workdir", text, where="ct")
    dataset_dir: str = setting("dataset_dir", text, where="ct")
    checkpoint_dir: str = setting("checkpoint_dir", text, where="ct")
    resume: bool = setting("resume", flag)
    token_budget: int = setting("token_budget", integer)
    max_batch_size: int = setting("max_batch_size", integer)
    stop_timeout_s: int = setting("training_stop_timeout_s", integer)
    restart_delay_s: int = setting("training_restart_delay_s", integer)
    restart_burst: int = setting("training_restart_burst", integer)
    alloc_conf: str = setting("pytorch_cuda_alloc_conf", text, strict=True)
    variant_overrides: Mapping[str, Mapping[str, Any]] = setting("variant_overrides", mapping)
    # checked with the GPU roles they use (pvegpu.plan.command.command_problems, from Settings)
    command: tuple[str, ...] = setting(
        "training_command", text_list, strict=True, default=DFLASH_COMMAND
    )
    launcher: str = setting("training_launcher", text, strict=True, default="python")
    env: Mapping[str, Any] = setting("training_env", mapping, strict=True, default={})
    start_watch_s: int = setting("training_start_watch_s", integer, default=60)

    def value(self, key: str, variant: str) -> Any:
        """Training setting ``key`` (one of OVERRIDABLE) with ``variant``'s override merged."""
        return self.variant_overrides.get(variant, {}).get(key, getattr(self, key))

    def problems(self) -> list[str]:
        errs = self.field_problems()
        if not UNIT_NAME_RE.match(self.unit_name):
            errs.append(
                f"training_unit_name={self.unit_name!r} is not a valid unit name: "
                "use letters, digits, - _ . @ (not first)"
            )
        if not ALLOC_CONF_RE.match(self.alloc_conf):
            errs.append(
                f"pytorch_cuda_alloc_conf={self.alloc_conf!r} has characters outside "
                "letters, digits and _ . : , [ ]: write it like expandable_segments:True"
            )
        errs.extend(self._override_problems())
        positive = (self.stop_timeout_s, self.restart_delay_s, self.restart_burst)
        for key, value in zip(POSITIVE, positive, strict=True):
            if value <= 0:
                errs.append(
                    f"{key}={value} must be positive: fix it in group_data/all.py or --data"
                )
        if self.start_watch_s < 0:
            errs.append(
                f"training_start_watch_s={self.start_watch_s} must be 0 (no watch) or more: fix "
                "it in group_data/all.py or --data"
            )
        return errs

    def _override_problems(self) -> list[str]:
        errs = []
        for key in OVERRIDABLE:
            for variant in sorted(set(VARIANTS) | set(self.variant_overrides)):
                value = self.value(key, variant)
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
        return errs
