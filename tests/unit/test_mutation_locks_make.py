"""pvegpu.locks.make: behaviours the mutation run (bench/mutation.py) found unpinned: the
environment, files and working directory uv gets, the lock and ``.in`` written word for word,
and each way making a lock fails."""

import os
import subprocess
from pathlib import Path

import pytest
import uv as uv_package

from pvegpu.digests import text_digest
from pvegpu.locks import IN_HEADER, LockPlan, make_lock, requirements_in
from pvegpu.locks.make import _write_atomically
from pvegpu.settings import Settings, defaults

H = "--hash=sha256:" + "ab" * 4
LOCK = "locks/cu130-py3.11.lock"
BODY = f"torch==2.11.0+cu130 \\\n    {H}\n"


def settings(**over) -> Settings:
    return Settings.from_data({**defaults(), "training_requirements": [], **over})


class FakeUv:
    """Stands in for ``uv pip compile``: records what it got, writes ``body`` to ``-o``."""

    def __init__(self, body: str = BODY, rc: int = 0, stdout: str = "", stderr: str = ""):
        self.body, self.rc, self.stdout, self.stderr, self.calls = body, rc, stdout, stderr, []

    def __call__(self, argv, **kw):
        netrc = kw["env"].get("NETRC")
        seen = netrc and (Path(netrc).read_text(), os.stat(netrc).st_mode & 0o777)
        self.calls.append(dict(kw, argv=argv, netrc=seen, pyproject=Path(argv[-3]).read_text()))
        if self.body is not None:
            Path(argv[-1]).write_text(self.body)
        return subprocess.CompletedProcess(argv, self.rc, self.stdout, self.stderr)


def no_check(settings):
    return None


def header(s: Settings) -> str:
    return (
        "# Hashed lock of locks/cu130.in for Python 3.11, made by pvegpu with uv pip compile "
        "--generate-hashes:\n"
        f"# torch from {s.torch.index_url.replace(':t@', ':***@')} (explicit index), everything "
        "else from\n"
        f"# {s.torch.package_index_url.replace(':t@', ':***@')}. Commit it; deploys install "
        "exactly these files.\n"
    )


def test_make_lock_gives_uv_a_clean_env_a_0600_netrc_and_a_temp_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("UV_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("VIRTUAL_ENV", "/nowhere")
    monkeypatch.setenv("NETRC", "/nowhere/netrc")
    monkeypatch.setenv("PVEGPU_KEPT", "1")
    s = settings(
        package_index_url="http://me:t@127.0.0.1:3141/simple",
        torch_index_base="http://me:t@127.0.0.1:3142/whl",
    )
    fake = FakeUv()
    plan = make_lock(s, "3.11", tmp_path, uv="uv", run=fake, check=no_check)
    [call] = fake.calls
    cwd = Path(call["cwd"])
    assert cwd.name.startswith("pvegpu-lock-") and not cwd.exists()
    assert call["argv"][0] == "uv"
    assert call["argv"][-3:] == [str(cwd / "pyproject.toml"), "-o", str(cwd / "lock.txt")]
    assert call["capture_output"] is True and call["text"] is True
    env = call["env"]
    assert not any(
        k.startswith("UV_") for k in env if k not in ("UV_NO_PROGRESS", "UV_PYTHON_DOWNLOADS")
    )
    assert env["UV_NO_PROGRESS"] == "1" and env["UV_PYTHON_DOWNLOADS"] == "never"
    assert "VIRTUAL_ENV" not in env and env["PVEGPU_KEPT"] == "1"
    assert env["NETRC"] == str(cwd / "netrc")
    assert call["netrc"] == ("machine 127.0.0.1 login me password t\n", 0o600)
    assert 'torch = { index = "pytorch" }' in call["pyproject"]
    text = header(s) + BODY
    assert plan == LockPlan(
        "lock", text, text_digest(text), LOCK, reason=f"{LOCK} is missing", made=True
    )
    assert (tmp_path / LOCK).read_text() == text
    assert (tmp_path / "locks" / "cu130.in").read_text() == (
        IN_HEADER.format(variant="cu130") + requirements_in(s)
    )
    assert sorted(p.name for p in (tmp_path / "locks").iterdir()) == [
        "cu130-py3.11.lock",
        "cu130.in",
    ]


def test_without_credentials_uv_gets_no_netrc(tmp_path, monkeypatch):
    monkeypatch.setenv("NETRC", "/nowhere/netrc")
    fake = FakeUv()
    make_lock(settings(), "3.11", tmp_path, uv="uv", run=fake, check=no_check)
    assert "NETRC" not in fake.calls[0]["env"]


def test_make_lock_runs_the_projects_own_uv_by_default(tmp_path):
    fake = FakeUv()
    make_lock(settings(), "3.11", tmp_path, run=fake, check=no_check)
    assert fake.calls[0]["argv"][0] == uv_package.find_uv_bin()


def test_an_in_file_that_pins_the_settings_is_kept_as_written(tmp_path):
    s = settings()
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / "cu130.in").write_text("# mine\n" + requirements_in(s))
    make_lock(s, "3.11", tmp_path, uv="uv", run=FakeUv(), check=no_check)
    assert (tmp_path / "locks" / "cu130.in").read_text() == "# mine\n" + requirements_in(s)


