"""pvegpu.plan.venvs: behaviours the mutation run (bench/mutation.py) found unpinned: the marker's
keys, every reason to rebuild word for word, which entry counts as built, and pruning by recency,
of the live build, of links to kept dirs and of leftover ``.next`` dirs."""

import pytest

from pvegpu.locks import LockPlan
from pvegpu.plan.venvs import Drift, build_reasons, marker, prune_plan, selected_entry
from pvegpu.settings import Settings, defaults

BUILD = "torch-2.11.0-cu130"
SHA = "ab" * 32


def settings(**over) -> Settings:
    return Settings.from_data({**defaults(), "training_requirements": [], **over})


def plan(sha: str = SHA) -> LockPlan:
    return LockPlan("lock", "torch==2.11.0+cu130\n", sha, "locks/cu130-py3.11.lock")


# --- drift and the marker ------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["extra", "missing", "wrong_version", "wrong_variant"])
def test_any_one_kind_of_drift_is_drift(field):
    assert not Drift()
    assert Drift(**{field: {"x": ("1", "2")}})


def test_drift_has_one_line_per_difference_in_a_fixed_order():
    d = Drift(
        extra={"junk": "0.1"},
        missing={"numpy": "2.3.0"},
        wrong_version={"filelock": ("3.0", "3.1")},
        wrong_variant={"torch": ("2.11.0+cu128", "2.11.0+cu130")},
    )
    assert d.lines() == [
        "torch is 2.11.0+cu128, the lock says 2.11.0+cu130 (wrong variant: the cu128 build, "
        "not cu130)",
        "filelock is 3.0, the lock says 3.1 (wrong version)",
        "numpy 2.3.0 is in the lock but not installed (missing)",
        "junk 0.1 is installed but not in the lock (extra)",
    ]


def test_the_marker_records_what_the_build_was_made_from():
    s = settings()
    assert marker(s, plan(), "3.11.2") == {
        "build": BUILD,
        "torch": "2.11.0+cu130",
        "variant": "cu130",
        "input_sha256": SHA,
        "source": "locks/cu130-py3.11.lock",
        "python": "/usr/bin/python3",
        "python_version": "3.11",
        "compile_cache_dir": s.compile_cache_dir,
    }


# --- build reasons -------------------------------------------------------------------------------
def state(s: Settings, **entry_over) -> dict:
    """The selected build, built from ``plan()`` on Python 3.11.2, overridden by ``entry_over``."""
    entry = {
        "path": f"/root/venvs/{BUILD}.b1",
        "build": marker(s, plan(), "3.11.2"),
        "python_ok": True,
        "installed": {"torch": "2.11.0+cu130"},
        "locked": {"torch": "2.11.0+cu130"},
        "link": f"{BUILD}.b1",
        "real": f"{BUILD}.b1",
    }
    entry.update(entry_over)
    return {"python": {"version": "3.11.2"}, "venvs": {BUILD: entry}}


def test_a_build_whose_python_does_not_run_is_incomplete():
    s = settings()
    assert build_reasons(state(s, python_ok=False), s, plan()) == [
        f"{BUILD} ({BUILD}.b1) is incomplete"
    ]
    assert build_reasons(state(s, build={}), s, plan()) == [f"{BUILD} ({BUILD}.b1) is incomplete"]


def test_every_changed_input_is_named_digests_shortened_to_12():
    s = settings()
    old = marker(s, plan(), "3.10.4")
    old.update(
        torch="2.10.0+cu128",
        python="/opt/python3.10/bin/python3",
        compile_cache_dir="/var/cache/old",
    )
    assert build_reasons(state(s, build=old), s, plan("cd" * 32)) == [
        f"{BUILD}: its torch build changed (2.10.0+cu128 -> 2.11.0+cu130)",
        f"{BUILD}: its lock input changed (abababababab -> cdcdcdcdcdcd)",
        f"{BUILD}: its python_interpreter changed (/opt/python3.10/bin/python3 -> "
        "/usr/bin/python3)",
        f"{BUILD}: its python version changed (3.10 -> 3.11)",
        f"{BUILD}: its compile cache dir changed (/var/cache/old -> {s.compile_cache_dir})",
    ]


def test_only_a_lowercase_64_hex_value_is_shortened():
    s = settings()
    old = marker(s, plan(), "3.11.2")
    old["input_sha256"] = "AB" * 32
    assert build_reasons(state(s, build=old), s, plan()) == [
        f"{BUILD}: its lock input changed ({'AB' * 32} -> abababababab)"
    ]


def test_a_build_without_its_lock_record_is_rebuilt():
    s = settings()
    assert build_reasons(state(s, locked=None), s, plan()) == [
        f"{BUILD}: it records no lock (.pvegpu-lock.txt)"
    ]


@pytest.mark.parametrize(
    "entry",
    [
        {"path": "/root/venvs/x.b1", "real": "x.b1"},  # a real dir where the link should be
        {"link": "x.b1", "real": "x.b1"},  # a dangling link: no path
    ],
)
def test_only_a_link_to_a_real_dir_is_a_finished_build(entry):
    assert selected_entry({"venvs": {BUILD: entry}}, BUILD) is None


# --- pruning -------------------------------------------------------------------------------------
def real(build: str, n: int, t: float | None = None, built: float | None = None, in_use=()):
    return {
        "path": f"/root/venvs/{build}.b{n}",
        "build": {"build": build},
        "selected_at": t,
        "built": built,
        "in_use": list(in_use),
    }


