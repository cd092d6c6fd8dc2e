"""Spare pyinfra's per-operation stack walk the scans of every loaded module.

pyinfra orders the operations of a CLI run by the line numbers of the deploy files on the stack:
for every operation it calls ``inspect.stack()``, and ``inspect.getmodule`` looks each frame's
file up in ``inspect.modulesbyfile``. deploy.py, verify.py and tasks/*.py run through ``exec``
(pyinfra's ``exec_file``): they are no module's file, so every lookup of one misses and walks all
of ``sys.modules`` (about 1,400 modules) before returning None. A converged deploy does about 100
such walks: 0.15-0.25 s of its CPU. Marking those files as "no module" gives the same None
without the walk (a frame has no ``__name__``, so a miss can only end in None).

>>> import inspect, os
>>> register_deploy_files(["/nonexistent/deploy.py"])
>>> inspect.getmodule(compile("0", "/nonexistent/deploy.py", "eval")) is None
True
>>> inspect.modulesbyfile[os.path.abspath("/nonexistent/deploy.py")]
'<pvegpu deploy file>'
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path

#: What ``inspect.modulesbyfile`` maps a deploy file to: a name no module has (so: None).
NOT_A_MODULE = "<pvegpu deploy file>"


def register_deploy_files(paths) -> None:
    """Map each of ``paths`` to no module in ``inspect``'s file cache (a file some module was
    already found at keeps its module)."""
    cache = getattr(inspect, "modulesbyfile", None)
    if not isinstance(cache, dict):  # another Python's inspect: its own lookups, unchanged
        return
    for path in paths:
        absolute = os.path.normcase(os.path.abspath(path))
        for key in (absolute, os.path.realpath(absolute)):
            cache.setdefault(key, NOT_A_MODULE)


def deploy_files(deploy_file: str) -> list[str]:
    """``deploy_file`` and the task files beside it (``tasks/*.py``), as pyinfra runs them.

    >>> deploy_files("/nonexistent/deploy.py")
    ['/nonexistent/deploy.py']
    """
    here = Path(deploy_file).parent
    return [deploy_file, *sorted(str(p) for p in (here / "tasks").glob("*.py"))]
