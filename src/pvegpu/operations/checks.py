"""Operations that only observe: they yield nothing when the facts match (no change) and fail
the host with one clear line per problem when they do not."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import operation

from ..checks import torch_problems
from ..facts.torch import TorchRuntime
from ..settings import Settings
from .util import fail


@operation()
def torch_runtime(python: str, settings: Settings):
    """Fail unless torch under ``python`` is the configured build and sees every GPU.

    .. code:: python

        checks.torch_runtime(name="Verify torch in the new venv", python="/root/venvs/x/bin/python",
                             settings=s)
    """
    rt = host.get_fact(TorchRuntime, python=python)
    problems = torch_problems(
        rt, settings.torch_version, settings.torch_variant, settings.variant.cuda,
        settings.expected_gpu_count,
    )
    if problems:
        yield fail(*problems)
