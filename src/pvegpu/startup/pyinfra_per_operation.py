"""Spare pyinfra the per-operation work whose answer never changes within a run.

A no-op over 16 nodes spent about 0.05 s of controller CPU per node in two pyinfra helpers that
every operation call runs (cProfile, issue 22):

- ``get_operation_order_from_stack`` orders an operation by the line numbers of the deploy files
  on the stack. It calls ``inspect.stack()``, which reads every frame's source line from disk and
  looks up its module, then ``inspect.getframeinfo`` once more per frame; only each frame's file
  name and line number are used. ``operation_order`` takes both from the frames themselves.
- ``all_global_arguments`` runs ``typing.get_type_hints`` on pyinfra's argument classes for every
  operation (and fact): the same list each time. ``global_arguments`` computes it once.

``install()`` puts both in place of pyinfra's, in the modules that call them; the unit tests pin
that each gives pyinfra's own answer.

>>> import pyinfra.api.arguments as a
>>> global_arguments() == list(a.get_type_hints(a.AllArguments).items())
True
"""

from __future__ import annotations

import importlib
import sys
from functools import cache
from types import FrameType

import pyinfra
from pyinfra.api import arguments, facts, util

# the module: pyinfra.api's own name `operation` is the decorator
operation = importlib.import_module("pyinfra.api.operation")


def operation_order(state) -> list[int]:
    """What ``pyinfra.api.util.get_operation_order_from_stack(state)`` returns, called from the
    same place: ``[current_op_file_number (CLI runs)]`` then the line of every frame outside
    pyinfra's own files, outermost first, from the first frame of the current deploy file on (the
    last frame when no frame is in it)."""
    frames = []
    # from the caller (pyinfra's solve_operation_consistency), as pyinfra's walk
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    frames.reverse()
    files = [f.f_code.co_filename for f in frames]
    deploy = state.current_deploy_filename
    first = 0
    if deploy:  # pyinfra's search ends at the last frame when no frame is the deploy file's
        first = files.index(deploy) if deploy in files else len(frames) - 1
    order = [state.current_op_file_number] if pyinfra.is_cli else []
    ours = range(first, len(frames))
    order += [frames[i].f_lineno for i in ours if not files[i].startswith(util.PYINFRA_INSTALL_DIR)]
    return order


@cache
def _global_arguments() -> tuple[tuple[str, type], ...]:
    return tuple(arguments.get_type_hints(arguments.AllArguments).items())


def global_arguments() -> list[tuple[str, type]]:
    """pyinfra's global operation arguments and their types (``all_global_arguments()``), worked
    out once per process; a new list each call, as pyinfra's."""
    return list(_global_arguments())


def install() -> None:
    """Use ``operation_order`` and ``global_arguments`` where pyinfra calls its own (idempotent)."""
    setattr(operation, "get_operation_order_from_stack", operation_order)  # noqa: B010
    setattr(arguments, "all_global_arguments", global_arguments)  # noqa: B010
    setattr(facts, "all_global_arguments", global_arguments)  # noqa: B010
