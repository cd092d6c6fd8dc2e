"""``training_command``, ``training_launcher`` and ``training_env`` checked together with the GPU
roles the command uses (rendered by :mod:`pvegpu.plan.command`).

>>> command_problems(("{scrpt}",), {}, "python", (0,), ())[0]  # doctest: +NORMALIZE_WHITESPACE
"training_command argument '{scrpt}' has unknown placeholder {scrpt}: did you mean {script}?
(placeholders: {checkpoint_dir}, {data_dir}, {dataset_dir}, {drafter_gpus}, {gpu_count},
{gpus}, {max_batch_size}, {python}, {resume_flag}, {script}, {target_gpus}, {token_budget},
{workdir}; write a literal brace as {{ or }})"
>>> command_problems(("{script}", "--d", "{drafter_gpus}"), {}, "python", (0,), ())[0]
... # doctest: +NORMALIZE_WHITESPACE
'drafter_gpus is empty, but training_command uses {drafter_gpus}: list its GPU indices, e.g.
--data drafter_gpus=[0,1], or take {drafter_gpus} out of training_command'
"""

from __future__ import annotations

import difflib
import re
import string
from collections.abc import Mapping, Sequence

#: Each placeholder and what it becomes (docs/training-unit.md lists the same).
PLACEHOLDERS = {
    "python": "the build's python (the venv the unit started from)",
    "script": "training_script",
    "workdir": "training_workdir",
    "data_dir": "data_dir_ct",
    "dataset_dir": "dataset_dir",
    "checkpoint_dir": "checkpoint_dir",
    "gpus": "every training GPU as CUDA numbers them in the unit (0,1,...)",
    "gpu_count": "the number of training GPUs",
    "target_gpus": "target_gpus as CUDA numbers them in the unit",
    "drafter_gpus": "drafter_gpus as CUDA numbers them in the unit",
    "token_budget": "token_budget of the selected variant",
    "max_batch_size": "max_batch_size of the selected variant",
    "resume_flag": "--resume when resume=true; an argument that is only {resume_flag} is "
    "left out otherwise",
}
LAUNCHERS = ("python", "torchrun")
#: Variables the unit or the build's settings file set: a training_env entry may not change them.
RESERVED_ENV = {
    "CUDA_VISIBLE_DEVICES": "set target_gpus and drafter_gpus",
    "CUDA_DEVICE_ORDER": "pvegpu numbers GPUs as nvidia-smi does (PCI_BUS_ID)",
    "PYTORCH_CUDA_ALLOC_CONF": "set pytorch_cuda_alloc_conf",
    "TORCHINDUCTOR_CACHE_DIR": "each build has its own compile cache under the data dir",
    "TRITON_CACHE_DIR": "each build has its own compile cache under the data dir",
}
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def fields_of(arg: str) -> list[tuple[str, str | None, str | None, str | None]]:
    """``string.Formatter().parse`` of one argument: (literal, name, spec, conversion) parts;
    ValueError for a lone brace."""
    return list(string.Formatter().parse(arg))


def arg_problems(arg: str) -> list[str]:
    """The problems of one ``training_command`` argument (each naming it and the fix)."""
    try:
        parts = fields_of(arg)
    except ValueError:
        return [
            f"training_command argument {arg!r} has a lone brace: write a literal brace as {{{{ "
            "or }}"
        ]
    errs = []
    for _, name, spec, conversion in parts:
        if name is None:
            continue
        if name not in PLACEHOLDERS:
            close = difflib.get_close_matches(name, PLACEHOLDERS, n=1)
            hint = f"did you mean {{{close[0]}}}? " if close else ""
            known = ", ".join(f"{{{p}}}" for p in sorted(PLACEHOLDERS))
            errs.append(
                f"training_command argument {arg!r} has unknown placeholder {{{name}}}: {hint}"
                f"(placeholders: {known}; write a literal brace as {{{{ or }}}})"
            )
        elif spec or conversion:
            errs.append(
                f"training_command argument {arg!r}: placeholder {{{name}}} takes no format or "
                f"conversion: write it as {{{name}}}"
            )
    return errs


def used(command: Sequence[str]) -> set[str]:
    """The placeholders ``command`` uses (well-formed arguments only)."""
    names = set()
    for arg in command:
        try:
            names |= {name for _, name, _, _ in fields_of(arg) if name}
        except ValueError:
            continue
    return names


def command_problems(
    command: Sequence[str],
    env: Mapping,
    launcher: str,
    targets: Sequence[int],
    drafters: Sequence[int],
) -> list[str]:
    """Every problem of the command, its environment and its launcher against the GPU roles it
    uses: a role the command names must have GPUs; roles it does not name may be empty."""
    errs = [] if command else ["training_command is empty: give the script and its arguments"]
    for arg in command:
        errs += arg_problems(arg)
        if "\0" in arg or "\n" in arg:
            errs.append(f"training_command argument {arg!r} holds a newline or NUL: remove it")
    if launcher not in LAUNCHERS:
        errs.append(f"training_launcher={launcher!r} is unknown: use python or torchrun")
    errs += env_problems(env)
    names = used(command)
    for key, gpus in (("target_gpus", targets), ("drafter_gpus", drafters)):
        if key in names and not gpus:
            errs.append(
                f"{key} is empty, but training_command uses {{{key}}}: list its GPU indices, "
                f"e.g. --data {key}=[0,1], or take {{{key}}} out of training_command"
            )
    if not targets and not drafters:
        errs.append(
            "target_gpus and drafter_gpus are both empty: list the GPUs the training uses, "
            "e.g. --data target_gpus=[0]"
        )
    return errs


def env_problems(env: Mapping) -> list[str]:
    """The problems of ``training_env`` (names, values, variables pvegpu sets itself)."""
    errs = []
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME_RE.match(name):
            errs.append(
                f"training_env name {name!r} is not a variable name: use letters, digits and _ "
                "(not a digit first)"
            )
        elif name in RESERVED_ENV:
            errs.append(f"training_env sets {name}, which pvegpu sets: {RESERVED_ENV[name]}")
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            errs.append(f"training_env[{name!r}]={value!r} must be a string: quote it")
        elif bad := control_chars(str(value)):
            errs.append(f"training_env[{name!r}] holds {bad}: remove it")
    return errs


def control_chars(value: str) -> str:
    """The control characters in ``value`` in words ('' when none): a tab or CR in an exported
    value is refused like a newline, since the build's settings file and the venv switch's
    checks take it line by line.

    >>> control_chars("a\\tb\\r")
    'a control character (tab, CR)'
    >>> control_chars("a b $x")
    ''
    """
    names = {"\0": "NUL", "\n": "newline", "\t": "tab", "\r": "CR"}
    found = [names.get(c, f"0x{ord(c):02x}") for c in value if ord(c) < 0x20 or ord(c) == 0x7F]
    if not found:
        return ""
    return f"a control character ({', '.join(dict.fromkeys(found))})"
