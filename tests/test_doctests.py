"""The docstring examples of keras_selfattn run and print what they show.

They run once, on the TensorFlow run of `make test`; the ops and layers tests
cover the other backends.
"""

import doctest
import importlib
import pathlib

import keras
import pytest

import keras_selfattn

PACKAGE = pathlib.Path(keras_selfattn.__file__).parent


def _modules_with_examples():
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if ">>> " in path.read_text(encoding="utf-8"):
            parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="docstring examples run on the TensorFlow run")
@pytest.mark.parametrize("name", _modules_with_examples())
def test_docstring_examples(name):
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report = []
    for test in doctest.DocTestFinder().find(module, name):
        runner.run(test, out=report.append)
    results = runner.summarize(verbose=False)
    assert results.attempted, f"{name} has `>>> ` in its source but no docstring example was found"
    if results.failed:
        pytest.fail("".join(report), pytrace=False)
