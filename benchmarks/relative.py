"""Relative attention: skew and Shaw against plain and naive anchors.

Forward+backward time and peak memory at batch 1, 8 heads, model width 512,
causal self-attention, for:

- `MultiHeadAttention` with a causal mask (the anchor the ratios divide by);
- `RelativeMultiHeadAttention`, Music Transformer skew (`causal_table=True`,
  `max_relative_position = L`, key table per head), with the lengths known
  when the graph is built and, on TensorFlow, unknown (as in a model built on
  `keras.Input((None, width))`);
- `RelativeMultiHeadAttention`, Shaw (`k = 16`, key and value tables);
- naive Shaw: the same Shaw attention with the `[L, L, key_dim]` key and
  value relation tensors materialised, as in Shaw et al.'s formulation.

With `--memory`, a second table: segment memory (Transformer-XL), the skew
layer on a segment of L positions with a memory of M = L positions (the
relative skew over key length 2L, no gradient into the memory) against the
same layer on the concatenation of 2L positions (the anchor), the pass that
gives the segment's outputs without memory.

Run: `.venv/bin/python -m benchmarks.relative [--lengths 512 1024 2048]
[--variants skew shaw ...] [--loss sum|square] [--repeats 5] [--rounds 3]
[--memory]` (the anchor always runs);
`KERAS_SELFATTN_BENCHMARK_XLA=1` compiles the TensorFlow steps with XLA.

`--loss square` differentiates half the sum of squares of the output, whose
gradient (the output itself) depends on the forward pass as a training
loss's does. With the default sum the output's gradient is all ones: in a
graph with static shapes that is a constant, so TensorFlow may compute the
backward pass's `d_output . value^T` (`[heads, L, L]`) during the forward
pass, on top of the forward's own logits-sized tensors.
"""

import argparse

import keras
import numpy as np
from keras import ops

from benchmarks.common import measure_in_turns, megabytes, print_table, random_inputs
from keras_selfattn.layers.multi_head_attention import MultiHeadAttention
from keras_selfattn.layers.relative_multi_head_attention import RelativeMultiHeadAttention
from keras_selfattn.ops.relative import relative_distances, shaw_table_rows
from keras_selfattn.ops.softmax import masked_softmax

NUM_HEADS, KEY_DIM, WIDTH, SHAW_K = 8, 64, 512, 16
COLUMNS = ["L", "variant", "ms", "x time", "peak MB", "x memory"]  # of each `anchored_rows` row


class NaiveShawAttention(MultiHeadAttention):
    """Shaw et al. with materialised `[L, L, key_dim]` relations (the anchor)."""

    def build(self, query_shape, value_shape=None, key_shape=None):
        super().build(query_shape, value_shape, key_shape)
        rows = 2 * SHAW_K + 1
        self.key_table = self.add_weight(name="key_table", shape=(rows, self.key_dim))
        self.value_table = self.add_weight(name="value_table", shape=(rows, self.value_dim))

    def _compute_attention(
        self, query, key, value, attention_mask=None, training=None, return_attention_scores=False
    ):
        length = ops.shape(query)[1]
        rows = shaw_table_rows(relative_distances(length, length), SHAW_K)
        key_relations = ops.take(ops.cast(self.key_table, query.dtype), rows, axis=0)
        value_relations = ops.take(ops.cast(self.value_table, value.dtype), rows, axis=0)
        logits = ops.einsum("bihd,bjhd->bhij", query, key)
        logits = logits + ops.einsum("bihd,ijd->bhij", query, key_relations)
        logits = ops.cast(logits, "float32") * self.logit_scale
        weights = ops.cast(masked_softmax(logits, attention_mask), value.dtype)
        output = ops.einsum("bhij,bjhd->bihd", weights, value)
        output = output + ops.einsum("bhij,ijd->bihd", weights, value_relations)
        return output, None


class UnknownLengths(keras.layers.Layer):
    """Runs `layer` on a query whose batch and length the graph does not
    know, as in a model built on `keras.Input((None, width))`."""

    def __init__(self, layer, **kwargs):
        super().__init__(**kwargs)
        self.layer = layer

    def call(self, query, use_causal_mask=None):
        import tensorflow as tf

        query = tf.compat.v1.placeholder_with_default(query, (None, None, query.shape[-1]))
        return self.layer(query, use_causal_mask=use_causal_mask)


