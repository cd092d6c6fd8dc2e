"""Rendering the training systemd unit from templates/training.service.j2.

>>> "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in render_unit(Settings.from_data(defaults()))
True
"""

from __future__ import annotations

from pathlib import Path

import jinja2

from .settings import Settings, defaults  # noqa: F401 (defaults: doctest)

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


def unit_context(settings: Settings) -> dict:
    """Every value of the unit, from settings (per-variant overrides merged over defaults)."""
    gpus = sorted(settings.training_gpus)
    # Inside the unit, CUDA renumbers the visible GPUs 0..n-1 in CUDA_VISIBLE_DEVICES order.
    position = {g: i for i, g in enumerate(gpus)}
    return {
        "build_name": settings.build_name,
        "unit_name": settings.training_unit_name,
        "data_dir": settings.data_dir_ct,
        "workdir": settings.training_workdir,
        "visible_devices": ",".join(str(g) for g in gpus),
        "cache_dir": settings.compile_cache_dir,
        "alloc_conf": settings.pytorch_cuda_alloc_conf,
        "venv_path": settings.venv_path,
        "script": settings.training_script,
        "target_gpus": ",".join(str(position[g]) for g in settings.target_gpus),
        "drafter_gpus": ",".join(str(position[g]) for g in settings.drafter_gpus),
        "token_budget": settings.training_value("token_budget"),
        "max_batch_size": settings.training_value("max_batch_size"),
        "dataset_dir": settings.dataset_dir,
        "checkpoint_dir": settings.checkpoint_dir,
        "resume": settings.resume,
    }


def render_unit(settings: Settings, templates: Path = TEMPLATES) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    return env.get_template("training.service.j2").render(**unit_context(settings))
