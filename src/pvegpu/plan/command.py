"""The training command: ``training_command`` (an argv list with placeholders), its launcher
(``training_launcher``) and ``training_env``, checked and rendered for the unit.

The unit runs ``<the build's python> <launcher args> <command>``; the command is rendered into
the build's training settings file (``plan.unit.BUILD_ENV``) as one ``set --`` line, each
argument quoted for sh, so no value is ever split or interpreted by systemd or the shell.

>>> c = ("{script}", "--gpus", "{gpus}", "--tb={token_budget}", "{resume_flag}")
>>> command_argv(c, {"script": "/d/t.py", "gpus": "0,1", "token_budget": 48, "resume": False})
['/d/t.py', '--gpus', '0,1', '--tb=48']
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

from ..settings.command import fields_of

PLAIN_RE = re.compile(r"[\w@%+=:,./{}-]+")
#: The shell fragment {python} becomes: ``$b`` is the build the unit resolved when it started.
PYTHON_WORD = '"$b/bin/python"'


#: The torch launcher, one node, a local rendezvous (torch/distributed/run.py: --standalone is
#: c10d at localhost on a free port, so two containers never collide).
TORCHRUN = ("-m", "torch.distributed.run", "--standalone", "--nnodes=1")
#: Where {python} goes before the build's settings file turns it into ``PYTHON_WORD`` (NUL
#: never passes the settings, so no argument of the user's holds it).
PYTHON_MARK = "\0PY\0"


def placeholder_values(settings) -> dict[str, object]:
    """Every placeholder's value for ``settings`` (a :class:`pvegpu.settings.Settings`): the GPU
    lists as CUDA numbers them inside the unit (0..n-1 in CUDA_VISIBLE_DEVICES order)."""
    gpus = sorted(settings.gpus.training)
    position = {g: i for i, g in enumerate(gpus)}
    t = settings.training
    return {
        "python": PYTHON_MARK,
        "script": t.script,
        "workdir": t.workdir,
        "data_dir": settings.container.data_dir_ct,
        "dataset_dir": t.dataset_dir,
        "checkpoint_dir": t.checkpoint_dir,
        "gpus": ",".join(str(i) for i in range(len(gpus))),
        "gpu_count": len(gpus),
        "target_gpus": ",".join(str(position[g]) for g in settings.gpus.targets),
        "drafter_gpus": ",".join(str(position[g]) for g in settings.gpus.drafters),
        "token_budget": settings.training_value("token_budget"),
        "max_batch_size": settings.training_value("max_batch_size"),
        "resume": t.resume,
    }


def argv_for(settings) -> list[str]:
    """What the unit runs after the build's python: the launcher's arguments, then the command
    with every placeholder filled ({python} still as ``PYTHON_MARK``)."""
    t = settings.training
    gpu_count = len(settings.gpus.training)
    return launcher_args(t.launcher, gpu_count) + command_argv(
        t.command, placeholder_values(settings)
    )


def command_argv(command: Sequence[str], vals: Mapping[str, object]) -> list[str]:
    """The command's arguments with every placeholder replaced by ``vals`` (``resume`` a bool;
    an argument that is only ``{resume_flag}`` is left out when it is False)."""
    argv = []
    for arg in command:
        if arg == "{resume_flag}" and not vals.get("resume"):
            continue
        argv.append(fill(arg, vals))
    return argv


def fill(arg: str, vals: Mapping[str, object]) -> str:
    out = []
    for literal, name, _, _ in fields_of(arg):
        out.append(literal)
        if name == "resume_flag":
            out.append("--resume" if vals.get("resume") else "")
        elif name is not None:
            out.append(str(vals[name]))
    return "".join(out)


def launcher_args(launcher: str, gpu_count: int) -> list[str]:
    """What goes between the build's python and the command.

    >>> launcher_args("torchrun", 8)
    ['-m', 'torch.distributed.run', '--standalone', '--nnodes=1', '--nproc-per-node=8']
    >>> launcher_args("python", 8)
    []
    """
    if launcher == "torchrun":
        return [*TORCHRUN, f"--nproc-per-node={gpu_count}"]
    return []


def sh_word(arg: str) -> str:
    """One argument quoted for sh, ``{python}``'s marker left as ``"$b/bin/python"``.

    >>> sh_word("a b"), sh_word("--py=\\0PY\\0")
    ("'a b'", '--py="$b/bin/python"')
    """
    pieces = arg.split(PYTHON_MARK)
    return PYTHON_WORD.join(shlex.quote(p) if p else "" for p in pieces) or "''"


def set_words(argv: Sequence[str]) -> str:
    """The ``set --`` line of the build's settings file (argv after the build's python).

    >>> print(set_words(["/d/t.py", "a b", "$HOME", "it's"]))
    set -- /d/t.py 'a b' '$HOME' 'it'"'"'s'
    """
    return "set -- " + " ".join(sh_word(a) for a in argv)


def export_lines(env: Mapping) -> list[str]:
    """``export NAME=value`` per ``training_env`` entry, in name order, quoted for sh.

    >>> export_lines({"NCCL_DEBUG": "INFO", "X": "a b"})
    ['export NCCL_DEBUG=INFO', "export X='a b'"]
    """
    return [f"export {k}={shlex.quote(str(v))}" for k, v in sorted(env.items())]


def summary(launcher: str, command: Sequence[str]) -> str:
    """The command in words, placeholders kept (the same for every variant: the unit's comment).

    >>> summary("torchrun", ["{script}", "--x"])
    'torchrun (python -m torch.distributed.run, one worker per training GPU) {script} --x'
    """
    head = (
        "torchrun (python -m torch.distributed.run, one worker per training GPU)"
        if launcher == "torchrun"
        else "python"
    )
    return " ".join([head, *(a if PLAIN_RE.fullmatch(a) else shlex.quote(a) for a in command)])
