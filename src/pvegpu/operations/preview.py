"""What a preview shows of a change before pyinfra asks to go on (deploy.py without -y, and
``--dry``), and what ``--diff`` shows while a run executes: a file pvegpu writes as a unified diff
(old -> new), `pct set` as each key old -> new, a venv build as the packages it installs.

pyinfra's preview runs each operation only up to its first command (any command counts as a
change), so an operation shows its change before it yields anything. pvegpu writes files with one
shell command (``util.write_file_command``), which pyinfra's own ``--diff`` cannot see into. A
file's old contents are read only here, and only for a file whose digest differs from the new
text: a converged run, and a -y run without ``--diff``, read nothing more.

.. code:: python

    show_file(path, text, exists=state.get("unit_digest") is not None)
    yield write_file_command(path, text)
"""

from __future__ import annotations

import click
from pyinfra import host, logger
from pyinfra.facts.files import FileContents

from ..digests import text_digest
from ..output.diff import file_diff, pct_set_changes
from ..run.run_context import run_context


def showing() -> bool:
    """Whether a change is shown now: in a preview, or with ``--diff`` while executing."""
    state = getattr(host, "state", None)  # None: outside a pyinfra run (nothing to show)
    return state is not None and (not state.is_executing or bool(state.config.DIFF))


def show(title: str, lines: list[str] | tuple[str, ...] = ()) -> None:
    """Print ``title`` (for this host) and ``lines`` under it, once per run (a preview that goes
    on with ``--diff`` does not print it again)."""
    if not showing():
        return
    shown = run_context(host.state).shown
    key = (host.name, title, tuple(lines))
    if key in shown:
        return
    shown.add(key)
    host.log_styled(title, log_func=logger.info)
    for line in lines:
        color = (
            {"+": "green", "-": "red", "@": "cyan"}.get(line[:1])
            if line[:3]
            not in (
                "+++",
                "---",
            )
            else None
        )
        logger.info(f"  {click.style(line, fg=color) if color else line}")


def old_text(path: str) -> str | None:
    """The contents of ``path`` on this host now (None: it does not exist), for a diff."""
    lines = host.get_fact(FileContents, path=path)
    return None if lines is None else "".join(f"{line}\n" for line in lines)


def show_file(path: str, new: str, exists: bool, old: str | None = None) -> None:
    """Show the change of file ``path`` to ``new`` (``exists``: it is there now; ``old``: its
    contents when known, else read now)."""
    if not showing():
        return
    if exists and old is None:
        old = old_text(path)
    verb = "modifies" if exists else "creates"
    show(f"{verb} {path}:", file_diff(path, old if exists else None, new))


def show_pct_set(vmid: int, config: dict, args: list[str], defaults: dict | None = None) -> None:
    """Show what ``pct set <vmid> <args>`` changes in ``config``, each key old -> new."""
    if args:
        show(f"pct set {vmid}:", pct_set_changes(config, args, defaults))


def show_files(wanted: dict[str, str], digests: dict) -> None:
    """Show each file of ``wanted`` ({path: new text}) whose digest (``digests``: {path: sha256
    or None}) differs."""
    for path, text in wanted.items():
        if digests.get(path) != text_digest(text):
            show_file(path, text, exists=digests.get(path) is not None)