def test_an_unreachable_index_fails_before_uv_runs(tmp_path):
    fake = FakeUv()
    plan = make_lock(settings(), "3.11", tmp_path, uv="uv", run=fake, check=lambda s: "down")
    assert plan == LockPlan(
        "make", "", "", LOCK, reason=f"{LOCK} is missing", error=f"making {LOCK} failed: down"
    )
    assert fake.calls == [] and not (tmp_path / "locks").exists()


def test_a_usable_or_refused_plan_is_returned_without_running_anything(tmp_path):
    def fail(*a, **kw):
        raise AssertionError("must not run")

    s = settings(require_lock=True)
    plan = make_lock(s, "3.11", tmp_path, uv="uv", run=fail, check=fail)
    assert plan.kind == "make" and plan.error.startswith(f"require_lock=true and {LOCK} is missing")
    make_lock(settings(), "3.11", tmp_path, uv="uv", run=FakeUv(), check=no_check)
    plan = make_lock(settings(), "3.11", tmp_path, uv="uv", run=fail, check=fail)
    assert plan.kind == "lock" and not plan.made


@pytest.mark.parametrize(
    "fake, why",
    [
        (
            FakeUv(
                rc=1, stdout="resolving\n", stderr="error: no route to http://me:t@127.0.0.1:9/\n"
            ),
            "no route to http://me:***@127.0.0.1:9/",
        ),
        (FakeUv(body=None, stdout="said on stdout\n"), "said on stdout"),
    ],
)
def test_a_failed_compile_is_one_line_with_uvs_reason(tmp_path, fake, why):
    plan = make_lock(settings(), "3.11", tmp_path, uv="uv", run=fake, check=no_check)
    assert plan == LockPlan(
        "make",
        "",
        "",
        LOCK,
        reason=f"{LOCK} is missing",
        error=(
            f"making {LOCK} failed: {why}: fix the pins or the indexes (package_index_url, "
            "torch_index_base) and run deploy.py again"
        ),
    )
    assert not (tmp_path / "locks").exists()


def test_a_compiled_lock_that_misses_a_pin_is_refused(tmp_path):
    plan = make_lock(
        settings(), "3.11", tmp_path, uv="uv", run=FakeUv(body="a==1\n"), check=no_check
    )
    assert plan == LockPlan(
        "make",
        "",
        "",
        LOCK,
        reason=f"{LOCK} is missing",
        error=(
            f"making {LOCK} failed: {LOCK} is out of date (it does not pin torch==2.11.0+cu130)"
        ),
    )
    assert not (tmp_path / "locks").exists()


def test_the_lock_header_names_the_in_file_from_the_project(tmp_path):
    s = settings(locks_dir=str(tmp_path / "locks"))  # absolute, inside the project
    plan = make_lock(s, "3.11", tmp_path, uv="uv", run=FakeUv(), check=no_check)
    assert plan.text.startswith("# Hashed lock of locks/cu130.in for Python 3.11, made by")


def test_writing_the_in_file_keeps_an_existing_one_unless_told(tmp_path):
    s = settings()
    path = tmp_path / "new" / "locks" / "cu130.in"
    _write_atomically(path, None, s)
    assert path.read_text() == IN_HEADER.format(variant="cu130") + requirements_in(s)
    path.write_text("mine\n")
    _write_atomically(path, None, s)
    assert path.read_text() == "mine\n"
    _write_atomically(path, None, s, replace_in=True)
    assert path.read_text().startswith("# Input of the cu130 locks")
    assert [p.name for p in path.parent.iterdir()] == ["cu130.in"]
