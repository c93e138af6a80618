import keras
import numpy as np
import pytest
from keras import ops
from layer_testing import jit, run_layer_test
from references import naive_multi_head_attention

from keras_selfattn.compat import get_keras_mask
from keras_selfattn.layers.multi_head_attention import MultiHeadAttention

RNG = np.random.default_rng(7)


def _random(*shape):
    return RNG.normal(size=shape).astype("float32")


def numpy(x):
    return ops.convert_to_numpy(x)


def _twin_layers(**kwargs):
    """Our layer and Keras's, built on the same shapes, with the same weights."""
    ours = MultiHeadAttention(**kwargs, name="attention")
    theirs = keras.layers.MultiHeadAttention(**kwargs, name="attention")
    query, value = _random(2, 5, 12), _random(2, 7, 10)
    ours(query, value)
    theirs(query, value, return_attention_scores=True)
    theirs.set_weights(ours.get_weights())
    return ours, theirs


class TestParityWithKeras:
    @pytest.mark.parametrize(
        "kwargs",
        [
            dict(num_heads=2, key_dim=4),
            dict(num_heads=3, key_dim=4, value_dim=6, output_shape=9),
            dict(num_heads=2, key_dim=4, use_bias=False, use_gate=True),
        ],
    )
    def test_weights_and_outputs_match(self, kwargs):
        ours, theirs = _twin_layers(**kwargs)
        assert [w.shape for w in ours.weights] == [w.shape for w in theirs.weights]
        assert ours.get_config() == theirs.get_config()
        query, value = _random(2, 5, 12), _random(2, 7, 10)
        # Keras's fused path on JAX rejects value_dim != key_dim; its einsum
        # path (taken when scores are returned) computes the same outputs.
        expected, _ = theirs(query, value, return_attention_scores=True)
        np.testing.assert_allclose(numpy(ours(query, value)), numpy(expected), atol=1e-5)

    def test_self_attention_with_causal_mask(self):
        ours, theirs = _twin_layers(num_heads=2, key_dim=4)
        x = _random(2, 6, 12)
        expected = numpy(theirs(x, x[..., :10], use_causal_mask=True))
        np.testing.assert_allclose(
            numpy(ours(x, x[..., :10], use_causal_mask=True)), expected, atol=1e-5
        )

    @pytest.mark.parametrize("return_scores", [False, True], ids=["fused", "einsum"])
    def test_cross_attention_with_masks(self, return_scores):
        ours, theirs = _twin_layers(num_heads=2, key_dim=4)
        query, value = _random(2, 5, 12), _random(2, 7, 10)
        attention_mask = RNG.random((2, 5, 7)) > 0.5
        attention_mask[..., 0] = True  # no fully masked row: Keras averages those
        value_mask = np.array([[1] * 7, [1] * 4 + [0] * 3], bool)
        kwargs = dict(attention_mask=attention_mask, value_mask=value_mask)
        expected = theirs(query, value, return_attention_scores=return_scores, **kwargs)
        result = ours(query, value, return_attention_scores=return_scores, **kwargs)
        for got, want in zip(keras.tree.flatten(result), keras.tree.flatten(expected)):
            np.testing.assert_allclose(numpy(got), numpy(want), atol=1e-5)

    def test_attention_over_two_axes(self):
        kwargs = dict(num_heads=2, key_dim=4, attention_axes=(1, 2), name="attention")
        ours, theirs = MultiHeadAttention(**kwargs), keras.layers.MultiHeadAttention(**kwargs)
        x = _random(2, 3, 4, 8)
        ours(x, x)
        theirs(x, x)
        theirs.set_weights(ours.get_weights())
        np.testing.assert_allclose(numpy(ours(x, x)), numpy(theirs(x, x)), atol=1e-5)
        # Keras fails deep inside its softmax here; ours says why.
        with pytest.raises(ValueError, match="`use_causal_mask` needs a single attention axis"):
            ours(x, x, use_causal_mask=True)

    def test_keras_mask_of_embedded_tokens(self):
        tokens = keras.Input((None,), dtype="int32")
        embedded = keras.layers.Embedding(20, 12, mask_zero=True)(tokens)
        ours = MultiHeadAttention(num_heads=2, key_dim=4)
        theirs = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)
        model_ours = keras.Model(tokens, ours(embedded, embedded))
        model_theirs = keras.Model(tokens, theirs(embedded, embedded))
        model_theirs.set_weights(model_ours.get_weights())
        ids = np.array([[3, 4, 5, 0, 0], [1, 2, 3, 4, 5]])
        real = ids != 0  # padded query rows differ by design: zeros vs averages
        np.testing.assert_allclose(
            numpy(model_ours(ids))[real], numpy(model_theirs(ids))[real], atol=1e-5
        )


