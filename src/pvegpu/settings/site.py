"""What a real site needs beyond the defaults: the free-space floor on the container's root disk
and SSH keepalive on the node connections.

>>> for line in SiteSettings(-1, 0).problems(): print(line)
min_free_gib=-1 must be >= 0: the GiB the container's root disk must have free for a build
ssh_keepalive_s=0 must be 1..3600: seconds between SSH keepalives on the node connections
"""

from __future__ import annotations

from dataclasses import dataclass

from .kinds import Part, integer, setting


@dataclass(frozen=True)
class SiteSettings(Part):
    """``min_free_gib`` and ``ssh_keepalive_s`` (group_data/all.py, "site")."""

    min_free_gib: int = setting("min_free_gib", integer)
    ssh_keepalive_s: int = setting("ssh_keepalive_s", integer)

    def problems(self) -> list[str]:
        errs = self.field_problems()
        if self.min_free_gib < 0:
            errs.append(
                f"min_free_gib={self.min_free_gib} must be >= 0: the GiB the container's root "
                "disk must have free for a build"
            )
        if not 1 <= self.ssh_keepalive_s <= 3600:
            errs.append(
                f"ssh_keepalive_s={self.ssh_keepalive_s} must be 1..3600: seconds between SSH "
                "keepalives on the node connections"
            )
        return errs
