"""verify.py against the simulated node: the table and verdict when all is well, one clear line
per injected failure, never a change (overlay digests before/after), at most 3 container
commands (DESIGN.md "Speed"). Each pyinfra run costs seconds here, so scenarios share a site."""

import json

import pytest

UNIT = "dflash-train.service"
RACE = "FX to symbolically trace a dynamo-optimized function"


def container_calls(node):
    return [c for c in node.pct_calls() if c["argv"][:1] == ["exec"]]


def verify_unchanged(site, *data):
    """Run verify.py and prove it changed nothing on the node or in any container."""
    site.node.clear_pct_log()
    before = site.node.tree_digest()
    run = site.pyinfra("verify.py", *data)
    assert site.node.tree_digest() == before, "verify.py changed the node or a container"
    return run


def problem_lines(run):
    return [
        line.split("] ", 1)[1]
        for line in run.stderr.splitlines()
        if "] " in line and ": expected " in line and "; fix: " in line
    ]


def test_verify_table_verdict_and_each_injected_failure(deployed, tmp_path):
    site = deployed
    report = tmp_path / "verify.json"

    # --- happy path: table, verdict, exit 0, no change, JSON report, <= 3 container commands
    ok = verify_unchanged(site, f"verify_report={report}")
    assert ok.rc == 0, ok.stderr[-4000:]
    assert ok.changed == 0 and ok.json["results"]["totals"]["error"] == 0
    assert len(container_calls(site.node)) <= 3
    out = ok.stderr
    assert "CT 200 on 127.0.0.1: torch 2.11.0+cu130, CUDA 13.0" in out
    assert "driver 580.95.05 (node = container)" in out
    rows = [line.split() for line in out.splitlines() if line.strip().endswith((" ok", "status"))]
    assert rows[0] == ["GPU", "node", "name", "total", "MiB", "free", "MiB", "role", "status"]
    assert [r[-2] for r in rows[1:]] == ["target"] * 5 + ["drafter"] * 3
    assert "VERIFIED CT 200 on 127.0.0.1: torch 2.11.0+cu130 sees 8/8 GPUs" in out
    doc = json.loads(report.read_text())
    host = doc["hosts"]["@pct/127.0.0.1/200"]
    assert doc["verdict"] == "pass" and host["problems"] == []
    assert [g["node_gpu"] for g in host["gpus"]] == list(range(8))
    assert host["summary"]["driver_container"]["libcuda"] == "580.95.05"

    # --- the deep check: cu130 compiles from 8 threads at once without the race (on GPUs the
    # training does not hold: a user stops it first, as the refusal beside it says)
    assert site.ct("systemctl", "stop", UNIT).returncode == 0
    deep = verify_unchanged(site, "verify_level=compile")
    assert deep.rc == 0, deep.stderr[-4000:]
    assert "concurrent torch.compile ok" in deep.stderr
    assert site.ct("systemctl", "start", UNIT).returncode == 0

    # --- a stale trainer holds GPU 6, and only 7 GPUs are passed through (dev3 dropped)
    pid = site.node.spawn_gpu_process(6, ["python3", "train_old.py", "--run", "36"], 20000)
    # ... while the training unit's own process on GPU 0 is neither stale nor short of memory
    own = site.node.spawn_gpu_process(
        0,
        ["/root/venv/bin/python", "/data/dflash/train.py"],
        143000,
        cgroup=f"0::/lxc/200/ns/system.slice/{UNIT}",
    )
    site.node.run(["sed", "-i", "/^dev3:/d", "/etc/pve/lxc/200.conf"], check=True)
    site.node.run(["pct", "stop", "200"], check=True)
    site.node.run(["pct", "start", "200"], check=True)
    bad = verify_unchanged(site, f"verify_report={report}")
    assert bad.rc != 0 and "Traceback" not in bad.output
    lines = problem_lines(bad)
    assert any(
        line.startswith(
            "GPU count: expected 8 GPUs visible to torch (expected_gpu_count); "
            "found 7 (node GPU 3 not passed through)"
        )
        for line in lines
    ), lines
    assert any(line.startswith("GPU 7 (drafter): expected CUDA device 7 present") for line in lines)
    # node GPU 6 is CUDA device 5 inside the container now: named by both
    assert any(
        line.startswith("GPU 5 (drafter) free: expected no compute process")
        and f"pid {pid} (python3 train_old.py --run 36) holding 20000 MiB on node GPU 6" in line
        and f"kill {pid}" in line
        for line in lines
    ), lines
    assert "NOT VERIFIED CT 200 on 127.0.0.1: 3 problems" in bad.stderr
    assert not any(line.startswith("GPU 0") for line in lines) and f"pid {own}" not in bad.stderr
    assert json.loads(report.read_text())["verdict"] == "fail"

    # --- CUDA init error: the container lost its libcuda
    site.node.kill_gpu_process(pid)
    site.node.kill_gpu_process(own)
    site.node.ct_run(200, ["rm", "-f", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"], check=True)
    # ... and a side install polluted the venv (a distribution no pin asks for)
    site.node.ct_run(
        200,
        [
            "sh",
            "-c",
            "d=$(echo /root/venv/lib/python3*/site-packages)/"
            "sglang_junk-0.1.dist-info && mkdir -p $d && "
            "printf 'Metadata-Version: 2.1\\nName: sglang-junk\\nVersion: 0.1\\n' "
            "> $d/METADATA",
        ],
        check=True,
    )
    broken = verify_unchanged(site)
    assert broken.rc != 0
    lines = problem_lines(broken)
    assert any(
        line.startswith(
            "CUDA init: expected torch.cuda.is_available() is True; found CUDA "
            "error: Found no NVIDIA driver"
        )
        for line in lines
    ), lines
    assert any(
        line.startswith("driver parity: expected libcuda.so.580.95.05 in CT 200") for line in lines
    )
    # the deploy made the lock on first use (the site's scratch locks_dir): verify checks it
    assert any(
        line.startswith("venv packages: expected exactly ")
        and "/cu130-py3.11.lock; found extra sglang-junk==0.1" in line
        for line in lines
    ), lines

    # --- overlapping target/drafter lists: a settings error before any command
    overlap = verify_unchanged(site, "target_gpus=[0,1,2,3,4,5]")
    assert overlap.rc != 0 and "Traceback" not in overlap.output
    assert (
        "target_gpus and drafter_gpus overlap on [5]: a GPU is either a target or a drafter"
        in overlap.output
    )
    assert container_calls(site.node) == []


@pytest.mark.parametrize("node_options", [{"driver_version": "575.57.08"}])
def test_verify_wrong_build_old_driver_and_the_compile_race(site, node_options):
    # A node whose driver runs cu128 but not cu130, deployed with cu128.
    first = site.deploy("torch_variant=cu128")
    assert first.rc == 0, first.output[-4000:]

    # cu130 expected (the default): the cu128 build and the too-old driver, each on its own line.
    wrong = verify_unchanged(site)
    assert wrong.rc != 0
    lines = problem_lines(wrong)
    assert any(
        line.startswith("torch build: expected 2.11.0+cu130; found 2.11.0+cu128 in /root/venv")
        for line in lines
    ), lines
    assert any(
        line.startswith("driver for cu130: expected >= 580.65.06 (CUDA 13.0); found 575.57.08")
        for line in lines
    ), lines
    assert len(container_calls(site.node)) <= 3

    # cu128 as deployed, with the deep check (the training stopped first): the FX-tracing race,
    # and what to do about it.
    site.ct("systemctl", "stop", UNIT)
    race = verify_unchanged(site, "torch_variant=cu128", "verify_level=compile")
    assert race.rc != 0
    lines = problem_lines(race)
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        "concurrent torch.compile: expected flex_attention compiles from 8 threads at once"
    )
    assert RACE in lines[0] and "with torch 2.11.0+cu128" in lines[0]
    assert "one training process per GPU" in lines[0]
    assert "compile under a lock and warm each device in turn" in lines[0]
