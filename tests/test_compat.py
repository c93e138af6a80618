"""The Keras internals `keras_selfattn.compat` relies on still exist.

Each failure names what a Keras release changed, so the fix is one edit in
`keras_selfattn/compat.py`.
"""

import math
import pathlib
import re

import keras
import numpy as np
import pytest

from keras_selfattn import compat

PACKAGE = pathlib.Path(compat.__file__).parent

# Keras's public `MultiHeadAttention` properties the attention layers read.
PUBLIC_PROPERTIES = (
    "num_heads",
    "key_dim",
    "value_dim",
    "dropout",
    "use_bias",
    "attention_axes",
    "query_dense",
    "key_dense",
    "value_dense",
    "output_dense",
)


def _changed(what):
    return f"{what} in Keras {keras.__version__}: update keras_selfattn/compat.py"


class _Internals(compat.MultiHeadAttentionInternals, keras.layers.MultiHeadAttention):
    pass


def _built_gated_layer(cls=keras.layers.MultiHeadAttention):
    arguments = dict(
        num_heads=2, key_dim=4, value_dim=3, dropout=0.25, output_shape=(5,), use_gate=True, sliding_window=2
    )
    try:
        layer = cls(**arguments)
    except (TypeError, ValueError) as error:
        pytest.fail(_changed(f"keras.layers.MultiHeadAttention({arguments}) raises {error}"))
    x = np.ones((1, 3, 6), "float32")
    layer(x, x)
    return layer


def test_multi_head_attention_private_attributes_exist():
    layer = _built_gated_layer()
    missing = [name for name in compat.MULTI_HEAD_ATTENTION_PRIVATE_ATTRIBUTES if not hasattr(layer, name)]
    assert not missing, _changed(f"keras.layers.MultiHeadAttention has no {', '.join(missing)}")


def test_multi_head_attention_public_properties_exist():
    layer = _built_gated_layer()
    missing = [name for name in PUBLIC_PROPERTIES if not hasattr(layer, name)]
    assert not missing, _changed(f"keras.layers.MultiHeadAttention has no public {', '.join(missing)}")


def test_internals_read_the_constructor_arguments():
    layer = _built_gated_layer(_Internals)
    read = {
        "output_features": (layer.output_features, (5,)),
        "sliding_window": (layer.sliding_window, 2),
        "use_gate": (layer.use_gate, True),
        "flash_attention": (layer.flash_attention in (None, False), True),
        "logit_scale": (layer.logit_scale, 1.0 / math.sqrt(4.0)),
        "dropout_layer.rate": (layer.dropout_layer.rate, 0.25),
        "gate_dense is a layer": (isinstance(layer.gate_dense, keras.layers.Layer), True),
    }
    wrong = {name: got for name, (got, expected) in read.items() if got != expected}
    assert not wrong, _changed(f"MultiHeadAttentionInternals reads wrong values {wrong}")


def test_internals_have_no_gate_without_use_gate():
    layer = _Internals(num_heads=2, key_dim=4)
    x = np.ones((1, 3, 6), "float32")
    layer(x, x)
    assert layer.gate_dense is None


def test_keras_mask_set_then_get():
    x = keras.ops.ones((2, 3))
    mask = keras.ops.convert_to_tensor([[True, True, False], [True, False, False]])
    try:
        compat.set_keras_mask(x, mask)
        got = compat.get_keras_mask(x)
    except Exception as error:  # noqa: BLE001 - the message must name Keras's change
        pytest.fail(_changed(f"set_keras_mask/get_keras_mask raise {error!r}"))
    assert got is not None, _changed("get_keras_mask does not return the mask set_keras_mask set")
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(got), keras.ops.convert_to_numpy(mask))


def test_tensorflow_trainer_has_what_multi_worker_fit_replaces():
    trainer = compat.tensorflow_trainer_module()
    missing = [
        name
        for name, owner in (
            ("reduce_per_replica", trainer),
            ("TensorFlowTrainer", trainer),
            ("TensorFlowTrainer._maybe_symbolic_build", getattr(trainer, "TensorFlowTrainer", None)),
        )
        if not hasattr(owner, name.rsplit(".", 1)[-1])
    ]
    assert not missing, _changed(f"keras.src.backend.tensorflow.trainer has no {', '.join(missing)}")


@pytest.mark.backends("tensorflow", reason="the TensorFlow trainer and tf.distribute")
def test_trainer_and_strategy_internals_that_multi_worker_fit_reads():
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    try:
        assert compat.in_multi_worker_mode(strategy) is False
    except AttributeError as error:
        pytest.fail(_changed(f"tf.distribute strategies' extended: {error}"))
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    assert compat.trainer_distribute_strategy(model) is strategy
    batch = (np.ones((4, 3), "float32"), np.ones((4, 2), "float32"))
    with strategy.scope():
        compat.symbolic_build(model, data_batch=batch)
    assert model.optimizer.built and model.built


def test_xla_context_is_told_apart():
    import tensorflow as tf

    seen = {}

    def record(name):
        seen[name] = compat.in_xla_context()
        return tf.constant(0)

    tf.function(lambda: record("xla"), jit_compile=True)()
    tf.function(lambda: record("graph"), jit_compile=False)()
    assert seen == {"xla": True, "graph": False}


def test_only_compat_imports_keras_internals():
    pattern = re.compile(r"^\s*(from|import)\s+keras\.src\b", re.MULTILINE)
    offenders = [
        str(path.relative_to(PACKAGE.parent))
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "compat.py" or path.parent != PACKAGE
        if pattern.search(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, f"import keras.src only in keras_selfattn/compat.py; also imported by {offenders}"


def test_pad_equals_keras_pad_eagerly_and_symbolically():
    x = np.arange(24, dtype="float32").reshape(2, 3, 4)
    widths = [[0, 0], [2, 1], [0, 3]]
    expected = keras.ops.convert_to_numpy(keras.ops.pad(x, widths, constant_values=-1.0))
    eager = compat.pad(keras.ops.convert_to_tensor(x), widths, constant_values=-1.0)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(eager), expected)
    symbolic = compat.pad(keras.Input((3, 4)), widths)
    assert tuple(symbolic.shape) == (None, 6, 7)
