"""pvegpu's version: pyproject.toml's, as the installed package records it (``uv sync``).

It opens every run's output (inventory.py) and is in the JSON verification report, so a user can
quote which pvegpu made a change.

>>> VERSION.count(".") >= 2
True
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    VERSION = version("pvegpu")
except PackageNotFoundError:  # a checkout used without `uv sync`: say so, never guess
    VERSION = "unknown (run `uv sync`)"
