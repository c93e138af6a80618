"""`export_for_serving`'s files: the version folder's permissions follow the
process umask (a TF Serving user must be able to read it), and `name` is one
folder inside `export_base`."""

import os
import re
import stat

import pytest

pytestmark = pytest.mark.backends("tensorflow", reason="SavedModels for TF Serving")

from keras_selfattn.export import export_for_serving  # noqa: E402
from tests.generation.generation_models import music_model  # noqa: E402


@pytest.fixture(scope="module")
def model():
    return music_model("absolute")


def _export_with_umask(model, export_base, umask):
    previous = os.umask(umask)
    try:
        return export_for_serving(model, export_base, name="music", max_length=8)
    finally:
        os.umask(previous)


def _modes(path):
    """`{path: permission bits}` of `path` and everything under it."""
    modes = {path: stat.S_IMODE(os.stat(path).st_mode)}
    for folder, folders, files in os.walk(path):
        for entry in folders + files:
            modes[os.path.join(folder, entry)] = stat.S_IMODE(os.stat(os.path.join(folder, entry)).st_mode)
    return modes


def test_a_version_is_readable_by_group_and_others_under_umask_022(model, tmp_path):
    path = _export_with_umask(model, tmp_path, 0o022)
    modes = _modes(path)
    assert len(modes) > 3 and any(os.path.isdir(p) for p in modes if p != path)
    for entry, mode in modes.items():
        wanted = 0o755 if os.path.isdir(entry) else 0o644
        assert mode & wanted == wanted, f"{entry}: {oct(mode)}"
        assert mode & 0o022 == 0, f"{entry}: {oct(mode)}"


def test_a_version_keeps_what_umask_077_hides(model, tmp_path):
    path = _export_with_umask(model, tmp_path, 0o077)
    for entry, mode in _modes(path).items():
        assert mode & 0o077 == 0, f"{entry}: {oct(mode)}"
        assert mode & 0o600 == 0o600, f"{entry}: {oct(mode)}"


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../music", "/tmp/music", "music\0"])
def test_a_name_that_is_not_one_plain_folder_is_refused_before_anything_is_written(model, tmp_path, name):
    export_base = tmp_path / "exports"
    with pytest.raises(ValueError, match="`name` must be one plain folder name"):
        export_for_serving(model, export_base, name=name, max_length=8)
    assert not os.listdir(tmp_path)


def test_a_name_with_the_alternative_separator_is_refused(model, tmp_path, monkeypatch):
    backslash = "\\"
    monkeypatch.setattr(os, "altsep", backslash)  # as on Windows
    expected = f"and without '/' or {backslash!r} or '\\x00'). Received: name={'a' + backslash + 'b'!r}"
    with pytest.raises(ValueError, match=re.escape(expected)):
        export_for_serving(model, tmp_path, name=f"a{backslash}b", max_length=8)
    monkeypatch.undo()
    assert not os.listdir(tmp_path)
