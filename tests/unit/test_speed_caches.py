"""What a run on the controller does once instead of every time (issue 14): the jinja2
templates compile once per run, and ``systemd-analyze verify``'s verdict on a unit text is kept
on the controller (keyed by the text and the tool), so a converged run does not start it again.
"""

import os
import stat

import jinja2
import pytest

from pvegpu.plan import boot, unit
from pvegpu.settings import Settings, defaults


@pytest.fixture
def compiles(monkeypatch, tmp_path):
    """Counts jinja2 template compilations (in a run with no compiled templates kept yet)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = []
    real = jinja2.Environment.compile

    def counting(self, *a, **kw):
        calls.append(a[1] if len(a) > 1 else kw.get("name"))
        return real(self, *a, **kw)

    monkeypatch.setattr(jinja2.Environment, "compile", counting)
    unit._unit_env.cache_clear()
    boot._env.cache_clear()
    return calls


def test_the_training_unit_template_compiles_once_for_many_renders(compiles):
    s = Settings.from_data(defaults())
    assert unit.render_unit(s) == unit.render_unit(s)
    assert compiles == ["training.service.j2"]


def test_the_boot_templates_compile_once_for_many_renders(compiles):
    assert boot.render_modules() == boot.render_modules()
    assert compiles == ["modules-load-nvidia.conf.j2"]


@pytest.fixture
def fake_analyze(tmp_path, monkeypatch):
    """A systemd-analyze on PATH that logs each start and rejects units holding 'BAD'."""
    bindir, log = tmp_path / "bin", tmp_path / "calls"
    bindir.mkdir()
    tool = bindir / "systemd-analyze"
    tool.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {log}\n'
        'if grep -q BAD "$2"; then echo "$2:3: Unknown key name \'BAD\', ignoring." >&2; fi\n'
    )
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    unit.verify_problems.cache_clear()

    def starts():
        unit.verify_problems.cache_clear()  # a new run: only the kept verdict is left
        return len(log.read_text().splitlines()) if log.exists() else 0

    return tool, starts


def test_a_unit_verdict_is_kept_between_runs(fake_analyze):
    tool, starts = fake_analyze
    assert unit.verify_problems("[Service]\nExecStart=/bin/true\n", "u") == ()
    assert starts() == 1
    assert unit.verify_problems("[Service]\nExecStart=/bin/true\n", "u") == ()
    assert starts() == 1  # the same text: the kept verdict
    bad = unit.verify_problems("[Service]\nExecStart=/bin/true\nBAD=1\n", "u")
    assert bad == ("u.service:3: Unknown key name 'BAD', ignoring.",)
    assert starts() == 2
    assert unit.verify_problems("[Service]\nExecStart=/bin/true\nBAD=1\n", "u") == bad
    assert starts() == 2  # a rejection is kept too


def test_another_tool_or_unit_name_checks_again(fake_analyze):
    tool, starts = fake_analyze
    unit.verify_problems("[Service]\nExecStart=/bin/true\n", "u")
    unit.verify_problems("[Service]\nExecStart=/bin/true\n", "v")
    assert starts() == 2
    tool.write_text(tool.read_text() + "# upgraded\n")  # another size and mtime
    unit.verify_problems("[Service]\nExecStart=/bin/true\n", "u")
    assert starts() == 3


def test_an_unwritable_cache_still_gives_the_verdict(fake_analyze, tmp_path, monkeypatch):
    tool, starts = fake_analyze
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert unit.verify_problems("[Service]\nBAD=1\n", "u") == (
        "u.service:3: Unknown key name 'BAD', ignoring.",
    )
    assert starts() == 1
    unit.verify_problems("[Service]\nBAD=1\n", "u")
    assert starts() == 2


def test_the_inventory_skips_the_final_garbage_collection(tmp_path):
    """Every pyinfra run loads inventory.py: it registers the exit handler that freezes the heap
    (pvegpu.quick_exit), which saves the run's last collection (0.1-0.5 s)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = (
        "import gc, runpy, pvegpu.quick_exit as q\n"
        f"runpy.run_path({str(root / 'inventory.py')!r})\n"
        "assert q._registered\n"
        "q.freeze_heap()\n"
        "print(gc.isenabled(), gc.get_freeze_count() > 0)\n"
    )
    env = {"PATH": os.environ["PATH"], "PVE_HOST": "127.0.0.1", "HOME": str(tmp_path)}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["False", "True"]
