"""Relational attention: dense ids and edge lists against plain and naive anchors.

Forward+backward time and peak memory at batch 1, 8 heads, model width 512,
self-attention over `--nodes` positions (default 512) with 16 relation
types, key and value tables shared by the heads, for:

- `MultiHeadAttention` without relations (the anchor the ratios divide by);
- `RelationalAttention` with dense ids `[1, nodes, nodes]`, a relation on
  every pair;
- naive: the same attention with the `[1, nodes, nodes, key_dim]` key and
  value relation tensors materialised from the ids;
- `RelationalAttention` on a sparse graph of `--edges_per_node` random
  edges per node (default 4), given as dense ids (zero elsewhere) and as an
  edge list `[edges, 4]`.

Each `RelationalAttention` row runs with `check_relations=False`, and again
with the check on (", checked"), whose "x unchecked" column divides its
time by the unchecked row's: the cost of checking every id and edge index
in the graph. Under `KERAS_SELFATTN_BENCHMARK_XLA=1` the checked rows are
left out: on TensorFlow a checking layer is never compiled with XLA (Keras
runs it without), so compare their time there with an unchecked run under XLA.

Run: `.venv/bin/python -m benchmarks.relational [--nodes 512]
[--key_dims 32 64 128] [--edges_per_node 4] [--repeats 5] [--rounds 3]`;
`KERAS_SELFATTN_BENCHMARK_XLA=1` compiles the TensorFlow steps with XLA.
The naive form's memory grows with `key_dim`; the others' does not.
"""

import argparse
import os

import keras
import numpy as np
from keras import ops

from benchmarks.common import measure_in_turns, megabytes, print_table, random_inputs
from keras_selfattn.layers.multi_head_attention import MultiHeadAttention
from keras_selfattn.layers.relational_attention import RelationalAttention
from keras_selfattn.ops.relation_graphs import with_no_relation_row
from keras_selfattn.ops.relation_tables import heads_first
from keras_selfattn.ops.softmax import masked_softmax

NUM_HEADS, WIDTH, NUM_RELATIONS = 8, 512, 16
ANCHOR = "mha (anchor)"
CHECKED = ", checked"


class NaiveRelationalAttention(RelationalAttention):
    """Dense relation ids read through materialised `[b, q, k, depth]` relation tensors."""

    def _compute_attention_with_context(self, query, key, value, call):
        ids = ops.cast(call.relations, "int32")
        key_table = with_no_relation_row(ops.cast(self.relative_key_embeddings, query.dtype))
        value_table = with_no_relation_row(ops.cast(self.relative_value_embeddings, value.dtype))
        key_relations = ops.take(key_table, ids, axis=0)  # [b, q, k, d]
        value_relations = ops.take(value_table, ids, axis=0)
        logits = ops.einsum("bihd,bjhd->bhij", query, key)
        logits = logits + ops.einsum("bihd,bijd->bhij", query, key_relations)
        logits = ops.cast(logits, "float32") * self.logit_scale
        weights = ops.cast(masked_softmax(logits, call.attention_mask), value.dtype)
        output = ops.einsum("bhij,bjhd->bihd", weights, value)
        output = output + heads_first(ops.einsum("bhij,bijd->bhid", weights, value_relations))
        return output, None


def graphs(nodes, edges_per_node, seed=0):
    """`(every_pair_ids, sparse_ids, edge_list)`: ids on every pair, and a
    random graph of `edges_per_node` edges per node as ids and as edges."""
    rng = np.random.default_rng(seed)
    every_pair = rng.integers(1, NUM_RELATIONS + 1, size=(1, nodes, nodes)).astype("int32")
    count = nodes * edges_per_node
    edges = np.stack(
        [
            np.zeros(count, int),
            np.repeat(np.arange(nodes), edges_per_node),
            rng.integers(0, nodes, count),
            rng.integers(1, NUM_RELATIONS + 1, count),
        ],
        axis=1,
    ).astype("int32")
    sparse_ids = np.zeros((1, nodes, nodes), "int32")
    sparse_ids[0, edges[:, 1], edges[:, 2]] = edges[:, 3]
    edges = edges[sparse_ids[0, edges[:, 1], edges[:, 2]] == edges[:, 3]]  # one per pair
    return every_pair, sparse_ids, edges


def rows_for(nodes, key_dim, edges_per_node, repeats, rounds=3):
    x = random_inputs((1, nodes, WIDTH))
    every_pair, sparse_ids, edges = graphs(nodes, edges_per_node)
    common = dict(num_heads=NUM_HEADS, key_dim=key_dim)
    relational = dict(num_relations=NUM_RELATIONS, **common)
    sparse = f"{edges_per_node} edges/node"
    cases = {
        ANCHOR: (MultiHeadAttention(**common), None),
        "naive, ids on every pair": (NaiveRelationalAttention(**relational, check_relations=False), every_pair),
    }
    xla = os.environ.get("KERAS_SELFATTN_BENCHMARK_XLA") == "1" and keras.backend.backend() == "tensorflow"
    for variant, relations in (
        ("ids on every pair", every_pair), (f"{sparse} as ids", sparse_ids), (f"{sparse} as edge list", edges)
    ):
        cases[f"relational, {variant}"] = (RelationalAttention(**relational, check_relations=False), relations)
        if not xla:
            cases[f"relational, {variant}{CHECKED}"] = (RelationalAttention(**relational), relations)
    measured = {}
    for name, (layer, relations) in cases.items():
        inputs = {"query": x} if relations is None else {"query": x, "relations": relations}
        layer(**inputs)  # build
        measured[name] = (layer, inputs, {})
    results = measure_in_turns(measured, rounds=rounds, repeats=repeats)
    anchor_seconds, anchor_bytes = results[ANCHOR]
    return [
        [nodes, key_dim, name, seconds * 1e3, seconds / anchor_seconds, megabytes(peak),
         peak / anchor_bytes, _against_unchecked(name, seconds, results)]
        for name, (seconds, peak) in results.items()
    ]


def _against_unchecked(name, seconds, results):
    """A checked row's time over its unchecked twin's; "" for other rows."""
    if not name.endswith(CHECKED):
        return ""
    return seconds / results[name[: -len(CHECKED)]][0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=512)
    parser.add_argument("--key_dims", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--edges_per_node", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3, help="turns over the variants (the fastest kept)")
    args = parser.parse_args()
    rows = []
    for key_dim in args.key_dims:
        rows += rows_for(args.nodes, key_dim, args.edges_per_node, args.repeats, args.rounds)
    print_table(
        f"Relational attention, forward+backward, batch 1, {NUM_HEADS} heads, width {WIDTH}, "
        f"{NUM_RELATIONS} relation types, shared tables",
        ["nodes", "key_dim", "variant", "ms", "x time", "peak MB", "x memory", "x unchecked"],
        rows,
    )


if __name__ == "__main__":
    keras.utils.set_random_seed(0)
    main()
