"""Container-side operations for the python env: uv, one venv per torch build, the live link.

pyinfra's stock ``uv.venv`` does not fit here: it takes no package list per venv and checks
existence at another path than it creates. These own their fact (``ContainerState``).
"""

from __future__ import annotations

import json
import shlex

from pyinfra import host
from pyinfra.api import StringCommand, operation

from ..facts.python_env import ContainerState
from ..settings import Settings
from ..unit import started_record
from .util import write_file_command

MARKER = ".pvegpu-build.json"


def uv_bin(settings: Settings) -> str:
    """Where the pinned uv lives in the container (its own small venv, one per version)."""
    return f"/opt/pvegpu/uv-{settings.uv_version}/bin/uv"


def container_state(settings: Settings) -> dict:
    return host.get_fact(
        ContainerState,
        uv_bin=uv_bin(settings),
        venvs_dir=settings.venvs_dir,
        venv_path=settings.venv_path,
        unit_path=f"/etc/systemd/system/{settings.training_unit_name}.service",
        unit_name=f"{settings.training_unit_name}.service",
        cache_dir=settings.compile_cache_dir,
        started_path=started_record(settings),
    )


def uv_env(settings: Settings) -> str:
    """Environment for every uv call: cache beside the venvs, never download a Python."""
    return (
        f"UV_CACHE_DIR={shlex.quote(settings.uv_cache_dir)} UV_PYTHON_DOWNLOADS=never "
        "UV_NO_PROGRESS=1"
    )


def build_record(settings: Settings) -> dict:
    """What a finished build of the selected variant must record in its marker file."""
    return {
        "torch": f"{settings.torch_version}+{settings.torch_variant}",
        "variant": settings.torch_variant,
        "requirements": sorted(settings.training_requirements),
        "python": settings.python_interpreter,
    }


@operation()
def uv_installed(settings: Settings):
    """Install the pinned uv from ``package_index_url`` into its own venv (never `curl | sh`).

    .. code:: python

        python_env.uv_installed(name="Install uv 0.13.9", settings=s)
    """
    state = container_state(settings)
    if state.get("uv_version") == settings.uv_version:
        return
    home = uv_bin(settings).rsplit("/bin/", 1)[0]
    yield StringCommand(
        f"rm -rf {home} && {shlex.quote(settings.python_interpreter)} -m venv {home} && "
        f"{home}/bin/pip install --quiet --disable-pip-version-check --no-input --no-deps "
        f"--index-url {shlex.quote(settings.package_index_url)} uv=={settings.uv_version} && "
        f"{home}/bin/uv --version && ln -sfn {home}/bin/uv /usr/local/bin/uv"
    )


@operation()
def venv_built(settings: Settings):
    """Build the selected torch build's venv beside the live one, from scratch when needed.

    .. code:: python

        python_env.venv_built(name="Build venv torch-2.11.0-cu130", settings=s)

    The build happens in ``<venv>.building`` and is renamed into place only when every install
    step succeeded (``--relocatable`` keeps it valid after the rename). A failed or interrupted
    build never touches the live venv; the next run starts it again from scratch.
    """
    state = container_state(settings)
    current = state.get("venvs", {}).get(settings.build_name, {})
    wanted = build_record(settings)
    if current.get("build") == wanted and current.get("python_ok"):
        return
    uv = uv_bin(settings)
    final = settings.build_venv
    tmp = f"{final}.building"
    pins = " ".join(shlex.quote(p) for p in (settings.torch_pin, *settings.training_requirements))
    # The torch index is an *extra* index so it takes priority; with first-index, torch and its
    # CUDA deps come only from it, and PyPI's unlabeled torch (a CUDA 13 build) can never win.
    yield StringCommand(
        f"mkdir -p {shlex.quote(settings.venvs_dir)} && rm -rf {tmp} && "
        f"{uv_env(settings)} {uv} venv --quiet --relocatable --python "
        f"{shlex.quote(settings.python_interpreter)} {tmp} && "
        f"{uv_env(settings)} {uv} pip install --quiet --python {tmp}/bin/python "
        f"--index-url {shlex.quote(settings.package_index_url)} "
        f"--extra-index-url {shlex.quote(settings.torch_index_url)} "
        f"--index-strategy first-index {pins}"
    )
    yield write_file_command(f"{tmp}/{MARKER}", json.dumps(wanted, sort_keys=True) + "\n")
    yield StringCommand(f"rm -rf {shlex.quote(final)} && mv {tmp} {shlex.quote(final)}")


@operation()
def venv_selected(settings: Settings):
    """Point ``venv_path`` at the selected build, atomically (rename of a temporary link).

    .. code:: python

        python_env.venv_selected(name="Switch /root/venv to torch-2.11.0-cu130", settings=s)
    """
    state = container_state(settings)
    if state.get("venv_link") == settings.build_venv:
        return
    link = shlex.quote(settings.venv_path)
    if state.get("venv_path_is_dir"):
        # A hand-made venv at the stable path: keep it aside rather than deleting anything.
        yield f"mv {link} {link}.pre-pvegpu.$(date +%s)"
    yield f"ln -sfn {shlex.quote(settings.build_venv)} {link}.pvegpu-tmp && mv -T {link}.pvegpu-tmp {link}"
