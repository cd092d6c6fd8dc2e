"""uv command lines for the container (pure: tests run them against the loopback index).

Every uv call: ``--no-config`` (no stray uv.toml can add an index or a torch backend), the
index-changing ``UV_*`` variables unset, ``--index-url <package_index_url>`` and the torch index
only as an *explicit* index that torch alone is bound to (a generated ``pyproject.toml``, see
:mod:`pvegpu.locks`). Never ``--torch-backend`` (``auto`` falls back to CPU wheels where no driver
is visible).

>>> from pvegpu.settings import Settings, defaults
>>> uv_bin(Settings.from_data({**defaults(), "uv_version": "0.13.9"}).python_env)
'/opt/pvegpu/uv-0.13.9/bin/uv'
"""

from __future__ import annotations

import shlex

from ..facts.probe import probe_source
from ..locks import index_args, parse_pins, split_credentials
from ..settings import PythonEnvSettings, Settings, TorchSettings

#: Environment variables that would change what uv installs or from where; unset for every call.
UV_UNSET = (
    "UV_TORCH_BACKEND",
    "UV_INDEX",
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_EXTRA_INDEX_URL",
    "UV_INDEX_STRATEGY",
    "UV_FIND_LINKS",
    "UV_NO_INDEX",
    "UV_CONSTRAINT",
    "UV_OVERRIDE",
    "UV_PRERELEASE",
    "UV_RESOLUTION",
    "UV_EXCLUDE_NEWER",
    "UV_CONFIG_FILE",
    "UV_OFFLINE",
    "UV_PYTHON",
    "UV_SYSTEM_PYTHON",
    "UV_LINK_MODE",
    "VIRTUAL_ENV",
)

#: Where the index credentials live in the container while pvegpu needs them (mode 0600; the
#: netrc uv reads through $NETRC): never in a command line.
NETRC = "/root/.config/pvegpu/netrc"
#: Where the indexes' CA bundle (``index_ca_bundle``, copied from the controller) lives in the
#: container, for uv and pvegpu's index checks (``SSL_CERT_FILE``).
CA_BUNDLE = "/etc/pvegpu/index-ca.pem"


def site_env(settings: Settings) -> dict[str, str]:
    """The proxy and CA variables every network call in the container gets explicitly (`pct
    exec` starts from an empty environment): ``http(s)_proxy``/``no_proxy`` in both spellings,
    ``SSL_CERT_FILE`` when ``index_ca_bundle`` is set (uv and Python's ssl both read it).

    >>> from pvegpu.settings import defaults
    >>> site_env(Settings.from_data(defaults()))
    {}
    """
    env = settings.site.proxy_env()
    if settings.site.index_ca_bundle:
        env["SSL_CERT_FILE"] = CA_BUNDLE
    return env


def site_assignments(settings: Settings) -> str:
    """``site_env`` as shell assignments to put in front of a command ("" when none)."""
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in site_env(settings).items())


def uv_home(python_env: PythonEnvSettings) -> str:
    """The pinned uv's own directory in the container (one per version)."""
    return f"/opt/pvegpu/uv-{python_env.uv_version}"


def uv_bin(python_env: PythonEnvSettings) -> str:
    """Where the pinned uv lives in the container (its own directory, one per version)."""
    return f"{uv_home(python_env)}/bin/uv"


def uv_env(settings: Settings) -> str:
    """Environment prefix of every uv call: cache beside the venvs, no Python downloads, and
    nothing from the environment that could change the indexes or the torch backend."""
    unset = " ".join(f"-u {k}" for k in UV_UNSET)
    site = site_assignments(settings)
    return (
        f"env {unset} UV_CACHE_DIR={shlex.quote(settings.python_env.uv_cache_dir)} "
        "UV_PYTHON_DOWNLOADS=never UV_NO_PROGRESS=1" + (f" {site}" if site else "")
    )


def sync_argv(
    settings: Settings, uv: str, python: str, pyproject: str, lock: str, offline: bool = False
) -> list[str]:
    """``uv pip sync`` of a hashed lock: exactly its packages, anything else removed.

    The requirements are the lock's pins in a pyproject that binds torch to the explicit torch
    index (``training_pyproject``); the lock itself is the constraints file that carries the
    hashes, and ``--require-hashes`` refuses any file whose hash is not in it.
    """
    return [
        uv,
        "pip",
        "sync",
        "--no-config",
        "--quiet",
        "--require-hashes",
        "--python",
        python,
        *index_args(settings),
        "--constraints",
        lock,
        *(["--offline"] if offline else []),
        pyproject,
    ]


def lock_requirements(lock_text: str) -> list[str]:
    """The lock's pins as requirement strings, for the sync's pyproject.

    >>> lock_requirements("torch==2.11.0+cu130 \\\\\\n    --hash=sha256:00\\nfilelock==3.20.0\\n")
    ['filelock==3.20.0', 'torch==2.11.0+cu130']
    """
    return [f"{name}=={version}" for name, version in sorted(parse_pins(lock_text).items())]


def has_credentials(torch: TorchSettings) -> bool:
    """Whether either index URL carries ``user:token@`` (then uv reads them from ``NETRC``)."""
    return any(split_credentials(u)[1] for u in (torch.package_index_url, torch.index_url))


def reach_command(settings: Settings) -> str:
    """The container-side check that both indexes answer (URLs without credentials): the
    ``reach_indexes`` probe (with the prelude, as every probe), run by ``python_interpreter``
    with the URLs as arguments."""
    package, _ = split_credentials(settings.torch.package_index_url)
    torch, _ = split_credentials(settings.torch.index_url)
    script = probe_source("reach_indexes")
    site = site_assignments(settings)
    return (
        (f"{site} " if site else "")
        + f"{shlex.quote(settings.python_env.interpreter)} -c {shlex.quote(script)} "
        f"{shlex.quote('package_index_url=' + package)} "
        f"{shlex.quote('torch_index_base=' + torch)}"
    )
