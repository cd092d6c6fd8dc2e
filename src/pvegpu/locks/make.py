"""Making a lock on the controller: ``uv pip compile --generate-hashes`` of the settings' pins
against the configured indexes, written atomically beside its ``.in``.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from ..digests import text_digest
from ..paths import PROJECT
from ..settings import Settings
from .credentials import index_problem, netrc_text, redact
from .pins import desired_pins_list, requirements_in
from .plan import LockPlan, _in_problem, _lock_problem, display, in_path, lock_path, lock_plan
from .uv_commands import compile_argv, training_pyproject, uv_reason

IN_HEADER = (
    "# Input of the {variant} locks ({variant}-py<X.Y>.lock): torch built for {variant} and the\n"
    "# training stack, pinned exactly as the settings ask (torch_version, torch_variant,\n"
    "# training_requirements). A deploy makes a missing lock from it; commit both.\n"
)


def make_lock(
    settings: Settings,
    python_version: str,
    project: Path = PROJECT,
    uv: str | None = None,
    run=subprocess.run,
    check=index_problem,
) -> LockPlan:
    """Compile ``<variant>-py<X.Y>.lock`` on this machine (the controller) from the settings'
    pins against the configured indexes, write it (and a missing ``.in``) atomically, and
    return its plan; on failure a plan with ``error`` (one line: what, why, the fix).

    Credentials in the index URLs reach uv only through a temporary 0600 netrc (``$NETRC``),
    never its argv; its output is redacted before it is shown.
    """
    plan = lock_plan(settings, python_version, project)
    if plan.kind == "lock" or plan.error:
        return plan
    path = lock_path(settings, python_version, project)
    source = display(path, project)
    problem = check(settings)
    if problem:
        return LockPlan(
            "make", "", "", source, reason=plan.reason, error=f"making {source} failed: {problem}"
        )
    if uv is None:
        import uv as uv_package

        uv = uv_package.find_uv_bin()
    with tempfile.TemporaryDirectory(prefix="pvegpu-lock-") as tmp:
        pyproject = Path(tmp) / "pyproject.toml"
        pyproject.write_text(training_pyproject(settings, desired_pins_list(settings)))
        out = Path(tmp) / "lock.txt"
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("UV_") and k not in ("VIRTUAL_ENV", "NETRC")
        }
        env.update(UV_NO_PROGRESS="1", UV_PYTHON_DOWNLOADS="never")
        # the site's proxies and index CA, as the container's uv gets them
        env.update(settings.site.proxy_env())
        if settings.site.index_ca_bundle:
            env["SSL_CERT_FILE"] = settings.site.index_ca_bundle
        netrc = netrc_text(settings.torch)
        if netrc:
            env["NETRC"] = str(Path(tmp) / "netrc")
            fd = os.open(env["NETRC"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(netrc)
        argv = compile_argv(settings, uv, str(pyproject), str(out), python_version)
        proc = run(argv, env=env, capture_output=True, text=True, cwd=tmp)
        if proc.returncode != 0 or not out.is_file():
            why = uv_reason(redact(proc.stdout + proc.stderr).splitlines())
            return LockPlan(
                "make",
                "",
                "",
                source,
                reason=plan.reason,
                error=(
                    f"making {source} failed: {why}: fix the pins or the indexes "
                    "(package_index_url, torch_index_base) and run deploy.py again"
                ),
            )
        body = out.read_text()
    problem = _lock_problem(settings, body, path, project)
    if problem:
        return LockPlan(
            "make", "", "", source, reason=plan.reason, error=f"making {source} failed: {problem}"
        )
    text = lock_header(settings, python_version, project) + body
    if not in_path(settings, project).exists() or _in_problem(settings, project):
        _write_atomically(in_path(settings, project), None, settings, replace_in=True)
    _write_atomically(path, text, settings)
    return LockPlan("lock", text, text_digest(text), source, reason=plan.reason, made=True)


def lock_header(settings: Settings, python_version: str, project: Path = PROJECT) -> str:
    return (
        f"# Hashed lock of {display(in_path(settings, project), project)} for Python "
        f"{python_version}, made by pvegpu with uv pip compile --generate-hashes:\n"
        f"# torch from {redact(settings.torch.index_url)} (explicit index), everything else from\n"
        f"# {redact(settings.torch.package_index_url)}. Commit it; "
        "deploys install exactly these files.\n"
    )


def _write_atomically(
    path: Path, text: str | None, settings: Settings, replace_in: bool = False
) -> None:
    """Write ``text`` to ``path`` via a temp file and a rename; ``None`` writes the ``.in`` of
    the settings (only when it is missing, unless ``replace_in``)."""
    if text is None:
        if path.exists() and not replace_in:
            return
        text = IN_HEADER.format(variant=settings.torch.variant) + requirements_in(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.pvegpu-tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
