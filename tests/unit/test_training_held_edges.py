"""Issue 35 (mutmut on probes/training_held.py): the held-GPU decision's edges in the container.

The refusal's whole text, a GPU exactly at the floor, a caller's own floor, two pids on one GPU,
nvidia-smi rows with more fields than asked for, a matcher missing a list, command lines that are
not UTF-8 and the real ``/proc`` as the default.
"""

from __future__ import annotations

import subprocess
import sys
import time

from pvegpu.probes import training_held as th


def test_the_compile_refusal_is_one_whole_line_consent_or_not():
    line = (
        "verify_level=compile: refused, 2 GPU(s) in use (a training, another process, a "
        "neighbour container or the node): it compiles and allocates on every GPU; run it on a "
        "stopped stack (deploy.py --data restart_training=true stops pvegpu's unit for it)"
    )
    assert th.compile_refusal(["ab", "cd"]) == line
    assert th.compile_refusal(["ab", "cd"], consent=True) == line
    assert th.compile_refusal([]) is None
    assert th.compile_refusal([], consent=True) is None


def test_a_gpu_exactly_at_the_floor_is_held():
    floor = th.CONTEXT_FLOOR_MIB
    assert th.held_why({"ab": floor}, {}) == {
        "ab": f"{floor} MiB in use (another process, a neighbour container or the node)"
    }
    assert th.held_why({"ab": floor - 1}, {}) == {}


def test_the_callers_floor_decides_which_gpus_may_take_a_context():
    used = {"ab": 20, "cd": 5}
    assert th.context_ok(used, {}, floor=10) == ["cd"]
    assert th.context_ok(used, {}, floor=30) == ["ab", "cd"]
    assert th.held_why(used, {}, floor=10) == {
        "ab": "20 MiB in use (another process, a neighbour container or the node)"
    }


def test_every_pid_of_this_container_on_a_gpu_is_named():
    assert th.held_why({"ab": 0}, {"ab": [42, 43]}) == {
        "ab": "compute process of this container (pid 42, 43)"
    }


def test_a_row_with_more_fields_than_asked_for_is_not_read_as_a_pid_or_figure():
    assert th.apps_by_uuid("GPU-ab, 12, 13") == {}
    assert th.apps_by_uuid("GPU-AB, 12\nGPU-ab, 14\n, 15", own_pid=14) == {"ab": [12]}
    assert th.used_by_uuid("GPU-ab, 10, 3") == {"ab": None}
    assert th.used_by_uuid("GPU-ab, 10\nno comma") == {"ab": 10}
    assert th.used_by_uuid(None) == {} and th.apps_by_uuid(None) == {}


def test_a_matcher_without_pythons_or_without_python_under_still_decides():
    argv = ["/root/venvs/torch-x.b1/bin/python", "/data/t.py"]
    assert th.is_training_argv(argv, {"script": "/data/t.py", "python_under": ["/root/venvs/"]})
    assert not th.is_training_argv(argv, {"script": "/data/t.py"})
    plain = ["/root/venv/bin/python", "/data/t.py"]
    assert th.is_training_argv(plain, {"script": "/data/t.py", "pythons": [plain[0]]})
    assert not th.is_training_argv(["/usr/bin/python3", "/data/t.py"], {"script": "/data/t.py"})


def test_a_command_line_that_is_not_utf8_is_read_with_each_byte_escaped(tmp_path):
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cmdline").write_bytes(b"/root/venv/bin/python\0/data/t\xff.py\0")
    (tmp_path / "8").mkdir()
    (tmp_path / "8" / "cmdline").write_bytes(b"/root/venv/bin/python\0/data/t.py\0")
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "cmdline").write_bytes(b"/root/venv/bin/python\0/data/t.py\0")
    # as the node probe reads it (prelude.as_text): the same process is a training in both
    matcher = {"script": "/data/t\\xff.py", "pythons": ["/root/venv/bin/python"]}
    assert th.training_pids(matcher, str(tmp_path)) == [7]
    matcher["script"] = "/data/t.py"
    # "self" is a link to a process, not a process of its own: only digit names count
    assert th.training_pids(matcher, str(tmp_path)) == [8]


def test_the_real_proc_is_read_by_default():
    # a child with a known command line (pytest's own may be retitled by xdist)
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        # bounded wait until the child's command line is its own (read before the interpreter
        # has finished its exec, it may still be pytest's)
        for _ in range(100):
            with open(f"/proc/{child.pid}/cmdline", "rb") as f:
                if f.read().split(b"\0")[:2] == [sys.executable.encode(), b"-c"]:
                    break
            time.sleep(0.05)
        matcher = {"script": "-c", "pythons": [sys.executable]}
        assert child.pid in th.training_pids(matcher)
    finally:
        child.stdin.close()
        child.wait()
