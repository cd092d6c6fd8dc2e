"""The training unit's plan (pvegpu.plan.unit): behaviours the mutation run (bench/mutation.py)
found unpinned. Lines a user reads are pinned word for word."""

import dataclasses
import os
import stat

import pytest

from pvegpu.plan import unit as unit_mod
from pvegpu.plan.unit import (
    _run_verify,
    _verdict_path,
    desired_start,
    parse_started_record,
    pending_reasons,
    renamed_unit_line,
    running_other_units,
    training_matcher,
    unit_plan,
    unit_problems,
)
from pvegpu.settings import Settings, defaults


def settings(**over):
    return Settings.from_data({**defaults(), **over})


def fake_tool(tmp_path, body):
    """A stand-in for systemd-analyze: a shell script that refuses anything but ``verify PATH``
    (so the subcommand is pinned) and then runs ``body`` with the unit's path in $2."""
    tool = tmp_path / "systemd-analyze"
    tool.write_text(
        "#!/bin/sh\n"
        'if [ "$1" != verify ]; then echo "Unknown command verb $1." >&2; exit 1; fi\n'
        f"{body}\n"
    )
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return str(tool)


# --- _run_verify: what systemd-analyze verify says, one line each ---------------------------


def test_verify_lines_name_the_unit_by_its_file_name_not_the_temporary_path(tmp_path):
    tool = fake_tool(tmp_path, "echo \"  $2:7: Unknown key name 'Foo', ignoring.  \" >&2")
    assert _run_verify(tool, "[Service]\n", "t1") == (
        "t1.service:7: Unknown key name 'Foo', ignoring.",
    )


def test_verify_that_succeeds_silently_reports_nothing(tmp_path):
    # the fake answers an unknown verb with an error: a wrong verb would not be silent
    assert _run_verify(fake_tool(tmp_path, "exit 0"), "[Service]\n", "t1") == ()


def test_failing_verify_without_a_line_naming_the_unit_reports_its_last_stderr_line(tmp_path):
    body = 'printf "first\\n\\n  second  \\n\\nFailed to load unit: bad\\n\\n" >&2; exit 1'
    assert _run_verify(fake_tool(tmp_path, body), "[Service]\n", "t1") == (
        "Failed to load unit: bad",
    )


def test_failing_verify_with_no_stderr_reports_its_exit_status(tmp_path):
    assert _run_verify(fake_tool(tmp_path, "exit 3"), "[Service]\n", "t1") == ("exit status 3",)
    blank = fake_tool(tmp_path, 'printf "\\n   \\n" >&2; exit 4')
    assert _run_verify(blank, "[Service]\n", "t1") == ("exit status 4",)


def test_failing_verify_with_lines_naming_the_unit_reports_only_those(tmp_path):
    body = 'echo "$2: bad" >&2; echo "other noise" >&2; exit 1'
    assert _run_verify(fake_tool(tmp_path, body), "[Service]\n", "t1") == ("t1.service: bad",)


# --- _verdict_path: where the verdict is kept -----------------------------------------------


def test_verdict_is_kept_under_xdg_cache_home(tmp_path, monkeypatch):
    tool = fake_tool(tmp_path, "exit 0")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    path = _verdict_path("text", "t1", tool)
    assert path.parent == tmp_path / "xdg" / "pvegpu" / "unit-verify"
    assert len(path.name) == 64 and int(path.name, 16) >= 0  # the sha256 of the inputs


def test_verdict_is_kept_under_home_dot_cache_without_xdg_cache_home(tmp_path, monkeypatch):
    tool = fake_tool(tmp_path, "exit 0")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert _verdict_path("text", "t1", tool).parent == (
        tmp_path / "home" / ".cache" / "pvegpu" / "unit-verify"
    )
    monkeypatch.setenv("XDG_CACHE_HOME", "")  # empty counts as unset (XDG base dir spec)
    assert _verdict_path("text", "t1", tool).parent == (
        tmp_path / "home" / ".cache" / "pvegpu" / "unit-verify"
    )


