import keras
import numpy as np
import pytest
from keras import ops

from keras_selfattn.layers.local_attention_1d import LocalAttention1D
from keras_selfattn.layers.multi_head_attention import MultiHeadAttention
from tests.layer_testing import jit, run_layer_test
from tests.references import backend_gradients, naive_attention_scores

# Distinct primes (batch 2): no axis can pass for another.
HEADS, KEY_DIM, FEATURES = 3, 5, 11


def inputs(length, batch=2, seed=0, features=FEATURES):
    return np.random.default_rng(seed).normal(size=(batch, length, features)).astype("float32")


def local_mask(length, block_length, filter_width, masked):
    """`[length, length]`: which key each query may attend to, position by position."""
    mask = np.zeros((length, length), bool)
    for i in range(length):
        block = i // block_length
        for j in range(length):
            if masked:
                mask[i, j] = (block - 1) * block_length <= j <= i
            else:
                start = block * block_length - filter_width
                mask[i, j] = start <= j < (block + 1) * block_length + filter_width
    return mask


def dense_twin(layer, x):
    """A `MultiHeadAttention` with the weights of `layer` (built on `x`)."""
    if not layer.built:
        layer(x)
    dense = MultiHeadAttention(HEADS, KEY_DIM)
    dense(x, x)
    dense.set_weights(layer.get_weights())
    return dense


def dense_reference(layer, x, mask):
    """Dense attention with the weights of `layer` and an explicit mask."""
    return ops.convert_to_numpy(dense_twin(layer, x)(x, x, attention_mask=mask))


def numpy(x):
    return ops.convert_to_numpy(x)


@pytest.mark.parametrize(
    "length, block_length, filter_width, masked",
    [
        (12, 4, 0, True),
        (11, 3, 0, True),
        (7, 2, 0, True),
        (12, 4, 2, False),
        (11, 3, 1, False),
        (10, 4, 0, False),
        (9, 2, 5, False),
    ],
)
def test_equals_dense_attention_with_local_mask(length, block_length, filter_width, masked):
    layer = LocalAttention1D(HEADS, KEY_DIM, block_length, filter_width)
    x = inputs(length)
    expected = dense_reference(
        layer, x, local_mask(length, block_length, filter_width, masked)[None]
    )
    np.testing.assert_allclose(numpy(layer(x, use_causal_mask=masked)), expected, atol=1e-5)


def test_one_layer_called_with_and_without_the_causal_mask():
    """The flange is the unmasked memory; the causal call reads the previous block."""
    layer = LocalAttention1D(HEADS, KEY_DIM, block_length=3, filter_width=2)
    x = inputs(11)
    unmasked = numpy(layer(x, use_causal_mask=False))
    causal = numpy(layer(x, use_causal_mask=True))
    default = numpy(layer(x))
    np.testing.assert_allclose(
        unmasked, dense_reference(layer, x, local_mask(11, 3, 2, False)[None]), atol=1e-5
    )
    np.testing.assert_allclose(
        causal, dense_reference(layer, x, local_mask(11, 3, 0, True)[None]), atol=1e-5
    )
    np.testing.assert_array_equal(default, unmasked)


@pytest.mark.parametrize(
    "block_length, filter_width, masked", [(3, 0, True), (3, 2, False)], ids=["masked", "unmasked"]
)
def test_input_gradient_equals_dense_attention_gradient(block_length, filter_width, masked):
    layer = LocalAttention1D(HEADS, KEY_DIM, block_length, filter_width)
    x = inputs(11)
    dense = dense_twin(layer, x)
    mask = local_mask(11, block_length, filter_width, masked)[None]
    weights = np.random.default_rng(4).normal(size=(2, 11, FEATURES))

    (local_gradient,) = backend_gradients(
        lambda y: ops.sum(ops.multiply(layer(y, use_causal_mask=masked), weights)), [x]
    )
    (dense_gradient,) = backend_gradients(
        lambda y: ops.sum(ops.multiply(dense(y, y, attention_mask=mask), weights)), [x]
    )
    np.testing.assert_allclose(local_gradient, dense_gradient, atol=1e-5)


