"""pvegpu.locks: behaviours the mutation run (bench/mutation.py) found unpinned: the edges of
requirement-file parsing, the sort of the ``.in``, index credentials and the reachability check,
early refusals and lock plans from a project-relative ``locks_dir``, and what uv gets and says."""

import urllib.error

import pytest

from pvegpu.locks import (
    LockPlan,
    compile_argv,
    credential_conflict,
    desired_pins,
    early_lock_error,
    index_problem,
    lock_plan,
    netrc_text,
    parse_pins,
    redact,
    requirements_in,
    split_credentials,
    training_pyproject,
    unhashed_pins,
    uv_error,
    uv_reason,
    uv_wheel_hashes,
)
from pvegpu.settings import Settings, defaults

H = "--hash=sha256:" + "ab" * 4


def settings(**over) -> Settings:
    return Settings.from_data({**defaults(), **over})


# --- pins ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, pins",
    [
        # a comment line ends a continuation and never joins the next line
        ("a==1 \\\n# note\nb==2\n", {"a": "1", "b": "2"}),
        ("# see below \\\nb==2\n", {"b": "2"}),
        ("\t# see below \\\nb==2\n", {"b": "2"}),
        # an inline comment, even one holding another ' #'
        ("a==1 # pinned\n", {"a": "1"}),
        ("a==1 # one # two\n", {"a": "1"}),
        # continuations: trailing blanks after the backslash, none before it, three lines, EOF
        (f"a==1 \\  \n    {H}\n", {"a": "1"}),
        (f"a==1\\\n    {H}\n", {"a": "1"}),
        (f"a==1 \\\n    {H} \\\n    {H}\nb==2\n", {"a": "1", "b": "2"}),
        ("a==1 \\", {"a": "1"}),
        # options before the pins, blanks around ==, several options on one line
        ("--index-url http://127.0.0.1:1/simple\na==1\n", {"a": "1"}),
        ("numpy == 2.3.0\n", {"numpy": "2.3.0"}),
        (f"a==1 {H} {H}\n", {"a": "1"}),
    ],
)
def test_parse_pins_edges_of_requirement_files(text, pins):
    assert parse_pins(text) == pins


@pytest.mark.parametrize(
    "text, bad",
    [
        ("--index-url http://127.0.0.1:1/simple\nb==2\n", ["b"]),
        ("b == 2\n", ["b"]),
        ("b==2 --config-settings x --no-binary y\n", ["b"]),
        ("b==2 --no-binary y\n", ["b"]),
        (f"a==1 {H} {H}\nb==2\n", ["b"]),
    ],
)
def test_unhashed_pins_edges(text, bad):
    assert unhashed_pins(text) == bad


def test_desired_pins_name_a_requirement_with_extras_by_its_package():
    s = settings(training_requirements=["Transformers[torch]==5.6.0"])
    assert desired_pins(s.torch) == {"torch": "2.11.0+cu130", "transformers": "5.6.0"}


def test_the_in_file_sorts_the_stack_without_regard_to_case():
    s = settings(training_requirements=["Bcd==1", "abc==2"])
    assert requirements_in(s) == "torch==2.11.0+cu130\nabc==2\nBcd==1\n"


# --- credentials ---------------------------------------------------------------------------------
PKG = "http://127.0.0.1:3141/root/pypi/simple"
WHL = "http://127.0.0.1:3142/whl"


def test_a_user_without_a_token_is_a_credential():
    assert split_credentials("http://tok@127.0.0.1:3141/simple") == (
        "http://127.0.0.1:3141/simple",
        ("tok", ""),
    )


@pytest.mark.parametrize(
    "url, clean, cred",
    [
        ("http://me:t@[::1]:3141/simple", "http://[::1]:3141/simple", ("me", "t")),
        ("http://:tok@127.0.0.1:3141/simple", "http://127.0.0.1:3141/simple", ("", "tok")),
        ("http://me:t@/simple", "http:///simple", ("me", "t")),
    ],
)
def test_credentials_leave_an_ipv6_host_bracketed_and_an_empty_part_empty(url, clean, cred):
    assert split_credentials(url) == (clean, cred)


def test_redact_ignores_the_schemes_case():
    assert redact("HTTPS://me:tok@127.0.0.1/simple") == "HTTPS://me:***@127.0.0.1/simple"


def test_a_netrc_has_one_line_per_host():
    s = settings(
        package_index_url="http://me:a@127.0.0.1:3141/simple",
        torch_index_base="http://you:b@127.0.0.2:3142/whl",
    )
    assert netrc_text(s.torch) == (
        "machine 127.0.0.1 login me password a\nmachine 127.0.0.2 login you password b\n"
    )


