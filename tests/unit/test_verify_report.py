"""The table, the verdict line and the JSON report of the verification."""

import json
from importlib.metadata import version

from pvegpu.output.report import report_document, table, verdict_line, write_report
from pvegpu.verification import verify
from tests.unit.verify_facts import ct_facts, node_facts, settings


def verdict(**kw):
    return verify(
        settings(),
        kw.get("node", node_facts()),
        kw.get("ct", ct_facts()),
        where="CT 200 on pve1",
        vmid=200,
        node_name="pve1",
    )


def test_table_has_a_header_a_title_row_and_one_aligned_row_per_gpu():
    lines = table(verdict())
    assert lines[0] == (
        "CT 200 on pve1: torch 2.11.0+cu130, CUDA 13.0, cuDNN 91300, NCCL 2.27.7, "
        "driver 580.95.05 (node = container), venv /root/venv -> "
        "/root/venvs/torch-2.11.0-cu130, gcc 12.2.0, Python.h in /usr/include/python3.11"
    )
    assert lines[1].split() == [
        "GPU",
        "node",
        "name",
        "total",
        "MiB",
        "free",
        "MiB",
        "role",
        "status",
    ]
    assert len(lines) == 2 + 8
    assert lines[2].split() == ["0", "0", "NVIDIA", "H200", "143771", "143771", "target", "ok"]
    assert lines[9].split()[-2:] == ["drafter", "ok"]
    # columns line up: every row puts the role at the same offset as the title
    offset = lines[1].index("role")
    assert all(line[offset:].startswith(("target", "drafter")) for line in lines[2:])


def test_table_of_a_broken_container_shows_missing_and_unpassed_gpus():
    lines = table(verdict(ct=ct_facts(gpus=[0, 1, 2, 4, 5, 6, 7], libcuda="575.57.08")))
    assert "driver 580.95.05 (node), 575.57.08 (container)" in lines[0]
    assert any(line.split()[-2:] == ["drafter", "missing"] for line in lines)
    assert any(
        line.split()[:2] == ["-", "3"] and line.endswith("not passed through") for line in lines
    )


def test_verdict_lines():
    assert verdict_line(verdict()) == (
        "VERIFIED CT 200 on pve1: torch 2.11.0+cu130 sees 8/8 GPUs (5 target, 3 drafter), "
        "driver 580.95.05 on node and container, venv = its pins and their dependencies (no lock)"
    )
    bad = verdict(ct=ct_facts(version="2.11.0+cu128", cuda="12.8", free=10))
    assert verdict_line(bad) == "NOT VERIFIED CT 200 on pve1: 9 problems"


def test_json_report_round_trip(tmp_path):
    good, bad = verdict(), verdict(ct=ct_facts(version="2.11.0+cu128", cuda="12.8"))
    doc = report_document({"@pct/a/200": good, "@pct/b/200": bad}, {"torch_variant": "cu130"})
    path = write_report(tmp_path / "sub" / "verify.json", doc)
    loaded = json.loads(path.read_text())
    assert loaded["verdict"] == "fail"
    assert loaded["pvegpu_version"] == version("pvegpu")  # pyproject's, as installed
    assert loaded["settings"] == {"torch_variant": "cu130"}
    a, b = loaded["hosts"]["@pct/a/200"], loaded["hosts"]["@pct/b/200"]
    assert a["verdict"] == "pass" and a["problems"] == [] and len(a["gpus"]) == 8
    assert a["summary"]["torch"] == "2.11.0+cu130" and a["summary"]["driver_node"] == "580.95.05"
    assert b["problems"][0]["check"] == "torch build"
    assert b["problems"][0]["expected"] == "2.11.0+cu130"
    assert b["problems"][0]["line"].startswith(
        "torch build: expected 2.11.0+cu130; found 2.11.0+cu128"
    )
    assert not list(tmp_path.glob("sub/*.tmp"))
    assert report_document({"x": good})["verdict"] == "pass"
