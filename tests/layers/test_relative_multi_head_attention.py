import keras
import numpy as np
import pytest
from keras import ops

from keras_selfattn.layers.relative_multi_head_attention import (
    RelativeMultiHeadAttention,
)
from layer_testing import jit, run_layer_test

# Distinct primes (batch 2): no axis can pass for another.
NUM_HEADS, KEY_DIM, WIDTH = 3, 5, 11


def weights_of(layer):
    """The projection kernels and biases, and the relative tables, as numpy."""
    names = ("query_dense", "key_dense", "value_dense", "output_dense")
    dense = {name: getattr(layer, name) for name in names}
    result = {name: (ops.convert_to_numpy(d.kernel).astype("float64"), ops.convert_to_numpy(d.bias).astype("float64")) for name, d in dense.items()}
    result["key_table"] = ops.convert_to_numpy(layer.relative_key_embeddings).astype("float64")
    value_table = layer.relative_value_embeddings
    result["value_table"] = None if value_table is None else ops.convert_to_numpy(value_table).astype("float64")
    return result


def head_table(table, head):
    return table if table.ndim == 2 else table[head]


def skew_relation(max_relative_position):
    """Music Transformer: row `d + M - 1`, nothing beyond the table."""

    def row(table, distance):
        index = distance + max_relative_position - 1
        if 0 <= index < table.shape[0]:
            return table[index]
        return np.zeros(table.shape[1])

    return row


def shaw_relation(k):
    """Shaw: row `clip(d, -k, k) + k`; a causal table stops at distance 0
    (its queries never see later keys)."""
    return lambda table, distance: table[min(max(distance, -k), k, table.shape[0] - 1 - k) + k]


def naive_relative_attention(layer, x, relation, allowed, key_mask=None):
    """Relative attention with `[L, L, d]` relations, written with loops.

    `allowed(i, j)` says whether query `i` may see key `j`.
    """
    w = weights_of(layer)
    x = x.astype("float64")
    projected = {
        name: np.einsum("bli,ihd->blhd", x, w[name][0]) + w[name][1]
        for name in ("query_dense", "key_dense", "value_dense")
    }
    q, k, v = projected["query_dense"], projected["key_dense"], projected["value_dense"]
    batch, length, heads, depth = q.shape
    mask = np.array([[allowed(i, j) for j in range(length)] for i in range(length)], bool)
    mask = np.broadcast_to(mask, (batch, length, length))
    if key_mask is not None:
        mask = mask & key_mask[:, None, :]
    attended = np.zeros(v.shape)
    for h in range(heads):
        key_relations = np.zeros((length, length, depth))
        value_relations = np.zeros((length, length, v.shape[-1]))
        for i in range(length):
            for j in range(length):
                key_relations[i, j] = relation(head_table(w["key_table"], h), j - i)
                if w["value_table"] is not None:
                    value_relations[i, j] = relation(head_table(w["value_table"], h), j - i)
        logits = np.einsum("bid,bjd->bij", q[:, :, h], k[:, :, h])
        logits += np.einsum("bid,ijd->bij", q[:, :, h], key_relations)
        logits /= np.sqrt(depth)
        logits = np.where(mask, logits, -np.inf)
        peak = np.max(logits, axis=-1, keepdims=True)
        exp = np.where(mask, np.exp(logits - np.where(np.isfinite(peak), peak, 0.0)), 0.0)
        probabilities = exp / np.maximum(exp.sum(-1, keepdims=True), 1e-30)
        attended[:, :, h] = np.einsum("bij,bjd->bid", probabilities, v[:, :, h])
        attended[:, :, h] += np.einsum("bij,ijd->bid", probabilities, value_relations)
    kernel, bias = w["output_dense"]
    return np.einsum("blhd,hdo->blo", attended, kernel) + bias


def causal(i, j):
    return j <= i


def everything(i, j):
    return True


def inputs(batch, length, seed=0):
    return np.random.default_rng(seed).normal(size=(batch, length, WIDTH)).astype("float32")


def make_layer(**kwargs):
    return RelativeMultiHeadAttention(num_heads=NUM_HEADS, key_dim=KEY_DIM, **kwargs)


LENGTH_AND_MAX = [(1, 3), (6, 9), (23, 5), (300, 16)]


