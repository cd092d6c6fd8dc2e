"""What a venv build says before it runs: why it is built, and (in the preview) the packages it
installs against the live venv's."""

from __future__ import annotations

from ..output.diff import package_changes
from ..settings import Settings
from .preview import show


def build_notes(state: dict, settings: Settings, reasons: list[str]) -> list[str]:
    """The lines a build prints first: why it is built, and a uv cache that cannot hard-link."""
    build = settings.torch.build_name
    notes = [r if r.startswith(build) else f"{build} needs a build: {r}" for r in reasons]
    if state.get("uv_cache_same_fs") is False:
        notes.append(
            f"uv_cache_dir={settings.python_env.uv_cache_dir} is on another filesystem than "
            f"venvs_dir={settings.python_env.venvs_dir}: installs copy instead of hard-linking"
        )
    return notes


def show_packages(state: dict, settings: Settings, pins: dict[str, str], why: list[str]) -> None:
    """Show what the new build installs against the live venv's packages."""
    link = state.get("venv_link") or ""
    live = ((state.get("venvs") or {}).get(link.rstrip("/").rsplit("/", 1)[-1]) or {}).get(
        "installed"
    ) or {}
    changes = package_changes(live, pins)
    same = len(set(pins) & set(live)) - sum(" -> " in line for line in changes)
    show(
        f"builds {settings.build_venv}.next beside the live venv ({'; '.join(why)}); against "
        f"{settings.python_env.venv_path} -> {link or '(none)'}:",
        [*changes, *([f"{same} packages as there"] if same else [])],
    )
