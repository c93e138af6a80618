"""Relation tables: rows of learned embeddings, one row per relation (a
clipped distance, an offset, an edge type), read by queries and weighed by
attention probabilities."""

from keras import ops


def heads_first(x):
    """`[batch, length, heads, dim]` <-> `[batch, heads, length, dim]`."""
    return ops.transpose(x, (0, 2, 1, 3))


def dot_table_rows(query, table):
    """`query [b, h, ..., l, d]` dotted with table rows `[(h,) rows, d]`:
    `[b, h, ..., l, rows]` (a batched matmul: no transposes of the result)."""
    return ops.matmul(query, ops.swapaxes(broadcast_table(table, len(query.shape)), -1, -2))


def weigh_table_rows(weights_by_row, table):
    """`weights_by_row [b, h, ..., l, rows]` times table rows `[(h,) rows, d]`:
    `[b, h, ..., l, d]`."""
    return ops.matmul(weights_by_row, broadcast_table(table, len(weights_by_row.shape)))


def broadcast_table(table, rank):
    """A per-head table `[h, rows, d]` aligned with `[b, h, ..., rows, d]`;
    a shared table `[rows, d]` as it is."""
    if len(table.shape) == 2:
        return table
    table = table[None]
    for _ in range(rank - 4):
        table = ops.expand_dims(table, 2)
    return table
