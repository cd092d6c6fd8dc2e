"""The compiled unit templates are kept between runs (pvegpu.plan.template_cache, issue 14): a
run loads them instead of compiling them again, renders the same text, and a change of the
Environment's options or of the template compiles again."""

from __future__ import annotations

import jinja2
import pytest

from pvegpu.plan import boot, template_cache, unit
from pvegpu.settings import Settings, defaults


@pytest.fixture
def compiles(monkeypatch, tmp_path):
    """Counts jinja2 compilations, with the cache under tmp_path and no Environment kept."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    count = {"n": 0}
    original = jinja2.Environment.compile

    def counting(self, *a, **kw):
        count["n"] += 1
        return original(self, *a, **kw)

    monkeypatch.setattr(jinja2.Environment, "compile", counting)
    unit._unit_env.cache_clear()
    boot._env.cache_clear()
    yield count
    unit._unit_env.cache_clear()
    boot._env.cache_clear()


def test_a_second_run_loads_the_compiled_unit_and_renders_the_same_text(compiles, tmp_path):
    s = Settings.from_data(defaults())
    first = unit.render_unit(s)
    assert compiles["n"] == 1 and list((tmp_path / "pvegpu" / "jinja").glob("*/*.cache"))
    unit._unit_env.cache_clear()  # what a new run starts with
    assert unit.render_unit(s) == first and compiles["n"] == 1


def test_the_boot_templates_are_kept_apart_from_the_units(compiles):
    boot.render_modules()
    unit.render_unit(Settings.from_data(defaults()))
    assert template_cache.options_dir(boot._env()) != template_cache.options_dir(
        unit._unit_env(unit.TEMPLATES)
    )


def test_an_option_that_changes_the_code_gets_its_own_directory(tmp_path):
    plain = jinja2.Environment()
    assert template_cache.options_dir(plain, tmp_path) == template_cache.options_dir(
        jinja2.Environment(), tmp_path
    )
    for other in (
        jinja2.Environment(trim_blocks=True),
        jinja2.Environment(finalize=str),
        jinja2.Environment(autoescape=True),
    ):
        assert template_cache.options_dir(other, tmp_path) != template_cache.options_dir(
            plain, tmp_path
        )


def test_an_unwritable_cache_renders_as_without_one(compiles, tmp_path):
    (tmp_path / "pvegpu").write_text("a file where the cache directory would go")
    s = Settings.from_data(defaults())
    assert unit.render_unit(s).startswith(unit.UNIT_MARKER) and compiles["n"] == 1


def test_the_units_cache_directory_is_the_same_in_every_run(tmp_path):
    """Its key is stable across interpreters (a key with an address in it would never hit)."""
    import subprocess
    import sys

    code = (
        "from pvegpu.plan import template_cache, unit; "
        "print(template_cache.options_dir(unit._unit_env(unit.TEMPLATES), '/x'))"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
        for _ in range(2)
    }
    assert len(runs) == 1


def test_a_changed_finalize_function_gets_its_own_directory(tmp_path):
    def one(value):
        return value

    def other(value):
        return str(value).strip()

    assert template_cache.options_dir(
        jinja2.Environment(finalize=one), tmp_path
    ) != template_cache.options_dir(jinja2.Environment(finalize=other), tmp_path)
