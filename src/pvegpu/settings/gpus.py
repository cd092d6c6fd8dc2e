"""The node's GPUs: how many, which the training uses, and how they reach the container.

>>> g = GpuSettings(8, (0, 1), (1, 8), 1024, (), "auto", "/root")
>>> g.training, g.problems()  # doctest: +NORMALIZE_WHITESPACE
((0, 1, 1, 8), ['drafter_gpus has GPU 8, outside 0..7 (expected_gpu_count=8): fix the index or
the count', 'target_gpus and drafter_gpus overlap on [1]: a GPU is either a target or a drafter'])
"""

from __future__ import annotations

from dataclasses import dataclass

from .kinds import Part, gpu_list, integer, setting, text, text_list

EXTRA_DEVICES = ("nvidia-modeset", "nvidia-caps")
PASSTHROUGH_MODES = ("auto", "dev", "lxc")


@dataclass(frozen=True)
class GpuSettings(Part):
    """``expected_gpu_count``, ``target_gpus``, ``drafter_gpus``, ``min_free_gpu_mib``,
    ``passthrough_*`` and ``nvidia_installer_dir`` (group_data/all.py, "GPUs")."""

    expected_count: int = setting("expected_gpu_count", integer)
    targets: tuple[int, ...] = setting("target_gpus", gpu_list)
    drafters: tuple[int, ...] = setting("drafter_gpus", gpu_list)
    min_free_mib: int = setting("min_free_gpu_mib", integer)
    extra_devices: tuple[str, ...] = setting("passthrough_extra_devices", text_list)
    passthrough_mode: str = setting("passthrough_mode", text)
    installer_dir: str = setting("nvidia_installer_dir", text, where="node")

    @property
    def training(self) -> tuple[int, ...]:
        """The GPUs the training uses: targets, then drafters."""
        return tuple(self.targets) + tuple(self.drafters)

    def problems(self) -> list[str]:
        errs = self.field_problems()
        if self.expected_count < 1:
            errs.append(
                f"expected_gpu_count={self.expected_count} must be >= 1: set the number of "
                "GPUs on the node"
            )
        errs.extend(self._index_problems())
        for dev in self.extra_devices:
            if dev not in EXTRA_DEVICES:
                errs.append(
                    f"passthrough_extra_devices entry {dev!r} is unknown: use nvidia-modeset or "
                    "nvidia-caps"
                )
        if self.passthrough_mode not in PASSTHROUGH_MODES:
            errs.append(
                f"passthrough_mode={self.passthrough_mode!r} is unknown: use auto, dev or lxc"
            )
        return errs

    def _index_problems(self) -> list[str]:
        errs = []
        for key, gpus in (("target_gpus", self.targets), ("drafter_gpus", self.drafters)):
            # an empty role is refused only when training_command uses it (plan.command)
            for i in gpus:
                if i < 0 or i >= self.expected_count:
                    errs.append(
                        f"{key} has GPU {i}, outside 0..{self.expected_count - 1} "
                        f"(expected_gpu_count={self.expected_count}): fix the index or the "
                        "count"
                    )
            if len(set(gpus)) != len(gpus):
                errs.append(f"{key}={list(gpus)} lists a GPU twice: list each once")
        overlap = sorted(set(self.targets) & set(self.drafters))
        if overlap:
            errs.append(
                f"target_gpus and drafter_gpus overlap on {overlap}: a GPU is either a target or a "
                "drafter"
            )
        return errs