def test_credentials_on_one_of_two_urls_of_a_host_are_no_conflict():
    s = settings(
        package_index_url="http://127.0.0.1:3141/simple",
        torch_index_base="http://me:b@127.0.0.1:3142/whl",
    )
    assert credential_conflict(s) is None


def test_a_credential_conflict_is_one_line_with_the_fix():
    s = settings(
        package_index_url="http://me:a@127.0.0.1:3141/simple",
        torch_index_base="http://me:b@127.0.0.1:3142/whl",
    )
    assert credential_conflict(s) == (
        "package_index_url and torch_index_base carry different credentials for 127.0.0.1: uv "
        "reads one login per host (netrc): give both the same user:token"
    )


class FakeUrlopen:
    """Records each request; raises ``fail[url]`` for a URL that has one."""

    def __init__(self, **fail):
        self.fail, self.calls = fail, []

    def __call__(self, req, timeout):
        self.calls.append(
            (req.get_method(), req.full_url, req.get_header("Authorization"), timeout)
        )
        for url, error in self.fail.items():
            if req.full_url.startswith(url):
                raise error
        return self

    def close(self):
        pass


def test_reachability_sends_one_head_per_index_with_basic_auth_and_a_timeout():
    s = settings(package_index_url="http://me:s%40c@127.0.0.1:3141/mirrorX/", torch_index_base=WHL)
    urlopen = FakeUrlopen()
    assert index_problem(s, urlopen) is None
    assert urlopen.calls == [
        ("HEAD", "http://127.0.0.1:3141/mirrorX/", "Basic bWU6c0Bj", 20),
        ("HEAD", f"{WHL}/cu130/", None, 20),
    ]


def http_error(url: str, code: int) -> urllib.error.HTTPError:
    return urllib.error.HTTPError(url, code, "no", {}, None)  # type: ignore[arg-type]


@pytest.mark.parametrize("code", [401, 403])
def test_a_refused_login_is_one_line_naming_the_setting(code):
    s = settings(package_index_url=PKG, torch_index_base="http://me:tok@127.0.0.1:3142/whl")
    urlopen = FakeUrlopen(**{"http://127.0.0.1:3142": http_error(WHL, code)})
    assert index_problem(s, urlopen) == (
        f"torch_index_base=http://me:***@127.0.0.1:3142/whl/cu130 refused the credentials "
        f"(HTTP {code}): fix the user:token in torch_index_base"
    )


def test_an_index_that_answers_404_at_its_root_is_reachable():
    s = settings(package_index_url=PKG, torch_index_base=WHL)
    urlopen = FakeUrlopen(**{PKG: http_error(PKG, 404)})
    assert index_problem(s, urlopen) is None
    assert len(urlopen.calls) == 2


@pytest.mark.parametrize(
    "error, why",
    [
        (urllib.error.URLError("Connection refused"), "Connection refused"),
        (TimeoutError("timed out"), "timed out"),
        (
            urllib.error.URLError("no route to http://me:tok@127.0.0.1:9/"),
            "no route to http://me:***@127.0.0.1:9/",
        ),
    ],
)
def test_an_unreachable_index_is_one_redacted_line_with_the_reason(error, why):
    s = settings(package_index_url=PKG, torch_index_base="http://me:tok@127.0.0.1:3142/whl")
    urlopen = FakeUrlopen(**{"http://127.0.0.1:3142": error})
    assert index_problem(s, urlopen) == (
        f"torch_index_base=http://me:***@127.0.0.1:3142/whl/cu130 is not reachable from this "
        f"machine ({why}), where locks are made: fix torch_index_base (or https_proxy, "
        "index_ca_bundle) or start the index"
    )


# --- the plan, decided early: paths relative to the project ------------------------------------
def project_with(tmp_path, s: Settings, in_text: str | None = None, locks=()):
    """A project dir with ``locks/<variant>.in`` (the settings' pins unless ``in_text``) and a
    valid hashed lock for each Python version in ``locks``."""
    d = tmp_path / "locks"
    d.mkdir()
    (d / f"{s.torch.variant}.in").write_text(in_text or requirements_in(s))
    for python in locks:
        text = "".join(f"{k}=={v} \\\n    {H}\n" for k, v in desired_pins(s.torch).items())
        (d / f"{s.torch.variant}-py{python}.lock").write_text(text)
    return tmp_path


REVIEW = "review it and commit it"


