"""Relations between query and key positions given as data: a dense
`[batch, query, key]` tensor of relation ids or a sparse edge list.

Id 0 is "no relation". The tables these functions read have one leading
row for it (zeros), so `table[..., id, :]` is the row of relation `id` and
an edge of relation 0 (a padding edge) adds nothing. Tables are
`[num_ids, depth]` (shared by the heads) or `[heads, num_ids, depth]`.

Nothing here forms a `[batch, query, key, depth]` tensor: the dense form
gathers from `query . table^T` and sums the attention weights per relation;
the sparse form costs O(edges x heads x depth) besides the logits-sized
tensor its terms are scattered into.

The functions read ids and edges as given: pass them through
`without_unknown_ids` and `without_out_of_range_edges` first, or an id or
index past its bound lands on another pair's entries (or, under some
backends, fails a gather).
"""

from keras import ops

from keras_selfattn.compat import pad

# Columns of an edge list `[num_edges, 4]`.
EDGE_BATCH, EDGE_QUERY, EDGE_KEY, EDGE_RELATION = range(4)


def with_no_relation_row(table):
    """`table [(h,) R, d]` with a zero row 0 for "no relation": `[(h,) R + 1, d]`."""
    padding = [[0, 0]] * (len(table.shape) - 2) + [[1, 0], [0, 0]]
    return pad(table, padding)


def without_unknown_ids(relations, num_ids):
    """Dense relation ids with every id outside `[0, num_ids)` set to 0 (no
    relation): an unknown id then adds no term instead of reading another
    pair's entries."""
    relations = ops.cast(relations, "int32")
    known = ops.logical_and(ops.greater_equal(relations, 0), ops.less(relations, num_ids))
    return ops.where(known, relations, 0)


def without_out_of_range_edges(edges, batch, query_length, key_length, num_ids):
    """An int32 edge list with every edge that has an index outside its bound
    (`batch`, `query_length`, `key_length`, `num_ids`) replaced by a zero
    row, a padding edge, which adds nothing."""
    edges = ops.cast(edges, "int32")
    bounds = ops.cast(ops.stack([batch, query_length, key_length, num_ids]), "int32")
    in_range = ops.logical_and(ops.greater_equal(edges, 0), ops.less(edges, bounds[None, :]))
    return ops.where(ops.all(in_range, axis=1, keepdims=True), edges, 0)


def _flat_index(batch, heads, query_length, width, columns):
    """`((b * heads + h) * query_length + i) * width + columns[b, h, i, ...]`:
    where entry `columns` of row `[b, h, i]` lies in a flattened
    `[batch, heads, query_length, width]` tensor."""
    rows = (
        ops.arange(batch, dtype="int32")[:, None, None] * heads
        + ops.arange(heads, dtype="int32")[None, :, None]
    ) * query_length + ops.arange(query_length, dtype="int32")[None, None, :]
    # expand_dims, not `[..., None]`: exportable to LiteRT builtins (see masks.padding_attention_mask).
    return ops.expand_dims(rows, -1) * width + columns


def _pair_rows(relations, batch, num_ids):
    """`[batch, query, key]`: the row of each pair's relation in a
    `[batch * query * num_ids, heads]` tensor (heads last)."""
    query_length = ops.shape(relations)[1]
    relations = ops.cast(relations, "int32")
    return _flat_index(batch, 1, query_length, num_ids, relations[:, None])[:, 0]


def _heads_last(x):
    """`[b, h, q, n]` -> `[b, q, n, h]`."""
    return ops.transpose(x, (0, 2, 3, 1))


def _heads_second(x):
    """`[b, q, n, h]` -> `[b, h, q, n]`."""
    return ops.transpose(x, (0, 3, 1, 2))


# The dense form moves whole rows of `heads` numbers: one index per pair
# rather than per pair and head, and gathers and scatters of rows, which
# run several times faster than of single numbers on the CPU.


def gather_relation_logits(query_table_logits, relations):
    """Each query-key pair's entry of `query . table^T`, by its relation id.

    Args:
        query_table_logits: `[batch, heads, query, num_ids]`, query `i`
            dotted with each relation's row (column 0: no relation, zero).
        relations: `[batch or 1, query, key]` int relation ids.

    Returns:
        `[batch, heads, query, key]`:
        `out[b, h, i, j] = query_table_logits[b, h, i, relations[b, i, j]]`.
    """
    batch, heads, _, num_ids = ops.shape(query_table_logits)
    rows = ops.reshape(_heads_last(query_table_logits), (-1, heads))
    return _heads_second(ops.take(rows, _pair_rows(relations, batch, num_ids), axis=0))