@pytest.mark.parametrize("length, max_relative_position", LENGTH_AND_MAX)
@pytest.mark.parametrize("mode", ["unmasked", "masked", "masked_with_full_table"])
@pytest.mark.parametrize("shared", [False, True], ids=["per_head", "shared"])
@pytest.mark.parametrize("values", [False, True], ids=["keys", "keys_values"])
def test_skew_matches_naive_relations(length, max_relative_position, mode, shared, values):
    layer = make_layer(
        max_relative_position=max_relative_position,
        heads_share_relative_embedding=shared,
        add_relative_to_values=values,
        causal_table=mode == "masked",
    )
    x = inputs(1 if length > 100 else 2, length)
    masked = mode != "unmasked"
    output = ops.convert_to_numpy(layer(x, use_causal_mask=masked))
    rows = max_relative_position if mode == "masked" else 2 * max_relative_position - 1
    table_shape = (rows, KEY_DIM) if shared else (NUM_HEADS, rows, KEY_DIM)
    assert tuple(layer.relative_key_embeddings.shape) == table_shape
    assert (layer.relative_value_embeddings is not None) == values
    expected = naive_relative_attention(
        layer, x, skew_relation(max_relative_position), causal if masked else everything
    )
    np.testing.assert_allclose(output, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("length", [1, 6, 23, 300])
@pytest.mark.parametrize("mode", ["unmasked", "masked", "causal_table"])
@pytest.mark.parametrize("shared", [True, False], ids=["shared", "per_head"])
def test_shaw_matches_naive_relations(length, mode, shared):
    k = 4
    layer = make_layer(
        max_relative_position=k,
        relative_type="shaw",
        heads_share_relative_embedding=shared,
        causal_table=mode == "causal_table",
    )
    x = inputs(1 if length > 100 else 2, length)
    masked = mode != "unmasked"
    output = ops.convert_to_numpy(layer(x, x, use_causal_mask=masked))
    rows = k + 1 if mode == "causal_table" else 2 * k + 1
    table_shape = (rows, KEY_DIM) if shared else (NUM_HEADS, rows, KEY_DIM)
    assert tuple(layer.relative_key_embeddings.shape) == table_shape
    assert tuple(layer.relative_value_embeddings.shape) == table_shape
    expected = naive_relative_attention(layer, x, shaw_relation(k), causal if masked else everything)
    np.testing.assert_allclose(output, expected, atol=1e-5, rtol=1e-5)


def test_shaw_without_value_table():
    layer = make_layer(max_relative_position=2, relative_type="shaw", add_relative_to_values=False)
    x = inputs(2, 9)
    output = ops.convert_to_numpy(layer(x, x))
    assert layer.relative_value_embeddings is None
    expected = naive_relative_attention(layer, x, shaw_relation(2), everything)
    np.testing.assert_allclose(output, expected, atol=1e-5, rtol=1e-5)


def test_key_padding_mask_with_relative_logits():
    layer = make_layer(max_relative_position=3, add_relative_to_values=True)
    x = inputs(2, 8)
    key_mask = np.arange(8)[None, :] < np.array([[5], [8]])
    output = ops.convert_to_numpy(layer(x, x, value_mask=key_mask, use_causal_mask=True))
    expected = naive_relative_attention(layer, x, skew_relation(3), causal, key_mask=key_mask)
    np.testing.assert_allclose(output, expected, atol=1e-5, rtol=1e-5)


def cached_loop(layer, x, prefill=0):
    """Runs `x` through the cache: one call for `prefill` positions, then steps."""
    batch, length, _ = x.shape
    cache = np.zeros((batch, 2, length, NUM_HEADS, KEY_DIM), "float32")
    outputs = []
    if prefill:
        output, cache = layer(x[:, :prefill], cache=cache, cache_update_index=0, use_causal_mask=True)
        outputs.append(ops.convert_to_numpy(output))
    for t in range(prefill, length):
        step = x[:, t : t + 1]
        output, cache = layer(step, cache=cache, cache_update_index=t, use_causal_mask=True)
        outputs.append(ops.convert_to_numpy(output))
    return np.concatenate(outputs, axis=1), ops.convert_to_numpy(cache)


CACHED_SETTINGS = {
    "skew_causal_table": dict(max_relative_position=4, causal_table=True),
    "skew_full_table_values": dict(max_relative_position=4, add_relative_to_values=True),
    "skew_shared_long_table": dict(
        max_relative_position=30, heads_share_relative_embedding=True, add_relative_to_values=True
    ),
    "shaw": dict(max_relative_position=3, relative_type="shaw"),
    "shaw_causal_table": dict(max_relative_position=3, relative_type="shaw", causal_table=True),
}


@pytest.mark.parametrize("settings", CACHED_SETTINGS.values(), ids=CACHED_SETTINGS.keys())
@pytest.mark.parametrize("prefill", [0, 5])
def test_cached_loop_equals_full_causal_pass(settings, prefill):
    layer = make_layer(**settings)
    x = inputs(2, 12)
    full = ops.convert_to_numpy(layer(x, x, use_causal_mask=True))
    looped, cache = cached_loop(layer, x, prefill)
    np.testing.assert_allclose(looped, full, atol=1e-5, rtol=1e-5)
    _, full_cache = layer(
        x, x, cache=np.zeros_like(cache), cache_update_index=0, use_causal_mask=True
    )
    np.testing.assert_allclose(cache, ops.convert_to_numpy(full_cache), atol=1e-6)


@pytest.mark.parametrize("max_relative_position", [3, 40])
@pytest.mark.parametrize("settings", [dict(causal_table=True), dict(add_relative_to_values=True)])
def test_masked_skew_never_attends_to_the_future(max_relative_position, settings):
    layer = make_layer(max_relative_position=max_relative_position, **settings)
    x = inputs(2, 20)
    before = ops.convert_to_numpy(layer(x, x, use_causal_mask=True))
    for t in (0, 7, 18):
        changed = x.copy()
        changed[:, t + 1 :] = inputs(2, 20, seed=t + 1)[:, t + 1 :] * 10.0
        after = ops.convert_to_numpy(layer(changed, changed, use_causal_mask=True))
        np.testing.assert_allclose(after[:, : t + 1], before[:, : t + 1], atol=1e-6)
        assert not np.allclose(after[:, t + 1 :], before[:, t + 1 :])


LAYER_TEST_SETTINGS = {
    "skew_causal_values": (dict(max_relative_position=5, causal_table=True, add_relative_to_values=True), True),
    "skew_unmasked_shared": (dict(max_relative_position=3, heads_share_relative_embedding=True), False),
    "shaw": (dict(max_relative_position=2, relative_type="shaw", dropout=0.1), True),
}


@pytest.mark.parametrize("settings, masked", LAYER_TEST_SETTINGS.values(), ids=LAYER_TEST_SETTINGS.keys())
def test_shared_layer_checks(settings, masked, tmp_path):
    x = inputs(2, 7)
    run_layer_test(
        RelativeMultiHeadAttention,
        dict(num_heads=NUM_HEADS, key_dim=KEY_DIM, **settings),
        {"query": x},
        tmp_path,
        call_kwargs={"use_causal_mask": masked},
    )


def test_config_keeps_relative_options():
    layer = make_layer(
        max_relative_position=7,
        relative_type="shaw",
        heads_share_relative_embedding=False,
        add_relative_to_values=True,
        causal_table=True,
        relative_embeddings_initializer="zeros",
    )
    revived = RelativeMultiHeadAttention.from_config(layer.get_config())
    assert revived.max_relative_position == 7
    assert revived.relative_type == "shaw"
    assert revived.heads_share_relative_embedding is False
    assert revived.causal_table is True
    x = inputs(1, 3)
    revived(x)
    assert tuple(revived.relative_key_embeddings.shape) == (NUM_HEADS, 8, KEY_DIM)
    np.testing.assert_array_equal(ops.convert_to_numpy(revived.relative_key_embeddings), 0.0)


@pytest.mark.parametrize("value", [0, -2, 1.5, True, False])
def test_bad_max_relative_position(value):
    with pytest.raises(ValueError, match="max_relative_position"):
        make_layer(max_relative_position=value)


def test_unknown_relative_type_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"relative_type.*'skew', 'shaw'"):
        make_layer(max_relative_position=2, relative_type="t5")


