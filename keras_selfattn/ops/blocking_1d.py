"""Cutting a sequence into query blocks and the memory windows they attend to.

Local 1D attention (Image Transformer) splits the length axis into query
blocks of `block_length` positions. Query block `b` covers positions
`[b * block_length, (b + 1) * block_length)` and attends to a memory window
covering `[b * block_length - left, (b + 1) * block_length + right)`:

- causal: `left = block_length`, `right = 0` (the previous block and its
  own block; `causal_window_mask` keeps keys at or before the query);
- not causal: `left = right = filter_width`.

Windows are built from reshapes, slices and one concatenation (no gather,
no `[length, length]` tensor): memory and compute O(length x window).
Positions outside the sequence are zero-filled; `window_validity` says which
window entries are real. The functions take the length `axis`, so the
sequence may carry other axes before it (heads, say). `block_attention` runs
the attention of every block to its window; the 2D layer uses it too, on the
memories `keras_selfattn.ops.blocking_2d` gathers.

Example:

>>> import numpy as np
>>> x = np.arange(5, dtype="float32")[None, :, None]  # [batch, length, 1]
>>> windows = memory_windows(pad_to_blocks(x, 2), 2, left=2, right=0)
>>> np.asarray(windows)[0, :, :, 0]  # the previous block, then its own
array([[0., 0., 0., 1.],
       [0., 1., 2., 3.],
       [2., 3., 4., 0.]], dtype=float32)
"""

import math

from keras import ops

from keras_selfattn.compat import pad
from keras_selfattn.ops.softmax_attention import attention_probabilities, softmax_attention