class TestMasksOnEveryPath:
    def _layer_and_inputs(self):
        layer = MultiHeadAttention(num_heads=2, key_dim=4)
        query, value = _random(2, 5, 12), _random(2, 7, 10)
        layer(query, value)
        mask = RNG.random((2, 5, 7)) > 0.5
        mask[0, 1] = False  # a fully masked row
        return layer, query, value, mask

    @pytest.mark.parametrize("path", ["fused", "einsum", "jit"])
    def test_matches_naive_reference(self, path):
        layer, query, value, mask = self._layer_and_inputs()
        expected = naive_multi_head_attention(layer, query, value, mask[:, None])

        def run(q, v, m):
            return layer(q, v, attention_mask=m, return_attention_scores=path == "einsum")

        result = jit(run)(query, value, mask) if path == "jit" else run(query, value, mask)
        output = keras.tree.flatten(result)[0]
        np.testing.assert_allclose(numpy(output), expected, atol=1e-5)

    def test_fully_masked_query_gets_the_output_bias_only(self):
        layer, query, value, mask = self._layer_and_inputs()
        output = numpy(layer(query, value, attention_mask=mask))
        np.testing.assert_allclose(output[0, 1], numpy(layer.output_dense.bias), atol=1e-6)

    @pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
    @pytest.mark.parametrize("return_scores", [False, True], ids=["fused", "einsum"])
    def test_fully_masked_row_is_finite_in_half_precision(self, policy, return_scores):
        layer = MultiHeadAttention(num_heads=2, key_dim=4, dtype=policy)
        x = _random(1, 4, 8)
        mask = np.ones((1, 4, 4), bool)
        mask[0, 2] = False
        result = layer(x, x, attention_mask=mask, return_attention_scores=return_scores)
        output = ops.convert_to_numpy(ops.cast(keras.tree.flatten(result)[0], "float32"))
        assert np.all(np.isfinite(output))
        if return_scores:
            scores = ops.convert_to_numpy(ops.cast(result[1], "float32"))
            np.testing.assert_array_equal(scores[0, :, 2], 0.0)

    def test_dropout_only_in_training(self):
        layer = MultiHeadAttention(num_heads=2, key_dim=4, dropout=0.5, seed=1)
        x = _random(2, 6, 8)
        inference = numpy(layer(x, x, training=False))
        np.testing.assert_allclose(inference, numpy(layer(x, x)), atol=1e-6)
        assert not np.allclose(numpy(layer(x, x, training=True)), inference)

    def test_attention_bias_is_added_to_logits(self):
        layer, query, value, _ = self._layer_and_inputs()
        forbid_last_keys = np.zeros((1, 1, 5, 7), "float32")
        forbid_last_keys[..., 4:] = -1e9
        mask = np.zeros((5, 7), bool)
        mask[:, :4] = True
        np.testing.assert_allclose(
            numpy(layer(query, value, attention_bias=forbid_last_keys)),
            numpy(layer(query, value, attention_mask=mask)),
            atol=1e-5,
        )


