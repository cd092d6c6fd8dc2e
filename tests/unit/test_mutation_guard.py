"""The delete guard (pvegpu.guard): behaviours the mutation run (bench/mutation.py) found
unpinned: remove_tree on real files, links and missing paths, and the edges of the path rules."""

import os

import pytest

from pvegpu.guard import UnsafeDelete, delete_command, is_within, remove_tree, system_dir

BUILD = "torch-2.11.0-cu130"


def test_an_empty_delete_is_refused_with_one_clear_line():
    with pytest.raises(UnsafeDelete) as e:
        delete_command([])
    assert str(e.value) == "refusing an empty delete: nothing to delete"


def test_a_sibling_that_only_shares_a_prefix_is_not_within():
    assert not is_within("/tank/a", "/tankX")


def test_only_the_lib_siblings_match_the_lib_star_entry():
    assert system_dir("/lib64") == system_dir("/libx32") == "/lib*"
    assert system_dir("/lin") is None and system_dir("/li") is None
    assert system_dir("/lib/modules") is None and system_dir("/lib64/x") is None


def test_remove_tree_deletes_a_build_directory_in_venvs_dir(tmp_path):
    build = tmp_path / f"{BUILD}.b1"
    (build / "bin").mkdir(parents=True)
    (build / "bin" / "python").write_text("x")
    remove_tree(str(build), venvs_dir=str(tmp_path))
    assert not build.exists()
    with pytest.raises(UnsafeDelete, match=f"refusing to delete {build}"):
        remove_tree(str(build))  # the same path without its venvs_dir is not pvegpu's


def test_remove_tree_deletes_a_file(tmp_path):
    building = tmp_path / f"{BUILD}.building"
    building.write_text("half a build")
    remove_tree(str(building), venvs_dir=str(tmp_path))
    assert not os.path.lexists(building)


def test_remove_tree_deletes_a_link_never_what_it_points_at(tmp_path):
    target = tmp_path / "data"
    target.mkdir()
    (target / "ckpt").write_text("keep")
    link = tmp_path / f"{BUILD}.next"
    link.symlink_to(target)
    remove_tree(str(link), venvs_dir=str(tmp_path))
    assert not os.path.lexists(link) and (target / "ckpt").read_text() == "keep"


def test_remove_tree_of_a_missing_path_is_no_error(tmp_path):
    remove_tree(str(tmp_path / f"{BUILD}.b9"), venvs_dir=str(tmp_path))


def test_remove_tree_reports_a_failed_delete_unless_told_to_ignore_it(tmp_path, monkeypatch):
    build = tmp_path / f"{BUILD}.b2"
    build.mkdir()

    def refuse(*args, **kwargs):
        raise PermissionError("busy")

    monkeypatch.setattr(os, "rmdir", refuse)
    with pytest.raises(PermissionError):
        remove_tree(str(build), venvs_dir=str(tmp_path))
    remove_tree(str(build), venvs_dir=str(tmp_path), ignore_errors=True)
