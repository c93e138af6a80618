import math

import keras
import numpy as np
import pytest
from keras import ops

from keras_selfattn.layers import MemoryCompressedAttention
from keras_selfattn.ops import compressed_padding_mask
from tests.layer_testing import jit

# All different: batch, heads, key size, length, features; the length is not
# a multiple of the factor, and the memory has 1 + ceil(11 / 4) = 4 keys.
BATCH, HEADS, KEY_DIM, LENGTH, FEATURES, FACTOR = 2, 3, 5, 11, 13, 4
NUM_KEYS = 4


def inputs(length=LENGTH, seed=0, batch=BATCH):
    return np.random.default_rng(seed).normal(size=(batch, length, FEATURES)).astype("float32")


def numpy(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


def built_layer(factor=FACTOR, **kwargs):
    layer = MemoryCompressedAttention(HEADS, KEY_DIM, factor, **kwargs)
    layer(inputs())
    # Non-zero biases everywhere, so that a bias added twice or not at all shows.
    rng = np.random.default_rng(7)
    layer.set_weights([rng.normal(scale=0.3, size=w.shape) for w in layer.get_weights()])
    return layer


def naive_reference(layer, x, causal, padding=None):
    """The layer written out with loops in float64: each block's strided
    convolution, which memory entries each query may see, softmax, projections."""
    w = lambda v: np.asarray(numpy(v), "float64")  # noqa: E731
    conv_kernel, conv_bias = w(layer.compression_kernel), w(layer.compression_bias)
    dense = {
        name: (w(sublayer.kernel), w(sublayer.bias))
        for name, sublayer in (
            ("query", layer.query_dense),
            ("key", layer.key_dense),
            ("value", layer.value_dense),
            ("output", layer.output_dense),
        )
    }
    factor = layer.compression_factor
    batch, length, features = x.shape
    real = np.ones((batch, length), bool) if padding is None else padding
    x = np.where(real[..., None], x, 0.0).astype("float64")
    blocks = math.ceil(length / factor)

    output = np.zeros((batch, length, features))
    for b in range(batch):
        memory = [x[b, 0] @ conv_kernel[0] + conv_bias]
        memory_real = [real[b, 0]]
        memory_end = [0]  # the last position an entry depends on
        for j in range(blocks):
            block = conv_bias.copy()
            for k in range(factor):
                if j * factor + k < length:
                    block += x[b, j * factor + k] @ conv_kernel[k]
            memory.append(block)
            memory_real.append(real[b, j * factor : (j + 1) * factor].any())
            memory_end.append((j + 1) * factor - 1)
        for i in range(length):
            q = np.einsum("f,fnh->nh", x[b, i], dense["query"][0])
            q = q + dense["query"][1]
            heads = np.zeros((HEADS, KEY_DIM))
            for n in range(HEADS):
                logits, values = [], []
                for m, entry in enumerate(memory):
                    visible = real[b, i] and memory_real[m] and (not causal or memory_end[m] <= i)
                    if not visible:
                        continue
                    key = entry @ dense["key"][0][:, n] + dense["key"][1][n]
                    logits.append(q[n] @ key / math.sqrt(KEY_DIM))
                    values.append(entry @ dense["value"][0][:, n] + dense["value"][1][n])
                if logits:
                    weights = np.exp(np.array(logits) - max(logits))
                    heads[n] = (weights / weights.sum()) @ np.array(values)
            output[b, i] = np.einsum("nh,nhf->f", heads, dense["output"][0]) + dense["output"][1]
    return output


def query_rows(x, padding):
    """The original (unzeroed) query: padded positions hold garbage."""
    return np.where(padding[..., None], x, 100.0).astype("float32")


@pytest.mark.parametrize("causal", [False, True], ids=["unmasked", "causal"])
def test_equals_naive_reference(causal):
    layer = built_layer()
    x = inputs()
    np.testing.assert_allclose(
        numpy(layer(x, use_causal_mask=causal)), naive_reference(layer, x, causal), atol=1e-4
    )


@pytest.mark.parametrize("causal", [False, True], ids=["unmasked", "causal"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_padding_equals_naive_reference(side, causal):
    """Row 0 is padded by 5 (left: block 0 all padding, block 1 partly;
    right: block 1 partly, block 2 all padding); padded inputs are garbage."""
    layer = built_layer()
    padding = np.ones((BATCH, LENGTH), bool)
    if side == "left":
        padding[0, :5] = False
    else:
        padding[0, -5:] = False
    x = query_rows(inputs(), padding)
    output = numpy(layer(x, query_mask=padding, value_mask=padding, use_causal_mask=causal))
    expected = naive_reference(layer, x, causal, padding)
    np.testing.assert_allclose(output[padding], expected[padding], atol=1e-4)


def test_keras_mask_of_the_input_is_used():
    tokens = np.arange(1, 1 + BATCH * LENGTH).reshape(BATCH, LENGTH) % 9 + 1
    tokens[0, :6] = 0
    tokens[1, -3:] = 0
    embedded = keras.layers.Embedding(10, FEATURES, mask_zero=True)(tokens)
    layer = MemoryCompressedAttention(HEADS, KEY_DIM, FACTOR)
    padding = tokens != 0
    with_keras_mask = numpy(layer(embedded, use_causal_mask=True))
    explicit = numpy(
        layer(embedded, query_mask=padding, value_mask=padding, use_causal_mask=True)
    )
    np.testing.assert_allclose(with_keras_mask, explicit, atol=1e-6)


def test_scores_are_over_the_memory_and_follow_the_block_rule():
    layer = built_layer()
    output, scores = layer(inputs(), use_causal_mask=True, return_attention_scores=True)
    scores = numpy(scores)
    assert scores.shape == (BATCH, HEADS, LENGTH, NUM_KEYS)
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)
    visible = np.array(
        [[m == 0 or m * FACTOR - 1 <= i for m in range(NUM_KEYS)] for i in range(LENGTH)]
    )
    assert np.all(scores[:, :, ~visible] == 0) and np.all(scores[:, :, visible] > 0)
    expected = numpy(layer(inputs(), use_causal_mask=True))
    np.testing.assert_allclose(numpy(output), expected, atol=1e-6)


def cached_loop(layer, x, max_length, steps=1, step_function=None):
    step_function = step_function or (
        lambda x, cache, index: layer(
            x, cache=cache, cache_update_index=index, use_causal_mask=True
        )
    )
    cache = layer.initial_cache(x.shape[0], max_length)
    outputs = []
    for start in range(0, x.shape[1], steps):
        output, cache = step_function(x[:, start : start + steps], cache, start)
        outputs.append(numpy(output))
    return np.concatenate(outputs, axis=1)


def test_cached_steps_equal_the_full_causal_call():
    layer = built_layer()
    x = inputs()
    full = numpy(layer(x, use_causal_mask=True))
    np.testing.assert_allclose(cached_loop(layer, x, LENGTH), full, atol=1e-5)


def test_compiled_cached_steps_of_several_positions_with_tensor_index():
    """Steps of 3 positions (the last of 2) cross block ends, and the cache
    is longer than the sequence (its blocks past the end stay hidden); XLA
    on TensorFlow and JAX, eager on PyTorch."""
    layer = built_layer()
    x = inputs()
    full = numpy(layer(x, use_causal_mask=True))
    step = jit(
        lambda x, cache, index: layer(
            x, cache=cache, cache_update_index=index, use_causal_mask=True
        )
    )
    looped = cached_loop(
        layer,
        x,
        LENGTH + FACTOR,
        steps=3,
        step_function=lambda x, cache, index: step(x, cache, ops.convert_to_tensor(index, "int32")),
    )
    np.testing.assert_allclose(looped, full, atol=1e-5)


def test_cached_steps_with_left_padding_take_the_padding_as_attention_mask():
    layer = built_layer()
    padding = np.ones((BATCH, LENGTH), bool)
    padding[1, :6] = False
    x = query_rows(inputs(), padding)
    full = numpy(layer(x, query_mask=padding, value_mask=padding, use_causal_mask=True))
    memory_padding = numpy(compressed_padding_mask(padding, FACTOR)).astype(bool)[:, None]
    looped = cached_loop(
        layer,
        x,
        LENGTH,
        step_function=lambda x, cache, index: layer(
            x, cache=cache, cache_update_index=index, use_causal_mask=True,
            query_mask=padding[:, index : index + 1], attention_mask=memory_padding,
        ),
    )
    np.testing.assert_allclose(looped[padding], full[padding], atol=1e-5)


def test_functional_model_fits_one_step_and_saves(tmp_path):
    """The shared battery (`tests.layer_testing.run_layer_test`) takes minutes
    on PyTorch; this keeps what the file's time budget allows."""
    x = inputs()
    sequence = keras.Input((None, FEATURES))
    layer = MemoryCompressedAttention(HEADS, KEY_DIM, FACTOR)
    model = keras.Model(sequence, layer(sequence, use_causal_mask=True))
    assert tuple(model.outputs[0].shape) == (None, None, FEATURES)
    np.testing.assert_allclose(
        numpy(model(x)), numpy(layer(x, use_causal_mask=True)), atol=1e-6
    )
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    before = [numpy(w) for w in model.trainable_weights]
    model.fit(x, np.ones_like(x), batch_size=BATCH, epochs=1, verbose=0)
    after = [numpy(w) for w in model.trainable_weights]
    assert all(not np.array_equal(a, b) for a, b in zip(before, after))

    path = str(tmp_path / "compressed.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    np.testing.assert_allclose(numpy(restored(x)), numpy(model(x)), atol=1e-6)
    revived = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(revived) is MemoryCompressedAttention
    assert revived.get_config() == layer.get_config()


def test_config_round_trip_keeps_the_factor():
    layer = MemoryCompressedAttention(HEADS, KEY_DIM, compression_factor=3, dropout=0.1)
    config = layer.get_config()
    assert config["compression_factor"] == 3
    assert MemoryCompressedAttention.from_config(config).get_config() == config


@pytest.mark.parametrize("factor", [1, 0, -2, 2.5, True, "3", None])
def test_bad_compression_factor_is_refused_by_name(factor):
    with pytest.raises(ValueError, match="`compression_factor` must be an integer >= 2"):
        MemoryCompressedAttention(HEADS, KEY_DIM, factor)


def test_calls_it_cannot_run_are_refused_by_name():
    layer = built_layer()
    x = inputs()
    with pytest.raises(ValueError, match="`value` must be None or `query` itself"):
        layer(x, inputs(seed=1))
    cache = layer.initial_cache(BATCH, LENGTH)
    with pytest.raises(ValueError, match="`cache` needs `use_causal_mask=True`"):
        layer(x[:, :1], cache=cache, cache_update_index=0)
    with pytest.raises(ValueError, match="`cache_update_index` needs a `cache`"):
        layer(x, cache_update_index=0)
    with pytest.raises(ValueError, match="`attention_mask` must broadcast to"):
        layer(x, attention_mask=np.ones((BATCH, LENGTH, LENGTH), bool))
    with pytest.raises(ValueError, match="`sliding_window` must be None"):
        MemoryCompressedAttention(HEADS, KEY_DIM, FACTOR, sliding_window=3)
