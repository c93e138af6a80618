"""Local 2D self-attention in query blocks with memory flanges (Image Transformer)."""

import keras
from keras import ops

from keras_selfattn.layers.argument_checks import check_non_negative_int, check_positive_int
from keras_selfattn.layers.local_attention_base import LocalAttentionBase, renamed_block_shape
from keras_selfattn.ops.blocking_1d import scores_over_keys
from keras_selfattn.ops.blocking_2d import (
    block_raster_index,
    blocks_to_image,
    causal_memory_mask_2d,
    gather_pixels,
    image_to_blocks,
    inside_image,
    memory_pixels_2d,
    memory_positions_2d,
    pad_image_to_blocks,
    padded_grid_shape,
    pixel_validity,
)


@keras.saving.register_keras_serializable(package="keras_selfattn")
class LocalAttention2D(LocalAttentionBase):
    """Multi-head self-attention restricted to 2D query blocks and their flanges.

    The image is cut into query blocks of `block_shape = (qh, qw)` pixels
    (padded to multiples of the block inside the layer, the padding masked).
    With `memory_flange = (fh, fw)`, a query in block `(R, C)` attends to:

    - by default: the `(qh + 2 fh) x (qw + 2 fw)` window centred on its
      block, clipped to the image;
    - with `use_causal_mask=True` (generation in block-raster order: blocks
      in raster order, pixels inside a block in raster order): the `fh` rows
      above the block over columns `[C qw - fw, (C + 1) qw + fw)`, the `fw`
      columns left of the block in the block's rows, and the pixels of its
      own block up to itself in raster order. Nothing else.

    Memory and compute are O(pixels x memory), with memory
    `(qh + 2 fh)(qw + 2 fw)` or, causal, `fh (qw + 2 fw) + qh (qw + fw)`
    positions per query block; no `[pixels, pixels]` tensor is formed.
    Sub-pixel images (channels folded into the width) work unchanged. One
    layer may be called both ways: the weights are those of
    `MultiHeadAttention` (sublayers `query`, `key`, `value`,
    `attention_output`) on the flattened pixels.

    Causal attention decodes pixel by pixel in block-raster order with the
    static cache of `MultiHeadAttention`: `cache`
    `[batch, 2, max_length, num_heads, key_dim]` is indexed by block-raster
    position in the image padded to multiples of `block_shape`
    (`max_length >= padded height x padded width`). A step call takes the
    pixel `[batch, 1, 1, channels]`, its block-raster position as
    `cache_update_index` and `use_causal_mask=True`; it gathers from the
    cache only the positions of that pixel's memory, in the grid of the
    constructor's `grid_shape`.

    Shapes: `query`, `value`, `key` `[batch, height, width, channels]`, one
    image size; the output is `[batch, height, width, output_dim]`.

    Args:
        num_heads: number of attention heads.
        key_dim: size of each head for query and key.
        block_shape: `(qh, qw)`, positive integers: the query block.
            `query_shape=` is its old name (a `DeprecationWarning`).
        memory_flange: `(fh, fw)`, non-negative integers, at most the image's
            height and width.
        grid_shape: `(height, width)` of the images the layer decodes with a
            cache (a step's input is one pixel, so the grid cannot be read
            from it); needed for cached steps only. When given, full calls
            must have that size too.
        value_dim: size of each head for value; defaults to `key_dim`.
        dropout: dropout rate on the attention probabilities.
        use_bias: whether the projections have biases.
        output_shape: output feature shape; defaults to the query's channels.
        kernel_initializer, bias_initializer, kernel_regularizer,
        bias_regularizer, activity_regularizer, kernel_constraint,
        bias_constraint, use_gate, seed: as in `keras.layers.MultiHeadAttention`.
        flash_attention: must be `None` (block attention has no fused kernel).
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `[batch, height, width, channels]`; with a cache, one pixel
            `[batch, 1, 1, channels]`.
        value: optional, shaped like `query`; defaults to `query`.
        key: optional, shaped like `value`; defaults to `value`.
        query_mask, value_mask, key_mask: optional `[batch, height, width]`
            padding masks, `True` for real pixels. A masked query outputs the
            projection of zeros.
        attention_mask, attention_bias: not supported (block attention forms
            no `[query, key]` logits); anything but `None` raises `ValueError`.
        cache: optional `[batch, 2, max_length, num_heads, key_dim]` cache
            (with `use_causal_mask=True` only).
        cache_update_index: with a cache, the block-raster position of the
            pixel (int or scalar int tensor); see
            `keras_selfattn.ops.blocking_2d.block_raster_index`.
        return_attention_scores: whether to also return the attention
            probabilities, dense over the pixels in raster order (row-major,
            as the layer flattens them): `[batch, num_heads, height * width,
            height * width]`, query pixels then key pixels, zero outside each
            query's memory and at masked keys, before dropout (a fully masked
            query's row is zeros). Reshape to `[batch, num_heads, height,
            width, height, width]` for the layout of
            `keras.layers.MultiHeadAttention` with `attention_axes=(1, 2)`.
            Only these scores form a `[pixels, pixels]` tensor. With a cache:
            `[batch, num_heads, 1, height * width]` over the pixels of the
            `grid_shape` image in raster order (not the cache's block-raster
            positions), the row the full causal pass gives that pixel.
        training: whether dropout is active.
        use_causal_mask: whether a pixel attends only to the pixels before it
            in block-raster order (in its causal memory). Defaults to `False`.

    Returns:
        `output` `[batch, height, width, output_dim]`; then the scores if
        `return_attention_scores`; then the updated cache if `cache` is
        given: `output`, `(output, scores)`, `(output, cache)` or
        `(output, scores, cache)`.

    Example:

    >>> import numpy as np
    >>> from keras import ops
    >>> from keras_selfattn.ops.blocking_2d import block_raster_index
    >>> layer = LocalAttention2D(num_heads=2, key_dim=4, block_shape=(2, 2),
    ...                          memory_flange=(1, 1), grid_shape=(4, 4))
    >>> image = np.random.rand(1, 4, 4, 8).astype("float32")
    >>> tuple(layer(image).shape)  # each 2 x 2 block attends to its 4 x 4 window
    (1, 4, 4, 8)
    >>> _, scores = layer(image, return_attention_scores=True)
    >>> tuple(scores.shape)  # [batch, heads, pixels, pixels], raster order
    (1, 2, 16, 16)
    >>> full = ops.convert_to_numpy(layer(image, use_causal_mask=True))
    >>> cache = np.zeros((1, 2, 16, 2, 4), "float32")
    >>> # Block-raster order: the 2 x 2 blocks in raster order, pixels inside each.
    >>> order = sorted(((r, c) for r in range(4) for c in range(4)),
    ...                key=lambda p: int(block_raster_index(p[0], p[1], 4, (2, 2))))
    >>> for r, c in order:
    ...     step, cache = layer(image[:, r:r + 1, c:c + 1], cache=cache,
    ...                         cache_update_index=int(block_raster_index(r, c, 4, (2, 2))),
    ...                         use_causal_mask=True)
    >>> bool(np.allclose(ops.convert_to_numpy(step)[0, 0, 0], full[0, 3, 3], atol=1e-5))
    True

    References:
        - [Parmar et al., 2018, Image Transformer](https://arxiv.org/abs/1802.05751)
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    _input_rank = 4
    _input_layout = "[batch, height, width, channels]"

    def __init__(
        self, num_heads, key_dim, block_shape=None, memory_flange=(0, 0), grid_shape=None, **kwargs
    ):
        block_shape = renamed_block_shape(kwargs, block_shape, type(self).__name__)
        block_shape = checked_pair("block_shape", block_shape, check_positive_int)
        memory_flange = checked_pair("memory_flange", memory_flange, check_non_negative_int)
        if grid_shape is not None:
            grid_shape = checked_pair("grid_shape", grid_shape, check_positive_int)
        super().__init__(num_heads, key_dim, **kwargs)
        self.block_shape = block_shape
        self.memory_flange = memory_flange
        self.grid_shape = grid_shape
        if grid_shape is not None:
            self._check_flange(grid_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            block_shape=self.block_shape, memory_flange=self.memory_flange, grid_shape=self.grid_shape
        )
        return config

    @classmethod
    def from_config(cls, config):
        # Configs saved before the rename hold `query_shape`: they load as they are.
        config = dict(config)
        if "query_shape" in config and "block_shape" not in config:
            config["block_shape"] = config.pop("query_shape")
        return super().from_config(config)

    @property
    def query_shape(self):
        """The old name of `block_shape`, read-only."""
        return self.block_shape

    def _to_sequence(self, x):
        """Pixels in raster order, `[batch, height * width, channels]`."""
        return ops.reshape(x, [-1, x.shape[1] * x.shape[2], x.shape[3]])

    def _check_local_inputs(self, query, value, key, cache):
        for name, tensor in (("query", query), ("value", value), ("key", key)):
            self._check_input_rank(name, tensor.shape)
            if None in tensor.shape[1:3]:
                raise ValueError(
                    f"`{name}` needs a known height and width. "
                    f"Received: {name}.shape={tuple(tensor.shape)}"
                )
        if cache is not None:
            if tuple(query.shape[1:3]) != (1, 1):
                raise ValueError(
                    "With a `cache`, `query` is one pixel `[batch, 1, 1, channels]`. "
                    f"Received: query.shape={tuple(query.shape)}"
                )
            if self.grid_shape is None:
                raise ValueError(
                    "A cached step needs the size of the images being decoded: construct "
                    "the layer with `grid_shape=(height, width)`."
                )
            self._check_cache_length(cache, self.grid_shape)
            return
        if not tuple(value.shape[1:3]) == tuple(key.shape[1:3]) == tuple(query.shape[1:3]):
            raise ValueError(
                "Local self-attention needs `query`, `value` and `key` of one "
                f"image size. Received: query.shape={tuple(query.shape)}, "
                f"value.shape={tuple(value.shape)}, key.shape={tuple(key.shape)}"
            )
        grid_shape = tuple(query.shape[1:3])
        if self.grid_shape is not None and grid_shape != self.grid_shape:
            raise ValueError(
                f"This layer decodes images of `grid_shape` {self.grid_shape}. "
                f"Received: query.shape={tuple(query.shape)}"
            )
        self._check_flange(grid_shape)

    def _check_flange(self, grid_shape):
        for axis, flange, size in zip(("height", "width"), self.memory_flange, grid_shape):
            if flange > size:
                raise ValueError(
                    f"`memory_flange` must not exceed the image's {axis} ({size}). "
                    f"Received: memory_flange={self.memory_flange}, "
                    f"grid shape {tuple(grid_shape)}"
                )

    def _check_cache_length(self, cache, grid_shape):
        padded_height, padded_width = padded_grid_shape(*grid_shape, self.block_shape)
        needed = padded_height * padded_width
        if cache.shape[2] is not None and cache.shape[2] < needed:
            raise ValueError(
                f"`cache` must hold the {needed} block-raster positions of the "
                f"{grid_shape} grid padded to multiples of `block_shape` "
                f"{self.block_shape}. Received: cache.shape={tuple(cache.shape)}"
            )

    def _full_attention(
        self, query, key, value, query_mask, key_mask, grid_shape, causal, training, return_scores
    ):
        heads = self.num_heads
        query_blocks = _unfold_heads(
            image_to_blocks(
                pad_image_to_blocks(self._head_images(query, grid_shape), self.block_shape),
                self.block_shape,
            ),
            heads,
        )
        positions = memory_positions_2d(grid_shape, self.block_shape, self.memory_flange, causal)
        key_memory, value_memory = (
            _unfold_heads(gather_pixels(self._head_images(x, grid_shape), positions), heads)
            for x in (key, value)
        )
        masks = (
            pixel_validity(positions, grid_shape, key_mask),
            causal_memory_mask_2d(self.block_shape, self.memory_flange) if causal else None,
            None if query_mask is None else image_to_blocks(
                pad_image_to_blocks(ops.cast(query_mask, "bool"), self.block_shape),
                self.block_shape,
            ),
        )
        output, scores = self._blocked_attention(
            query_blocks, key_memory, value_memory, masks, training, return_scores,
            bias=self._block_bias(query_blocks, causal),
        )
        output = self._blocks_to_raster(output, grid_shape)
        if scores is not None:
            pixels = grid_shape[0] * grid_shape[1]
            scores = self._blocks_to_raster(scores_over_keys(scores, positions, pixels), grid_shape)
        return ops.transpose(output, (0, 2, 1, 3)), scores

    def _blocks_to_raster(self, blocks, grid_shape):
        """`[batch, heads, blocks, qh * qw, n]` -> `[batch, heads, H * W, n]`,
        the query pixels in raster order."""
        height, width = grid_shape
        padded_shape = padded_grid_shape(height, width, self.block_shape)
        image = ops.reshape(blocks, [-1] + list(blocks.shape[2:]))  # [batch * heads, blocks, ...]
        image = blocks_to_image(image, padded_shape, self.block_shape)[:, :height, :width]
        return ops.reshape(image, [-1, self.num_heads, height * width, image.shape[-1]])

    def _block_bias(self, query_blocks, causal):
        """Additive logits `[batch, heads, blocks, qh * qw, memory]` for the
        full pass, or `None`; a subclass's relative term."""
        return None

    def _step_bias(self, query, position_in_block):
        """Additive logits `[batch, heads, 1, memory]` for a cached step's
        query `[batch, 1, heads, dim]` at `position_in_block` (raster order
        in its block), or `None`."""
        return None

    def _head_images(self, sequence, grid_shape):
        """Projected `[batch, H * W, heads, dim]` -> `[batch * heads, H, W, dim]`.

        Heads are folded into the batch so that blocks are cut per head and
        attention runs as batched matrix products without transposes.
        """
        heads_first = ops.transpose(sequence, (0, 2, 1, 3))
        return ops.reshape(heads_first, [-1, *grid_shape, sequence.shape[-1]])

    def _cached_attention(
        self, query, key_cache, value_cache, cache_update_index, query_mask, training, return_scores
    ):
        height, width = self.grid_shape
        padded_height, padded_width = padded_grid_shape(height, width, self.block_shape)
        query_height, query_width = self.block_shape
        block_size = query_height * query_width
        block = cache_update_index // block_size
        block_row = block // (padded_width // query_width)
        block_column = block % (padded_width // query_width)

        rows, columns = memory_pixels_2d(
            block_row, block_column, self.block_shape, self.memory_flange, causal=True
        )
        inside = inside_image(rows, columns, (height, width))
        positions = block_raster_index(
            ops.clip(rows, 0, padded_height - 1),
            ops.clip(columns, 0, padded_width - 1),
            padded_width,
            self.block_shape,
        )
        keys = ops.take(key_cache, positions, axis=1)
        values = ops.take(value_cache, positions, axis=1)
        causal = ops.take(
            causal_memory_mask_2d(self.block_shape, self.memory_flange),
            cache_update_index % block_size,
            axis=0,
        )
        mask = ops.logical_and(inside, causal)[None, None, :]  # [1, query, memory]
        bias = self._step_bias(query, cache_update_index % block_size)
        raster_positions = ops.where(inside, rows * width + columns, height * width)
        return self._step_attention(
            query,
            keys,
            values,
            mask,
            query_mask,
            training,
            bias=bias,
            key_positions=raster_positions if return_scores else None,
            num_keys=height * width,
        )

    def _scores_shape(self, query, cache):
        if cache is None:
            pixels = query.shape[1] * query.shape[2]
            return (query.shape[0], self.num_heads, pixels, pixels)
        return (query.shape[0], self.num_heads, 1, self.grid_shape[0] * self.grid_shape[1])


def _unfold_heads(blocks, heads):
    """`[batch * heads, blocks, n, dim]` -> `[batch, heads, blocks, n, dim]`."""
    return ops.reshape(blocks, [-1, heads] + list(blocks.shape[1:]))


def checked_pair(name, value, check):
    """`value` as a `(height, width)` tuple of two ints that pass `check`
    (`check_positive_int` or `check_non_negative_int`); else a `ValueError`."""
    kind = "positive" if check is check_positive_int else "non-negative"
    error = ValueError(
        f"`{name}` must be a pair of {kind} integers (height, width). Received: {name}={value!r}"
    )
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise error
    try:
        return tuple(check(name, item) for item in value)
    except ValueError:
        raise error from None
