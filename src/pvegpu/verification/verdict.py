"""The verdict every check adds to: problems (expectation, fact, fix), warnings, the GPU table.

>>> v = Verdict("CT 200 on n1")
>>> v.problems.append(Problem("GPU count", "8", "7", "run deploy.py", gpu=None))
>>> v.ok, v.lines()
(False, ['GPU count: expected 8; found 7; fix: run deploy.py'])
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Problem:
    """One failed expectation: what was expected, what the facts say, and the fix."""

    check: str
    expected: str
    found: str
    fix: str
    gpu: int | None = None  # the container's CUDA index it concerns, if any

    def line(self) -> str:
        return f"{self.check}: expected {self.expected}; found {self.found}; fix: {self.fix}"


@dataclass
class Verdict:
    """One container's verification. ``notes`` (CUDA index) and ``node_notes`` (node GPU index)
    collect the short status words of the table's rows while the checks run."""

    where: str
    rows: list[dict] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    notes: dict[int | None, list[str]] = field(default_factory=dict, repr=False, compare=False)
    node_notes: dict[int, list[str]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        return [p.line() for p in self.problems]

    def note(self, gpu: int | None, text: str) -> None:
        """Add a short status word to the table row of CUDA device ``gpu``."""
        self.notes.setdefault(gpu, []).append(text)

    def as_dict(self) -> dict:
        return {
            "where": self.where,
            "verdict": "pass" if self.ok else "fail",
            "problems": [{**asdict(p), "line": p.line()} for p in self.problems],
            "warnings": list(self.warnings),
            "gpus": self.rows,
            "summary": self.summary,
        }
