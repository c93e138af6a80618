"""Encoder-decoder Transformer for translation (Vaswani et al.; Shaw et al.)."""

import keras
from keras import ops

from keras_selfattn.layers.argument_checks import renamed_required_argument
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
    renamed_argument,
    resolve_preset,
)
from keras_selfattn.models.presets import register_presets
from keras_selfattn.models.sequence_models import SequenceTransformer, embed_tokens, output_projection

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


@keras.saving.register_keras_serializable(package="keras_selfattn")
class TranslationTransformer(SequenceTransformer):
    """An encoder-decoder Transformer for translation.

    Inputs `{"source_tokens": [batch, source_length], "target_tokens":
    [batch, target_length]}` (int32, 0 = padding; the target tokens are the
    decoder inputs, shifted right with the start token 0 first, as
    tensor2tensor shifts them with its padding id; generation starts from 0
    and stops at `eos_id`, 1 by default), output float32 logits
    `[batch, target_length, target_vocabulary_size]`. Embeddings start from
    `normal(0, hidden_dim ** -0.5)` and are scaled by `sqrt(hidden_dim)`, as
    in the paper and tensor2tensor, so a tied projection starts with logits
    of unit scale.

    Args:
        source_vocabulary_size: source vocabulary size (>= 2).
        target_vocabulary_size: target vocabulary size (>= 2).
        num_layers: encoder blocks, and as many decoder blocks.
        hidden_dim: width of the model.
        num_heads: attention heads (each `hidden_dim // num_heads` wide).
        feedforward_dim: width of each block's feedforward layer.
        dropout: dropout rate of attention and residual branches.
        share_embeddings: one embedding table for source and target, for a
            joint vocabulary (needs equal sizes); the layer is named
            `source_embedding`.
        tie_output_projection: the logits are the decoder output times the
            target embedding's matrix (`TiedOutputProjection`; the paper's).
        norm_first: pre-norm blocks, with a final norm after each stack.
        position: `"sinusoidal"` (the absolute signal) or `"shaw"` (Shaw
            relative attention in every self-attention instead).
        max_relative_position: Shaw's clipping distance.
        **kwargs: `name` and the other arguments of `keras.Model`.

    References:
        Vaswani et al. 2017, https://arxiv.org/abs/1706.03762; Shaw et al.
        2018, https://arxiv.org/abs/1803.02155
    """

    builder_name = "transformer_translation"
    family = "translation"

    def __init__(
        self,
        source_vocabulary_size,
        target_vocabulary_size,
        num_layers,
        hidden_dim,
        num_heads,
        feedforward_dim,
        dropout=0.0,
        share_embeddings=False,
        tie_output_projection=True,
        norm_first=False,
        position="sinusoidal",
        max_relative_position=16,
        **kwargs,
    ):
        hyperparameters = dict(
            source_vocabulary_size=source_vocabulary_size,
            target_vocabulary_size=target_vocabulary_size, num_layers=num_layers,
            hidden_dim=hidden_dim, num_heads=num_heads, feedforward_dim=feedforward_dim,
            dropout=dropout, share_embeddings=share_embeddings,
            tie_output_projection=tie_output_projection, norm_first=norm_first, position=position,
            max_relative_position=max_relative_position,
        )
        _check_hyperparameters(hyperparameters)
        self.source_embedding = _embedding(source_vocabulary_size, hidden_dim, "source_embedding")
        self.target_embedding = (
            self.source_embedding
            if share_embeddings
            else _embedding(target_vocabulary_size, hidden_dim, "target_embedding")
        )
        self.source_position = self.target_position = None
        if position == "sinusoidal":
            self.source_position = SinusoidalPositionEncoding(name="source_position")
            self.target_position = SinusoidalPositionEncoding(name="target_position")
        self.note_state = None
        block_kwargs = dict(feedforward_dim=feedforward_dim, dropout=dropout, norm_first=norm_first)
        self.encoder_blocks = [
            TransformerEncoderBlock(
                _self_attention(hyperparameters), name=f"encoder_block_{index}", **block_kwargs
            )
            for index in range(num_layers)
        ]
        self.decoder_blocks = [
            TransformerDecoderBlock(
                _self_attention(hyperparameters),
                cross_attention=_plain_attention(hyperparameters),
                name=f"decoder_block_{index}",
                **block_kwargs,
            )
            for index in range(num_layers)
        ]
        self.encoder_norm = self.decoder_norm = None
        if norm_first:
            self.encoder_norm = keras.layers.LayerNormalization(epsilon=1e-6, name="encoder_norm")
            self.decoder_norm = keras.layers.LayerNormalization(epsilon=1e-6, name="decoder_norm")
        if tie_output_projection:
            # float32, as `output_projection`: logits stay exact under mixed precision.
            self.output_projection = TiedOutputProjection(
                self.target_embedding, dtype="float32", name="logits"
            )
        else:
            self.output_projection = output_projection(target_vocabulary_size)

        source = keras.Input((None,), dtype="int32", name="source_tokens")
        target = keras.Input((None,), dtype="int32", name="target_tokens")
        encoder_outputs, source_mask = self.encode(source)
        logits, _, _ = self._decode(
            target, encoder_outputs=encoder_outputs, encoder_padding_mask=source_mask
        )
        kwargs.setdefault("name", "transformer_translation")
        super().__init__(
            {"source_tokens": source, "target_tokens": target}, logits, hyperparameters=hyperparameters, **kwargs
        )
        self.source_vocabulary_size = source_vocabulary_size
        self.vocabulary_size = target_vocabulary_size

    def _input_bounds(self):
        return {
            "source_tokens": ("token id", self.source_vocabulary_size),
            "target_tokens": ("token id", self.vocabulary_size),
        }

    @property
    def max_source_length(self):
        """The longest source the position signal covers, or `None`."""
        return getattr(self.source_position, "sequence_length", None)

    def encode(self, source_tokens, pad_id=0):
        """`(encoder_outputs, padding_mask)` of `source_tokens [batch, source]`."""
        padding_mask = ops.not_equal(source_tokens, pad_id)
        x = embed_tokens(self.source_embedding, source_tokens, self.source_position)
        for block in self.encoder_blocks:
            x = block(x, padding_mask=padding_mask)
        return (x if self.encoder_norm is None else self.encoder_norm(x)), padding_mask

    def attention_scores(self, source_tokens, decoder_tokens, block=-1):
        """Decoder block `block`'s attention probabilities for the decoder
        inputs `decoder_tokens`: `{"self": [batch, heads, target, target],
        "cross": [batch, heads, target, source]}`."""
        encoder_outputs, padding_mask = self.encode(source_tokens)
        return self._decoder_block_scores(
            decoder_tokens, block, encoder_outputs=encoder_outputs, encoder_padding_mask=padding_mask
        )

    def generate(
        self, source_tokens, max_new_tokens=None, *, beam_size=1, alpha=0.6, eos_id=1, temperature=0.0,
        top_k=0, top_p=1.0, seed=None, return_scores=False, **deprecated,
    ):
        """Translates `source_tokens` into at most `max_new_tokens` target
        tokens: greedy, sampled or beam search. The arguments and the result
        are those of `keras_selfattn.generation.translate_tokens`
        (`max_length=` is the old name of `max_new_tokens`).

        Example:

        >>> model = TranslationTransformer.from_preset(
        ...     "tiny", source_vocabulary_size=10, target_vocabulary_size=12, num_layers=1)
        >>> tuple(model.generate([[5, 6, 7, 0]], 4).shape)
        (1, 4)
        """
        from keras_selfattn.generation.sequences import generate_translation

        max_new_tokens = renamed_required_argument(max_new_tokens, "max_new_tokens", "max_length", deprecated)
        return generate_translation(
            self, source_tokens, max_new_tokens, beam_size=beam_size, alpha=alpha, eos_id=eos_id,
            temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, return_scores=return_scores,
        )


