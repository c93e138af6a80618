"""`export_for_serving`'s files: the version folder's permissions follow the
process umask (a TF Serving user must be able to read it)."""

import os
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
