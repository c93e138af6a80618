"""MultiHeadAttention against keras.layers.MultiHeadAttention, and cached decoding.

For each length L: forward+backward time and peak memory of our layer and of
the Keras layer with the same weights (causal self-attention, batch 1, width
512, 8 heads), and the time of one cached decoding step at position L against
recomputing the whole causal prefix.

    python -m benchmarks.attention [--lengths 256 1024 2048]
"""

import argparse

import keras

from benchmarks.common import (
    compiled,
    measure_in_turns,
    median_seconds,
    megabytes,
    print_table,
    random_inputs,
)
from keras_selfattn import MultiHeadAttention

WIDTH, NUM_HEADS = 512, 8
TRAINING_COLUMNS = ["L", "ours ms", "keras ms", "time ratio", "ours MiB", "keras MiB", "memory ratio"]


def built_pair(x, **keras_options):
    """Our layer and Keras's (built with `keras_options`) with the same weights."""
    ours = MultiHeadAttention(NUM_HEADS, WIDTH // NUM_HEADS)
    theirs = keras.layers.MultiHeadAttention(NUM_HEADS, WIDTH // NUM_HEADS, **keras_options)
    symbolic = keras.KerasTensor(x.shape, x.dtype)  # builds without running the layers
    ours(symbolic, symbolic)
    theirs(symbolic, symbolic)
    theirs.set_weights(ours.get_weights())
    return ours, theirs


def training_row(length, rounds=3, repeats=10, **keras_options):
    x = random_inputs((1, length, WIDTH))
    ours, theirs = built_pair(x, **keras_options)
    inputs, kwargs = {"query": x, "value": x}, {"use_causal_mask": True}
    cases = {"ours": (ours, inputs, kwargs), "keras": (theirs, inputs, kwargs)}
    results = measure_in_turns(cases, rounds=rounds, repeats=repeats)
    (ours_time, ours_memory), (keras_time, keras_memory) = results["ours"], results["keras"]
    return [
        length,
        ours_time * 1e3,
        keras_time * 1e3,
        ours_time / keras_time,
        megabytes(ours_memory),
        megabytes(keras_memory),
        ours_memory / keras_memory,
    ]


def decoding_row(length):
    x = random_inputs((1, length, WIDTH))
    layer, _ = built_pair(x)
    cache = keras.ops.zeros((1, 2, length, NUM_HEADS, WIDTH // NUM_HEADS))
    _, cache = layer(x, x, cache=cache, cache_update_index=0, use_causal_mask=True)
    last = x[:, -1:]

    def cached_step(token, cache, index):
        return layer(token, token, cache=cache, cache_update_index=index, use_causal_mask=True)

    def recompute(prefix):
        return layer(prefix, prefix, use_causal_mask=True)[:, -1:]

    index = keras.ops.convert_to_tensor(length - 1, "int32")
    step_time = median_seconds(compiled(cached_step), [last, cache, index], repeats=20)
    recompute_time = median_seconds(compiled(recompute), [keras.ops.convert_to_tensor(x)])
    return [length, step_time * 1e3, recompute_time * 1e3, recompute_time / step_time]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 2048])
    lengths = parser.parse_args().lengths
    print_table(
        "Causal self-attention, forward+backward (ratio = ours / keras)",
        TRAINING_COLUMNS,
        [training_row(length) for length in lengths],
    )
    print_table(
        "One decoding step at position L (speed-up = recompute / cached)",
        ["L", "cached step ms", "recompute ms", "speed-up"],
        [decoding_row(length) for length in lengths],
    )


if __name__ == "__main__":
    main()
