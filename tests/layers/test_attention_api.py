"""Every attention layer answers the same call forms the same way.

Swapping one attention layer for another in a model must not change how it
is called: `layer(x)` is self-attention, causality is asked with
`use_causal_mask` at call time, Keras padding masks are honoured, attention
scores are returned or refused by name, and a loop of one-step cached calls
equals the causal pass.
"""

import dataclasses
import inspect

import keras
import numpy as np
import pytest
from keras import ops
from test_local_attention_2d import cached_loop as cached_image_loop

from keras_selfattn.layers import (
    LocalAttention1D,
    LocalAttention2D,
    LocalRelativeAttention1D,
    LocalRelativeAttention2D,
    MultiHeadAttention,
    RelativeMultiHeadAttention,
)
from keras_selfattn.layers.attention_call import AttentionCall

# Distinct primes: a batch axis mixed up with the heads, or a query axis with
# the keys, cannot pass.
BATCH, HEADS, KEY_DIM, LENGTH, KEY_LENGTH, WIDTH = 2, 3, 5, 7, 13, 11


def numpy(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


# name -> (factory, whether the layer's weights make it causal by default)
SEQUENCE_LAYERS = {
    "multi_head": (lambda: MultiHeadAttention(HEADS, KEY_DIM), False),
    "relative_skew": (
        lambda: RelativeMultiHeadAttention(HEADS, KEY_DIM, max_relative_position=3), False
    ),
    "relative_skew_causal_table": (
        lambda: RelativeMultiHeadAttention(
            HEADS, KEY_DIM, max_relative_position=3, causal_table=True
        ),
        True,
    ),
    "relative_shaw": (
        lambda: RelativeMultiHeadAttention(
            HEADS, KEY_DIM, max_relative_position=2, relative_type="shaw"
        ),
        False,
    ),
    "local_relative_1d": (
        lambda: LocalRelativeAttention1D(HEADS, KEY_DIM, block_length=3, max_relative_position=4),
        True,
    ),
    "local_1d": (lambda: LocalAttention1D(HEADS, KEY_DIM, block_length=3), False),
}

sequence_layers = pytest.mark.parametrize("name", sorted(SEQUENCE_LAYERS))


def make(name):
    factory, causal_by_default = SEQUENCE_LAYERS[name]
    return factory(), causal_by_default


def sequence(seed=0, batch=BATCH, length=LENGTH):
    return np.random.default_rng(seed).normal(size=(batch, length, WIDTH)).astype("float32")


@sequence_layers
def test_one_argument_is_self_attention(name):
    layer, _ = make(name)
    x = sequence()
    output = numpy(layer(x))
    assert output.shape == x.shape
    np.testing.assert_allclose(output, numpy(layer(x, x)), atol=1e-6)
    np.testing.assert_allclose(output, numpy(layer(x, x, x)), atol=1e-6)


@sequence_layers
def test_causal_mask_hides_the_future_and_only_when_asked(name):
    layer, causal_by_default = make(name)
    x = sequence()
    later_changed = x.copy()
    later_changed[:, 3:] += 1.0
    causal = numpy(layer(x, use_causal_mask=True))
    np.testing.assert_allclose(
        numpy(layer(later_changed, use_causal_mask=True))[:, :3], causal[:, :3], atol=1e-5
    )
    if causal_by_default:
        np.testing.assert_allclose(numpy(layer(x)), causal, atol=1e-6)
        with pytest.raises(ValueError, match="use_causal_mask"):
            layer(x, use_causal_mask=False)
    else:
        # Position 0 sees position 1 (in its block, for local attention).
        second_changed = x.copy()
        second_changed[:, 1] += 1.0
        unmasked = numpy(layer(x))
        assert not np.allclose(numpy(layer(second_changed))[:, 0], unmasked[:, 0], atol=1e-5)


@sequence_layers
def test_keras_padding_mask_hides_padded_positions(name):
    layer, _ = make(name)
    embedding = keras.layers.Embedding(10, WIDTH, mask_zero=True)
    tokens = keras.Input((None,), dtype="int32")
    model = keras.Model(tokens, layer(embedding(tokens)))
    ids = np.array([[3, 1, 4, 1, 5, 0, 0], [2, 7, 1, 8, 2, 8, 1]], "int32")
    padded = numpy(model(ids))
    # The real positions of row 0 attend as if the sequence ended there.
    np.testing.assert_allclose(padded[:1, :5], numpy(model(ids[:1, :5])), atol=1e-5)
    np.testing.assert_allclose(padded[1:], numpy(model(ids[1:])), atol=1e-5)


@sequence_layers
@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_positions_never_reach_real_ones(name, side):
    """Whatever the padded positions hold, the real positions' outputs stay."""
    layer, causal_by_default = make(name)
    embedding = keras.layers.Embedding(10, WIDTH, mask_zero=True)
    tokens = keras.Input((None,), dtype="int32")
    model = keras.Model(tokens, layer(embedding(tokens)))
    ids = np.array([[3, 1, 4, 1, 5, 9, 2], [2, 7, 1, 8, 2, 8, 1]], "int32")
    real = np.ones_like(ids, bool)
    real[0, :3] = False if side == "left" else real[0, :3]
    real[0, -3:] = False if side == "right" else real[0, -3:]
    ids = np.where(real, ids, 0)
    before = numpy(model(ids))
    table = embedding.embeddings
    table.assign(ops.concatenate([ops.ones((1, WIDTH)) * 5.0, table[1:]], axis=0))
    after = numpy(model(ids))
    np.testing.assert_allclose(after[real], before[real], atol=1e-5)


@pytest.mark.parametrize("name", ["multi_head", "relative_skew", "relative_shaw"])
@pytest.mark.parametrize("use_causal_mask", [False, True])
def test_attention_mask_layouts_as_in_keras(name, use_causal_mask):
    """`[query, key]`, `[batch, query, key]` and `[batch, heads, query, key]`
    masks read as Keras reads them (the head axis inserted second)."""
    layer, _ = make(name)
    query = sequence()
    value = None if use_causal_mask else sequence(seed=1, length=KEY_LENGTH)
    key_length = LENGTH if value is None else KEY_LENGTH
    mask = np.random.default_rng(2).random((BATCH, LENGTH, key_length)) > 0.4

    def attend(attention_mask):
        return numpy(layer(query, value, attention_mask=attention_mask,
                           use_causal_mask=use_causal_mask))

    batch_major = attend(mask)
    np.testing.assert_allclose(batch_major, attend(mask[:, None]), atol=1e-6)
    np.testing.assert_allclose(
        batch_major, attend(np.repeat(mask[:, None], HEADS, axis=1)), atol=1e-6
    )
    assert not np.allclose(batch_major, attend(None), atol=1e-4)
    np.testing.assert_allclose(attend(mask[0]), attend(mask[:1].repeat(BATCH, 0)), atol=1e-6)
    with pytest.raises(ValueError, match="`attention_mask` must broadcast to"):
        attend(mask[:, :, :-1])


@sequence_layers
def test_attention_scores_are_returned_or_refused_by_name(name):
    layer, _ = make(name)
    x = sequence()
    try:
        output, scores = layer(x, return_attention_scores=True)
    except ValueError as error:
        assert "return_attention_scores" in str(error)
        return
    scores = numpy(scores)
    assert scores.shape == (BATCH, HEADS, LENGTH, LENGTH)
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(numpy(output), numpy(layer(x)), atol=1e-6)


@sequence_layers
def test_cached_loop_equals_causal_pass(name):
    layer, _ = make(name)
    x = sequence()
    expected = numpy(layer(x, use_causal_mask=True))
    cache = layer.initial_cache(BATCH, LENGTH)
    for t in range(LENGTH):
        step, cache = layer(
            x[:, t : t + 1], cache=cache, cache_update_index=t, use_causal_mask=True
        )
        np.testing.assert_allclose(numpy(step)[:, 0], expected[:, t], atol=1e-5)


@sequence_layers
def test_initial_cache_is_zero_keys_and_values_in_the_compute_dtype(name):
    layer, _ = make(name)
    cache = layer.initial_cache(BATCH, LENGTH)
    assert tuple(cache.shape) == (BATCH, 2, LENGTH, HEADS, KEY_DIM)
    assert not numpy(cache).any()
    config = {**SEQUENCE_LAYERS[name][0]().get_config(), "dtype": "mixed_float16"}
    half = type(layer).from_config(config)
    assert keras.backend.standardize_dtype(half.initial_cache(1, 3).dtype) == "float16"
    with pytest.raises(ValueError, match="batch_size"):
        layer.initial_cache(0, LENGTH)
    with pytest.raises(ValueError, match="max_length"):
        layer.initial_cache(BATCH, True)


class TestLocalAttention2D:
    def make(self):
        return LocalAttention2D(
            HEADS, KEY_DIM, query_shape=(2, 2), memory_flange=(1, 1), grid_shape=(4, 4)
        )

    def image(self):
        return np.random.default_rng(1).normal(size=(2, 4, 4, WIDTH)).astype("float32")

    def test_one_argument_is_self_attention(self):
        layer, image = self.make(), self.image()
        np.testing.assert_allclose(numpy(layer(image)), numpy(layer(image, image)), atol=1e-6)
        np.testing.assert_allclose(
            numpy(layer(image, use_causal_mask=True)),
            numpy(layer(image, image, image, use_causal_mask=True)),
            atol=1e-6,
        )

    def test_causal_mask_only_when_asked(self):
        layer, image = self.make(), self.image()
        later_changed = image.copy()
        later_changed[:, 2:] += 1.0  # the second row of query blocks
        causal = numpy(layer(image, use_causal_mask=True))
        np.testing.assert_allclose(
            numpy(layer(later_changed, use_causal_mask=True))[:, :2], causal[:, :2], atol=1e-5
        )
        assert not np.allclose(numpy(layer(later_changed))[:, :2], numpy(layer(image))[:, :2])

    def test_attention_scores_are_returned_over_the_pixels_in_raster_order(self):
        layer, image = self.make(), self.image()
        output, scores = layer(image, return_attention_scores=True)
        scores = numpy(scores)
        assert scores.shape == (2, HEADS, 16, 16)
        np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)
        np.testing.assert_allclose(numpy(output), numpy(layer(image)), atol=1e-6)

    def test_cached_loop_equals_causal_pass(self):
        layer, image = self.make(), self.image()
        expected = numpy(layer(image, use_causal_mask=True))
        np.testing.assert_allclose(cached_image_loop(layer, image), expected, atol=1e-5)


