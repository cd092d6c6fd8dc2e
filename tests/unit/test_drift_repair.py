"""Drift that leaves torch alone (issue 15): an extra package alone is a reason to rebuild."""

from __future__ import annotations

from pvegpu.locks import lock_plan
from pvegpu.plan.venvs import build_reasons, marker
from pvegpu.settings import Settings, defaults


def test_an_extra_package_alone_makes_the_build_stale():
    s = Settings.from_data({**defaults(), "training_requirements": []})
    plan = lock_plan(s, "3.11")
    real = f"{s.torch.build_name}.b1"
    entry = {
        "path": f"/root/venvs/{real}",
        "build": marker(s, plan, "3.11.2"),
        "python_ok": True,
        "installed": {"torch": "2.11.0+cu130", "sglang-junk": "0.1.0"},
        "locked": {"torch": "2.11.0+cu130"},
    }
    state = {
        "python": {"version": "3.11.2"},
        "venv_link": s.build_venv,
        "venvs": {real: entry, s.torch.build_name: dict(entry, link=real, real=real)},
    }
    assert build_reasons(state, s, plan) == [
        f"{s.torch.build_name}: sglang-junk 0.1.0 is installed but not in the lock (extra)"
    ]
