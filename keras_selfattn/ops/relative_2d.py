"""2D relative logits: one relation table per image axis (Bello et al. 2019).

The relation of query pixel `(y, x)` and key pixel `(y', x')` is its offset
`(dy, dx) = (y' - y, x' - x)`, each axis clipped to `[-k, k]` as Shaw et al.
clip distances. A table per axis has `2k + 1` rows, row `r` standing for the
clipped offset `r - k`, and the logit of a pair gains
`q . r^H[dy] + q . r^W[dx]`.

No `[..., query, key, depth]` tensor is formed: each query is dotted with
the rows of each table (`[..., query, 2k + 1]`), and each pair picks its
entries by its clipped offsets. In block attention the offsets are known
statically: a query's place in its block and the memory layout of
`keras_selfattn.ops.blocking_2d` fix them, the same for every block.

Example:

>>> import numpy as np
>>> dy, dx = block_relative_offsets_2d((1, 2), (1, 1), causal=True)
>>> np.asarray(dx)  # memory columns -1 .. 2 above, -1 .. 1 in the block's row
array([[-1,  0,  1,  2, -1,  0,  1],
       [-2, -1,  0,  1, -2, -1,  0]], dtype=int32)
>>> np.asarray(clipped_offset_rows(dx, 1))[1]
array([0, 0, 1, 2, 0, 0, 1], dtype=int32)
"""

from keras import ops

from keras_selfattn.ops.blocking_2d import memory_offsets_2d
from keras_selfattn.ops.relation_tables import dot_table_rows
from keras_selfattn.ops.relative import gather_relative_logits


def block_relative_offsets_2d(block_shape, memory_flange, causal):
    """Key-minus-query offsets of a query block and its memory.

    Args:
        block_shape: `(qh, qw)`.
        memory_flange: `(fh, fw)`.
        causal: which memory (as in `keras_selfattn.ops.blocking_2d`).

    Returns:
        `(dy, dx)`: two int32 `[qh * qw, memory_length]` tensors; row `q` is
        the query at `(q // qw, q % qw)` in its block, column `m` the memory
        position in the order of `memory_offsets_2d`.
    """
    block_height, block_width = block_shape
    memory_dy, memory_dx = memory_offsets_2d(block_shape, memory_flange, causal)
    query = ops.arange(block_height * block_width, dtype="int32")
    query_dy, query_dx = query // block_width, query % block_width
    return memory_dy[None, :] - query_dy[:, None], memory_dx[None, :] - query_dx[:, None]


def clipped_offset_rows(offsets, max_relative_position):
    """Table rows of `offsets`: `clip(offset, -k, k) + k`, `k = max_relative_position`."""
    k = max_relative_position
    return ops.clip(ops.cast(offsets, "int32"), -k, k) + k


def relative_logits_2d(query, height_table, width_table, height_rows, width_rows):
    """`q . r^H[dy] + q . r^W[dx]` for every query and key, in float32.

    Args:
        query: `[batch, heads, ..., queries, depth]` (scaled as the content
            logits' query is).
        height_table, width_table: `[(heads,) rows, depth]` relation tables,
            one per axis.
        height_rows, width_rows: int32 `[queries, keys]`, the row of each
            pair's offset in each table (`clipped_offset_rows`).

    Returns:
        `[batch, heads, ..., queries, keys]` float32.
    """
    logits = []
    for table, rows in ((height_table, height_rows), (width_table, width_rows)):
        products = ops.cast(dot_table_rows(query, ops.cast(table, query.dtype)), "float32")
        logits.append(gather_relative_logits(products, rows))
    return logits[0] + logits[1]