def test_causal_table_refuses_an_unmasked_call():
    layer = make_layer(max_relative_position=2, causal_table=True)
    x = inputs(1, 4)
    with pytest.raises(ValueError, match=r"causal_table=True.*use_causal_mask"):
        layer(x, use_causal_mask=False)


def test_cache_needs_its_update_index():
    layer = make_layer(max_relative_position=2)
    x = inputs(1, 4)
    cache = np.zeros((1, 2, 4, NUM_HEADS, KEY_DIM), "float32")
    with pytest.raises(ValueError, match="cache_update_index"):
        layer(x[:, :1], x[:, :1], cache=cache, use_causal_mask=True)


def test_cache_too_short_for_the_update():
    layer = make_layer(max_relative_position=2)
    x = inputs(1, 4)
    cache = np.zeros((1, 2, 4, NUM_HEADS, KEY_DIM), "float32")
    with pytest.raises(ValueError, match=r"cache_update_index.*\[0, 2\]"):
        layer(x[:, :2], x[:, :2], cache=cache, cache_update_index=3, use_causal_mask=True)


def test_needs_sequence_inputs():
    layer = make_layer(max_relative_position=2)
    image = np.zeros((1, 3, 3, WIDTH), "float32")
    with pytest.raises(ValueError, match="attention_axes"):
        layer(image, image)


