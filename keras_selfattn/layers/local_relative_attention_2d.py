"""Local (or global) 2D self-attention with per-axis relative logits."""

import keras
from keras import ops

from keras_selfattn.layers.argument_checks import check_non_negative_int
from keras_selfattn.layers.local_attention_2d import LocalAttention2D, checked_pair
from keras_selfattn.layers.relation_table_weights import add_relation_table, initializer_config
from keras_selfattn.ops.relation_tables import heads_first
from keras_selfattn.ops.relative_2d import (
    block_relative_offsets_2d,
    clipped_offset_rows,
    relative_logits_2d,
)


@keras.saving.register_keras_serializable(package="keras_selfattn")
class LocalRelativeAttention2D(LocalAttention2D):
    """`LocalAttention2D` with 2D relative logits, one table per image axis.

    Every query block attends to its memory exactly as in `LocalAttention2D`
    (unmasked: the window centred on the block; `use_causal_mask=True`: the
    causal memory in block-raster order, with the same static cache for
    step-by-step decoding). The logit of query pixel `(y, x)` and key pixel
    `(y', x')` gains the relative term of Bello et al. (2019):
    `logits = (q . k + q . r^H[dy] + q . r^W[dx]) / sqrt(key_dim)`, with the
    offsets `dy = y' - y`, `dx = x' - x` each clipped to
    `[-max_relative_position[i], max_relative_position[i]]` (Shaw et al.'s
    clipping). With no absolute position signal the layer is translation
    equivariant: an image shifted by a multiple of `block_shape` gives the
    shifted output wherever the windows stay inside the image.

    Tables: `relative_height_embeddings` `(2 kh + 1, key_dim)` and
    `relative_width_embeddings` `(2 kw + 1, key_dim)`, `(kh, kw) =
    max_relative_position`, shared by the heads (Bello et al.), or
    `(num_heads, 2 k + 1, key_dim)` each with
    `heads_share_relative_embedding=False`; row `r` stands for the clipped
    offset `r - k`. There is no value table.

    How it is computed: each query is dotted with every row of each table
    (`[.., queries, 2 k + 1]`) and each query-key pair of a block picks its
    entries by its clipped `dy` and `dx`, which the blocking fixes
    statically (`keras_selfattn.ops.relative_2d`); no `[.., query, key,
    key_dim]` tensor is formed. A cached step picks the row of its pixel's
    place in its block.

    Global 2D attention: one query block covering the image,
    `block_shape=(height, width)` with `memory_flange=(0, 0)`; masked, that
    is raster order over the whole image (as for `LocalAttention2D`).

    Sub-pixel images (channels folded into the width) work unchanged; `dx`
    then counts sub-pixels.

    Shapes: `query`, `value`, `key` `[batch, height, width, channels]`; the
    output is `[batch, height, width, output_dim]`.

    Args:
        num_heads: number of attention heads.
        key_dim: size of each head for query and key.
        block_shape: `(qh, qw)`, positive integers: the query block
            (`query_shape=` is its old name, with a `DeprecationWarning`).
        memory_flange: `(fh, fw)`, non-negative integers.
        grid_shape: `(height, width)` of the images decoded with a cache.
        max_relative_position: `(kh, kw)`, non-negative integers: the
            clipping offsets per axis. `None` is `(qh - 1 + fh, qw - 1 + fw)`,
            every offset a block's memory holds.
        heads_share_relative_embedding: whether one table per axis serves
            every head (default `True`).
        relative_embeddings_initializer: initializer of the tables; `None`
            is a normal distribution with standard deviation `key_dim**-0.5`.
        **kwargs: the other `LocalAttention2D` arguments (`value_dim`,
            `dropout`, `use_bias`, `output_shape`, `use_gate`,
            initializers, ...).

    Call arguments:
        As `LocalAttention2D`: `query`, `value`, `key`, `query_mask`,
        `value_mask`, `key_mask`, `use_causal_mask`, `cache` (with
        `cache_update_index`, the block-raster position of the step's
        pixel), `return_attention_scores` (the probabilities, relative
        terms included, `[batch, num_heads, height * width, height *
        width]` over the pixels in raster order, zero outside each query's
        memory; with a cache `[batch, num_heads, 1, height * width]`),
        `training`.

    Returns:
        As `LocalAttention2D`: `output` `[batch, height, width,
        output_dim]`, then the scores if asked, then the cache if given.

    Example:

    >>> import numpy as np
    >>> layer = LocalRelativeAttention2D(num_heads=2, key_dim=4, block_shape=(2, 2),
    ...                                  memory_flange=(1, 1))
    >>> image = np.random.rand(1, 4, 6, 8).astype("float32")
    >>> tuple(layer(image, use_causal_mask=True).shape)
    (1, 4, 6, 8)
    >>> tuple(layer.relative_height_embeddings.shape)  # offsets -2 .. 2
    (5, 4)
    >>> global_2d = LocalRelativeAttention2D(num_heads=2, key_dim=4, block_shape=(4, 6))
    >>> tuple(global_2d(image).shape), tuple(global_2d.relative_width_embeddings.shape)
    ((1, 4, 6, 8), (11, 4))

    References:
        - [Bello et al., 2019, Attention Augmented Convolutional Networks](
          https://arxiv.org/abs/1904.09925)
        - [Shaw et al., 2018](https://arxiv.org/abs/1803.02155)
        - [Parmar et al., 2018, Image Transformer](https://arxiv.org/abs/1802.05751)
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        block_shape=None,
        memory_flange=(0, 0),
        grid_shape=None,
        max_relative_position=None,
        heads_share_relative_embedding=True,
        relative_embeddings_initializer=None,
        **kwargs,
    ):
        super().__init__(num_heads, key_dim, block_shape, memory_flange, grid_shape, **kwargs)
        if max_relative_position is None:
            max_relative_position = tuple(
                size - 1 + flange for size, flange in zip(self.block_shape, self.memory_flange)
            )
        self.max_relative_position = checked_pair(
            "max_relative_position", max_relative_position, check_non_negative_int
        )
        if not isinstance(heads_share_relative_embedding, bool):
            raise ValueError(
                "`heads_share_relative_embedding` must be True or False. Received: "
                f"heads_share_relative_embedding={heads_share_relative_embedding!r}"
            )
        self.heads_share_relative_embedding = heads_share_relative_embedding
        self.relative_embeddings_initializer = relative_embeddings_initializer
        self.relative_height_embeddings = None
        self.relative_width_embeddings = None

    def build(self, query_shape, value_shape=None, key_shape=None):
        super().build(query_shape, value_shape, key_shape)
        height, width = self.max_relative_position
        self.relative_height_embeddings = self._add_table("relative_height_embeddings", height)
        self.relative_width_embeddings = self._add_table("relative_width_embeddings", width)

    def _add_table(self, name, max_offset):
        return add_relation_table(
            self, name, 2 * max_offset + 1, self.key_dim, self.heads_share_relative_embedding
        )

    def _offset_rows(self, causal):
        """Table rows `([qh * qw, memory], [qh * qw, memory])` of each
        query-memory pair of a block, height then width."""
        offsets = block_relative_offsets_2d(self.block_shape, self.memory_flange, causal)
        return tuple(
            clipped_offset_rows(offset, k) for offset, k in zip(offsets, self.max_relative_position)
        )

    def _relative_logits(self, query, height_rows, width_rows):
        query = ops.multiply(query, ops.cast(self.logit_scale, query.dtype))
        return relative_logits_2d(
            query,
            self.relative_height_embeddings,
            self.relative_width_embeddings,
            height_rows,
            width_rows,
        )

    def _block_bias(self, query_blocks, causal):
        return self._relative_logits(query_blocks, *self._offset_rows(causal))

    def _step_bias(self, query, position_in_block):
        height_rows, width_rows = (
            ops.take(rows, position_in_block, axis=0)[None] for rows in self._offset_rows(True)
        )
        return self._relative_logits(heads_first(query), height_rows, width_rows)

    def get_config(self):
        config = super().get_config()
        initializer = initializer_config(self.relative_embeddings_initializer)
        config.update(
            max_relative_position=self.max_relative_position,
            heads_share_relative_embedding=self.heads_share_relative_embedding,
            relative_embeddings_initializer=initializer,
        )
        return config

