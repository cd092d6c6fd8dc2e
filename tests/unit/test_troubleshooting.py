"""docs/troubleshooting.md lists every refusal the code can print, as the code writes it.

A refusal is found in the code where it is made (src/pvegpu: settings, startup, plan,
operations, locks): the message of a ``raise SettingsError/FleetError/PreflightError/ValueError``
(settings/kinds.py's type checks), of ``fail(...)``/``failure(...)``, of ``<problems|errors|errs>
.append(...)``, and what a function named ``*_problem``, ``*_line``, ``*_blocker`` or
``*_refusal`` returns. Each message's skeleton (its text with every formatted value as ``…``,
without a leading ``…: `` node prefix) must appear in the page, backticks and line breaks aside,
so a user who searches the page for the line they got finds its cause and fix. Lines that are no
refusal (a restart's reasons, a title over refusals) are listed in ``NOT_REFUSALS`` with why.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "pvegpu"
PAGE = ROOT / "docs" / "troubleshooting.md"
PACKAGES = ("settings", "startup", "plan", "operations", "locks")
RAISED = {"SettingsError", "FleetError", "PreflightError", "ValueError", "Refused"}
FAILS = {"fail", "failure"}
LISTS = {"problems", "errors", "errs"}
RETURNING = ("_problem", "_line", "_blocker", "_refusal")
#: the verification checks the node's preflight runs too (their ``Problem(check, expected,
#: found, fix)``: the check's name and its fix)
NODE_CHECKS = ("node.py",)
#: skeletons of lines the scan finds that are no refusal: why each is not one
NOT_REFUSALS = {
    "… is in the container but no longer passed through": "a reason a container restarts",
    "… is missing in the container": "a reason a container restarts",
    "… is …:… in the container, …:… on the node": "a reason a container restarts",
    "bad settings, nothing was changed:\n…": "the title over the settings' refusals",
    "hosts deploy.py cannot deploy, nothing was changed:\n…": "the title over stray hosts",
    "CT …: … waits for … (…)": "a change that waits, not a refusal",
    "pvegpu: …: converged; … changes wait for … (…): …": "a closing line (README, How a run ends)",
    "fix: run deploy.py (it rebuilds the venv from its lock beside the live one and switches "
    "to it)": "the fix of a verification's drift line (docs/verification.md)",
}


def skeleton(node: ast.AST) -> list[str | None] | None:
    """A message's parts: literal text, None for each formatted value (None: not a message)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [v.value if isinstance(v, ast.Constant) else None for v in node.values]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = skeleton(node.left), skeleton(node.right)
        if left is None and right is None:
            return None
        return (left or [None]) + (right or [None])
    return None


def messages(node: ast.AST) -> list[str]:
    """The skeletons of the message(s) an expression makes (both branches of an ``x if c else
    y``), values as ``…``, a leading node prefix ``…: `` dropped; none without a word of text."""
    if isinstance(node, ast.IfExp):
        return messages(node.body) + messages(node.orelse)
    parts = skeleton(node)
    if parts is None:
        return []
    text = "".join("…" if p is None else p for p in parts)
    text = re.sub(r"^…: ", "", text)
    return [text] if re.search(r"[A-Za-z]{3}", text) else []


def name_of(func: ast.AST) -> str:
    return getattr(func, "id", getattr(func, "attr", ""))


def message_args(n: ast.AST) -> list[ast.AST]:
    """The expressions that make a refusal's message at node ``n`` (none: no refusal there)."""
    if isinstance(n, ast.Raise) and isinstance(n.exc, ast.Call):
        return list(n.exc.args) if name_of(n.exc.func) in RAISED else []
    if isinstance(n, ast.Call):
        appended = name_of(n.func) == "append" and name_of(getattr(n.func, "value", None))
        if name_of(n.func) in FAILS or appended in LISTS:
            return list(n.args)
        if name_of(n.func) == "Problem" and len(n.args) == 4:
            return [n.args[0], n.args[3]]  # a node check the preflight runs: its name and fix
    returning = getattr(n, "function", "").endswith((*RETURNING, "_problems"))
    if isinstance(n, ast.Return) and n.value is not None and returning:
        return list(n.value.elts) if isinstance(n.value, ast.List) else [n.value]
    return []


def refusal_sites(path: Path):
    """(line, skeleton) of each refusal made in ``path``."""
    tree = ast.parse(path.read_text())
    for fn in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
        for n in ast.walk(fn):
            n.function = fn.name  # type: ignore[attr-defined]
    for n in ast.walk(tree):
        for arg in message_args(n):
            for text in messages(arg):
                yield n.lineno, text


def all_refusals() -> list[tuple[str, str]]:
    """(where, skeleton) of every refusal of the code."""
    found = []
    paths = [p for package in PACKAGES for p in sorted((SRC / package).rglob("*.py"))]
    for path in [*paths, *(SRC / "verification" / name for name in NODE_CHECKS)]:
        for line, text in refusal_sites(path):
            found.append((f"{path.relative_to(ROOT)}:{line}", text))
    return found


def normal(text: str) -> str:
    """Backticks dropped, any run of white space one space, of values (…) one value."""
    return re.sub(r"…+", "…", re.sub(r"\s+", " ", text.replace("`", ""))).strip()


REFUSALS = all_refusals()


def test_the_scan_finds_the_refusals_it_must():
    texts = {text for _, text in REFUSALS}
    for known in (
        "torch_variant=… is not a known variant: set torch_variant to one of …",
        "data_dir_node=… would be on the node's root filesystem",
        "another deploy holds the node",
        "… is stopping (deactivating): not started",
    ):
        assert any(known in t for t in texts), known


@pytest.mark.parametrize("where, text", REFUSALS, ids=[w for w, _ in REFUSALS])
def test_every_refusal_is_in_the_troubleshooting_page(where, text):
    if text in NOT_REFUSALS:
        return
    assert normal(text) in normal(PAGE.read_text()), (
        f"{where}: add this refusal to docs/troubleshooting.md (as the code writes it, each "
        f"value as …), with its cause and fix:\n{text}"
    )


def test_every_line_listed_as_no_refusal_is_still_in_the_code():
    texts = {text for _, text in REFUSALS}
    assert sorted(set(NOT_REFUSALS) - texts) == []
