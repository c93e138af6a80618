"""Encoder-decoder Transformer for translation (Vaswani et al.; Shaw et al.)."""

import keras

from keras_selfattn.layers.multi_head_attention import MultiHeadAttention
from keras_selfattn.layers.relative_multi_head_attention import RelativeMultiHeadAttention
from keras_selfattn.layers.sinusoidal_position_encoding import SinusoidalPositionEncoding
from keras_selfattn.layers.tied_output_projection import TiedOutputProjection
from keras_selfattn.layers.transformer_decoder_block import TransformerDecoderBlock
from keras_selfattn.layers.transformer_encoder_block import TransformerEncoderBlock
from keras_selfattn.models.config import (
    check_choice,
    check_divisible_width,
    check_vocabulary_size,
    resolve_preset,
)
from keras_selfattn.models.decoding import decoder_logits, encode, output_layer
from keras_selfattn.models.sequence_models import TranslationTransformer

POSITIONS = ("sinusoidal", "shaw")

TRANSLATION_PRESETS = {
    # Vaswani et al. 2017, Table 3 and section 3.4 (the output projection is
    # the target embedding's matrix); Shaw et al. 2018 clip relative
    # distances at 16.
    "base": dict(
        num_layers=6, hidden_dim=512, num_heads=8, feedforward_dim=2048, dropout=0.1,
        share_embeddings=False, tie_output_projection=True, norm_first=False, position="sinusoidal",
        max_relative_position=16,
    ),
    "big": dict(
        num_layers=6, hidden_dim=1024, num_heads=16, feedforward_dim=4096, dropout=0.3,
        share_embeddings=False, tie_output_projection=True, norm_first=False, position="sinusoidal",
        max_relative_position=16,
    ),
    "tiny": dict(
        num_layers=2, hidden_dim=64, num_heads=4, feedforward_dim=128, dropout=0.0,
        share_embeddings=False, tie_output_projection=True, norm_first=True, position="sinusoidal",
        max_relative_position=8,
    ),
}


def transformer_translation(source_vocab_size, target_vocab_size, preset="base", **overrides):
    """Builds the encoder-decoder Transformer as a Functional model.

    Inputs `{"source_tokens": [batch, source_length], "target_tokens":
    [batch, target_length]}` (int32, 0 = padding; the target tokens are the
    decoder inputs, shifted right with the start token 0 first, as
    tensor2tensor shifts them with its padding id; generation starts from 0
    and stops at `eos_id`, 1 by default), output float32 logits
    `[batch, target_length, target_vocab_size]`. `position="shaw"` replaces
    the sinusoidal signal by Shaw relative attention in every self-attention.
    Embeddings start from `normal(0, hidden_dim ** -0.5)` and are scaled by
    `sqrt(hidden_dim)` (`decoding.embed_tokens`), as in the paper and
    tensor2tensor, so a tied projection starts with logits of unit scale.
    With `share_embeddings` the one embedding layer is named
    `source_embedding`; `decoding.layers_by_name` lists it under
    `target_embedding` too.

    Args:
        source_vocab_size: source vocabulary size (>= 2).
        target_vocab_size: target vocabulary size (>= 2).
        preset: `"base"`, `"big"` (the paper's) or `"tiny"`.
        **overrides: hyperparameters replacing the preset's: `num_layers`,
            `hidden_dim`, `num_heads`, `feedforward_dim`, `dropout`,
            `share_embeddings` (one embedding table for source and target,
            for a joint vocabulary; needs equal sizes),
            `tie_output_projection` (the logits are the decoder output times
            the target embedding's matrix, `TiedOutputProjection`; the
            paper's, on in every preset), `norm_first`, `position`
            (`"sinusoidal"` or `"shaw"`), `max_relative_position`.

    Returns:
        A `TranslationTransformer`, whose methods give its encoder, its
        cached decoder step and its attention weights.
    """
    check_vocabulary_size("source_vocab_size", source_vocab_size)
    check_vocabulary_size("target_vocab_size", target_vocab_size)
    config = resolve_preset("transformer_translation", TRANSLATION_PRESETS, preset, overrides)
    check_choice("position", config["position"], POSITIONS)
    check_divisible_width(config["hidden_dim"], config["num_heads"])
    if config["share_embeddings"] and source_vocab_size != target_vocab_size:
        raise ValueError(
            "`share_embeddings=True` needs `source_vocab_size == target_vocab_size`. "
            f"Received: {source_vocab_size} and {target_vocab_size}"
        )
    layers = _translation_layers(source_vocab_size, target_vocab_size, config)
    source = keras.Input((None,), dtype="int32", name="source_tokens")
    target = keras.Input((None,), dtype="int32", name="target_tokens")
    encoder_outputs, source_mask = encode(layers, source)
    logits = decoder_logits(
        layers, target, encoder_outputs=encoder_outputs, encoder_padding_mask=source_mask
    )
    return TranslationTransformer(
        {"source_tokens": source, "target_tokens": target}, logits, name="transformer_translation"
    )


def _translation_layers(source_vocab_size, target_vocab_size, config):
    width = config["hidden_dim"]
    layers = {}
    layers["source_embedding"] = _embedding(source_vocab_size, width, "source_embedding")
    layers["target_embedding"] = (
        layers["source_embedding"]
        if config["share_embeddings"]
        else _embedding(target_vocab_size, width, "target_embedding")
    )
    if config["position"] == "sinusoidal":
        layers["source_position"] = SinusoidalPositionEncoding(name="source_position")
        layers["target_position"] = SinusoidalPositionEncoding(name="target_position")
    block_kwargs = dict(
        feedforward_dim=config["feedforward_dim"],
        dropout=config["dropout"],
        norm_first=config["norm_first"],
    )
    for index in range(config["num_layers"]):
        layers[f"encoder_block_{index}"] = TransformerEncoderBlock(
            _self_attention(config), name=f"encoder_block_{index}", **block_kwargs
        )
        layers[f"decoder_block_{index}"] = TransformerDecoderBlock(
            _self_attention(config),
            cross_attention=_plain_attention(config),
            name=f"decoder_block_{index}",
            **block_kwargs,
        )
    if config["norm_first"]:
        layers["encoder_norm"] = keras.layers.LayerNormalization(epsilon=1e-6, name="encoder_norm")
        layers["decoder_norm"] = keras.layers.LayerNormalization(epsilon=1e-6, name="decoder_norm")
    if config["tie_output_projection"]:
        # float32, as `output_layer`: logits stay exact under mixed precision.
        layers["logits"] = TiedOutputProjection(
            layers["target_embedding"], dtype="float32", name="logits"
        )
    else:
        layers["logits"] = output_layer(target_vocab_size)
    return layers


def _embedding(vocab_size, width, name):
    initializer = keras.initializers.RandomNormal(stddev=width**-0.5)
    return keras.layers.Embedding(vocab_size, width, embeddings_initializer=initializer, name=name)


def _plain_attention(config):
    head_dim = config["hidden_dim"] // config["num_heads"]
    return MultiHeadAttention(config["num_heads"], head_dim, dropout=config["dropout"])


def _self_attention(config):
    """Self-attention for encoder and decoder alike: the decoder block asks
    for the causal mask when it calls it."""
    if config["position"] == "sinusoidal":
        return _plain_attention(config)
    return RelativeMultiHeadAttention(
        config["num_heads"],
        config["hidden_dim"] // config["num_heads"],
        max_relative_position=config["max_relative_position"],
        relative_type="shaw",
        dropout=config["dropout"],
    )
