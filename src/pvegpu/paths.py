"""Where the package finds the project's own files (templates, group_data, locks, uv.lock).

The package runs from a checkout (``uv sync`` installs it editable), so the repository root is
two levels above this file.

>>> (PROJECT / "group_data" / "all.py").is_file(), TEMPLATES.name
(True, 'templates')
"""

from pathlib import Path

#: The repository root: deploy.py, group_data/, templates/, locks/, uv.lock.
PROJECT = Path(__file__).resolve().parents[2]
#: The Jinja templates of the boot units and the training unit.
TEMPLATES = PROJECT / "templates"
#: The one defaults file (every setting: docs/variables.md).
GROUP_DATA = PROJECT / "group_data" / "all.py"