class HalfSquare(keras.layers.Layer):
    """`layer`'s output squared and halved: its sum is the `square` loss."""

    def __init__(self, layer, **kwargs):
        super().__init__(**kwargs)
        self.layer = layer

    def call(self, query, use_causal_mask=None, memory=None):
        with_memory = {} if memory is None else {"memory": memory}
        output = self.layer(query, use_causal_mask=use_causal_mask, **with_memory)
        return 0.5 * ops.square(ops.cast(output, "float32"))


def skew_attention(length):
    """The Music Transformer's skew over distances up to `length`, key table per head."""
    return RelativeMultiHeadAttention(
        max_relative_position=length, causal_table=True, num_heads=NUM_HEADS, key_dim=KEY_DIM
    )


def variants(length):
    common = dict(num_heads=NUM_HEADS, key_dim=KEY_DIM)
    layers = {ANCHOR: MultiHeadAttention(**common), "skew": skew_attention(length)}
    if keras.backend.backend() == "tensorflow":
        layers["skew, unknown lengths"] = UnknownLengths(skew_attention(length))
    layers["shaw"] = RelativeMultiHeadAttention(
        max_relative_position=SHAW_K, relative_type="shaw", **common
    )
    layers["naive shaw"] = NaiveShawAttention(**common)
    return layers


ANCHOR = "mha causal (anchor)"


def rows_for(length, repeats, chosen=None, loss="sum", rounds=3):
    x = random_inputs((1, length, WIDTH))
    inputs = {"query": x}
    cases = {}
    for name, layer in variants(length).items():
        if chosen is not None and name != ANCHOR and name not in chosen:
            continue
        if loss == "square":
            layer = HalfSquare(layer)
        layer(x, use_causal_mask=True)  # build
        cases[name] = (layer, inputs, {"use_causal_mask": True})
    return anchored_rows(length, cases, ANCHOR, repeats, rounds)


def anchored_rows(length, cases, anchor, repeats, rounds):
    """`[L, name, ms, x time, peak MB, x memory]` of each of `cases`
    (`measure_in_turns`'s), the ratios to the `anchor` case's."""
    results = measure_in_turns(cases, rounds=rounds, repeats=repeats)
    anchor_seconds, anchor_bytes = results[anchor]
    return [
        [length, name, seconds * 1e3, seconds / anchor_seconds, megabytes(peak), peak / anchor_bytes]
        for name, (seconds, peak) in results.items()
    ]


MEMORY_ANCHOR = "skew on the concatenation (anchor)"


def memory_rows_for(length, repeats, loss="sum", rounds=3):
    """The skew layer with memory M = L against it over the 2L concatenation."""
    memory, segment = random_inputs((1, length, WIDTH)), random_inputs((1, length, WIDTH), seed=1)
    both = np.concatenate([memory, segment], axis=1)
    layer = skew_attention(2 * length)
    if loss == "square":
        layer = HalfSquare(layer)
    layer(both, use_causal_mask=True)  # build
    cases = {
        MEMORY_ANCHOR: (layer, {"query": both}, {"use_causal_mask": True}),
        "skew with memory": (layer, {"query": segment, "memory": memory}, {"use_causal_mask": True}),
    }
    return [[length, *row] for row in anchored_rows(length, cases, MEMORY_ANCHOR, repeats, rounds)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3, help="turns over the variants (the fastest kept)")
    parser.add_argument(
        "--variants",
        nargs="+",
        help='variants besides the anchor, by name: "skew", "skew, unknown lengths", '
        '"shaw", "naive shaw" (default: all)',
    )
    parser.add_argument("--loss", choices=["sum", "square"], default="sum")
    parser.add_argument(
        "--memory",
        action="store_true",
        help="also time the skew with segment memory M = L against the 2L concatenation",
    )
    args = parser.parse_args()
    rows = []
    for length in args.lengths:
        rows += rows_for(length, args.repeats, args.variants, args.loss, args.rounds)
    print_table(
        f"Relative attention, forward+backward, batch 1, {NUM_HEADS} heads, width {WIDTH}, "
        f"causal, {args.loss} loss",
        COLUMNS,
        rows,
    )
    if args.memory:
        rows = []
        for length in args.lengths:
            rows += memory_rows_for(length, args.repeats, args.loss, args.rounds)
        print_table(
            f"Segment memory, forward+backward, batch 1, {NUM_HEADS} heads, width {WIDTH}, "
            f"causal skew, {args.loss} loss",
            ["L", "M", *COLUMNS[1:]],
            rows,
        )


if __name__ == "__main__":
    keras.utils.set_random_seed(0)
    main()
