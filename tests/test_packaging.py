"""The wheel carries what users of the trained weights must read: the code's
licence, the weights' licence beside the weights, and each trained preset's
model card; its metadata names both licences."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from keras_selfattn.models import presets

ROOT = Path(__file__).resolve().parents[1]
WEIGHTS = "keras_selfattn/models/weights"


# What setup.py packages, copied so that no earlier build folder is reused.
SOURCES = ("setup.py", "MANIFEST.in", "README.md", "LICENSE", "keras_selfattn", "recipes", "serving", "docs/models")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    source, folder = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(folder), str(source)],
        check=True, capture_output=True,
    )
    (path,) = folder.glob("keras_selfattn-*.whl")
    return zipfile.ZipFile(path)


def test_the_code_is_apache_licensed():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text


def test_the_wheel_carries_the_weights_with_their_licence_and_card(wheel):
    names = set(wheel.namelist())
    licence = wheel.read(f"{WEIGHTS}/LICENSE.md").decode()
    for preset in presets.TRAINED_PRESETS.values():
        assert f"{WEIGHTS}/{preset.weights_file}" in names
        card = Path(preset.card).name
        assert wheel.read(f"{WEIGHTS}/{card}") == (ROOT / preset.card).read_bytes()
        assert f"`{preset.weights_file}`" in licence and preset.license == "CC-BY-NC-SA-4.0"
        assert "CC BY-NC-SA 4.0" in licence
    (metadata,) = [name for name in names if name.endswith(".dist-info/METADATA")]
    fields = wheel.read(metadata).decode().splitlines()
    assert "License: Apache-2.0 (code); CC-BY-NC-SA-4.0 (trained weights in keras_selfattn/models/weights)" in fields
    assert {"License-File: LICENSE", f"License-File: {WEIGHTS}/LICENSE.md"} <= set(fields)


def test_list_presets_names_the_weights_licence():
    listed = {p["name"]: p["license"] for p in presets.list_presets()}
    assert listed["maestro_small"] == "CC-BY-NC-SA-4.0"
    assert listed["tiny"] is None
