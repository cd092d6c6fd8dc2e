"""The container's shared fact: one ``ContainerState`` document per run and host.

Operations of the python env, rebuild and training unit stages share it; it is read again only
after an operation of the run changed something (``container_state``), or patched by the
operation that made a change it knows exactly (``remember``).
"""

from __future__ import annotations

from pyinfra import host

from ..facts.python_env import ContainerState
from ..plan.unit import started_record, unit_file, unit_path
from ..plan.uv_commands import uv_bin
from ..run.ct_reads import container_fact, folded_commands
from ..run.run_context import container_operations, run_context
from ..settings import Settings

#: Resolved locks of pin-only builds, by input sha256, so a rebuild needs no index (outside
#: venvs_dir: rebuild=venv deletes that).
LOCKS_CACHE = "/var/lib/pvegpu/resolved-locks"
#: The container's apt packages right after creation (operations.rebuild.baseline_recorded writes
#: it; the pollution report reads it). Its existence is part of the shared fact.
BASELINE = "/var/lib/pvegpu/baseline-packages"


def container_state_args(settings: Settings) -> dict:
    """The ``ContainerState`` fact's arguments for ``settings``."""
    return dict(
        uv_bin=uv_bin(settings.python_env),
        venvs_dir=settings.python_env.venvs_dir,
        venv_path=settings.python_env.venv_path,
        unit_path=unit_path(settings.training),
        unit_name=unit_file(settings.training),
        cache_dir=settings.compile_cache_dir,
        started_path=started_record(settings.training),
        python=settings.python_env.interpreter,
        uv_cache_dir=settings.python_env.uv_cache_dir,
        locks_cache=LOCKS_CACHE,
        baseline_path=BASELINE,
    )


def state_reads(settings: Settings) -> tuple[str, ...]:
    """The host's ``ContainerState`` read as a line to run right after a change in the same
    command (:func:`pvegpu.run.ct_reads.change_then_read`), so the next operation's
    ``container_state()`` needs no command of its own; () when it must run on its own."""
    return tuple(folded_commands(host, [(ContainerState, container_state_args(settings))]))


def container_state() -> dict:
    """The host's ``ContainerState`` document, read at most once between changes of this run
    (the run context's fact cache, :mod:`pvegpu.run.run_context`; served from the preflight's node
    read while nothing ran: :mod:`pvegpu.run.ct_reads`), with the paths of the host's settings in
    this run (so an operation needs no settings to read it).

    .. code:: python

        state = container_state()  # inside an operation body
    """
    state = host.state
    run = run_context(state)

    def read() -> dict:
        settings = run.settings[host.name]  # type: ignore[index]  # the run has begun
        return container_fact(host, ContainerState, **container_state_args(settings))

    return run.facts.get(("container", host.name), container_operations(state, host), read)


def remember(update) -> None:
    """After an operation's last command ran: apply ``update(doc)`` to the cached document and
    keep it valid past this operation's own completion (it knows exactly what it changed).

    .. code:: python

        remember(lambda doc: doc.update(cache_dir_exists=True))
    """
    state = host.state
    point = container_operations(state, host)
    run_context(state).facts.remember(("container", host.name), point, state.is_executing, update)