@pytest.mark.parametrize("masked", [True, False], ids=["masked", "unmasked"])
def test_padding_masks_are_respected(masked):
    length, block_length = 10, 3
    layer = LocalAttention1D(HEADS, KEY_DIM, block_length, 0 if masked else 2)
    x = inputs(length)
    lengths = np.array([10, 6])
    padding = np.arange(length)[None] < lengths[:, None]
    output = numpy(
        layer(x, x, query_mask=padding, value_mask=padding, use_causal_mask=masked)
    )
    mask = (
        local_mask(length, block_length, layer.filter_width, masked)[None]
        & padding[:, None, :]
        & padding[:, :, None]
    )
    np.testing.assert_allclose(output, dense_reference(layer, x, mask), atol=1e-5)


def test_keras_mask_of_the_input_is_used():
    tokens = np.array([[3, 1, 4, 1, 5, 9, 2], [6, 5, 3, 0, 0, 0, 0]])
    embedded = keras.layers.Embedding(10, FEATURES, mask_zero=True)(tokens)
    layer = LocalAttention1D(HEADS, KEY_DIM, 2)
    padding = tokens != 0
    with_keras_mask = numpy(layer(embedded, use_causal_mask=True))
    explicit = numpy(
        layer(embedded, embedded, query_mask=padding, value_mask=padding, use_causal_mask=True)
    )
    np.testing.assert_allclose(with_keras_mask, explicit, atol=1e-6)


@pytest.mark.parametrize("block_length", [9, 16])
def test_a_block_covering_the_input_is_global_attention(block_length):
    x = inputs(9)
    for masked in (True, False):
        layer = LocalAttention1D(HEADS, KEY_DIM, block_length)
        output = numpy(layer(x, use_causal_mask=masked))
        dense = MultiHeadAttention(HEADS, KEY_DIM)
        dense(x, x)
        dense.set_weights(layer.get_weights())
        expected = numpy(dense(x, x, use_causal_mask=masked))
        np.testing.assert_allclose(output, expected, atol=1e-5)


def test_distinct_key_and_value_inputs():
    layer = LocalAttention1D(HEADS, KEY_DIM, 3, 1)
    query, key, value = inputs(8, seed=1), inputs(8, seed=2), inputs(8, seed=3)
    dense = MultiHeadAttention(HEADS, KEY_DIM)
    dense(query, value, key)
    layer(query, value, key)
    dense.set_weights(layer.get_weights())
    expected = numpy(dense(query, value, key, attention_mask=local_mask(8, 3, 1, False)[None]))
    np.testing.assert_allclose(numpy(layer(query, value, key)), expected, atol=1e-5)


@pytest.mark.parametrize("block_length", [1, 3, 4])
def test_changing_a_later_position_changes_no_earlier_output(block_length):
    layer = LocalAttention1D(HEADS, KEY_DIM, block_length)
    x = inputs(10)
    before = numpy(layer(x, use_causal_mask=True))
    for position in (0, 4, 9):
        changed = x.copy()
        changed[:, position] += 3.0
        after = numpy(layer(changed, use_causal_mask=True))
        np.testing.assert_array_equal(after[:, :position], before[:, :position])
        assert not np.allclose(after[:, position], before[:, position])


def cached_loop(layer, x, max_length, steps=1, step_function=None):
    step_function = step_function or (
        lambda x, cache, index: layer(
            x, cache=cache, cache_update_index=index, use_causal_mask=True
        )
    )
    cache = np.zeros((x.shape[0], 2, max_length, HEADS, KEY_DIM), "float32")
    outputs = []
    for start in range(0, x.shape[1], steps):
        output, cache = step_function(x[:, start : start + steps], cache, start)
        outputs.append(numpy(output))
    return np.concatenate(outputs, axis=1)


