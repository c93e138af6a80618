"""Keras's own `MultiHeadAttention` test suite, run on this package's class.

The suite is read from the installed Keras (`keras/src/layers/attention/
multi_head_attention_test.py`) at test time, so a Keras upgrade that changes
it runs here unchanged; its `layers.MultiHeadAttention` is swapped for
`keras_selfattn.MultiHeadAttention`, every other layer stays Keras's. Each of
Keras's cases is collected under its own name, on every backend `make test`
runs.
"""

import importlib.util
import types
import unittest
from pathlib import Path

import keras
import pytest

from keras_selfattn.layers.multi_head_attention import MultiHeadAttention

SUITE_PATH = Path(keras.__file__).parent / "src" / "layers" / "attention" / "multi_head_attention_test.py"

# Cases of Keras's suite that cannot pass on this class by design, with the
# reason; none today.
EXCLUDED_CASES = {}


def _load_suite_module():
    if not SUITE_PATH.exists():
        pytest.fail(f"Keras's MultiHeadAttention suite is missing from the install: {SUITE_PATH}")
    spec = importlib.util.spec_from_file_location("keras_multi_head_attention_test", SUITE_PATH)
    suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite)
    suite.layers = _layers_with_our_multi_head_attention(suite.layers)
    for name, reason in EXCLUDED_CASES.items():
        case = getattr(suite.MultiHeadAttentionTest, name)
        setattr(suite.MultiHeadAttentionTest, name, unittest.skip(reason)(case))
    return suite


def _layers_with_our_multi_head_attention(keras_layers):
    """Keras's `layers` namespace with `MultiHeadAttention` replaced."""
    namespace = types.SimpleNamespace(**{
        name: getattr(keras_layers, name) for name in dir(keras_layers) if not name.startswith("__")
    })
    namespace.MultiHeadAttention = MultiHeadAttention
    return namespace


SUITE = _load_suite_module()
KerasMultiHeadAttentionSuite = SUITE.MultiHeadAttentionTest


def test_the_suite_builds_our_class():
    assert "layers.MultiHeadAttention(" in SUITE_PATH.read_text()
    layer = SUITE.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    assert type(layer) is MultiHeadAttention
    assert SUITE.layers.Embedding is keras.layers.Embedding


def test_excluded_cases_still_exist_in_the_suite():
    names = {name for name in dir(KerasMultiHeadAttentionSuite) if name.startswith("test")}
    assert set(EXCLUDED_CASES) <= names, sorted(set(EXCLUDED_CASES) - names)
