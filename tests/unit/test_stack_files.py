"""pyinfra's per-operation stack walk (``inspect.stack()``) finds deploy.py and tasks/*.py in
``inspect``'s file cache instead of scanning every loaded module for each frame of theirs
(pvegpu.startup.stack_files, issue 14)."""

from __future__ import annotations

import inspect
import sys
import types

from pvegpu.startup.stack_files import NOT_A_MODULE, deploy_files, register_deploy_files


class CountingModule(types.ModuleType):
    """A loaded module that counts how often a scan of sys.modules asks for its file."""

    asked = 0

    @property
    def __file__(self):  # type: ignore[override]
        CountingModule.asked += 1
        return "/nonexistent/counting.py"


def test_deploy_files_are_the_file_and_its_tasks(tmp_path):
    (tmp_path / "tasks").mkdir()
    for name in ("deploy.py", "tasks/b.py", "tasks/a.py", "tasks/notes.txt"):
        (tmp_path / name).write_text("")
    assert deploy_files(str(tmp_path / "deploy.py")) == [
        str(tmp_path / "deploy.py"),
        str(tmp_path / "tasks/a.py"),
        str(tmp_path / "tasks/b.py"),
    ]


def test_a_registered_deploy_files_frame_is_found_without_scanning_modules(tmp_path, monkeypatch):
    deploy = tmp_path / "deploy.py"
    deploy.write_text("import sys\nframe = sys._getframe()\n")
    monkeypatch.setitem(sys.modules, "pvegpu_counting_module", CountingModule("counting"))
    register_deploy_files(deploy_files(str(deploy)))
    scope: dict = {}
    exec(compile(deploy.read_text(), str(deploy), "exec"), scope)  # as pyinfra's exec_file does
    CountingModule.asked = 0
    assert inspect.getmodule(scope["frame"], str(deploy)) is None
    assert inspect.getframeinfo(scope["frame"]).filename == str(deploy)
    assert CountingModule.asked == 0
    assert inspect.modulesbyfile[str(deploy)] == NOT_A_MODULE


def test_a_file_some_module_was_found_at_keeps_its_module(monkeypatch):
    monkeypatch.setitem(inspect.modulesbyfile, "/nonexistent/mod.py", "json")
    register_deploy_files(["/nonexistent/mod.py"])
    assert inspect.modulesbyfile["/nonexistent/mod.py"] == "json"
