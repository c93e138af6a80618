"""Every Python example in README.md and docs/ runs as written: each file's
blocks in order, in one namespace."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def python_blocks(page):
    return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)


def test_the_readme_shows_examples():
    assert len(python_blocks(ROOT / "README.md")) >= 5


def test_every_code_block_says_its_language():
    """A block is Python (run here) or a shell command (`sh`), never untyped."""
    for page in PAGES:
        fences = re.findall(r"^```(\w*)$", page.read_text(encoding="utf-8"), re.MULTILINE)
        opening = fences[::2]
        assert all(opening), f"{page.relative_to(ROOT)} has a code block without a language"


@pytest.mark.slow
@pytest.mark.backends("tensorflow", reason="the examples generate and export on TensorFlow")
@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)], ids=lambda p: str(p.relative_to(ROOT)))
def test_examples_run_as_written(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # files the examples write land here
    namespace = {}
    for index, block in enumerate(python_blocks(page)):
        try:
            exec(compile(block, f"{page.name} python block {index}", "exec"), namespace)
        except Exception as error:  # noqa: BLE001 - report which example broke
            pytest.fail(f"{page.relative_to(ROOT)} python block {index} fails: {type(error).__name__}: {error}")
    if page.name == "README.md":
        check_readme_results(namespace)


def check_readme_results(namespace):
    """What the README's examples say they make, made."""
    import keras
    import numpy as np

    events = keras.ops.convert_to_numpy(namespace["events"])
    assert events.shape == (1, 256 + 256)
    np.testing.assert_array_equal(events[:, :256], namespace["primer"])
    assert pathlib.Path("continuation.mid").stat().st_size > 0
    reply = namespace["reply"]
    assert reply["status"].numpy().tolist() == [b""]
    tokens = reply["tokens"].numpy()
    assert tokens.shape == (1, 320)
    np.testing.assert_array_equal(tokens[:, :256], namespace["primer"])