class TestLocalRelativeAttention2D(TestLocalAttention2D):
    def make(self):
        return LocalRelativeAttention2D(
            HEADS, KEY_DIM, query_shape=(2, 2), memory_flange=(1, 1), grid_shape=(4, 4)
        )


@pytest.mark.parametrize(
    "base",
    [
        RelativeMultiHeadAttention,
        LocalRelativeAttention1D,
        LocalAttention1D,
        LocalAttention2D,
        LocalRelativeAttention2D,
    ],
)
def test_a_compute_attention_override_is_refused_by_name(base):
    """Keras's hook is honoured by `MultiHeadAttention` (Keras's own suite
    tests that); a layer that never calls it refuses a subclass that
    overrides it, instead of ignoring the override."""
    with pytest.raises(TypeError, match=f"overrides `_compute_attention`, which {base.__name__}"):
        type("Custom", (base,), {"_compute_attention": lambda self, *args, **kwargs: None})
    subclass = type("Custom", (base,), {"_compute_attention_with_context": base._compute_attention_with_context})
    assert issubclass(subclass, base)


def test_attention_call_binds_arguments_as_the_call_does():
    parameters = list(inspect.signature(MultiHeadAttention.call).parameters.values())[1:]
    fields = dataclasses.fields(AttentionCall)
    assert [p.name for p in parameters] == [f.name for f in fields]
    for parameter, field in zip(parameters[1:], fields[1:]):
        assert parameter.default == field.default, parameter.name
    call = AttentionCall("q", "v", key_mask="k", use_causal_mask=True)
    assert (call.query, call.value, call.key, call.key_mask) == ("q", "v", None, "k")
    assert call.replace(use_causal_mask=False).use_causal_mask is False


