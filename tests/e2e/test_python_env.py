"""The python env stage end to end on the simulated node, with the torch doubles and the loopback
index: a one-variable swap there and back (offline), bad input, pollution reported and repaired,
a failed build that leaves the live venv alone, compile caches that outlive swaps and rebuilds."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import socket
import zipfile
from importlib.metadata import version
from pathlib import Path

import uv as uv_package

from pvegpu.locks import make_lock, parse_pins
from pvegpu.settings import Settings, defaults

UV = f"/opt/pvegpu/uv-{version('uv')}/bin/uv"
ROOT = Path(__file__).resolve().parents[2]
CU130, CU128 = "torch-2.11.0-cu130", "torch-2.11.0-cu128"
UNIT = "dflash-train.service"
COMPILE = "import torch; f = torch.compile(lambda x: x + 1); f(1)"
DRIFT_CHECK = """\
from pyinfra import host
from pvegpu.startup.deploy_context import settings
from pvegpu.operations import python_env
if "training_cts" in host.groups:
    python_env.venv_matches_lock(name="Check the live venv has exactly its lock",
                                 settings=settings(host))
"""


def make_locks(site, out: Path) -> Path:
    """<variant>.in and <variant>-py3.11.lock for torch alone, made as the deploy makes them
    (pvegpu.locks.make_lock) against the loopback index (the real PyTorch index is not
    reachable here)."""
    for variant in ("cu128", "cu130"):
        s = Settings.from_data(
            {
                **defaults(),
                "torch_variant": variant,
                "training_requirements": [],
                "package_index_url": site.index.package_index_url,
                "torch_index_base": site.index.torch_index_base,
                "locks_dir": str(out),
            }
        )
        plan = make_lock(s, "3.11", uv=uv_package.find_uv_bin())
        assert plan.made and plan.error is None, plan.error
    return out


def link(site, path):
    return site.ct("readlink", path).stdout.strip()


def torch_of(site, python="/root/venv/bin/python"):
    r = site.ct(python, "-c", "import torch; print(torch.__version__)")
    return r.stdout.strip() if r.returncode == 0 else f"error: {r.stderr.strip()[-200:]}"


def ct_commands(site) -> list[str]:
    """The commands the run sent into the container (the @pct connector's `env -i ... sh -c`)."""
    return [
        c["argv"][-1]
        for c in site.node.pct_calls()
        if c["argv"][:2] == ["exec", "200"] and "env" in c["argv"]
    ]


def probes(cmds, name):
    import base64
    import re

    found = 0
    for cmd in cmds:
        m = re.search(r"b64decode\('[\"']*([A-Za-z0-9+/=]+)", cmd)
        if m and f"# Probe: {name}" in base64.b64decode(m.group(1) + "==").decode(errors="replace"):
            found += 1
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_swap_there_and_back_offline_keeps_builds_and_caches(site, tmp_path):
    locks = f"locks_dir={make_locks(site, tmp_path / 'locks')}"

    first = site.deploy(locks)
    assert first.rc == 0, first.output[-4000:]
    assert "no usable lock" not in first.output
    assert link(site, "/root/venv") == f"/root/venvs/{CU130}"
    assert link(site, f"/root/venvs/{CU130}") == f"{CU130}.b1"
    marker = json.loads(site.ct("cat", f"/root/venvs/{CU130}/.pvegpu-build.json").stdout)
    assert marker["source"].endswith("cu130-py3.11.lock") and marker["torch"] == "2.11.0+cu130"
    assert torch_of(site) == "2.11.0+cu130"
    # torch.compile in the venv writes to the build's own cache on the data mount
    assert site.ct("/root/venv/bin/python", "-c", COMPILE).returncode == 0
    warm = site.ct("find", f"/data/cache/{CU130}/inductor", "-type", "f").stdout.split()
    assert warm

    # bad input: one clear line each, non-zero, nothing changed
    before = site.node.tree_digest()
    for bad, line in (
        ("torch_variant=cu129", "torch_variant='cu129' is not a known variant"),
        ("torch_version=2.11", "torch_version='2.11' is not a full X.Y.Z version"),
    ):
        run = site.deploy(locks, bad)
        assert run.rc != 0 and line in run.output, run.output[-3000:]
    empty = tmp_path / "no-locks"
    refused = site.deploy(f"locks_dir={empty}", "require_lock=true")
    assert refused.rc != 0, refused.output[-3000:]
    assert f"require_lock=true and there is no {empty}/cu130-py<X.Y>.lock" in refused.output
    assert not empty.exists()
    # the repo's locks/cu130.in pins transformers, these settings do not: with require_lock
    # refused, nothing written (without it the .in and lock would be made again)
    repo = sorted(p.name for p in (ROOT / "locks").iterdir())
    refused = site.deploy("locks_dir=locks", "require_lock=true")
    assert refused.rc != 0 and "locks/cu130.in does not pin what the settings ask" in refused.output
    assert "write the settings' pins (torch==2.11.0+cu130) to locks/cu130.in" in refused.output
    assert sorted(p.name for p in (ROOT / "locks").iterdir()) == repo
    assert site.node.tree_digest() == before

    # a lock that does not resolve: the build fails with uv's reason, the live venv is untouched
    bad = tmp_path / "bad-locks"
    bad.mkdir()
    for f in (tmp_path / "locks").iterdir():
        (bad / f.name).write_text(f.read_text())
    with open(bad / "cu128-py3.11.lock", "a") as f:
        f.write("transformers==9.9.9 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    run = site.deploy(f"locks_dir={bad}", "torch_variant=cu128")
    assert run.rc != 0
    assert f"building /root/venvs/{CU128}.next failed: " in run.output, run.output[-3000:]
    assert "Because there is no version of transformers==9.9.9" in run.output
    assert link(site, "/root/venv") == f"/root/venvs/{CU130}" and torch_of(site) == "2.11.0+cu130"

    # one variable swaps: built beside, checked, switched; the cu130 build stays for rollback
    swap = site.deploy(locks, "torch_variant=cu128")
    assert swap.rc == 0, swap.output[-4000:]
    assert link(site, "/root/venv") == f"/root/venvs/{CU128}"
    assert torch_of(site) == "2.11.0+cu128"
    assert torch_of(site, f"/root/venvs/{CU130}/bin/python") == "2.11.0+cu130"
    assert site.ct("test", "-d", f"/data/cache/{CU128}/triton").returncode == 0

    # an unreachable index, when a lock must be made: one clear line, the live venv untouched
    dead = f"http://127.0.0.1:{free_port()}/simple"
    fresh = tmp_path / "fresh-locks"
    run = site.deploy(
        f"locks_dir={fresh}",
        "torch_variant=cu128",
        f"package_index_url={dead}",
        'training_requirements=["transformers==5.6.0"]',
    )
    assert run.rc != 0
    line = next(ln for ln in run.output.splitlines() if "cu128-py3.11.lock failed: " in ln)
    assert f"making {fresh}/cu128-py3.11.lock failed: " in line and dead in line, run.output[-3000:]
    assert not (fresh / "cu128-py3.11.lock").exists()
    assert link(site, "/root/venv") == f"/root/venvs/{CU128}" and torch_of(site) == "2.11.0+cu128"

    # swap back with the index gone: a link flip and the checks, nothing downloaded or built
    site.index.stop()
    site.node.clear_pct_log()
    back = site.deploy(locks)
    assert back.rc == 0, back.output[-4000:]
    cmds = ct_commands(site)
    assert not [c for c in cmds if "pip sync" in c or " venv " in c]
    assert probes(cmds, "the python env and training unit state") <= 2  # the stage's + the unit's
    print(f"swap back: {len(cmds)} container commands")
    assert link(site, "/root/venv") == f"/root/venvs/{CU130}"
    assert torch_of(site) == "2.11.0+cu130"
    verify = site.pyinfra("verify.py", locks)
    assert verify.rc == 0, verify.output[-4000:]
    # the compile cache of each build outlived both swaps
    assert site.ct("find", f"/data/cache/{CU130}/inductor", "-type", "f").stdout.split() == warm


def test_pollution_is_reported_and_repaired_and_a_failed_build_leaves_the_live_venv(site, tmp_path):
    first = site.deploy()
    assert first.rc == 0, first.output[-4000:]
    # no lock yet in the site's scratch locks_dir: made on first use, then installed from it
    assert f"wrote {tmp_path}/locks/cu130-py3.11.lock" in first.output
    assert site.ct("/root/venv/bin/python", "-c", COMPILE).returncode == 0
    warm = site.ct("find", f"/data/cache/{CU130}/inductor", "-type", "f").stdout.split()
    assert warm

    # pollute the live venv by hand: a junk package, and torch replaced by the other variant
    index = site.index
    for argv in (
        ["sglang-junk==0.1.0", "--index-url", index.package_index_url],
        ["torch==2.11.0+cu128", "--index-url", index.torch_index_url("cu128")],
    ):
        r = site.ct(UV, "pip", "install", "--python", "/root/venv/bin/python", *argv)
        assert r.returncode == 0, r.stderr
    assert torch_of(site) == "2.11.0+cu128"

    # a read-only drift check reports it and changes nothing
    check = tmp_path / "drift_check.py"
    check.write_text(DRIFT_CHECK)
    before = site.node.tree_digest()
    report = site.pyinfra(str(check))
    assert report.rc != 0
    assert "sglang-junk 0.1.0 is installed but not in the lock (extra)" in report.output
    assert "torch is 2.11.0+cu128, the lock says 2.11.0+cu130 (wrong variant" in report.output
    assert site.node.tree_digest() == before

    # deploy reports it and repairs it: a fresh build beside the live one, from uv's cache
    index.clear_requests()
    repair = site.deploy()
    assert repair.rc == 0, repair.output[-4000:]
    assert "sglang-junk 0.1.0 is installed but not in the lock (extra)" in repair.output
    assert "torch is 2.11.0+cu128, the lock says 2.11.0+cu130 (wrong variant" in repair.output
    assert index.downloads() == []
    assert torch_of(site) == "2.11.0+cu130"
    assert site.ct("/root/venv/bin/python", "-c", "import sglang_junk").returncode != 0
    assert link(site, f"/root/venvs/{CU130}") == f"{CU130}.b2"
    # The superseded build .b1 is kept, not pruned: the training unit the first deploy started
    # really runs from it (ExecStart resolves /root/venv when the unit starts), and the prune never
    # deletes a build a running process uses. The unit keeps running it until a restart is asked
    # for (restart_training=true, below); the deploy says both.
    trainer = site.ct("systemctl", "show", "-p", "MainPID", "--value", UNIT).stdout.strip()
    argv = site.ct("cat", f"/proc/{trainer}/cmdline").stdout.split("\0")
    assert argv[0] == f"/root/venvs/{CU130}.b1/bin/python", argv
    assert f"keeping /root/venvs/{CU130}.b1: in use by pid {trainer}" in repair.output
    assert f"{UNIT} keeps running; restart pending" in repair.output
    assert site.ct("test", "-d", f"/root/venvs/{CU130}.b1").returncode == 0
    assert site.deploy().changed == 0
    assert site.pyinfra(str(check)).rc == 0

    # rebuild=venv (deletes every build) comes back offline from uv's cache; caches survive
    index.clear_requests()
    rebuilt = site.deploy("rebuild=venv", "restart_training=true")
    assert rebuilt.rc == 0, rebuilt.output[-4000:]
    assert index.downloads() == [] and torch_of(site) == "2.11.0+cu130"
    assert site.ct("find", f"/data/cache/{CU130}/inductor", "-type", "f").stdout.split() == warm
    # restarted onto the fresh build: nothing runs from .b1 any more, so it is gone
    assert site.ct("test", "-e", f"/root/venvs/{CU130}.b1").returncode != 0

    # the index goes empty mid-way (after the cu128 lock was made): the new build fails, the
    # live venv still runs the old one
    s128 = Settings.from_data(
        {
            **defaults(),
            "torch_variant": "cu128",
            "training_requirements": [],
            "package_index_url": index.package_index_url,
            "torch_index_base": index.torch_index_base,
            "locks_dir": str(tmp_path / "locks"),
        }
    )
    assert make_lock(s128, "3.11", uv=uv_package.find_uv_bin()).made
    site.ct("rm", "-rf", "/root/.cache/uv")  # the hand install above cached the cu128 wheel
    index.set_mode("empty")
    failed = site.deploy("torch_variant=cu128")
    assert failed.rc != 0
    assert f"building /root/venvs/{CU128}.next failed" in failed.output, failed.output[-3000:]
    assert f"/root/venv still points at /root/venvs/{CU130}, untouched" in failed.output
    assert link(site, "/root/venv") == f"/root/venvs/{CU130}" and torch_of(site) == "2.11.0+cu130"
    assert site.ct("test", "-e", f"/root/venvs/{CU128}").returncode != 0


def test_locks_on_first_use_take_fresh_dependencies_and_refuse_a_swapped_wheel(site, tmp_path):
    """The torch index hosts stale copies of filelock/typing-extensions; trainer-utils needs the
    package index's newer ones. The first deploy makes the lock (torch from the torch index
    only), later ones install exactly it; a wheel the index swaps afterwards (advertising the new
    file's hash) is refused by hash in a fresh container."""
    from sim.wheels import build_wheel

    locks = tmp_path / "locks"  # the site's scratch locks_dir (never the repo's locks/)
    req = 'training_requirements=["trainer-utils==1.0.0"]'
    first = site.deploy(req)
    assert first.rc == 0, first.output[-4000:]
    lock = locks / "cu130-py3.11.lock"
    assert f"wrote {lock} ({lock} is missing; made on this machine" in first.output
    assert "commit it" in first.output
    assert lock.is_file() and (locks / "cu130.in").is_file()
    pins = parse_pins(lock.read_text())
    assert pins["filelock"] == "3.20.0" and pins["typing-extensions"] == "4.15.0"
    r = site.ct(
        "/root/venv/bin/python",
        "-c",
        "import filelock, typing_extensions as t; print(filelock.__version__, t.__version__)",
    )
    assert r.stdout.split() == ["3.20.0", "4.15.0"], r.stderr
    again = site.deploy(req)
    assert again.rc == 0 and again.changed == 0, again.output[-3000:]
    assert "wrote " not in again.output

    # the index swaps trainer-utils for another file of the same name and advertises its hash
    evil = build_wheel(
        "trainer-utils",
        "1.0.0",
        {"trainer_utils/__init__.py": "EVIL = 1\n"},
        tmp_path / "evil",
        requires=["filelock>=3.20.0"],
    )
    site.index.add([evil])
    fresh = site.deploy(req, "rebuild=container", "restart_training=true")
    assert fresh.rc != 0
    failed = [
        ln for ln in fresh.output.splitlines() if "/root/venvs/torch-2.11.0-cu130.next failed" in ln
    ]
    assert len(failed) == 1 and "Hash mismatch for `trainer-utils==1.0.0`" in failed[0], (
        fresh.output[-3000:]
    )
    assert f"the index serves another file than {lock} records: refused" in failed[0]
    assert site.ct("/root/venv/bin/python", "-c", "import trainer_utils").returncode != 0
    assert lock.read_text().count("trainer-utils==1.0.0") == 1  # the recorded lock is unchanged


def test_index_credentials_never_reach_output_argv_or_the_lock(wheelhouse, tmp_path):
    """Indexes that need basic auth, given as ``user:token@`` URLs: the deploy works, and the
    token is in no output (debug included), no pct argv, no lock; uv and the reachability check
    get it from a 0600 netrc in the container. A wrong token is one line, redacted."""
    from sim.__main__ import seed_training_code
    from sim.index import PackageIndex
    from sim.node import SimNode
    from tests.e2e.conftest import Site

    token = "s3cret-TOKEN"
    with (
        PackageIndex(wheelhouse.torch_index(), wheelhouse.pypi(), auth=("me", token)) as index,
        SimNode(tmp_path / "node") as node,
    ):
        seed_training_code(node)
        base = index.url.replace("http://", f"http://me:{token}@")
        locks = tmp_path / "locks"
        site = Site(
            node,
            index,
            [
                "--data",
                f"torch_index_base={base}/whl",
                "--data",
                f"package_index_url={base}/simple",
                "--data",
                f"locks_dir={locks}",
                "--data",
                "training_requirements=[]",
            ],
        )
        run = site.pyinfra("deploy.py", extra=("--debug",))
        assert run.rc == 0, run.output[-4000:]
        assert token not in run.output
        assert "me:***@127.0.0.1" in (locks / "cu130-py3.11.lock").read_text()
        assert token not in (locks / "cu130-py3.11.lock").read_text()
        assert not [c for c in node.pct_calls() if token in " ".join(c["argv"])]
        assert site.ct("stat", "-c", "%a", "/root/.config/pvegpu/netrc").stdout.strip() == "600"
        assert torch_of(site) == "2.11.0+cu130"
        import base64

        good = "Basic " + base64.b64encode(f"me:{token}".encode()).decode()
        assert good in index.authorization_headers()  # uv and the checks did authenticate

        wrong = base.replace(token, "wrong-TOKEN")
        bad = site.deploy(
            f"package_index_url={wrong}/simple",
            f"torch_index_base={wrong}/whl",
            "torch_variant=cu128",
        )
        assert bad.rc != 0
        assert "wrong-TOKEN" not in bad.output and token not in bad.output
        line = next(ln for ln in bad.output.splitlines() if "cu128-py3.11.lock failed" in ln)
        assert (
            f"package_index_url={index.url.replace('http://', 'http://me:***@')}/simple "
            "refused the credentials (HTTP 401): fix the user:token"
        ) in line, line
        assert torch_of(site) == "2.11.0+cu130"


def padded_wheel(wheel: Path, out: Path, mib: int) -> Path:
    """A copy of ``wheel`` with ``mib`` MiB of random bytes stored (uncompressed) in it, listed
    in its RECORD: a wheel big enough that a download stalled halfway has visibly arrived."""
    pad = os.urandom(mib << 20)
    digest = base64.urlsafe_b64encode(hashlib.sha256(pad).digest()).rstrip(b"=").decode()
    out.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out / wheel.name, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                data += f"torch/_padding.bin,sha256={digest},{len(pad)}\n".encode()
            dst.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
        dst.writestr("torch/_padding.bin", pad, compress_type=zipfile.ZIP_STORED)
    return out / wheel.name


def test_a_slow_download_prints_the_builds_progress_while_it_runs(site, wheelhouse, tmp_path):
    """The index stalls halfway through a torch wheel of 8 MiB until the test releases it: the
    deploy prints the build's phase and what uv's cache received while the download is in
    progress (the lock is made on first use, from the index as it is now)."""
    site.index.add([padded_wheel(wheelhouse.torch["cu130"], tmp_path / "padded", 8)], "cu130")
    release = site.index.hold("torch-")
    building = f"/root/venvs/{CU130}"
    with site.deploy_streaming("progress_interval_s=1") as run:
        try:
            # the first line once the download has begun (an earlier one may come before it)
            line = run.wait_for(
                f"building {building}.next: ",
                timeout=600,
                pattern=r"so far; download: [\d.]+ MiB into uv's cache",
            )
            # the build is still downloading: nothing installed, no finished build; the first
            # half of the wheel (4 MiB) is in uv's cache
            found = re.search(
                r"download: ([\d.]+) MiB into uv's cache so far, "
                r"0 of \d+ packages installed",
                line,
            )
            assert found and float(found[1]) >= 1, line
            assert site.ct("test", "-d", f"{building}.building").returncode == 0
            assert site.ct("test", "-e", f"{building}.next").returncode == 1
        finally:
            release.set()
        done = run.finish()
    assert done.rc == 0, done.output[-4000:]
    assert site.ct("readlink", "-f", "/root/venv").stdout.startswith(building)