def test_early_refusal_for_a_set_python_version_names_its_lock(tmp_path):
    s = settings(require_lock=True, python_version="3.11")
    project = project_with(tmp_path, s)
    assert early_lock_error(s, project) == (
        "require_lock=true and locks/cu130-py3.11.lock is missing: run deploy.py once without "
        "require_lock (it makes locks/cu130-py3.11.lock on this machine from the configured "
        f"indexes), {REVIEW}"
    )


def test_early_refusal_without_any_lock_names_the_lock_pattern(tmp_path):
    s = settings(require_lock=True)
    project = project_with(tmp_path, s)
    assert early_lock_error(s, project) == (
        "require_lock=true and there is no locks/cu130-py<X.Y>.lock: run deploy.py once without "
        "require_lock (it makes the lock for the container's Python on this machine from the "
        f"configured indexes), {REVIEW}"
    )


def test_early_refusal_of_an_in_file_that_pins_other_things_without_any_lock(tmp_path):
    s = settings(require_lock=True, training_requirements=[])
    project = project_with(tmp_path, s, in_text="torch==2.11.0+cu130\nnumpy==1.0\n")
    assert early_lock_error(s, project) == (
        "require_lock=true and locks/cu130.in does not pin what the settings ask for (numpy 1.0 "
        "vs (absent)): write the settings' pins (torch==2.11.0+cu130) to locks/cu130.in and "
        "delete its cu130-py*.lock files, or run deploy.py once without require_lock (it makes "
        "them), review and commit them"
    )


def test_a_valid_lock_in_the_project_is_no_early_refusal(tmp_path):
    s = settings(require_lock=True, training_requirements=[])
    assert early_lock_error(s, project_with(tmp_path, s, locks=["3.12"])) is None


def test_a_valid_lock_for_the_set_python_version_is_no_early_refusal(tmp_path):
    s = settings(require_lock=True, python_version="3.11", training_requirements=[])
    assert early_lock_error(s, project_with(tmp_path, s, locks=["3.11"])) is None


@pytest.mark.parametrize(
    "lock, reason",
    [
        (None, "locks/cu130-py3.11.lock is missing"),
        (
            "torch==2.11.0+cu128 \\\n    --hash=sha256:00\n",
            "locks/cu130-py3.11.lock is out of date (it does not pin torch==2.11.0+cu130, "
            "transformers==5.6.0)",
        ),
        (
            "torch==2.11.0+cu130\ntransformers==5.6.0\n",
            "locks/cu130-py3.11.lock has entries without hashes (torch, transformers)",
        ),
    ],
)
def test_why_a_lock_is_made_again_names_it_from_the_project(tmp_path, lock, reason):
    s = settings()
    project = project_with(tmp_path, s)
    if lock is not None:
        (project / "locks" / "cu130-py3.11.lock").write_text(lock)
    assert lock_plan(s, "3.11", project) == LockPlan(
        "make", "", "", "locks/cu130-py3.11.lock", reason=reason
    )
    refused = lock_plan(s.changed(require_lock=True), "3.11", project)
    assert refused == LockPlan(
        "make",
        "",
        "",
        "locks/cu130-py3.11.lock",
        reason=reason,
        error=(
            f"require_lock=true and {reason}: run deploy.py once without require_lock (it makes "
            f"locks/cu130-py3.11.lock on this machine from the configured indexes), {REVIEW}"
        ),
    )


def test_an_in_file_with_other_pins_is_made_again_or_refused_naming_each_difference(tmp_path):
    s = settings()
    project = project_with(tmp_path, s, in_text="torch==2.11.0+cu128\nnumpy==1.0\n")
    problem = (
        "locks/cu130.in does not pin what the settings ask for (numpy 1.0 vs (absent); "
        "torch 2.11.0+cu128 vs 2.11.0+cu130; transformers (absent) vs 5.6.0)"
    )
    source = "locks/cu130-py3.11.lock"
    assert lock_plan(s, "3.11", project) == LockPlan("make", "", "", source, reason=problem)
    assert lock_plan(s.changed(require_lock=True), "3.11", project) == LockPlan(
        "make",
        "",
        "",
        source,
        reason=problem,
        error=(
            f"require_lock=true and {problem}: write the settings' pins (torch==2.11.0+cu130, "
            "transformers==5.6.0) to locks/cu130.in and delete its cu130-py*.lock files, or run "
            "deploy.py once without require_lock (it makes them), review and commit them"
        ),
    )


