import keras
import numpy as np
import pytest
from keras import ops
from layer_testing import run_layer_test
from references import naive_multi_head_attention

from keras_selfattn.layers.local_attention_1d import LocalAttention1D
from keras_selfattn.layers.local_attention_2d import LocalAttention2D
from keras_selfattn.layers.multi_head_attention import MultiHeadAttention
from keras_selfattn.layers.relative_multi_head_attention import RelativeMultiHeadAttention
from keras_selfattn.layers.transformer_decoder_block import TransformerDecoderBlock
from keras_selfattn.layers.transformer_encoder_block import TransformerEncoderBlock

RNG = np.random.default_rng(11)
WIDTH = 16


def _random(*shape):
    return RNG.normal(size=shape).astype("float32")


def _numpy(tensor):
    return np.asarray(ops.convert_to_numpy(tensor))


def _layer_norm(x, norm):
    mean = x.mean(-1, keepdims=True)
    variance = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + norm.epsilon) * _numpy(norm.gamma) + _numpy(norm.beta)


def _feedforward(x, network):
    hidden = np.maximum(x @ _numpy(network.layers[0].kernel) + _numpy(network.layers[0].bias), 0)
    return hidden @ _numpy(network.layers[2].kernel) + _numpy(network.layers[2].bias)


def naive_encoder_block(block, x, mask):
    """The block written out with numpy: attention, residuals, norms, ffn."""
    attend = lambda h: naive_multi_head_attention(block.self_attention, h, h, mask)  # noqa: E731
    ffn = lambda h: _feedforward(h, block._feedforward)  # noqa: E731
    if block.norm_first:
        x = x + attend(_layer_norm(x, block._attention_norm))
        return x + ffn(_layer_norm(x, block._feedforward_norm))
    x = _layer_norm(x + attend(x), block._attention_norm)
    return _layer_norm(x + ffn(x), block._feedforward_norm)


@pytest.mark.parametrize("norm_first", [True, False])
def test_encoder_block_matches_numpy_reference(norm_first):
    block = TransformerEncoderBlock(MultiHeadAttention(2, 8), 32, norm_first=norm_first)
    x = _random(2, 5, WIDTH)
    padding = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)
    output = _numpy(block(x, padding_mask=padding))
    mask = (padding[:, None, :, None] & padding[:, None, None, :])
    np.testing.assert_allclose(output, naive_encoder_block(block, x, mask), atol=1e-5)


def test_decoder_block_matches_numpy_reference():
    block = TransformerDecoderBlock(
        MultiHeadAttention(2, 8), 32, cross_attention=MultiHeadAttention(2, 8)
    )
    x, memory = _random(2, 4, WIDTH), _random(2, 6, WIDTH)
    memory_padding = np.array([[1] * 6, [1] * 3 + [0] * 3], bool)
    output = _numpy(block(x, encoder_outputs=memory, encoder_padding_mask=memory_padding))
    causal = np.tril(np.ones((4, 4), bool))[None, None]
    h = x + naive_multi_head_attention(
        block.self_attention, _layer_norm(x, block._self_attention_norm), _layer_norm(x, block._self_attention_norm), causal
    )
    h = h + naive_multi_head_attention(
        block.cross_attention, _layer_norm(h, block._cross_attention_norm), memory,
        memory_padding[:, None, None, :],
    )
    expected = h + _feedforward(_layer_norm(h, block._feedforward_norm), block._feedforward)
    np.testing.assert_allclose(output, expected, atol=1e-5)


ATTENTIONS = {
    "plain": lambda: MultiHeadAttention(2, 8),
    "skew": lambda: RelativeMultiHeadAttention(2, 8, max_relative_position=4, causal_table=True),
    "shaw": lambda: RelativeMultiHeadAttention(2, 8, max_relative_position=3, relative_type="shaw"),
    "local_1d": lambda: LocalAttention1D(2, 8, block_length=3),
}


