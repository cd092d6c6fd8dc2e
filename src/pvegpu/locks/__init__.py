"""Locks: what the python env stage installs into a build's venv, and how the lock is made.

Each variant has an input ``<locks_dir>/<variant>.in`` (the exact pins:
``torch==<version>+<variant>`` and the training stack) and, per Python version (the venv's X.Y:
wheels differ per Python), a hashed lock ``<locks_dir>/<variant>-py<X.Y>.lock`` (``uv pip compile
--generate-hashes`` output). A build applies it with ``uv pip sync --require-hashes``, so anything
not in the lock is removed and any file whose hash differs is refused.

Locks on first use: when the lock is missing (or out of date) the deploy compiles it on the
controller against the configured indexes (``make_lock``), writes it, says so ("commit it") and
installs from it; later deploys install from the recorded lock, so an index that changes a wheel
afterwards is refused by hash. ``require_lock=true`` refuses instead of making one. An ``.in``
that pins something else than the settings is refused (its locks were made for other pins).

Torch comes only from the torch index and everything else only from ``package_index_url``: the
per-CUDA torch index also hosts older copies of many of torch's dependencies (filelock,
typing-extensions, ...), so ``first-index`` with the torch index as an *extra* index pins those
stale copies or fails. uv's mechanism for this (docs/guides/integration/pytorch.md) is a named
index with ``explicit = true`` that only packages bound to it in ``[tool.uv.sources]`` use; ``uv
pip compile`` and ``uv pip sync`` honour both when the requirements come from a ``pyproject.toml``
(``training_pyproject``). docs/real-tools.md ("uv", "PyTorch wheel index") records the tests.

The package is split by concern; import from ``pvegpu.locks`` (this file names its interface):

- :mod:`.pins`: the pins the settings ask for and the pins a requirements or lock text holds;
- :mod:`.credentials`: index credentials (netrc, redaction, the reachability check);
- :mod:`.uv_commands`: the pyproject and argv given to uv, and uv's output read back;
- :mod:`.plan`: where the locks are and whether to install, make or refuse (:func:`lock_plan`);
- :mod:`.make`: making a lock on the controller (:func:`make_lock`).

>>> from pvegpu.settings import Settings, defaults
>>> lock_plan(Settings.from_data(defaults()), "3.11").source
'locks/cu130-py3.11.lock'
"""

from .credentials import credential_conflict, index_problem, netrc_text, redact, split_credentials
from .make import IN_HEADER, lock_header, make_lock
from .pins import (
    PIN_LINE,
    constraints,
    desired_pins,
    desired_pins_list,
    normalize,
    parse_pins,
    requirements_in,
    unhashed_pins,
)
from .plan import (
    LockPlan,
    display,
    early_lock_error,
    in_path,
    lock_name,
    lock_path,
    lock_plan,
    locks_dir,
)
from .uv_commands import (
    TORCH_INDEX,
    compile_argv,
    index_args,
    training_pyproject,
    uv_error,
    uv_reason,
    uv_wheel_hashes,
)

__all__ = [
    "IN_HEADER",
    "PIN_LINE",
    "TORCH_INDEX",
    "LockPlan",
    "compile_argv",
    "constraints",
    "credential_conflict",
    "desired_pins",
    "desired_pins_list",
    "display",
    "early_lock_error",
    "in_path",
    "index_args",
    "index_problem",
    "lock_header",
    "lock_name",
    "lock_path",
    "lock_plan",
    "locks_dir",
    "make_lock",
    "netrc_text",
    "normalize",
    "parse_pins",
    "redact",
    "requirements_in",
    "split_credentials",
    "training_pyproject",
    "unhashed_pins",
    "uv_error",
    "uv_reason",
    "uv_wheel_hashes",
]