def venvs_of(*reals, links: dict[str, str]) -> dict:
    venvs = {name: entry for name, entry in reals}
    for build, target in links.items():
        venvs[build] = dict(venvs[target], link=target, real=target)
    return venvs


def builds(*recency) -> tuple[dict, dict]:
    """Builds ``b<i>`` (real dir ``b<i>.b1``) with ``(selected_at, built)`` from ``recency``."""
    reals = [(f"b{i}.b1", real(f"b{i}", 1, t, b)) for i, (t, b) in enumerate(recency)]
    return dict(reals), {f"b{i}": f"b{i}.b1" for i in range(len(recency))}


@pytest.mark.parametrize(
    "recency, kept",
    [
        # selected_at decides, whatever the names' order or built
        ([(100, 900), (300, 100), (200, 800)], "b1"),
        # built when never selected
        ([(None, 100), (None, 300), (None, 200)], "b1"),
        # a build never selected but built recently is more recent than an old selection
        ([(None, 900), (300, 100), (None, 200)], "b0"),
    ],
)
def test_prune_keeps_the_most_recently_selected_other_build(recency, kept):
    s = settings(keep_venvs=2)
    reals, links = builds(*recency)
    reals[f"{BUILD}.b1"] = real(BUILD, 1, 50)
    links[BUILD] = f"{BUILD}.b1"
    st = {"venvs": venvs_of(*reals.items(), links=links), "venv_real": f"/root/venvs/{BUILD}.b1/"}
    remove, in_use = prune_plan(st, s.torch.build_name, s.python_env.keep_venvs)
    others = sorted(b for b in links if b not in (BUILD, kept))
    assert sorted(remove) == sorted(others + [f"{b}.b1" for b in others])
    assert in_use == []


def test_prune_with_no_live_venv_keeps_the_selected_build():
    s = settings(keep_venvs=1)
    reals, links = builds((100, 100))
    reals[f"{BUILD}.b1"] = real(BUILD, 1, 50)
    links[BUILD] = f"{BUILD}.b1"
    st = {"venvs": venvs_of(*reals.items(), links=links), "venv_real": None}
    assert sorted(prune_plan(st, s.torch.build_name, s.python_env.keep_venvs)[0]) == ["b0", "b0.b1"]


def test_prune_keeps_the_live_build_beyond_keep_venvs():
    """The selected build is not live yet (its switch comes later in the run); the live one,
    the least recent, stays."""
    s = settings(keep_venvs=1)
    reals, links = builds((300, 300), (100, 100), (200, 200))
    reals["b1.b1"]["in_use"] = [4242]  # the training runs in it: kept as live, not as in use
    reals[f"{BUILD}.b1"] = real(BUILD, 1, 50)
    links[BUILD] = f"{BUILD}.b1"
    st = {"venvs": venvs_of(*reals.items(), links=links), "venv_real": "/root/venvs/b1.b1/"}
    remove, in_use = prune_plan(st, s.torch.build_name, s.python_env.keep_venvs)
    assert sorted(remove) == ["b0", "b0.b1", "b2", "b2.b1"]
    assert in_use == []


def test_prune_keeps_the_link_to_a_dir_in_use_and_goes_on():
    s = settings(keep_venvs=1)
    reals, links = builds((100, 100), (90, 90))
    reals["b0.b1"]["in_use"] = [4242]
    reals[f"{BUILD}.b1"] = real(BUILD, 1, 50)
    links[BUILD] = f"{BUILD}.b1"
    st = {"venvs": venvs_of(*reals.items(), links=links), "venv_real": f"/root/venvs/{BUILD}.b1"}
    remove, in_use = prune_plan(st, s.torch.build_name, s.python_env.keep_venvs)
    assert sorted(remove) == ["b1", "b1.b1"]
    assert in_use == ["b0.b1"]


def test_prune_skips_a_dir_pvegpu_did_not_make_and_goes_on():
    s = settings(keep_venvs=1)
    venvs = venvs_of((f"{BUILD}.b1", real(BUILD, 1, 50)), links={BUILD: f"{BUILD}.b1"})
    venvs["a.b1"] = dict(real("a", 1, 10), build={"build": "someone-else"})
    venvs["b.b1"] = real("b", 1, 10)
    st = {"venvs": venvs, "venv_real": f"/root/venvs/{BUILD}.b1"}
    assert prune_plan(st, s.torch.build_name, s.python_env.keep_venvs) == (["b.b1"], [])


def test_prune_keeps_only_the_selected_builds_next_dir():
    s = settings(keep_venvs=1)
    venvs = venvs_of((f"{BUILD}.b1", real(BUILD, 1, 50)), links={BUILD: f"{BUILD}.b1"})
    leftovers = [f"{BUILD}.next", "torch-2.11.0-cu128.next", "torch-2.11.0-cu128.building", "zz.b1"]
    for name in leftovers:
        venvs[name] = {"path": f"/root/venvs/{name}", "build": {"build": "zz"}, "in_use": []}
    st = {"venvs": venvs, "venv_real": f"/root/venvs/{BUILD}.b1"}
    assert prune_plan(st, s.torch.build_name, s.python_env.keep_venvs) == (
        sorted(leftovers[1:]),
        [],
    )