def sum_weights_by_relation(weights, relations, num_ids):
    """Sums attention weights over the keys of each relation.

    Args:
        weights: `[batch, heads, query, key]` attention weights.
        relations: `[batch or 1, query, key]` int relation ids.
        num_ids: the number of ids, `num_relations + 1`.

    Returns:
        `[batch, heads, query, num_ids]`: `out[b, h, i, r]` is the sum of
        `weights[b, h, i, j]` over the keys `j` with `relations[b, i, j] == r`
        (zero for `r = 0`).
    """
    batch, heads, query_length, _ = ops.shape(weights)
    rows = _pair_rows(relations, batch, num_ids)
    # Pairs without a relation go to no row (segment sums drop negative
    # ids): on a sparse graph most pairs, which would all pile onto one row.
    rows = ops.where(ops.equal(ops.cast(relations, "int32"), 0), -1, rows)
    sums = ops.segment_sum(
        ops.reshape(_heads_last(weights), (-1, heads)),
        ops.reshape(rows, (-1,)),
        batch * query_length * num_ids,
    )
    sums = ops.reshape(ops.cast(sums, weights.dtype), (batch, query_length, num_ids, heads))
    return _heads_second(sums)


def _edge_columns(edges):
    edges = ops.cast(edges, "int32")
    return tuple(edges[:, column] for column in range(4))


def _edge_query_rows(edges, heads, query_length):
    """`[heads, edges]`: each edge's query row in a flattened
    `[batch, heads, query, ...]` tensor, for every head."""
    batch, query, _, _ = _edge_columns(edges)
    head = ops.arange(heads, dtype="int32")[:, None]
    return (batch[None, :] * heads + head) * query_length + query[None, :]


def _edge_pairs(edges, heads, query_length, key_length):
    """`[heads, edges]`: each edge's entry in a flattened
    `[batch, heads, query, key]` tensor, for every head."""
    key = _edge_columns(edges)[EDGE_KEY]
    return _edge_query_rows(edges, heads, query_length) * key_length + key[None, :]


def _edge_rows(table, edges):
    """Each edge's relation row: `[edges, d]` from a shared table, `[heads,
    edges, d]` from a per-head one."""
    return ops.take(table, _edge_columns(edges)[EDGE_RELATION], axis=-2)


def edge_query_logits(query, table, edges):
    """`query . row` for every edge and head.

    Args:
        query: `[batch, heads, query, depth]`.
        table: `[(heads,) num_ids, depth]`, row 0 zero.
        edges: `[num_edges, 4]` int `(batch, query, key, relation)`.

    Returns:
        `[heads, num_edges]`.
    """
    _, heads, query_length, depth = ops.shape(query)
    rows = _edge_query_rows(edges, heads, query_length)
    queries = ops.take(ops.reshape(query, (-1, depth)), rows, axis=0)  # [h, e, d]
    return ops.sum(queries * _edge_rows(table, edges), axis=-1)


def edge_relation_bias(bias, edges):
    """`[heads, num_edges]`: each edge's entry of a per-head bias `[heads, num_ids]`."""
    return ops.take(bias, _edge_columns(edges)[EDGE_RELATION], axis=1)


def scatter_edge_logits(edge_logits, edges, batch, query_length, key_length):
    """Adds per-edge logits into the `[batch, heads, query, key]` layout.

    Args:
        edge_logits: `[heads, num_edges]`.
        edges: `[num_edges, 4]` int `(batch, query, key, relation)`; several
            edges on one pair add.
        batch, query_length, key_length: the sizes of the result.

    Returns:
        `[batch, heads, query_length, key_length]`, zero where no edge lies.
    """
    heads = ops.shape(edge_logits)[0]
    pairs = _edge_pairs(edges, heads, query_length, key_length)
    total = batch * heads * query_length * key_length
    summed = ops.segment_sum(ops.reshape(edge_logits, (-1,)), ops.reshape(pairs, (-1,)), total)
    return ops.reshape(
        ops.cast(summed, edge_logits.dtype), (batch, heads, query_length, key_length)
    )


def edge_value_term(weights, table, edges):
    """`sum_j weights[b, h, i, j] * row(relation)` over the edges of each query.

    Args:
        weights: `[batch, heads, query, key]` attention weights.
        table: `[(heads,) num_ids, value_depth]`, row 0 zero.
        edges: `[num_edges, 4]` int `(batch, query, key, relation)`.

    Returns:
        `[batch, heads, query, value_depth]` in the dtype of `weights`.
    """
    batch, heads, query_length, key_length = ops.shape(weights)
    pairs = _edge_pairs(edges, heads, query_length, key_length)
    edge_weights = ops.take(ops.reshape(weights, (-1,)), pairs, axis=0)  # [h, e]
    terms = edge_weights[..., None] * ops.cast(_edge_rows(table, edges), weights.dtype)
    depth = ops.shape(terms)[-1]
    rows = _edge_query_rows(edges, heads, query_length)
    summed = ops.segment_sum(
        ops.reshape(terms, (-1, depth)), ops.reshape(rows, (-1,)), batch * heads * query_length
    )
    return ops.reshape(ops.cast(summed, weights.dtype), (batch, heads, query_length, depth))
