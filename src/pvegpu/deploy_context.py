"""The validated settings of the host a deploy file is running for.

>>> callable(settings)
True
"""

from __future__ import annotations

from .preflight import check_fleet
from .settings import Settings


def settings(host) -> Settings:
    """Settings of ``host``, after the fleet-wide preflight has passed (run once per run)."""
    return check_fleet(host.state, host.inventory)[host.name]
