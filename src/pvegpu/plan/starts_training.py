"""What starts a training, read from a unit's or a crontab line's command rather than from a
running process: the training script, a launcher, the configured training_command's module, or
a shell wrapper in the training dir. Everything else that merely lives under the venvs or the
training dir (Jupyter, TensorBoard, a checkpoint upload) is no training, and pvegpu never stops,
disables or masks it.
"""

from __future__ import annotations

from .process_tree import SHELLS, is_launcher, program, resolve, runs_script


def under(path: str, top: str) -> bool:
    """``path`` is ``top`` or inside it.

    >>> under("/root/venv/bin/python", "/root/venv"), under("/root/venvs", "/root/venv")
    (True, False)
    """
    top = top.rstrip("/")
    return path == top or path.startswith(top + "/")


def unit_runs_training(unit: dict, match: dict) -> bool:
    """Whether a unit's ``ExecStart`` starts the training: the script (relative to its
    WorkingDirectory), a launcher, or the module the configured ``training_command`` runs
    (``-m pkg.train``), or a shell running a script in the training dir (a wrapper such as
    ``bash run.sh``). Any other program that lives under the venvs or the training dir
    (Jupyter, TensorBoard, a checkpoint upload) starts no training.

    >>> m = {"script": "/data/dflash/train.py", "paths": ["/root/venv", "/data/dflash"]}
    >>> unit = {"exec": [["/root/venv/bin/python", "train.py"]], "wd": "/data/dflash"}
    >>> unit_runs_training(unit, m), unit_runs_training({"exec": [["/root/venv/bin/jupyter"]]}, m)
    (True, False)
    """
    for argv in unit.get("exec") or []:
        if runs_script(argv, unit.get("wd"), match.get("script")) or is_launcher(argv):
            return True
        if runs_module(argv, match.get("module")):
            return True
        if runs_wrapper(argv, unit.get("wd"), match.get("workdir")):
            return True
    return False


def runs_wrapper(argv: list[str], cwd: str | None, workdir: str | None) -> bool:
    """Whether ``argv`` is a shell running a script file in ``workdir`` (``bash run.sh``).

    >>> runs_wrapper(["/bin/bash", "run.sh"], "/data/dflash", "/data/dflash")
    True
    >>> runs_wrapper(["/bin/sh", "-c", "run.sh"], "/data/dflash", "/data/dflash")
    False
    """
    if not workdir or not argv or program(argv[0]) not in SHELLS:
        return False
    script = next((a for a in argv[1:] if not a.startswith("-")), None)
    if script is None or "-c" in argv[1 : argv.index(script)]:
        return False
    path = resolve(script, cwd)
    return path is not None and under(path, workdir)


def runs_module(argv: list[str], module: str | None) -> bool:
    """Whether ``argv`` runs ``module`` with ``-m`` (the configured training_command's).

    >>> runs_module(["python", "-m", "dflash.train", "--x"], "dflash.train")
    True
    """
    return bool(module) and any(
        a == "-m" and b == module for a, b in zip(argv, argv[1:], strict=False)
    )
