"""How deep verification goes and where its report goes.

>>> VerificationSettings("full", None).problems()
["verify_level='full' is unknown: use basic or compile"]
"""

from __future__ import annotations

from dataclasses import dataclass

from .kinds import Part, optional_text, setting, text

LEVELS = ("basic", "compile")


@dataclass(frozen=True)
class VerificationSettings(Part):
    """``verify_level`` and ``verify_report`` (group_data/all.py, "verification")."""

    level: str = setting("verify_level", text)
    report: str | None = setting("verify_report", optional_text)

    def problems(self) -> list[str]:
        errs = self.field_problems()
        if self.level not in LEVELS:
            errs.append(f"verify_level={self.level!r} is unknown: use basic or compile")
        return errs