def test_a_pin_missing_from_the_in_file_is_named_absent(tmp_path):
    s = settings()
    project = project_with(tmp_path, s, in_text="torch==2.11.0+cu130\n")
    assert lock_plan(s, "3.11", project).reason == (
        "locks/cu130.in does not pin what the settings ask for (transformers (absent) vs 5.6.0)"
    )


# --- what uv gets and what it says -------------------------------------------------------------
CRED = settings(
    package_index_url="http://me:t@127.0.0.1:3141/simple",
    torch_index_base="http://me:t@127.0.0.1:3142/whl",
)


def test_the_training_pyproject_word_for_word():
    assert training_pyproject(CRED, ["torch==2.11.0+cu130", "a==1"]) == (
        "# Made by pvegpu for one uv call: torch from the torch index only, the rest from\n"
        "# package_index_url only (see pvegpu.locks).\n"
        "[project]\n"
        'name = "pvegpu-training-env"\n'
        'version = "0"\n'
        "dependencies = [\n"
        '    "torch==2.11.0+cu130",\n'
        '    "a==1",\n'
        "]\n"
        "\n"
        "[[tool.uv.index]]\n"
        'name = "pytorch"\n'
        'url = "http://127.0.0.1:3142/whl/cu130"\n'
        "explicit = true\n"
        "\n"
        "[tool.uv.sources]\n"
        'torch = { index = "pytorch" }\n'
    )


def test_the_compile_argv_in_full():
    assert compile_argv(CRED, "uv", "p.toml", "out.txt", "3.11") == [
        "uv",
        "pip",
        "compile",
        "--no-config",
        "--quiet",
        "--generate-hashes",
        "--no-header",
        "--index-url",
        "http://127.0.0.1:3141/simple",
        "--index-strategy",
        "first-index",
        "--python-version",
        "3.11",
        "--python-platform",
        "x86_64-manylinux_2_28",
        "p.toml",
        "-o",
        "out.txt",
    ]


def test_uv_error_keeps_only_uvs_marked_lines():
    lines = [
        "  × Failed to build `x`",
        "  ├─▶ step one",
        "  │",
        "  │ more",
        "cause: two",
        "Caused by: three",
        "error: four",
        "plain detail",
        "  ╰─▶ last",
    ]
    assert uv_error(lines) == "Failed to build `x` step one more two three four last"


@pytest.mark.parametrize(
    "lines, reason",
    [
        (["resolving", "the end", "   ", ""], "the end"),
        (["", "  "], "no output"),
        ([], "no output"),
    ],
)
def test_uv_reason_is_the_last_line_said_without_a_marked_error(lines, reason):
    assert uv_reason(lines) == reason


UV_LOCK = """
[[package]]
name = "other"
version = "0.9.5"
wheels = [{ url = "https://files.example/other-0.9.5-py3-none-any.whl", hash = "sha256:11" }]

[[package]]
name = "uv"
version = "0.9.4"
wheels = [{ url = "https://files.example/uv-0.9.4-old.whl", hash = "sha256:22" }]

[[package]]
name = "uv"
version = "0.9.5"
wheels = [
    { url = "https://files.example/uv-0.9.5-manylinux.whl", hash = "sha256:33" },
    { url = "https://files.example/uv-0.9.5-md5.whl", hash = "md5:44" },
    { url = "https://files.example/uv-0.9.5-nohash.whl" },
    { hash = "sha256:55" },
    { url = "https://files.example/uv-0.9.5-empty.whl", hash = "sha256:" },
    { url = "https://files.example/uv-0.9.5-musl.whl", hash = "sha256:66" },
]
"""


def test_uv_wheel_hashes_of_one_version_with_sha256_only(tmp_path):
    (tmp_path / "uv.lock").write_text(UV_LOCK)
    assert uv_wheel_hashes("0.9.5", tmp_path) == {
        "uv-0.9.5-manylinux.whl": "33",
        "uv-0.9.5-musl.whl": "66",
    }
    assert uv_wheel_hashes("0.9.6", tmp_path) == {}
    (tmp_path / "uv.lock").write_text('[[package]]\nname = "uv"\nversion = "0.9.5"\n')
    assert uv_wheel_hashes("0.9.5", tmp_path) == {}  # an sdist-only entry has no wheels


@pytest.mark.parametrize("text", [None, "not [toml", "version = 1\n"])
def test_uv_wheel_hashes_without_a_readable_uv_lock_are_empty(tmp_path, text):
    if text is not None:
        (tmp_path / "uv.lock").write_text(text)
    assert uv_wheel_hashes("0.9.5", tmp_path) == {}
