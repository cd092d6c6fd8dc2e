"""The container's shared fact: one ``ContainerState`` document per run and host.

Operations of the python env, rebuild and training unit stages share it; it is read again only
after an operation of the run changed something (``container_state``), or patched by the
operation that made a change it knows exactly (``remember``).
"""

from __future__ import annotations

from pyinfra import host

from ..ct_reads import container_fact
from ..facts.python_env import ContainerState
from ..settings import Settings
from ..unit import started_record, unit_file, unit_path
from ..uv_commands import uv_bin
from .util import run_point

#: Resolved locks of pin-only builds, by input sha256, so a rebuild needs no index (outside
#: venvs_dir: rebuild=venv deletes that).
LOCKS_CACHE = "/var/lib/pvegpu/resolved-locks"
#: The container's apt packages right after creation (operations.rebuild.baseline_recorded writes
#: it; the pollution report reads it). Its existence is part of the shared fact.
BASELINE = "/var/lib/pvegpu/baseline-packages"

_CACHE_ATTR = "_pvegpu_container_state"


def container_state_args(settings: Settings) -> dict:
    """The ``ContainerState`` fact's arguments for ``settings``."""
    return dict(
        uv_bin=uv_bin(settings),
        venvs_dir=settings.venvs_dir,
        venv_path=settings.venv_path,
        unit_path=unit_path(settings),
        unit_name=unit_file(settings),
        cache_dir=settings.compile_cache_dir,
        started_path=started_record(settings),
        python=settings.python_interpreter,
        uv_cache_dir=settings.uv_cache_dir,
        locks_cache=LOCKS_CACHE,
        baseline_path=BASELINE,
    )


def container_state(settings: Settings) -> dict:
    """The ``ContainerState`` document, read at most once between changes of this run (served
    from the preflight's node read while nothing ran: pvegpu.ct_reads).

    .. code:: python

        state = container_state(settings)  # inside an operation body
    """
    point = run_point(host)
    cached = getattr(host, _CACHE_ATTR, None)
    if cached and cached[0] == point:
        return cached[1]
    doc = container_fact(host, ContainerState, **container_state_args(settings))
    setattr(host, _CACHE_ATTR, (point, doc))
    return doc


def remember(update) -> None:
    """After an operation's last command ran: apply ``update(doc)`` to the cached document and
    keep it valid past this operation's own completion (it knows exactly what it changed).

    .. code:: python

        remember(lambda doc: doc.update(cache_dir_exists=True))
    """
    cached = getattr(host, _CACHE_ATTR, None)
    if not cached:
        return
    update(cached[1])
    point = run_point(host)
    setattr(host, _CACHE_ATTR, ((point[0], point[1], point[2] + 1), cached[1]))