class TestCache:
    NUM_HEADS, KEY_DIM, LENGTH = 2, 4, 6

    def _empty_cache(self, batch=2):
        return np.zeros((batch, 2, self.LENGTH, self.NUM_HEADS, self.KEY_DIM), "float32")

    def _layer(self, **kwargs):
        layer = MultiHeadAttention(num_heads=self.NUM_HEADS, key_dim=self.KEY_DIM, **kwargs)
        layer(_random(2, self.LENGTH, 8), _random(2, self.LENGTH, 8))
        return layer

    @pytest.mark.parametrize("compiled", [False, True], ids=["eager", "jit"])
    def test_loop_of_steps_equals_full_causal_pass(self, compiled):
        layer = self._layer()
        x = _random(2, self.LENGTH, 8)
        full, full_cache = layer(
            x, x, cache=self._empty_cache(), cache_update_index=0, use_causal_mask=True
        )

        def step(x_step, cache, index):
            return layer(x_step, x_step, cache=cache, cache_update_index=index, use_causal_mask=True)

        step = jit(step) if compiled else step
        cache = self._empty_cache()
        outputs = []
        for t in range(self.LENGTH):
            output, cache = step(x[:, t : t + 1], cache, ops.convert_to_tensor(t, "int32"))
            outputs.append(numpy(output))
        np.testing.assert_allclose(np.concatenate(outputs, 1), numpy(full), atol=1e-5)
        np.testing.assert_allclose(numpy(cache), numpy(full_cache), atol=1e-6)
        np.testing.assert_allclose(numpy(full), numpy(layer(x, x, use_causal_mask=True)), atol=1e-5)

    def test_prefill_then_steps_with_sliding_window(self):
        layer = self._layer(sliding_window=3)
        x = _random(2, self.LENGTH, 8)
        full = layer(x, x, use_causal_mask=True)
        output, cache = layer(
            x[:, :4], x[:, :4], cache=self._empty_cache(), cache_update_index=0, use_causal_mask=True
        )
        outputs = [numpy(output)]
        for t in (4, 5):
            output, cache = layer(
                x[:, t : t + 1], x[:, t : t + 1], cache=cache, cache_update_index=t, use_causal_mask=True
            )
            outputs.append(numpy(output))
        np.testing.assert_allclose(np.concatenate(outputs, 1), numpy(full), atol=1e-5)

    def test_cache_without_index_attends_to_precomputed_keys(self):
        layer = self._layer()
        query, memory = _random(2, 1, 8), _random(2, self.LENGTH, 8)
        _, cache = layer(memory, memory, cache=self._empty_cache(), cache_update_index=0)
        output, same_cache = layer(query, query, cache=cache)
        np.testing.assert_allclose(numpy(output), numpy(layer(query, memory)), atol=1e-5)
        np.testing.assert_array_equal(numpy(same_cache), numpy(cache))

    def test_scores_come_before_the_cache(self):
        layer = self._layer()
        x = _random(2, 1, 8)
        output, scores, cache = layer(
            x, x, cache=self._empty_cache(), cache_update_index=2,
            use_causal_mask=True, return_attention_scores=True,
        )
        scores = numpy(scores)
        assert scores.shape == (2, self.NUM_HEADS, 1, self.LENGTH)
        np.testing.assert_array_equal(scores[..., 3:], 0.0)
        np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-6)
        assert tuple(cache.shape) == self._empty_cache().shape

    def test_symbolic_call_with_cache(self):
        layer = MultiHeadAttention(num_heads=self.NUM_HEADS, key_dim=self.KEY_DIM)
        x = keras.Input((1, 8))
        cache = keras.Input((2, self.LENGTH, self.NUM_HEADS, self.KEY_DIM))
        output, new_cache = layer(x, x, cache=cache, cache_update_index=0)
        assert tuple(output.shape) == (None, 1, 8)
        assert tuple(new_cache.shape) == (None, 2, self.LENGTH, self.NUM_HEADS, self.KEY_DIM)


