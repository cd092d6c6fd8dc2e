"""What pvegpu gives uv to make a lock (a pyproject, the index arguments, the argv) and what it
reads back from uv (its error, the hashes of its own wheels in uv.lock).

Torch comes only from the torch index and everything else only from ``package_index_url``: see
:mod:`pvegpu.locks`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..paths import PROJECT
from ..settings import Settings
from .credentials import split_credentials

#: The name of the torch index in the pyproject given to uv (credentials would be
#: ``UV_INDEX_PYTORCH_USERNAME``; we use the netrc, which covers both indexes).
TORCH_INDEX = "pytorch"


def training_pyproject(settings: Settings, pins: list[str]) -> str:
    """A ``pyproject.toml`` whose dependencies are ``pins`` and that binds torch, and only
    torch, to the torch index (``explicit = true``; uv's PyTorch guide): every other package
    comes from ``package_index_url`` (``--index-url``), even when the torch index has a copy.

    >>> from pvegpu.settings import defaults
    >>> text = training_pyproject(Settings.from_data(defaults()), ["torch==2.11.0+cu130"])
    >>> 'explicit = true' in text, 'torch = { index = "pytorch" }' in text
    (True, True)
    """
    url, _ = split_credentials(settings.torch.index_url)
    deps = "".join(f"    {json.dumps(pin)},\n" for pin in pins)
    return (
        "# Made by pvegpu for one uv call: torch from the torch index only, the rest from\n"
        "# package_index_url only (see pvegpu.locks).\n"
        "[project]\n"
        'name = "pvegpu-training-env"\n'
        'version = "0"\n'
        f"dependencies = [\n{deps}]\n\n"
        "[[tool.uv.index]]\n"
        f'name = "{TORCH_INDEX}"\n'
        f"url = {json.dumps(url)}\n"
        "explicit = true\n\n"
        "[tool.uv.sources]\n"
        f'torch = {{ index = "{TORCH_INDEX}" }}\n'
    )


def index_args(settings: Settings) -> list[str]:
    """``--index-url <package_index_url>`` (without credentials: those come from the netrc) and
    ``first-index`` (uv's default, stated against any config); the torch index is in the
    pyproject, never an extra index."""
    url, _ = split_credentials(settings.torch.package_index_url)
    return ["--index-url", url, "--index-strategy", "first-index"]


def compile_argv(
    settings: Settings, uv: str, pyproject: str, output: str, python_version: str
) -> list[str]:
    """``uv pip compile`` of the pyproject into a hashed lock for CPython ``python_version`` on
    x86_64 glibc Linux (what the container runs), without uv's header (it would name temp
    paths)."""
    return [
        uv,
        "pip",
        "compile",
        "--no-config",
        "--quiet",
        "--generate-hashes",
        "--no-header",
        *index_args(settings),
        "--python-version",
        python_version,
        "--python-platform",
        "x86_64-manylinux_2_28",
        pyproject,
        "-o",
        output,
    ]


def uv_error(lines: list[str]) -> str | None:
    """uv's own explanation, as one line, from its output (None when it gave none).

    >>> uv_error(["error: No solution found when resolving dependencies",
    ...           "  cause: Because transformers==9.9.9 was not found ...", "", "hint: ..."])
    'No solution found when resolving dependencies Because transformers==9.9.9 was not found ...'
    >>> uv_error(["  × No solution found when resolving dependencies:",
    ...           "  ╰─▶ Because torch==2.11.0+cu128 was not found in the package registry ..."])
    ... # doctest: +NORMALIZE_WHITESPACE
    'No solution found when resolving dependencies: Because torch==2.11.0+cu128 was not found in
    the package registry ...'
    """
    picked = []
    for line in lines:
        s = line.strip()
        s = re.sub(r"^(×|╰─▶|├─▶|│|error:|Caused by:|cause:)\s*", "", s)
        if s != line.strip() and s:
            picked.append(s)
    return " ".join(picked) if picked else None


def uv_reason(lines: list[str]) -> str:
    """:func:`uv_error`, else uv's last line of output.

    >>> uv_reason(["resolving", "something odd"])
    'something odd'
    """
    return uv_error(lines) or next(
        (line.strip() for line in reversed(lines) if line.strip()), "no output"
    )


def uv_wheel_hashes(version: str, project: Path = PROJECT) -> dict[str, str]:
    """``{wheel filename: sha256}`` of ``uv==version`` from the project's own uv.lock (the one pin
    for the controller's uv and the container's): the container install checks the wheel
    against it. Empty when uv.lock does not know that version.

    >>> from importlib.metadata import version as v
    >>> any("manylinux" in name for name in uv_wheel_hashes(v("uv")))
    True
    """
    import tomllib  # here: verify.py imports this module and never needs it

    try:
        lock = tomllib.loads((project / "uv.lock").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    for pkg in lock.get("package", []):
        if pkg.get("name") == "uv" and pkg.get("version") == version:
            out = {}
            for wheel in pkg.get("wheels", []):
                name = wheel.get("url", "").rsplit("/", 1)[-1]
                algo, _, digest = wheel.get("hash", "").partition(":")
                if name and algo == "sha256" and digest:
                    out[name] = digest
            return out
    return {}