MEMORY_LAYERS = ["multi_head", "relative_skew", "relative_skew_causal_table", "relative_shaw"]


@pytest.mark.parametrize("name", MEMORY_LAYERS)
@pytest.mark.parametrize(
    "memory_shape, expected",
    [
        ((BATCH, 3, WIDTH + 1), rf"`memory` must have shape `\[batch, memory_length, {WIDTH}\]`"),
        ((BATCH, 3), "`memory` must have shape"),
        ((BATCH, 3, 2, WIDTH), "`memory` must have shape"),
        ((BATCH + 1, 3, WIDTH), r"the batch size and features of `query`.*memory.shape=\(3, 3, 11\)"),
    ],
    ids=["features", "rank_2", "rank_4", "batch"],
)
def test_bad_memory_is_refused_by_name(name, memory_shape, expected):
    layer, _ = make(name)
    x = sequence()
    layer(x)
    with pytest.raises(ValueError, match=expected):
        layer(x, memory=np.zeros(memory_shape, "float32"))


@pytest.mark.parametrize("name", MEMORY_LAYERS)
def test_memory_is_for_self_attention_without_a_cache(name):
    layer, _ = make(name)
    x, memory = sequence(), sequence(seed=1, length=3)
    layer(x)
    for separate in (dict(value=sequence(seed=2)), dict(key=x, value=sequence(seed=2))):
        with pytest.raises(ValueError, match="`memory` is for self-attention.*separate `value`"):
            layer(x, memory=memory, **separate)
    cache = layer.initial_cache(BATCH, LENGTH + 2)
    with pytest.raises(ValueError, match="`memory` cannot be combined with a `cache`"):
        layer(x, memory=memory, cache=cache, cache_update_index=0, use_causal_mask=True)