class TestDropIn:
    def test_causal_mask_with_an_extra_non_attention_axis(self):
        kwargs = dict(num_heads=2, key_dim=4, attention_axes=1, name="attention")
        ours, theirs = MultiHeadAttention(**kwargs), keras.layers.MultiHeadAttention(**kwargs)
        x = _random(1, 5, 3, 8)
        ours(x, x)
        theirs(x, x)
        theirs.set_weights(ours.get_weights())
        expected = numpy(theirs(x, x, use_causal_mask=True))
        np.testing.assert_allclose(numpy(ours(x, x, use_causal_mask=True)), expected, atol=1e-5)
        # Row 0 of the attention axis sees only itself: changing later rows
        # leaves it alone.
        changed = x.copy()
        changed[:, 1:] += 1.0
        np.testing.assert_allclose(
            numpy(ours(changed, changed, use_causal_mask=True))[:, 0], expected[:, 0], atol=1e-5
        )

    def test_subclass_overriding_the_keras_hook_gets_every_mask(self):
        calls = []

        class Recording(MultiHeadAttention):
            def _compute_attention(
                self, query, key, value, attention_mask=None, training=None,
                return_attention_scores=False,
            ):
                calls.append(attention_mask)
                return super()._compute_attention(
                    query, key, value, attention_mask, training, return_attention_scores
                )

        reference = MultiHeadAttention(num_heads=2, key_dim=4)
        layer = Recording(num_heads=2, key_dim=4)
        x = _random(2, 5, 8)
        expected = numpy(reference(x, use_causal_mask=True))
        layer(x)
        layer.set_weights(reference.get_weights())
        np.testing.assert_allclose(numpy(layer(x, use_causal_mask=True)), expected, atol=1e-5)
        assert calls[-1] is not None  # the causal mask, merged in
        cache = np.zeros((2, 2, 5, 2, 4), "float32")
        for t in range(5):
            step, cache = layer(x[:, t:t + 1], cache=cache, cache_update_index=t, use_causal_mask=True)
            np.testing.assert_allclose(numpy(step)[:, 0], expected[:, t], atol=1e-5)
        with pytest.raises(ValueError, match="overrides `_compute_attention`"):
            layer(x, attention_bias=np.zeros((1, 1, 5, 5), "float32"))

    def test_value_defaults_to_query_and_its_padding_masks_the_keys(self):
        layer = MultiHeadAttention(num_heads=2, key_dim=4)
        x = _random(2, 5, 8)
        np.testing.assert_allclose(numpy(layer(x)), numpy(layer(x, x)), atol=1e-6)
        padding = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
        np.testing.assert_allclose(
            numpy(layer(x, query_mask=padding)),
            numpy(layer(x, x, query_mask=padding, value_mask=padding)),
            atol=1e-6,
        )

    def test_output_carries_the_query_keras_mask(self):
        embedding = keras.layers.Embedding(20, 8, mask_zero=True)
        ids = np.array([[3, 4, 0], [1, 2, 3]])
        output = MultiHeadAttention(num_heads=2, key_dim=4)(embedding(ids))
        np.testing.assert_array_equal(numpy(get_keras_mask(output)), ids != 0)