@pytest.mark.parametrize("relative_type", ["skew", "shaw"])
def test_self_attention_call_forms_and_causal_defaults(relative_type):
    x = inputs(2, 6)
    encoder = make_layer(max_relative_position=3, relative_type=relative_type)
    both_ways = ops.convert_to_numpy(encoder(x))
    np.testing.assert_allclose(both_ways, ops.convert_to_numpy(encoder(x, x, x)), atol=1e-6)
    np.testing.assert_allclose(both_ways, ops.convert_to_numpy(encoder(x, use_causal_mask=False)), atol=1e-6)
    assert not np.allclose(both_ways, ops.convert_to_numpy(encoder(x, use_causal_mask=True)))

    decoder = make_layer(max_relative_position=3, relative_type=relative_type, causal_table=True)
    causal_output = ops.convert_to_numpy(decoder(x))
    np.testing.assert_allclose(causal_output, ops.convert_to_numpy(decoder(x, x, use_causal_mask=True)), atol=1e-6)
    relation = skew_relation(3) if relative_type == "skew" else shaw_relation(3)
    np.testing.assert_allclose(causal_output, naive_relative_attention(decoder, x, relation, causal), atol=1e-5)


def test_query_padding_masks_keys_when_value_is_omitted():
    layer = make_layer(max_relative_position=3, add_relative_to_values=True)
    x = inputs(2, 8)
    present = np.arange(8)[None, :] < np.array([[5], [8]])
    output = ops.convert_to_numpy(layer(x, query_mask=present, use_causal_mask=True))
    expected = naive_relative_attention(layer, x, skew_relation(3), causal, key_mask=present)
    np.testing.assert_allclose(output[1], expected[1], atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(output[0, :5], expected[0, :5], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal_table", [False, True])
@pytest.mark.parametrize("relative_type", ["skew", "shaw"])
def test_returned_scores_and_attention_bias(causal_table, relative_type):
    layer = make_layer(max_relative_position=3, relative_type=relative_type, causal_table=causal_table)
    x = inputs(2, 7)
    output, scores = layer(x, use_causal_mask=True, return_attention_scores=True)
    scores = ops.convert_to_numpy(scores)
    assert scores.shape == (2, NUM_HEADS, 7, 7)
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(scores * (1 - np.tril(np.ones((7, 7)))), 0.0)
    np.testing.assert_allclose(ops.convert_to_numpy(output), ops.convert_to_numpy(layer(x, use_causal_mask=True)), atol=1e-6)
    # A bias of minus infinity-like on key 0 moves every row's weight off it.
    bias = np.zeros((1, 1, 7, 7), "float32")
    bias[..., 0] = -1e9
    _, biased = layer(x, use_causal_mask=True, attention_bias=bias, return_attention_scores=True)
    biased = ops.convert_to_numpy(biased)
    np.testing.assert_array_equal(biased[:, :, 1:, 0], 0.0)
    np.testing.assert_allclose(biased[:, :, 1:].sum(-1), 1.0, atol=1e-5)


@pytest.mark.parametrize("flash_attention", [True, False])
def test_flash_attention_is_refused(flash_attention):
    with pytest.raises(ValueError, match="flash_attention.*logits"):
        make_layer(max_relative_position=2, flash_attention=flash_attention)


def test_causal_is_no_constructor_argument():
    with pytest.raises(ValueError, match=r"use_causal_mask.*causal_table"):
        make_layer(max_relative_position=2, causal=True)


@pytest.mark.parametrize("name", ["causal_table", "heads_share_relative_embedding", "add_relative_to_values"])
def test_boolean_options_reject_other_values(name):
    with pytest.raises(ValueError, match=name):
        make_layer(max_relative_position=2, **{name: 1})


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="unknown lengths are a TensorFlow graph feature")
@pytest.mark.parametrize(
    "settings, masked",
    [
        (dict(max_relative_position=4, causal_table=True, add_relative_to_values=True), True),
        (dict(max_relative_position=40, causal_table=True), True),
        (dict(max_relative_position=3, relative_type="shaw"), True),
        (dict(max_relative_position=3, relative_type="shaw"), False),
        (dict(max_relative_position=4, add_relative_to_values=True), False),
    ],
)
def test_unknown_lengths_take_the_skew(settings, masked, monkeypatch):
    import tensorflow as tf

    layer = make_layer(**settings)
    x = inputs(2, 11)
    expected = ops.convert_to_numpy(layer(x, use_causal_mask=masked))

    def refuse(*args, **kwargs):
        raise AssertionError("a full pass read its relative rows per query-key pair")

    monkeypatch.setattr(layer, "_pairwise_pass", refuse)
    traced = tf.function(
        lambda x: layer(x, use_causal_mask=masked),
        input_signature=[tf.TensorSpec((None, None, WIDTH), "float32")],
    )
    np.testing.assert_allclose(traced(x).numpy(), expected, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(traced(x[:1, :5]).numpy(), ops.convert_to_numpy(layer(x[:1, :5], use_causal_mask=masked)), atol=1e-5, rtol=1e-5)


def test_cross_lengths_without_cache_match_naive_relations():
    """Queries and keys of different lengths: query `i` at position `i`."""
    layer = make_layer(max_relative_position=3, relative_type="shaw")
    x, memory = inputs(2, 4), inputs(2, 7, seed=1)
    output = ops.convert_to_numpy(layer(x, memory, use_causal_mask=True))
    expected = naive_cross_attention(weights_of(layer), x, memory, shaw_relation(3))
    np.testing.assert_allclose(output, expected, atol=1e-5, rtol=1e-5)


def naive_cross_attention(w, queries, memory, relation):
    """Causal relative attention of `queries` (positions 0..) to `memory`."""
    q = np.einsum("bli,ihd->blhd", queries, w["query_dense"][0]) + w["query_dense"][1]
    k = np.einsum("bli,ihd->blhd", memory, w["key_dense"][0]) + w["key_dense"][1]
    v = np.einsum("bli,ihd->blhd", memory, w["value_dense"][0]) + w["value_dense"][1]
    attended = np.zeros(q.shape[:2] + v.shape[2:])
    for h in range(q.shape[2]):
        for i in range(q.shape[1]):
            keys = range(min(i + 1, k.shape[1]))
            logits = np.stack(
                [np.sum(q[:, i, h] * (k[:, j, h] + relation(head_table(w["key_table"], h), j - i)), -1) for j in keys],
                axis=-1,
            ) / np.sqrt(q.shape[-1])
            p = np.exp(logits - logits.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            values = np.stack([v[:, j, h] + relation(head_table(w["value_table"], h), j - i) for j in keys], 1)
            attended[:, i, h] = np.einsum("bj,bjd->bd", p, values)
    kernel, bias = w["output_dense"]
    return np.einsum("blhd,hdo->blo", attended, kernel) + bias


# Segment memory: batch 2, heads 3, memory 7, segment 4, key_dim 5, width 11.
MEMORY_LENGTH, SEGMENT_LENGTH = 7, 4
MEMORY_SETTINGS = {
    "skew_beyond_the_table": dict(max_relative_position=3),
    "skew_within_the_table": dict(max_relative_position=40),
    "skew_values_per_head": dict(max_relative_position=5, add_relative_to_values=True),
    "skew_causal_table_shared": dict(
        max_relative_position=6, causal_table=True, add_relative_to_values=True,
        heads_share_relative_embedding=True,
    ),
    "shaw_beyond_the_clip": dict(relative_type="shaw", max_relative_position=2),
    "shaw_within_the_clip": dict(relative_type="shaw", max_relative_position=40),
    "shaw_causal_table_per_head": dict(
        relative_type="shaw", max_relative_position=3, causal_table=True,
        heads_share_relative_embedding=False,
    ),
}


def memory_and_segment(batch=2, seed=0):
    both = inputs(batch, MEMORY_LENGTH + SEGMENT_LENGTH, seed)
    return both[:, :MEMORY_LENGTH], both[:, MEMORY_LENGTH:], both


@pytest.mark.parametrize("settings", MEMORY_SETTINGS.values(), ids=MEMORY_SETTINGS.keys())
@pytest.mark.parametrize("use_causal_mask", [True, False], ids=["causal", "unmasked"])
def test_memory_equals_the_last_rows_over_the_concatenation(settings, use_causal_mask):
    if settings.get("causal_table") and not use_causal_mask:
        pytest.skip("a causal table is always causal")
    layer = make_layer(**settings)
    memory, segment, both = memory_and_segment()
    output, scores = layer(segment, memory=memory, use_causal_mask=use_causal_mask, return_attention_scores=True)
    full_output, full_scores = layer(both, use_causal_mask=use_causal_mask, return_attention_scores=True)
    assert tuple(scores.shape) == (2, NUM_HEADS, SEGMENT_LENGTH, MEMORY_LENGTH + SEGMENT_LENGTH)
    np.testing.assert_allclose(
        ops.convert_to_numpy(output), ops.convert_to_numpy(full_output)[:, -SEGMENT_LENGTH:], atol=2e-5
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(scores), ops.convert_to_numpy(full_scores)[:, :, -SEGMENT_LENGTH:], atol=2e-6
    )
    # The scores' path and the fused one agree too.
    fused = layer(segment, memory=memory, use_causal_mask=use_causal_mask)
    np.testing.assert_allclose(ops.convert_to_numpy(fused), ops.convert_to_numpy(output), atol=2e-5)


@pytest.mark.parametrize(
    "settings",
    [MEMORY_SETTINGS["skew_values_per_head"], MEMORY_SETTINGS["shaw_beyond_the_clip"]],
    ids=["skew", "shaw"],
)
def test_memory_with_segment_padding_and_attention_mask(settings):
    """Masks cover the segment's keys; every memory position stays visible."""
    layer = make_layer(**settings)
    memory, segment, both = memory_and_segment()
    padding = np.ones((2, SEGMENT_LENGTH), bool)
    padding[0, :2] = False  # left padding
    padding[1, -1] = False
    explicit = np.random.default_rng(3).random((2, SEGMENT_LENGTH, SEGMENT_LENGTH)) > 0.3
    output = layer(
        segment, memory=memory, query_mask=padding, attention_mask=explicit, use_causal_mask=True
    )
    full_padding = np.concatenate([np.ones((2, MEMORY_LENGTH), bool), padding], axis=1)
    full_explicit = np.ones((2,) + (MEMORY_LENGTH + SEGMENT_LENGTH,) * 2, bool)
    full_explicit[:, MEMORY_LENGTH:, MEMORY_LENGTH:] = explicit
    full_output = layer(both, query_mask=full_padding, attention_mask=full_explicit, use_causal_mask=True)
    np.testing.assert_allclose(
        ops.convert_to_numpy(output), ops.convert_to_numpy(full_output)[:, -SEGMENT_LENGTH:], atol=2e-5
    )


@pytest.mark.parametrize("relative_type", ["skew", "shaw"])
def test_no_gradient_flows_into_memory(relative_type):
    layer = make_layer(max_relative_position=3, relative_type=relative_type, add_relative_to_values=True)
    memory, segment, _ = memory_and_segment()
    memory_gradient, segment_gradient = gradients_to_memory_and_segment(layer, memory, segment)
    assert memory_gradient is None or not np.any(memory_gradient)
    assert np.any(segment_gradient)


def gradients_to_memory_and_segment(layer, memory, segment):
    """The gradients of the summed causal output to `memory` and `segment`
    (`None` where none flows), on the backend's own autodiff."""
    backend = keras.backend.backend()

    def loss(memory, segment):
        return ops.sum(layer(segment, memory=memory, use_causal_mask=True))

    if backend == "tensorflow":
        import tensorflow as tf

        memory, segment = tf.constant(memory), tf.constant(segment)
        with tf.GradientTape() as tape:
            tape.watch([memory, segment])
            value = loss(memory, segment)
        gradients = tape.gradient(value, [memory, segment])
    elif backend == "jax":
        import jax

        layer(segment, memory=memory)  # built outside the trace
        gradients = jax.grad(loss, argnums=(0, 1))(memory, segment)
    else:
        import torch

        memory, segment = (torch.tensor(x, requires_grad=True) for x in (memory, segment))
        loss(memory, segment).backward()
        gradients = memory.grad, segment.grad
    return [None if g is None else ops.convert_to_numpy(g) for g in gradients]


@pytest.mark.parametrize("relative_type", ["skew", "shaw"])
def test_memory_in_a_functional_model_with_unknown_lengths(relative_type):
    layer = make_layer(max_relative_position=3, relative_type=relative_type)
    segment_input, memory_input = keras.Input((None, WIDTH)), keras.Input((None, WIDTH))
    model = keras.Model(
        [segment_input, memory_input], layer(segment_input, memory=memory_input, use_causal_mask=True)
    )
    memory, segment, both = memory_and_segment()
    np.testing.assert_allclose(
        ops.convert_to_numpy(model([segment, memory])),
        ops.convert_to_numpy(layer(both, use_causal_mask=True))[:, -SEGMENT_LENGTH:],
        atol=2e-5,
    )


@pytest.mark.parametrize("use_causal_mask", [True, False], ids=["causal", "unmasked"])
def test_skew_with_memory_takes_the_skew(use_causal_mask, monkeypatch):
    layer = make_layer(max_relative_position=5, add_relative_to_values=not use_causal_mask)
    memory, segment, both = memory_and_segment()
    expected = ops.convert_to_numpy(layer(both, use_causal_mask=use_causal_mask))[:, -SEGMENT_LENGTH:]

    def refuse(*args, **kwargs):
        raise AssertionError("a skew pass with memory read its relative rows per query-key pair")

    monkeypatch.setattr(layer, "_pairwise_pass", refuse)
    output = layer(segment, memory=memory, use_causal_mask=use_causal_mask)
    np.testing.assert_allclose(ops.convert_to_numpy(output), expected, atol=2e-5)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="unknown lengths are a TensorFlow graph feature")
@pytest.mark.parametrize("settings", MEMORY_SETTINGS.values(), ids=MEMORY_SETTINGS.keys())
def test_memory_with_unknown_lengths(settings):
    import tensorflow as tf

    layer = make_layer(**settings)
    memory, segment, both = memory_and_segment()
    expected = ops.convert_to_numpy(layer(both, use_causal_mask=True))[:, -SEGMENT_LENGTH:]
    spec = tf.TensorSpec((None, None, WIDTH), "float32")
    traced = tf.function(
        lambda x, m: layer(x, memory=m, use_causal_mask=True), input_signature=[spec, spec]
    )
    np.testing.assert_allclose(traced(segment, memory).numpy(), expected, atol=2e-5)


@pytest.mark.parametrize("relative_type", ["skew", "shaw"])
def test_memory_compiled_and_in_mixed_precision(relative_type):
    memory, segment, both = memory_and_segment()
    layer = make_layer(max_relative_position=3, relative_type=relative_type, add_relative_to_values=True)
    expected = ops.convert_to_numpy(layer(both, use_causal_mask=True))[:, -SEGMENT_LENGTH:]
    compiled = jit(lambda x, m: layer(x, memory=m, use_causal_mask=True))
    np.testing.assert_allclose(ops.convert_to_numpy(compiled(segment, memory)), expected, atol=2e-5)
    for policy, atol in (("mixed_float16", 5e-3), ("mixed_bfloat16", 5e-2)):
        layer = make_layer(max_relative_position=3, relative_type=relative_type, dtype=policy)
        output = layer(segment, memory=memory, use_causal_mask=True)
        assert keras.backend.standardize_dtype(output.dtype) == policy.split("_")[1]
        full = ops.cast(layer(both, use_causal_mask=True), "float32")
        np.testing.assert_allclose(
            ops.convert_to_numpy(ops.cast(output, "float32")),
            ops.convert_to_numpy(full)[:, -SEGMENT_LENGTH:],
            atol=atol,
        )
