"""The README's Python examples run as written, in order, in one namespace."""

import pathlib
import re

import keras
import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)


def test_the_readme_has_examples():
    assert len(_python_blocks()) >= 3


@pytest.mark.backends("tensorflow", reason="the README's generation example runs on TensorFlow")
def test_readme_examples_run_as_written():
    namespace = {}
    for index, block in enumerate(_python_blocks()):
        try:
            exec(compile(block, f"README.md python block {index}", "exec"), namespace)
        except Exception as error:  # noqa: BLE001 - report which example broke
            pytest.fail(f"README.md python block {index} fails: {type(error).__name__}: {error}")
    events = keras.ops.convert_to_numpy(namespace["events"])
    assert events.shape == (1, 16 + 64)