def test_verdict_key_depends_on_text_unit_name_and_tool(tmp_path):
    tool = fake_tool(tmp_path, "exit 0")
    keys = {
        _verdict_path("a", "t1", tool).name,
        _verdict_path("b", "t1", tool).name,
        _verdict_path("a", "t2", tool).name,
    }
    assert len(keys) == 3
    os.utime(tool, ns=(1, 1))  # the tool replaced: its earlier verdicts no longer count
    assert _verdict_path("a", "t1", tool).name not in keys


# --- unit_problems: one line per problem ----------------------------------------------------


def test_unit_problem_line_names_the_unit_the_verdict_and_the_fix(monkeypatch):
    asked = []

    def verdict(text, unit_name):
        asked.append(unit_name)
        return ("x.service:3: Unknown section 'Foo'. Ignoring.",)

    monkeypatch.setattr(unit_mod, "verify_problems", verdict)
    assert unit_problems(settings(training_unit_name="trainer")) == [
        "trainer.service as rendered is rejected by systemd-analyze verify: "
        "x.service:3: Unknown section 'Foo'. Ignoring.: "
        "fix the setting or templates/training.service.j2"
    ]
    assert asked == ["trainer"]  # the unit is verified under its own name


# --- running units, renamed units ------------------------------------------------------------


def test_running_other_units_reads_both_plain_and_dict_states():
    states = {
        "d.service": {"active": "deactivating"},
        "c.service": "reloading",
        "b.service": {"active": "failed"},
        "a.service": {"active": "active", "sub": "running"},
        "e.service": {},
        "f.service": None,
    }
    assert running_other_units(states) == ["a.service", "c.service", "d.service"]
    assert running_other_units(None) == []


def test_renamed_unit_line_word_for_word_with_two_old_units():
    s = settings(training_unit_name="new-train")
    assert renamed_unit_line(s, "CT 200", ["a.service", "b.service"]) == (
        "CT 200: a.service, b.service is running, but training_unit_name=new-train asks for "
        "new-train.service: a renamed unit would be a second trainer on the same GPUs; pass "
        "--data restart_training=true to stop and disable a.service, b.service and start "
        "new-train.service, or set training_unit_name back"
    )


def test_training_matcher_accepts_pythons_of_any_build_under_venvs_dir():
    assert training_matcher(settings(venvs_dir="/root/venvX"))["python_under"] == ["/root/venvX/"]


def test_training_matcher_prefix_has_one_slash_even_for_a_trailing_slash():
    # Settings reject venvs_dir='/root/venvs/' (not normalised), but the matcher, which decides
    # what is killed, does not rely on it.
    s = settings()
    s = dataclasses.replace(s, python_env=dataclasses.replace(s.python_env, venvs_dir="/r/v/"))
    assert training_matcher(s)["python_under"] == ["/r/v/"]


# --- start record, pending restart -----------------------------------------------------------


def test_start_record_keeps_values_other_than_unit_whole():
    assert parse_started_record("unit abc  -\nvenv /v/a b\nbuilt 17 18\n") == {
        "unit": "abc",
        "venv": "/v/a b",
        "built": "17 18",
    }


def test_start_record_with_empty_values():
    assert parse_started_record("unit\nvenv\nbuilt \n") == {"unit": "", "venv": "", "built": ""}
    assert parse_started_record("") is None
    assert parse_started_record(None) is None


def test_desired_start_records_no_build_time_as_empty():
    s = settings()
    assert desired_start(s, "text", None)["built"] == ""
    assert desired_start(s, "text", 17)["built"] == "17"
    assert desired_start(s, "text", 0)["built"] == "0"


def test_pending_reason_without_a_start_record_word_for_word():
    assert pending_reasons(None, {"unit": "u", "venv": "/v", "built": ""}) == [
        "the running unit left no start record (started before pvegpu recorded starts, "
        "or the record write failed)"
    ]


def test_pending_reason_for_a_record_without_venv_says_none():
    desired = {"unit": "u", "venv": "/v/b", "built": ""}
    assert pending_reasons({"unit": "u"}, desired) == ["venv build (none) -> /v/b"]
    assert pending_reasons({"unit": "u", "venv": ""}, desired) == ["venv build (none) -> /v/b"]


@pytest.mark.parametrize("active", [None, ""])
def test_unit_plan_without_an_active_state_is_inactive(active):
    assert unit_plan(settings(), active, "unit x\n", 17) == ("inactive", [])
