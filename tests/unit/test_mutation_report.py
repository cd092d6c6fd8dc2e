"""The verification's table, verdict line and JSON file: behaviours the mutation run
(bench/mutation.py) found unpinned."""

import re
from pathlib import PurePosixPath

from pvegpu.output.report import header, report_document, table, verdict_line, write_report
from pvegpu.verification import Problem, Verdict

ROW = {
    "gpu": 0,
    "node_gpu": 3,
    "name": "NVIDIA H200",
    "total_mib": 143771,
    "free_mib": 512,
    "role": "target",
    "status": "ok",
}


def problem(n):
    return Problem(f"check {n}", "x", "y", "z")


def test_header_names_what_is_missing_or_differs():
    s = {"driver_node": "580.95.05", "driver_container": {"libcuda": None}}
    assert header(Verdict("CT 200", summary=s)) == (
        "CT 200: torch missing, driver 580.95.05 (node), none (container)"
    )
    s = {"torch": "2.11.0+cu130", "venv": "/root/venv", "venv_real": "/root/venv"}
    assert header(Verdict("CT 200", summary=s)) == "CT 200: torch 2.11.0+cu130, venv /root/venv"
    s = {"torch": "2.11.0+cu130", "venv": "/root/venv", "venv_real": None}
    assert header(Verdict("CT 200", summary=s)) == "CT 200: torch 2.11.0+cu130, venv /root/venv"


def test_header_reports_the_compile_check_only_once_it_ran():
    ran = {"torch": "t", "compile": {"seconds": 41.5, "threads": [1, 2, 3, 4], "ok": True}}
    assert header(Verdict("CT 200", summary=ran)) == (
        "CT 200: torch t, compile check 41.5 s on 4 threads"
    )
    skipped = {"torch": "t", "compile": {"seconds": None, "ok": None}}
    assert header(Verdict("CT 200", summary=skipped)) == "CT 200: torch t"


def test_table_aligns_numbers_right_and_words_left_and_blanks_show_a_dash():
    title, row = table(
        Verdict("CT 200", rows=[ROW, dict(ROW, gpu=1, name="", free_mib=143771, role="drafter")])
    )[1:3]
    # numeric columns end where their title ends; text columns start where it starts
    assert title.index("free MiB") + len("free MiB") == row.index("512") + len("512")
    assert title.index("GPU") + len("GPU") == row.index("0") + 1
    assert title.index("status") == row.index("ok")
    assert row.index("target") == title.index("role")
    third = table(Verdict("CT 200", rows=[ROW, dict(ROW, gpu=1, name="", role="drafter")]))[3]
    assert third.split()[2] == "-"


def test_verdict_line_counts_problems_in_words():
    assert verdict_line(Verdict("CT 200", problems=[problem(1)])) == (
        "NOT VERIFIED CT 200: 1 problem"
    )
    assert verdict_line(Verdict("CT 200", problems=[problem(1), problem(2)])) == (
        "NOT VERIFIED CT 200: 2 problems"
    )


def test_verdict_line_names_a_passed_compile_check():
    s = {"torch": "t", "device_count": 1, "expected_gpu_count": 1, "compile": {"ok": True}}
    assert verdict_line(Verdict("CT 200", summary=s)) == (
        "VERIFIED CT 200: torch t sees 1/1 GPUs, concurrent torch.compile ok"
    )
    s["compile"] = {"ok": False}
    assert verdict_line(Verdict("CT 200", summary=s)) == "VERIFIED CT 200: torch t sees 1/1 GPUs"


def test_report_carries_the_time_it_was_made_with_its_utc_offset():
    doc = report_document({"x": Verdict("CT 200")})
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}", doc["time"])


def test_report_file_is_indented_sorted_json_in_new_nested_directories(tmp_path):
    path = write_report(
        tmp_path / "a" / "b" / "verify.json", {"b": 1, "a": {"where": PurePosixPath("/root/venv")}}
    )
    assert path.read_text() == '{\n  "a": {\n    "where": "/root/venv"\n  },\n  "b": 1\n}\n'
    assert sorted(p.name for p in path.parent.iterdir()) == ["verify.json"]
