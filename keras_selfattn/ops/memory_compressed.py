"""Memory-compressed attention's keys: a sequence reduced in blocks.

Memory-compressed attention (Liu et al. 2018; tensor2tensor's
`multihead_self_attention_reduced` with `conv_elems_1d`) attends to a
shorter memory: the sequence cut into blocks of `factor` positions, each
block reduced to one vector by a strided convolution (kernel = stride =
`factor`, as many output as input channels). Block `j` covers positions
`[j * factor, (j + 1) * factor)`; a last partial block is zero-padded.

The memory has `1 + num_blocks` entries. Entry 0 is position 0 reduced on
its own (the first block with its other positions zeroed), so that under
the causal rule a query that sees no complete block yet still has a key;
tensor2tensor puts the raw position 0 there for the same reason. Entry
`1 + j` is block `j`.

The reduction is linear: `kernel[t % factor]` times position `t`, summed
over a block, plus the bias. `position_contributions` gives those terms
one position at a time (what a decoding cache stores) and
`memory_from_contributions` sums them into the memory, so that
`compressed_memory(x, kernel, bias)` equals
`memory_from_contributions(position_contributions(x, kernel), factor) + bias`.

Example:

>>> import numpy as np
>>> x = np.arange(5, dtype="float32")[None, :, None]  # [batch, length, 1]
>>> kernel = np.ones((2, 1, 1), "float32")  # sums each block of 2
>>> np.asarray(compressed_memory(x, kernel))[0, :, 0].tolist()
[0.0, 1.0, 5.0, 4.0]
>>> np.asarray(compressed_visibility(5, 5, 2)).astype(int).tolist()
[[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 0]]
"""

from keras import ops

from keras_selfattn.ops.blocking_1d import num_blocks, pad_to_blocks, split_blocks


def num_compressed_keys(length, factor):
    """`1 + ceil(length / factor)`: the memory entries of `length` positions."""
    return 1 + num_blocks(length, factor)


def compress_blocks(x, kernel, bias=None):
    """The strided convolution of `x` over its length, one output per block.

    Args:
        x: `[batch, length, features]`; the length is zero-padded up to a
            multiple of `factor`.
        kernel: `[factor, features, out_features]`.
        bias: optional `[out_features]`.

    Returns:
        `[batch, ceil(length / factor), out_features]`.
    """
    factor = kernel.shape[0]
    blocks = split_blocks(pad_to_blocks(x, factor), factor)  # [batch, blocks, factor, features]
    reduced = ops.einsum("bnkf,kfg->bng", blocks, ops.cast(kernel, x.dtype))
    return _add_bias(reduced, bias)


def compressed_memory(x, kernel, bias=None):
    """The memory of `x`: position 0 reduced on its own, then every block.

    Args:
        x: `[batch, length, features]`, `length >= 1`.
        kernel, bias: as in `compress_blocks`.

    Returns:
        `[batch, 1 + ceil(length / factor), out_features]`.
    """
    first = ops.einsum("btf,fg->btg", x[:, :1], ops.cast(kernel[0], x.dtype))
    return ops.concatenate([_add_bias(first, bias), compress_blocks(x, kernel, bias)], axis=1)


def position_contributions(x, kernel, first_position=0):
    """Each position's term of its block's reduction, without the bias.

    Args:
        x: `[batch, steps, features]`, positions `first_position ...`.
        kernel: `[factor, features, out_features]`.
        first_position: absolute position of `x[:, 0]` (int or scalar int tensor).

    Returns:
        `[batch, steps, out_features]`: `x[:, t] @ kernel[(first_position + t) % factor]`.
    """
    factor = kernel.shape[0]
    positions = ops.arange(ops.shape(x)[1], dtype="int32") + ops.cast(first_position, "int32")
    rows = ops.take(ops.cast(kernel, x.dtype), positions % factor, axis=0)  # [steps, f, g]
    return ops.einsum("btf,tfg->btg", x, rows)


def memory_from_contributions(contributions, factor):
    """The memory (without the bias) from per-position contributions.

    Args:
        contributions: `[batch, length, ...]`, from `position_contributions`
            (or those terms already projected, `[batch, length, heads, dim]`).
        factor: the block size.

    Returns:
        `[batch, 1 + ceil(length / factor), ...]`: position 0's term, then
        the sum over each block.
    """
    block_sums = ops.sum(split_blocks(pad_to_blocks(contributions, factor), factor), axis=2)
    return ops.concatenate([contributions[:, :1], block_sums], axis=1)


def compressed_visibility(query_length, length, factor, query_offset=0):
    """The causal rule over the memory of `length` positions.

    Query row `i` stands at position `query_offset + i`. Entry 0 (position
    0) is visible to every query; block `j` only once every position in it
    is at or before the query: `(j + 1) * factor - 1 <= query_offset + i`.
    A last partial block never is.

    Returns:
        A boolean `[query_length, 1 + ceil(length / factor)]` mask.
    """
    query_positions = ops.arange(query_length, dtype="int32") + ops.cast(query_offset, "int32")
    block_ends = (ops.arange(num_blocks(length, factor), dtype="int32") + 1) * factor - 1
    complete = ops.less_equal(block_ends[None, :], query_positions[:, None])
    first = ops.ones_like(query_positions[:, None], dtype="bool")
    return ops.concatenate([first, complete], axis=1)


def compressed_padding_mask(padding_mask, factor):
    """Which memory entries hold a real position.

    Args:
        padding_mask: `[batch, length]`, `True` for real positions.
        factor: the block size.

    Returns:
        `[batch, 1 + ceil(length / factor)]`: entry 0 is real where position
        0 is; a block where any of its positions is (a block of padding
        only is masked).
    """
    real = ops.cast(padding_mask, "int32")
    block_real = ops.max(split_blocks(pad_to_blocks(real, factor), factor), axis=2)
    return ops.cast(ops.concatenate([real[:, :1], block_real], axis=1), "bool")


def _add_bias(x, bias):
    return x if bias is None else x + ops.cast(bias, x.dtype)