@pytest.mark.parametrize("attention", sorted(ATTENTIONS))
def test_decoder_cached_steps_equal_full_pass(attention):
    block = TransformerDecoderBlock(
        ATTENTIONS[attention](), 32, cross_attention=MultiHeadAttention(2, 8)
    )
    x, memory = _random(2, 7, WIDTH), _random(2, 5, WIDTH)
    full = _numpy(block(x, encoder_outputs=memory))
    cache = np.zeros((2, 2, 7, 2, 8), "float32")
    steps = []
    for t in range(7):
        output, cache = block(x[:, t : t + 1], encoder_outputs=memory, cache=cache, cache_update_index=t)
        steps.append(_numpy(output))
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)


def test_decoder_block_on_an_image_grid_matches_numpy_reference():
    # One query block covering the 3 x 4 image: masked 2D local attention is
    # then causal attention over the pixels in raster order.
    block = TransformerDecoderBlock(
        LocalAttention2D(2, 8, query_shape=(3, 4), memory_flange=(0, 0)),
        32,
        cross_attention=MultiHeadAttention(2, 8),
    )
    grid, memory = _random(2, 3, 4, WIDTH), _random(2, 5, WIDTH)
    output = _numpy(block(grid, encoder_outputs=memory)).reshape(2, 12, WIDTH)
    x = grid.reshape(2, 12, WIDTH)
    normed = _layer_norm(x, block._self_attention_norm)
    causal = np.tril(np.ones((12, 12), bool))[None, None]
    h = x + naive_multi_head_attention(block.self_attention, normed, normed, causal)
    no_mask = np.ones((1, 1, 1, 1), bool)
    h = h + naive_multi_head_attention(
        block.cross_attention, _layer_norm(h, block._cross_attention_norm), memory, no_mask
    )
    expected = h + _feedforward(_layer_norm(h, block._feedforward_norm), block._feedforward)
    np.testing.assert_allclose(output, expected, atol=1e-5)


def test_encoder_padding_hides_padded_memory():
    block = TransformerDecoderBlock(
        MultiHeadAttention(2, 8), 32, cross_attention=MultiHeadAttention(2, 8)
    )
    x, memory = _random(1, 4, WIDTH), _random(1, 6, WIDTH)
    padding = np.array([[1, 1, 1, 1, 0, 0]], bool)
    changed = memory.copy()
    changed[:, 4:] += 10.0
    np.testing.assert_allclose(
        ops.convert_to_numpy(block(x, encoder_outputs=memory, encoder_padding_mask=padding)),
        ops.convert_to_numpy(block(x, encoder_outputs=changed, encoder_padding_mask=padding)),
        atol=1e-5,
    )


def test_encoder_block_shared_checks(tmp_path):
    run_layer_test(
        TransformerEncoderBlock,
        lambda: dict(self_attention=MultiHeadAttention(2, 8), feedforward_dim=32, dropout=0.1),
        {"inputs": _random(2, 5, WIDTH)},
        tmp_path,
    )


def test_decoder_block_shared_checks(tmp_path):
    run_layer_test(
        TransformerDecoderBlock,
        lambda: dict(
            self_attention=RelativeMultiHeadAttention(2, 8, max_relative_position=4, causal_table=True),
            feedforward_dim=32,
            cross_attention=MultiHeadAttention(2, 8),
            norm_first=False,
        ),
        {"inputs": _random(2, 5, WIDTH), "encoder_outputs": _random(2, 3, 12)},
        tmp_path,
    )