class TestBadInput:
    def test_rank_two_query(self):
        layer = MultiHeadAttention(num_heads=2, key_dim=4)
        with pytest.raises(ValueError, match="`query` must have rank 3 or more"):
            layer(_random(3, 8), _random(1, 3, 8))

    def test_value_batch_differs_from_query(self):
        layer = MultiHeadAttention(num_heads=2, key_dim=4)
        with pytest.raises(ValueError, match="`value` must have the batch size of `query` \\(2\\)"):
            layer(_random(2, 3, 8), _random(3, 4, 8))

    @pytest.mark.parametrize("argument,shape", [
        ("attention_mask", (2, 3, 5)),
        ("attention_mask", (2, 3, 4, 4)),
        ("attention_bias", (3, 1, 4)),
        ("attention_bias", (2, 3, 4, 4)),
    ])
    def test_mask_or_bias_that_does_not_broadcast(self, argument, shape):
        layer = MultiHeadAttention(num_heads=2, key_dim=4)
        tensor = np.ones(shape, bool) if argument == "attention_mask" else np.zeros(shape, "float32")
        with pytest.raises(ValueError, match=f"`{argument}` must broadcast to"):
            layer(_random(2, 3, 8), _random(2, 4, 8), **{argument: tensor})

    @pytest.mark.parametrize("kwargs,argument", [
        (dict(num_heads=0, key_dim=4), "num_heads"),
        (dict(num_heads=2, key_dim=-1), "key_dim"),
    ])
    def test_invalid_sizes(self, kwargs, argument):
        with pytest.raises(ValueError, match=argument):
            MultiHeadAttention(**kwargs)

    def test_mismatched_feature_sizes(self):
        layer = MultiHeadAttention(num_heads=2, key_dim=4)
        layer(_random(1, 3, 8), _random(1, 3, 8))
        with pytest.raises(ValueError, match=r"`query` must have shape `\[batch, \.\.\., 8\]`"):
            layer(_random(1, 3, 6), _random(1, 3, 8))

    def test_cache_update_index_without_a_cache(self):
        layer = MultiHeadAttention(num_heads=2, key_dim=4)
        with pytest.raises(ValueError, match="`cache_update_index` needs a `cache`"):
            layer(_random(1, 3, 8), cache_update_index=0)

    def test_key_and_value_lengths_differ(self):
        with pytest.raises(ValueError, match="`value` and `key`"):
            MultiHeadAttention(num_heads=2, key_dim=4)(
                _random(1, 3, 8), _random(1, 4, 8), key=_random(1, 5, 8)
            )

    @pytest.mark.parametrize("cache,match", [
        (np.zeros((1, 2, 6, 3, 4), "float32"), "`cache` must have shape"),
        (np.zeros((1, 6, 2, 4), "float32"), "`cache` must have shape"),
        (np.zeros((1, 2, 6, 2, 4), "int32"), "`cache` must have the layer's compute dtype"),
    ])
    def test_wrong_cache(self, cache, match):
        layer = MultiHeadAttention(num_heads=2, key_dim=4)
        x = _random(1, 1, 8)
        with pytest.raises(ValueError, match=match):
            layer(x, x, cache=cache, cache_update_index=0)

    @pytest.mark.parametrize("index", [-1, 6, 7])
    def test_cache_update_index_outside_the_cache(self, index):
        layer = MultiHeadAttention(num_heads=2, key_dim=4)
        x = _random(1, 1, 8)
        with pytest.raises(ValueError, match="`cache_update_index` must lie in"):
            layer(x, x, cache=np.zeros((1, 2, 6, 2, 4), "float32"), cache_update_index=index)

    def test_cache_needs_equal_key_and_value_dims(self):
        layer = MultiHeadAttention(num_heads=2, key_dim=4, value_dim=3)
        x = _random(1, 1, 8)
        with pytest.raises(ValueError, match="value_dim == key_dim"):
            layer(x, x, cache=np.zeros((1, 2, 6, 2, 4), "float32"), cache_update_index=0)

    def test_mask_of_wrong_rank(self):
        layer = MultiHeadAttention(num_heads=2, key_dim=4)
        x = _random(1, 3, 8)
        with pytest.raises(ValueError, match="`attention_mask` must broadcast"):
            layer(x, x, attention_mask=np.ones((3,), bool))


def test_shared_layer_checks(tmp_path):
    run_layer_test(
        MultiHeadAttention,
        dict(num_heads=3, key_dim=5, dropout=0.1),
        {"query": _random(2, 7, 11), "value": _random(2, 13, 17)},
        tmp_path,
        expected_output_shape=(2, 7, 11),
    )


def test_shared_layer_checks_causal(tmp_path):
    run_layer_test(
        MultiHeadAttention,
        dict(num_heads=3, key_dim=5),
        {"query": _random(2, 7, 11), "value": _random(2, 7, 13)},
        tmp_path,
        call_kwargs={"use_causal_mask": True},
    )