def transformer_translation(
    source_vocabulary_size=None, target_vocabulary_size=None, preset="base", **overrides
):
    """A `TranslationTransformer` of architecture preset `preset` (`"base"`
    or `"big"`, the paper's, or `"tiny"`), its hyperparameters replaced by
    `overrides` (the constructor's arguments). `source_vocab_size=` and
    `target_vocab_size=` are the old names of the vocabulary sizes."""
    source_vocabulary_size = renamed_argument(
        overrides, "source_vocab_size", "source_vocabulary_size", source_vocabulary_size
    )
    target_vocabulary_size = renamed_argument(
        overrides, "target_vocab_size", "target_vocabulary_size", target_vocabulary_size
    )
    hyperparameters = resolve_preset("transformer_translation", TRANSLATION_PRESETS, preset, overrides)
    return TranslationTransformer(source_vocabulary_size, target_vocabulary_size, **hyperparameters)


def _check_hyperparameters(hyperparameters):
    check_vocabulary_size("source_vocabulary_size", hyperparameters["source_vocabulary_size"])
    check_vocabulary_size("target_vocabulary_size", hyperparameters["target_vocabulary_size"])
    check_choice("position", hyperparameters["position"], POSITIONS)
    check_divisible_width(hyperparameters["hidden_dim"], hyperparameters["num_heads"])
    sizes = hyperparameters["source_vocabulary_size"], hyperparameters["target_vocabulary_size"]
    if hyperparameters["share_embeddings"] and sizes[0] != sizes[1]:
        raise ValueError(
            "`share_embeddings=True` needs `source_vocabulary_size == target_vocabulary_size`. "
            f"Received: {sizes[0]} and {sizes[1]}"
        )


def _embedding(vocabulary_size, width, name):
    initializer = keras.initializers.RandomNormal(stddev=width**-0.5)
    return keras.layers.Embedding(vocabulary_size, width, embeddings_initializer=initializer, name=name)


def _plain_attention(hyperparameters):
    key_dim = hyperparameters["hidden_dim"] // hyperparameters["num_heads"]
    return MultiHeadAttention(hyperparameters["num_heads"], key_dim, dropout=hyperparameters["dropout"])


def _self_attention(hyperparameters):
    """Self-attention for encoder and decoder alike: the decoder block asks
    for the causal mask when it calls it."""
    if hyperparameters["position"] == "sinusoidal":
        return _plain_attention(hyperparameters)
    return RelativeMultiHeadAttention(
        hyperparameters["num_heads"],
        hyperparameters["hidden_dim"] // hyperparameters["num_heads"],
        max_relative_position=hyperparameters["max_relative_position"],
        relative_type="shaw",
        dropout=hyperparameters["dropout"],
    )


register_presets(TranslationTransformer, TRANSLATION_PRESETS, builder="transformer_translation")
