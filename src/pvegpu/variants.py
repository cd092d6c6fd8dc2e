"""The torch CUDA variants pvegpu can install: one row per wheel build.

Adding a variant (cu126, cu132) is one row here plus its ``locks/<variant>.in``; nothing else
changes. Driver minimums come from NVIDIA's CUDA Toolkit release notes (table 3, "CUDA Toolkit
and Corresponding Driver Versions"): CUDA 12.8 GA needs >= 570.26 and runs, with reduced features,
from 525.60.13 under 12.x minor-version compatibility; CUDA 13.0 needs >= 580.65.06 (13.x floor
580).

>>> VARIANTS["cu130"].cuda
'13.0'
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Variant:
    """One torch wheel build: where it lives and which driver it needs."""

    name: str
    cuda: str  # what torch.version.cuda reports
    index_path: str  # appended to torch_index_base
    min_driver: str  # full-feature minimum
    compat_driver: str | None  # minor-version-compatibility floor (reduced features), if any
    notes: str


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant(
            name="cu128",
            cuda="12.8",
            index_path="cu128",
            min_driver="570.26",
            compat_driver="525.60.13",
            notes="torch 2.11 is the last release with cu128 wheels; concurrent flex_attention "
            "compiles from several threads hit the FX-tracing race",
        ),
        Variant(
            name="cu130",
            cuda="13.0",
            index_path="cu130",
            min_driver="580.65.06",
            compat_driver=None,
            notes="PyPI's unlabeled torch==2.11.0 is this build; needs smaller token_budget and "
            "max_batch_size to fit memory",
        ),
    )
}


def driver_tuple(version: str) -> tuple[int, ...]:
    """Parse an NVIDIA driver version for comparison.

    >>> driver_tuple("580.65.06") > driver_tuple("580.9")
    True
    """
    return tuple(int(part) for part in version.strip().split("."))


def driver_fit(variant: Variant, driver: str) -> str:
    """Classify a driver for a variant: ``ok``, ``reduced`` (compatibility mode) or ``too_old``.

    >>> driver_fit(VARIANTS["cu128"], "550.54.15")
    'reduced'
    """
    found = driver_tuple(driver)
    if found >= driver_tuple(variant.min_driver):
        return "ok"
    if variant.compat_driver and found >= driver_tuple(variant.compat_driver):
        return "reduced"
    return "too_old"