class TestSegmentMemory:
    """`memory`: the previous segment's inputs as extra keys and values.
    Batch 2, heads 3, memory 7, segment 4, key_dim 5, width 11."""

    MEMORY, SEGMENT = 7, 4

    def inputs(self):
        both = np.random.default_rng(11).normal(size=(2, self.MEMORY + self.SEGMENT, 11))
        both = both.astype("float32")
        return both[:, : self.MEMORY], both[:, self.MEMORY :], both

    def last_rows(self, x):
        return numpy(x)[..., -self.SEGMENT :, :]

    @pytest.mark.parametrize("use_causal_mask", [True, False], ids=["causal", "unmasked"])
    @pytest.mark.parametrize(
        "kwargs",
        [dict(), dict(value_dim=6, use_gate=True, output_shape=13), dict(sliding_window=5)],
        ids=["plain", "gate", "sliding_window"],
    )
    def test_equals_the_last_rows_over_the_concatenation(self, use_causal_mask, kwargs):
        layer = MultiHeadAttention(num_heads=3, key_dim=5, **kwargs)
        memory, segment, both = self.inputs()
        output, scores = layer(
            segment, memory=memory, use_causal_mask=use_causal_mask, return_attention_scores=True
        )
        full_output, full_scores = layer(
            both, use_causal_mask=use_causal_mask, return_attention_scores=True
        )
        assert tuple(scores.shape) == (2, 3, self.SEGMENT, self.MEMORY + self.SEGMENT)
        np.testing.assert_allclose(numpy(output), numpy(full_output)[:, -self.SEGMENT :], atol=2e-5)
        np.testing.assert_allclose(numpy(scores), self.last_rows(full_scores), atol=2e-6)
        fused = layer(segment, memory=memory, use_causal_mask=use_causal_mask)
        np.testing.assert_allclose(numpy(fused), numpy(output), atol=2e-5)

    def test_bias_and_masks_cover_the_segments_keys(self):
        layer = MultiHeadAttention(num_heads=3, key_dim=5)
        memory, segment, both = self.inputs()
        padding = np.ones((2, self.SEGMENT), bool)
        padding[0, :2] = False
        bias = np.random.default_rng(2).normal(size=(2, 1, self.SEGMENT, self.SEGMENT))
        bias = bias.astype("float32")
        output = layer(
            segment, memory=memory, query_mask=padding, attention_bias=bias, use_causal_mask=True
        )
        full_padding = np.concatenate([np.ones((2, self.MEMORY), bool), padding], axis=1)
        full_bias = np.zeros((2, 1) + (self.MEMORY + self.SEGMENT,) * 2, "float32")
        full_bias[..., self.MEMORY :, self.MEMORY :] = bias
        full = layer(both, query_mask=full_padding, attention_bias=full_bias, use_causal_mask=True)
        np.testing.assert_allclose(numpy(output), numpy(full)[:, -self.SEGMENT :], atol=2e-5)

    def test_no_gradient_flows_into_memory(self):
        from test_relative_multi_head_attention import gradients_to_memory_and_segment

        layer = MultiHeadAttention(num_heads=3, key_dim=5)
        memory, segment, _ = self.inputs()
        memory_gradient, segment_gradient = gradients_to_memory_and_segment(layer, memory, segment)
        assert memory_gradient is None or not np.any(memory_gradient)
        assert np.any(segment_gradient)

    def test_a_compute_attention_override_sees_the_memory_offset(self):
        """Keras's hook gets the causal mask of queries at `M + i`."""

        class Custom(MultiHeadAttention):
            def _compute_attention(self, query, key, value, attention_mask=None, training=None,
                                   return_attention_scores=False):
                return super()._compute_attention(
                    query, key, value, attention_mask, training, return_attention_scores
                )

        layer = Custom(num_heads=3, key_dim=5)
        memory, segment, both = self.inputs()
        output = layer(segment, memory=memory, use_causal_mask=True)
        full = layer(both, use_causal_mask=True)
        np.testing.assert_allclose(numpy(output), numpy(full)[:, -self.SEGMENT :], atol=2e-5)