@pytest.mark.parametrize(
    "length, block_length, max_length", [(10, 3, 10), (8, 4, 12), (7, 8, 7), (9, 2, 9)]
)
def test_cached_loop_equals_full_masked_pass(length, block_length, max_length):
    layer = LocalAttention1D(HEADS, KEY_DIM, block_length)
    x = inputs(length)
    full = numpy(layer(x, use_causal_mask=True))
    np.testing.assert_allclose(cached_loop(layer, x, max_length), full, atol=1e-5)


def test_cached_steps_of_several_positions():
    layer = LocalAttention1D(HEADS, KEY_DIM, 3)
    x = inputs(12)
    full = numpy(layer(x, use_causal_mask=True))
    np.testing.assert_allclose(cached_loop(layer, x, 12, steps=4), full, atol=1e-5)


def test_compiled_cached_step_with_tensor_index():
    layer = LocalAttention1D(HEADS, KEY_DIM, 3)
    x = inputs(10)
    full = numpy(layer(x, use_causal_mask=True))
    step = jit(
        lambda x, cache, index: layer(
            x, cache=cache, cache_update_index=index, use_causal_mask=True
        )
    )
    looped = cached_loop(
        layer,
        x,
        10,
        step_function=lambda x, cache, index: step(x, cache, ops.convert_to_tensor(index, "int32")),
    )
    np.testing.assert_allclose(looped, full, atol=1e-5)


def test_layer_helper_masked_with_value(tmp_path):
    run_layer_test(
        LocalAttention1D,
        dict(num_heads=HEADS, key_dim=KEY_DIM, block_length=3),
        {"query": inputs(7), "value": inputs(7, seed=1, features=13)},
        tmp_path,
        call_kwargs={"use_causal_mask": True},
    )


def test_layer_helper_unmasked_self_attention_with_dropout_and_output_shape(tmp_path):
    run_layer_test(
        LocalAttention1D,
        dict(
            num_heads=HEADS,
            key_dim=KEY_DIM,
            block_length=4,
            filter_width=2,
            dropout=0.1,
            output_shape=7,
        ),
        {"query": inputs(13)},
        tmp_path,
        expected_output_shape=(2, 13, 7),
    )


def test_config_round_trip_keeps_local_arguments():
    layer = LocalAttention1D(HEADS, KEY_DIM, 5, 2, name="local")
    config = layer.get_config()
    assert (config["block_length"], config["filter_width"]) == (5, 2)
    for absent in ("use_causal_mask", "attention_axes", "sliding_window", "flash_attention"):
        assert absent not in config
    assert LocalAttention1D.from_config(config).get_config() == config


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        (dict(block_length=0), "block_length"),
        (dict(block_length=-2), "block_length"),
        (dict(block_length=2.5), "block_length"),
        (dict(block_length=True), "block_length"),
        (dict(block_length=4, filter_width=-1), "filter_width"),
        (dict(block_length=4, filter_width=1.0), "filter_width"),
        (dict(block_length=4, use_causal_mask=True), "use_causal_mask"),
        (dict(block_length=4, flash_attention=True), "flash_attention"),
        (dict(block_length=4, flash_attention=False), "flash_attention"),
        (dict(block_length=4, sliding_window=2), "sliding_window"),
        (dict(block_length=4, attention_axes=(1,)), "attention_axes"),
        (dict(block_length=4, num_heads=True), "num_heads"),
        (dict(block_length=4, key_dim=0), "key_dim"),
        (dict(block_length=4, value_dim=False), "value_dim"),
    ],
)
def test_bad_constructor_arguments(kwargs, argument):
    kwargs = {"num_heads": HEADS, "key_dim": KEY_DIM, **kwargs}
    with pytest.raises(ValueError, match=f"`{argument}`"):
        LocalAttention1D(**kwargs)