def num_blocks(length, block_length):
    """Number of blocks covering `length` positions (the last may be partial)."""
    return -(-length // block_length)


def pad_to_blocks(x, block_length, axis=1):
    """Zero-pads `axis` of `x` up to a multiple of `block_length`."""
    length = ops.shape(x)[axis]
    padding = (-length) % block_length
    return _pad_axis(x, axis, 0, padding)


def split_blocks(x, block_length, axis=1):
    """`[..., length, ...]` -> `[..., num_blocks, block_length, ...]` on `axis`.

    `length` must be a multiple of `block_length` (see `pad_to_blocks`).
    """
    axis = _positive_axis(x, axis)
    shape = list(ops.shape(x))
    new_shape = shape[:axis] + [-1, block_length] + shape[axis + 1 :]
    return ops.reshape(x, new_shape)


def merge_blocks(x, axis=1):
    """Inverse of `split_blocks`: merges `axis` and `axis + 1`."""
    axis = _positive_axis(x, axis)
    shape = list(ops.shape(x))
    new_shape = shape[:axis] + [-1] + shape[axis + 2 :]
    return ops.reshape(x, new_shape)


def memory_windows(x, block_length, left, right, axis=1):
    """The memory window of every query block along `axis`.

    Args:
        x: a tensor whose `axis` has a length that is a multiple of
            `block_length`.
        block_length: the query block size.
        left: how many positions before its block a window starts (>= 0).
        right: how many positions after its block a window ends; may be
            negative (a window that stops before its block ends).
        axis: the length axis.

    Returns:
        `[..., num_blocks, window_length, ...]` with
        `window_length = left + block_length + right`; window `b` holds
        positions `[b * block_length - left, (b + 1) * block_length + right)`,
        zeros outside the sequence.
    """
    window_length = window_size(block_length, left, right)
    axis = _positive_axis(x, axis)
    length = ops.shape(x)[axis]
    blocks = length // block_length
    chunks_per_window = num_blocks(window_length, block_length)
    # Window b is the start of chunks b .. b + chunks_per_window - 1 of the
    # sequence shifted right by `left`.
    padded_length = (blocks - 1 + chunks_per_window) * block_length
    shifted = _pad_axis(x, axis, left, 0)
    shifted = _fit_axis(shifted, axis, padded_length)
    chunks = split_blocks(shifted, block_length, axis)
    pieces = [_slice_axis(chunks, axis, offset, blocks) for offset in range(chunks_per_window)]
    windows = ops.concatenate(pieces, axis=axis + 1) if len(pieces) > 1 else pieces[0]
    return _slice_axis(windows, axis + 1, 0, window_length)


def window_size(block_length, left, right):
    """`left + block_length + right`, checked to be positive."""
    if left < 0:
        raise ValueError(f"`left` must be >= 0. Received: left={left}")
    size = left + block_length + right
    if size <= 0:
        raise ValueError(
            "A memory window must hold at least one position: "
            f"left + block_length + right = {size}."
        )
    return size


def window_validity(length, padded_length, block_length, left, right, key_mask=None):
    """Which memory window entries are real positions of the sequence.

    Args:
        length: the true sequence length (int or scalar tensor).
        padded_length: the length after `pad_to_blocks` (a multiple of
            `block_length`).
        block_length, left, right: as in `memory_windows`.
        key_mask: optional `[batch, length]` padding mask, `True` = real.

    Returns:
        A boolean `[num_blocks, window_length]` tensor, or
        `[batch, num_blocks, window_length]` with a `key_mask`.
    """
    valid = ops.arange(padded_length, dtype="int32") < length
    if key_mask is None:
        return ops.cast(memory_windows(valid, block_length, left, right, axis=0), "bool")
    valid = ops.logical_and(
        valid[None, :], _pad_axis(ops.cast(key_mask, "bool"), 1, 0, padded_length - length)
    )
    return ops.cast(memory_windows(valid, block_length, left, right, axis=1), "bool")


def window_positions(num_blocks, block_length, left, right):
    """`[num_blocks, window_length]` int32: the sequence position of each
    window entry, negative or past the end where the window leaves the
    sequence."""
    window_length = window_size(block_length, left, right)
    starts = ops.arange(num_blocks, dtype="int32")[:, None] * block_length - left
    return starts + ops.arange(window_length, dtype="int32")[None, :]


def scores_over_keys(block_scores, positions, num_keys):
    """Attention probabilities of query blocks over their memories, laid
    out over every key: zero for the keys outside a block's memory.

    Args:
        block_scores: `[batch, heads, num_blocks, block_length, memory_length]`.
        positions: int32 `[num_blocks, memory_length]`, the key position
            of each memory entry. Entries outside `[0, num_keys)` (padding)
            are dropped: their probabilities must be masked to zero. The
            positions of one block's memory are distinct.
        num_keys: the number of keys (int or scalar tensor).

    Returns:
        `[batch, heads, num_blocks, block_length, num_keys]`.
    """
    keys = ops.arange(num_keys, dtype="int32")
    is_entry = ops.equal(ops.expand_dims(positions, -1), keys)  # [blocks, memory, keys]
    in_memory = ops.any(is_entry, axis=1)[None, None, :, None, :]
    entry = ops.argmax(ops.cast(is_entry, "int32"), axis=1)[None, None, :, None, :]
    gathered = ops.take_along_axis(block_scores, ops.cast(entry, "int32"), axis=-1)
    return ops.where(in_memory, gathered, ops.zeros_like(gathered))


def window_relative_positions(block_length, left, right):
    """`[block_length, window_length]` int32: key position minus query position.

    Entry `[i, j]` is the distance from query `i` of a block to entry `j` of
    its memory window; it is the same for every block, which is what a
    relative-position bias or a causal mask inside the window needs.
    """
    window_length = window_size(block_length, left, right)
    queries = ops.arange(block_length, dtype="int32")[:, None]
    keys = ops.arange(window_length, dtype="int32")[None, :] - left
    return keys - queries


def causal_window_mask(block_length, left, right):
    """`[block_length, window_length]`: `True` where the key is not after the query."""
    return window_relative_positions(block_length, left, right) <= 0


def _positive_axis(x, axis):
    return axis % len(x.shape)


def _pad_axis(x, axis, before, after):
    axis = _positive_axis(x, axis)
    widths = [(0, 0)] * len(x.shape)
    widths[axis] = (before, after)
    return pad(x, widths)


def _slice_axis(x, axis, start, size):
    """`x` restricted to `[start, start + size)` along `axis`."""
    axis = _positive_axis(x, axis)
    shape = ops.shape(x)
    starts = [0] * len(x.shape)
    starts[axis] = start
    sizes = list(shape)
    sizes[axis] = size
    return ops.slice(x, starts, sizes)


def _fit_axis(x, axis, length):
    """Crops or zero-pads the end of `axis` to exactly `length`."""
    current = ops.shape(x)[axis]
    if isinstance(current, int) and isinstance(length, int):
        if current >= length:
            return _slice_axis(x, axis, 0, length)
        return _pad_axis(x, axis, 0, length - current)
    x = _pad_axis(x, axis, 0, ops.maximum(length - current, 0))
    return _slice_axis(x, axis, 0, length)


def block_attention(
    query_blocks,
    key_windows,
    value_windows,
    mask=None,
    bias=None,
    scale=None,
    dropout=None,
    return_probabilities=False,
):
    """Dot-product attention of every query block to its own memory window.

    Heads come before blocks so that the two products are plain batched
    matrix products, with no transposes of the windows. The mask factors
    carry no heads axis; their logical AND stays head-free, so small, and
    goes to `keras_selfattn.ops.softmax_attention` as its `mask` (a query
    with no key to attend to gets zeros), the bias as its `bias`.

    Args:
        query_blocks: `[batch, heads, num_blocks, block_length, head_dim]`.
        key_windows: `[batch, heads, num_blocks, window_length, head_dim]`.
        value_windows: `[batch, heads, num_blocks, window_length, value_dim]`.
        mask: optional boolean tensor, or tuple of boolean tensors whose
            logical AND is the mask, each broadcastable to
            `[batch, num_blocks, block_length, window_length]`, `True` = may
            attend (the same for every head). Factors such as a causal
            `[block_length, window_length]` mask and a validity
            `[num_blocks, 1, window_length]` mask stay small.
        bias: optional additive logits broadcastable to
            `[batch, heads, num_blocks, block_length, window_length]` (for
            example a relative-position bias built from
            `window_relative_positions`).
        scale: logit scale; defaults to `1 / sqrt(head_dim)`.
        dropout: optional callable applied to the attention probabilities.
        return_probabilities: whether to return the probabilities too.

    Returns:
        `[batch, heads, num_blocks, block_length, value_dim]`; with
        `return_probabilities`, `(output, probabilities)`, the probabilities
        `[batch, heads, num_blocks, block_length, window_length]` in the
        dtype of `value_windows`, masked entries 0, before dropout.

    Example:

    >>> import numpy as np
    >>> query = np.ones((1, 1, 2, 2, 4), "float32")  # [batch, heads, blocks, 2, dim]
    >>> key = np.ones((1, 1, 2, 3, 4), "float32")  # windows of 3 positions
    >>> value = np.arange(24, dtype="float32").reshape(1, 1, 2, 3, 4)
    >>> causal = causal_window_mask(2, left=1, right=0)  # [queries, window]
    >>> output = block_attention(query, key, value, mask=causal)
    >>> np.asarray(output)[0, 0, 1, 0]  # equal logits: the mean of 2 values
    array([14., 15., 16., 17.], dtype=float32)
    """
    if scale is None:
        scale = 1.0 / math.sqrt(query_blocks.shape[-1])
    query_blocks = ops.multiply(query_blocks, ops.cast(scale, query_blocks.dtype))
    factors = [] if mask is None else list(mask) if isinstance(mask, (tuple, list)) else [mask]
    # The heads axis sits before the blocks: [..., 1, blocks?, queries?, keys].
    factors = [_insert_heads_axis(ops.cast(factor, "bool")) for factor in factors]
    allowed = _logical_and_all(factors) if factors else None
    if not return_probabilities:
        return softmax_attention(
            query_blocks, key_windows, value_windows, bias=bias, mask=allowed, dropout=dropout
        )
    probabilities = attention_probabilities(query_blocks, key_windows, bias, allowed)
    probabilities = ops.cast(probabilities, value_windows.dtype)
    weights = probabilities if dropout is None else dropout(probabilities)
    return ops.einsum("...qk,...kd->...qd", weights, value_windows), probabilities


def _insert_heads_axis(factor):
    """A mask factor of rank <= 4 (`[batch, blocks, queries, keys]` aligned
    right) gets a heads axis of size 1 before its blocks axis."""
    rank = len(factor.shape)
    if rank <= 2:
        return factor  # `[queries, keys]` or `[keys]`: broadcasts as is.
    return ops.expand_dims(factor, -4)


def _logical_and_all(masks):
    merged = masks[0]
    for mask in masks[1:]:
        merged = ops.logical_and(merged, mask)
    return merged