class TestBadInput:
    def test_attention_must_be_a_layer(self):
        with pytest.raises(ValueError, match="attention layer instance"):
            TransformerEncoderBlock("multi_head", 32)

    def test_feedforward_dim(self):
        with pytest.raises(ValueError, match="`feedforward_dim` must be a positive integer"):
            TransformerDecoderBlock(MultiHeadAttention(2, 8), 0)

    def test_dropout(self):
        with pytest.raises(ValueError, match="`dropout` must lie in"):
            TransformerEncoderBlock(MultiHeadAttention(2, 8), 32, dropout=1.5)

    def test_encoder_outputs_exactly_with_cross_attention(self):
        block = TransformerDecoderBlock(MultiHeadAttention(2, 8), 32)
        with pytest.raises(ValueError, match="`encoder_outputs` exactly when"):
            block(_random(1, 3, WIDTH), encoder_outputs=_random(1, 3, WIDTH))
        with_cross = TransformerDecoderBlock(
            MultiHeadAttention(2, 8), 32, cross_attention=MultiHeadAttention(2, 8)
        )
        with pytest.raises(ValueError, match="encoder_outputs"):
            with_cross(_random(1, 3, WIDTH))


def test_decoder_block_returns_its_attention_scores():
    block = TransformerDecoderBlock(
        MultiHeadAttention(3, 5), feedforward_dim=32, cross_attention=MultiHeadAttention(3, 5)
    )
    x, encoded = _random(2, 7, WIDTH), _random(2, 11, 13)
    encoder_mask = np.arange(11)[None] < np.array([[11], [6]])
    output, scores = block(
        x, encoder_outputs=encoded, encoder_padding_mask=encoder_mask, return_attention_scores=True
    )
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(output),
        keras.ops.convert_to_numpy(block(x, encoder_outputs=encoded, encoder_padding_mask=encoder_mask)),
        atol=1e-6,
    )
    own = block.self_attention(block.self_attention_input(x), use_causal_mask=True, return_attention_scores=True)[1]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(scores["self"]), keras.ops.convert_to_numpy(own), atol=1e-6)
    cross = keras.ops.convert_to_numpy(scores["cross"])
    assert cross.shape == (2, 3, 7, 11)
    assert np.all(cross[1, :, :, 6:] == 0)
    np.testing.assert_allclose(cross.sum(-1), 1.0, atol=1e-5)
    cache = np.zeros((2, 2, 7, 3, 5), "float32")
    step, step_scores, _ = block(
        x, encoder_outputs=encoded, encoder_padding_mask=encoder_mask, cache=cache,
        cache_update_index=0, return_attention_scores=True,
    )
    np.testing.assert_allclose(keras.ops.convert_to_numpy(step_scores["cross"]), cross, atol=1e-6)


def test_decoder_block_scores_of_an_image_are_over_its_pixels():
    block = TransformerDecoderBlock(
        LocalAttention2D(3, 5, query_shape=(2, 3), memory_flange=(1, 1), grid_shape=(4, 6)),
        32,
        cross_attention=MultiHeadAttention(2, 8),
    )
    grid, memory = _random(2, 4, 6, WIDTH), _random(2, 7, WIDTH)
    _, scores = block(grid, encoder_outputs=memory, return_attention_scores=True)
    own = block.self_attention(
        block.self_attention_input(grid), use_causal_mask=True, return_attention_scores=True
    )[1]
    np.testing.assert_allclose(_numpy(scores["self"]), _numpy(own), atol=1e-6)
    assert _numpy(scores["self"]).shape == (2, 3, 24, 24)
    assert _numpy(scores["cross"]).shape == (2, 2, 24, 7)
    symbolic = block(
        keras.Input((4, 6, WIDTH), batch_size=2),
        encoder_outputs=keras.Input((7, WIDTH), batch_size=2),
        return_attention_scores=True,
    )[1]
    assert tuple(symbolic["self"].shape) == (2, 3, 24, 24)
    assert tuple(symbolic["cross"].shape) == (2, 2, 24, 7)
    pixel = keras.Input((1, 1, WIDTH), batch_size=2)
    cache = keras.Input((2, 24, 3, 5), batch_size=2)
    step_scores = block(
        pixel, encoder_outputs=keras.Input((7, WIDTH), batch_size=2), cache=cache,
        cache_update_index=0, return_attention_scores=True,
    )[1]
    assert tuple(step_scores["self"].shape) == (2, 3, 1, 24)