def test_bad_call_arguments():
    layer = LocalAttention1D(HEADS, KEY_DIM, 4)
    with pytest.raises(ValueError, match="`query` must have rank 3"):
        layer(np.zeros((2, 3, 4, FEATURES), "float32"))
    with pytest.raises(ValueError, match="`query` must have rank 3"):
        layer.build((2, FEATURES))
    with pytest.raises(ValueError, match="one length"):
        layer(inputs(6), inputs(5))
    with pytest.raises(ValueError, match="`use_causal_mask` must be True or False"):
        layer(inputs(6), use_causal_mask="yes")
    with pytest.raises(ValueError, match=f"`query`.*{FEATURES} features"):
        layer(np.zeros((2, 6, 3), "float32"))


def test_cache_arguments_are_checked():
    layer = LocalAttention1D(HEADS, KEY_DIM, 4)
    cache = np.zeros((2, 2, 6, HEADS, KEY_DIM), "float32")
    with pytest.raises(ValueError, match="A `cache` needs `use_causal_mask=True`"):
        layer(inputs(1), cache=cache, cache_update_index=0)
    with pytest.raises(ValueError, match="`cache_update_index`"):
        layer(inputs(1), cache=cache, use_causal_mask=True)
    with pytest.raises(ValueError, match="`cache_update_index` must lie"):
        layer(inputs(1), cache=cache, cache_update_index=6, use_causal_mask=True)
    with pytest.raises(ValueError, match="`cache_update_index` needs a `cache`"):
        layer(inputs(6), cache_update_index=0)
    step, padding = inputs(1), np.ones((2, 1), bool)
    with pytest.raises(ValueError, match="`value_mask` and `key_mask`"):
        layer(
            step, step, value_mask=padding, cache=cache, cache_update_index=0, use_causal_mask=True
        )


@pytest.mark.parametrize("symbolic", [False, True], ids=["eager", "symbolic"])
@pytest.mark.parametrize(
    "argument, value",
    [
        ("attention_mask", np.ones((2, 6, 6), bool)),
        ("attention_bias", np.zeros((2, HEADS, 6, 6), "float32")),
    ],
)
def test_arguments_block_attention_cannot_honour_raise(argument, value, symbolic):
    layer = LocalAttention1D(HEADS, KEY_DIM, 4)
    x = keras.Input((6, FEATURES), batch_size=2) if symbolic else inputs(6)
    with pytest.raises(ValueError, match=f"`{argument}` is not supported by LocalAttention1D"):
        layer(x, **{argument: value})


def test_removed_image_shape_argument():
    layer = LocalAttention1D(HEADS, KEY_DIM, 4)
    with pytest.raises(TypeError, match="image_shape"):
        layer(inputs(6), image_shape=(2, 3))


def test_gate_and_value_dim_follow_multi_head_attention():
    x = inputs(10)
    layer = LocalAttention1D(HEADS, KEY_DIM, 4, 1, value_dim=3, use_gate=True)
    output = numpy(layer(x))
    dense = MultiHeadAttention(HEADS, KEY_DIM, value_dim=3, use_gate=True)
    dense(x, x)
    dense.set_weights(layer.get_weights())
    expected = numpy(dense(x, x, attention_mask=local_mask(10, 4, 1, False)[None]))
    np.testing.assert_allclose(output, expected, atol=1e-5)


def test_functional_model_with_unknown_length():
    layer = LocalAttention1D(HEADS, KEY_DIM, 3)
    sequence = keras.Input((None, FEATURES))
    model = keras.Model(sequence, layer(sequence, use_causal_mask=True))
    for length in (5, 9):
        x = inputs(length)
        expected = numpy(layer(x, use_causal_mask=True))
        np.testing.assert_allclose(model.predict(x, verbose=0), expected, atol=1e-5)


def output_from_scores(layer, scores, value):
    """The layer's output recomputed as `scores @ values`, projected."""
    mixed = np.einsum("bhqk,bkhd->bqhd", scores, numpy(layer.value_dense(value)))
    return numpy(layer.output_dense(mixed.astype("float32")))


