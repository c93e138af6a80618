import numpy as np
from keras import ops

from keras_selfattn.ops.relation_graphs import (
    edge_query_logits,
    edge_value_term,
    gather_relation_logits,
    scatter_edge_logits,
    sum_weights_by_relation,
    with_no_relation_row,
)

# Distinct sizes: batch, heads, queries, keys, ids, depth.
BATCH, HEADS, QUERIES, KEYS, IDS, DEPTH = 2, 3, 5, 7, 11, 13
RNG = np.random.default_rng(0)
IDS_DENSE = RNG.integers(0, IDS, (BATCH, QUERIES, KEYS)).astype("int32")


def numpy(x):
    return ops.convert_to_numpy(x)


def test_with_no_relation_row_prepends_zeros():
    table = RNG.normal(size=(HEADS, IDS - 1, DEPTH)).astype("float32")
    padded = numpy(with_no_relation_row(table))
    assert padded.shape == (HEADS, IDS, DEPTH)
    np.testing.assert_array_equal(padded[:, 0], 0.0)
    np.testing.assert_array_equal(padded[:, 1:], table)


def test_gather_relation_logits_reads_each_pairs_column():
    by_relation = RNG.normal(size=(BATCH, HEADS, QUERIES, IDS)).astype("float32")
    out = numpy(gather_relation_logits(by_relation, IDS_DENSE))
    b, h, i, j = np.indices((BATCH, HEADS, QUERIES, KEYS))
    np.testing.assert_array_equal(out, by_relation[b, h, i, IDS_DENSE[b, i, j]])
    shared = numpy(gather_relation_logits(by_relation, IDS_DENSE[:1]))
    np.testing.assert_array_equal(shared, by_relation[b, h, i, IDS_DENSE[0][i, j]])


def test_sum_weights_by_relation_sums_each_relations_keys():
    weights = RNG.random((BATCH, HEADS, QUERIES, KEYS)).astype("float32")
    out = numpy(sum_weights_by_relation(weights, IDS_DENSE, IDS))
    expected = np.zeros((BATCH, HEADS, QUERIES, IDS))
    for b, i, j in np.ndindex(BATCH, QUERIES, KEYS):
        if IDS_DENSE[b, i, j]:
            expected[b, :, i, IDS_DENSE[b, i, j]] += weights[b, :, i, j]
    np.testing.assert_allclose(out, expected, atol=1e-6)


def test_edge_terms_add_on_repeated_pairs():
    edges = np.array([[1, 4, 6, 3], [1, 4, 6, 3], [0, 0, 2, 10], [0, 2, 2, 0]], "int32")
    query = RNG.normal(size=(BATCH, HEADS, QUERIES, DEPTH)).astype("float32")
    table = with_no_relation_row(RNG.normal(size=(IDS - 1, DEPTH)).astype("float32"))
    table_np = numpy(table)
    per_edge = numpy(edge_query_logits(query, table, edges))
    np.testing.assert_allclose(per_edge[:, 0], query[1, :, 4] @ table_np[3], atol=1e-5)
    np.testing.assert_array_equal(per_edge[:, 3], 0.0)
    logits = numpy(scatter_edge_logits(per_edge, edges, BATCH, QUERIES, KEYS))
    expected = np.zeros((BATCH, HEADS, QUERIES, KEYS), "float32")
    expected[1, :, 4, 6] = 2 * per_edge[:, 0]
    expected[0, :, 0, 2] = per_edge[:, 2]
    np.testing.assert_allclose(logits, expected, atol=1e-6)
    weights = RNG.random((BATCH, HEADS, QUERIES, KEYS)).astype("float32")
    values = numpy(edge_value_term(weights, table, edges))
    expected = np.zeros((BATCH, HEADS, QUERIES, DEPTH), "float32")
    expected[1, :, 4] = 2 * weights[1, :, 4, 6, None] * table_np[3]
    expected[0, :, 0] = weights[0, :, 0, 2, None] * table_np[10]
    np.testing.assert_allclose(values, expected, atol=1e-6)