@pytest.mark.parametrize("name", ["local_1d", "local_relative_1d"])
def test_layers_without_memory_refuse_it_by_name(name):
    layer, _ = make(name)
    x = sequence(length=6)
    layer(x)
    with pytest.raises(ValueError, match=f"{type(layer).__name__} takes no `memory`"):
        layer(x, memory=sequence(seed=1, length=3))


@pytest.mark.parametrize("name", MEMORY_LAYERS)
def test_memory_mask_hides_memory_positions(name):
    layer, _ = make(name)
    x, memory = sequence(), sequence(seed=1, length=5)
    # Row 0 keeps its last 2 memory positions, row 1 none: as a shorter
    # memory, and as no memory at all.
    mask = np.array([[False, False, False, True, True], [False] * 5])
    masked = numpy(layer(x, memory=memory, memory_mask=mask, use_causal_mask=True))
    shorter = numpy(layer(x[:1], memory=memory[:1, 3:], use_causal_mask=True))
    alone = numpy(layer(x[1:], use_causal_mask=True))
    np.testing.assert_allclose(masked[:1], shorter, atol=1e-5)
    np.testing.assert_allclose(masked[1:], alone, atol=1e-5)


@pytest.mark.parametrize("name", MEMORY_LAYERS)
def test_bad_memory_mask_is_refused_by_name(name):
    layer, _ = make(name)
    x, memory = sequence(), sequence(seed=1, length=3)
    layer(x)
    with pytest.raises(ValueError, match=r"`memory_mask` must have shape `\[batch, memory_length\]` = \(2, 3\)"):
        layer(x, memory=memory, memory_mask=np.ones((BATCH, 4), bool), use_causal_mask=True)
    with pytest.raises(ValueError, match="`memory_mask` needs a `memory`"):
        layer(x, memory_mask=np.ones((BATCH, 3), bool), use_causal_mask=True)