@pytest.mark.parametrize("masked", [True, False], ids=["masked", "unmasked"])
def test_scores_are_a_naive_dense_softmax_over_the_window(masked):
    length, block_length = 13, 4
    layer = LocalAttention1D(HEADS, KEY_DIM, block_length, 0 if masked else 2)
    x = inputs(length)
    padding = np.ones((2, length), bool)
    padding[0, :3] = False  # left padding
    padding[1, -4:] = False
    output, scores = layer(
        x, x, query_mask=padding, value_mask=padding, use_causal_mask=masked,
        return_attention_scores=True,
    )
    scores = numpy(scores)
    assert scores.shape == (2, HEADS, length, length)
    allowed = (
        local_mask(length, block_length, layer.filter_width, masked)[None, None]
        & padding[:, None, None, :]
        & padding[:, None, :, None]
    )
    np.testing.assert_allclose(scores, naive_attention_scores(layer, x, x, allowed), atol=1e-6)
    assert np.all(scores[~np.broadcast_to(allowed, scores.shape)] == 0)
    real_rows = np.broadcast_to(padding[:, None, :], scores.shape[:-1])
    np.testing.assert_allclose(scores.sum(-1), real_rows.astype("float32"), atol=1e-5)
    np.testing.assert_allclose(output_from_scores(layer, scores, x), numpy(output), atol=1e-5)


def test_scores_are_the_probabilities_before_dropout():
    layer = LocalAttention1D(HEADS, KEY_DIM, 3, 1, dropout=0.5)
    x = inputs(10)
    dropped, scores = layer(x, training=True, return_attention_scores=True)
    inference, expected = layer(x, training=False, return_attention_scores=True)
    np.testing.assert_allclose(numpy(scores), numpy(expected), atol=1e-6)
    assert not np.allclose(numpy(dropped), numpy(inference), atol=1e-3)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("steps", [1, 3])
def test_cached_steps_return_the_rows_of_the_full_pass(steps, compiled):
    length, max_length = 10, 12
    layer = LocalAttention1D(HEADS, KEY_DIM, 3)
    x = inputs(length)
    _, full = layer(x, use_causal_mask=True, return_attention_scores=True)
    full = numpy(full)

    def step(x, cache, index):
        return layer(
            x, cache=cache, cache_update_index=index, use_causal_mask=True,
            return_attention_scores=True,
        )

    step = jit(step) if compiled else step
    cache = np.zeros((2, 2, max_length, HEADS, KEY_DIM), "float32")
    for start in range(0, length, steps):
        chunk = x[:, start : start + steps]
        _, scores, cache = step(chunk, cache, ops.convert_to_tensor(start, "int32"))
        scores = numpy(scores)
        assert scores.shape == (2, HEADS, chunk.shape[1], max_length)
        np.testing.assert_allclose(
            scores[..., :length], full[:, :, start : start + chunk.shape[1]], atol=1e-6
        )
        assert np.all(scores[..., length:] == 0)


def test_symbolic_scores_and_a_model_that_returns_them():
    layer = LocalAttention1D(HEADS, KEY_DIM, 3)
    fixed = keras.Input((6, FEATURES), batch_size=2)
    _, scores = layer(fixed, use_causal_mask=True, return_attention_scores=True)
    assert tuple(scores.shape) == (2, HEADS, 6, 6)
    step = keras.Input((1, FEATURES), batch_size=2)
    cache = keras.Input((2, 8, HEADS, KEY_DIM), batch_size=2)
    _, step_scores, _ = layer(
        step, cache=cache, cache_update_index=0, use_causal_mask=True, return_attention_scores=True
    )
    assert tuple(step_scores.shape) == (2, HEADS, 1, 8)

    sequence = keras.Input((None, FEATURES))
    model = keras.Model(
        sequence, layer(sequence, use_causal_mask=True, return_attention_scores=True)
    )
    for length in (5, 9):
        x = inputs(length)
        _, expected = layer(x, use_causal_mask=True, return_attention_scores=True)
        _, predicted = model.predict(x, verbose=0)
        assert predicted.shape == (2, HEADS, length, length)
        np.testing.assert_allclose(predicted, numpy(expected), atol=1e-6)
