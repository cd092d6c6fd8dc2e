"""What a run may disrupt: rebuilds, restarting the training, waiting for another deploy.

>>> RunPolicy("everything", False, 600).problems()  # doctest: +NORMALIZE_WHITESPACE
["rebuild='everything' is unknown: use rebuild=venv or rebuild=container (or leave it unset)"]
"""

from __future__ import annotations

from dataclasses import dataclass

from .kinds import Part, flag, integer, optional_text, setting

REBUILDS = (None, "venv", "container")


@dataclass(frozen=True)
class RunPolicy(Part):
    """``rebuild``, ``restart_training`` and ``deploy_lock_wait_s`` (group_data/all.py,
    "rebuild / restarts")."""

    rebuild: str | None = setting("rebuild", optional_text)
    restart_training: bool = setting("restart_training", flag)
    lock_wait_s: int = setting("deploy_lock_wait_s", integer)

    def problems(self) -> list[str]:
        errs = self.field_problems()
        if self.rebuild not in REBUILDS:
            errs.append(
                f"rebuild={self.rebuild!r} is unknown: use rebuild=venv or rebuild=container (or "
                "leave it unset)"
            )
        if not 0 <= self.lock_wait_s <= 86400:
            errs.append(
                f"deploy_lock_wait_s={self.lock_wait_s} must be 0..86400: the "
                "seconds a deploy waits for another one on the same node"
            )
        return errs
