"""Generation benchmark: cached against uncached decoding, and the cost of a step by position.

Three tables (TensorFlow backend; `--xla` compiles the cached generation
with XLA, otherwise it runs as a `tf.function` graph with XLA off, the way
TensorFlow Serving runs it):

1. Music: `--events` events continued from a `--primer`-event primer, per
   preset width, batch size and decoding: a model without the note state, one
   with it (`note_event_ids`, the music recipe's default; its cached steps
   read the token cache), and that one under the note rules as well
   (`continue_sequence(..., note_event_ids=...)`, the recipe's decoding):
   `continue_sequence` (cached) against an
   uncached loop that re-runs the model's forward pass on the growing
   sequence and takes the argmax (t2t's fallback for relative and local
   attention). The uncached time is the mean of one pass at `--samples`
   evenly spaced lengths times the number of steps.
2. Per-step time of cached decoding at each `--positions` for the `maestro`
   width: `(T(k2) - T(k1)) / (k2 - k1)` where `T(k)` generates `k` tokens
   after a primer of that length (the prefill cancels), so the step is
   timed inside the generation loop with a cache of `position + k` rows.
   A cached step attends over the whole static cache (masked past the
   position), so its cost follows the cache's length; here that length is
   the position. The generation loop writes each step's keys and values
   into the cache's own buffer (`cache_writes_in_place`; a scatter into a
   loop-carried tensor would copy the whole cache every step without XLA),
   and the attention reads them in place.
3. A 32x32x3 image (`tiny` width) sampled cached against uncached (one
   forward pass per sub-pixel), `local_1d` and `local_2d`.
4. Long generation (`--tables long`, not run by default): time and cache
   memory per event of greedy generation of `--long_events` events from a
   16-event primer, batch 1, at the long-range study's `tiny` width
   (docs/results/long_range.md), for global relative attention (its cache
   holds the whole sequence), local relative, local relative +
   memory-compressed, and global relative with a segment memory of 256
   over segments of 256 (a sliding cache window of 512 positions).

    python -m benchmarks.generation            # the issue's sizes
    python -m benchmarks.generation --quick    # small sizes for a CPU

`--presets`, `--batches`, `--events`, `--primer`, `--positions`,
`--step_preset` and `--image_size` change the tables' sizes (`--help`).
"""

import argparse
import functools
import itertools
import time

import numpy as np
import tensorflow as tf

from benchmarks.common import best_seconds, print_table, uncached_generation_seconds
from keras_selfattn.data.music import event_id_ranges
from keras_selfattn.generation import continue_sequence, sample_images
from keras_selfattn.models import image_transformer, music_transformer

VOCAB_SIZE = 390
RNG = np.random.default_rng(0)


def _music_model(preset, note_state=False):
    note_event_ids = event_id_ranges() if note_state else None
    return music_transformer(VOCAB_SIZE, preset=preset, dropout=0.0, note_event_ids=note_event_ids)


DECODINGS = {  # name: (the model has the note state, generation applies the note rules)
    "plain": (False, False),
    "note state": (True, False),
    "note state + rules": (True, True),
}


def music_table(presets, batches, events, primer_length, samples, xla):
    rows, cached_plain = [], {}
    for preset, (decoding, (note_state, rules)) in itertools.product(presets, DECODINGS.items()):
        model = _music_model(preset, note_state)
        note_event_ids = event_id_ranges() if rules else None
        forward = tf.function(
            lambda tokens: tf.argmax(model(tokens)[:, -1], axis=-1),
            input_signature=[tf.TensorSpec((None, None), tf.int32)],
        )
        for batch in batches:
            primer = RNG.integers(0, VOCAB_SIZE, (batch, primer_length)).astype("int32")
            generate = functools.partial(
                continue_sequence, model, max_new_tokens=events, temperature=0, note_event_ids=note_event_ids
            )
            if xla:
                generate = tf.function(generate, jit_compile=True)
            cached = best_seconds(generate, primer, repeats=1 if xla else 2)
            uncached = uncached_generation_seconds(forward, batch, primer_length, events, samples, VOCAB_SIZE, RNG)
            cached_plain.setdefault((preset, batch), cached)
            rows.append([
                preset, decoding, batch, events, cached, uncached, uncached / cached,
                cached / cached_plain[preset, batch],
            ])
    print_table(
        f"Music: {events} events from a {primer_length}-event primer, greedy"
        + ("  (cached: XLA)" if xla else "  (cached: continue_sequence called eagerly: a graph, XLA off)"),
        ["preset", "decoding", "batch", "events", "cached s", "uncached s", "speed-up", "cached vs plain"],
        rows,
    )


def step_table(positions, k1, k2, xla, preset="maestro"):
    model = _music_model(preset)
    rows = []
    for position in positions:
        primer = RNG.integers(0, VOCAB_SIZE, (1, position)).astype("int32")
        totals = {}
        for count in (k1, k2):
            generate = tf.function(
                lambda p, n=count: continue_sequence(model, p, n, temperature=0), jit_compile=xla
            )
            totals[count] = best_seconds(generate, primer, repeats=3)
        rows.append([position, 1000 * (totals[k2] - totals[k1]) / (k2 - k1)])
    base = rows[0][1]
    for row in rows:
        row.append(row[1] / base)
    print_table(
        f"Cached step of the {preset} width by position, batch 1"
        + ("  (XLA)" if xla else "  (graph, XLA off)"),
        ["position", "ms / step", f"vs {positions[0]}"],
        rows,
    )


def image_table(attentions, uncached_passes, xla, size=32):
    shape = (size, size, 3)
    steps = shape[0] * shape[1] * shape[2]
    rows = []
    for attention in attentions:
        model = image_transformer(shape, preset="tiny", attention=attention)
        generate = tf.function(lambda s: sample_images(model, 1, seed=s), jit_compile=xla)
        cached = best_seconds(generate, tf.constant(0), repeats=1)
        forward = tf.function(lambda pixels: model({"pixels": pixels}))
        pixels = RNG.integers(0, 256, (1,) + shape).astype("int32")
        np.asarray(forward(pixels))
        start = time.perf_counter()
        for _ in range(uncached_passes):
            np.asarray(forward(pixels))
        uncached = (time.perf_counter() - start) / uncached_passes * steps
        rows.append([attention, steps, cached, uncached, uncached / cached])
    print_table(
        f"Image {size}x{size}x3 (tiny width), sampled" + ("  (cached: XLA)" if xla else "  (cached: graph)"),
        ["attention", "steps", "cached s", "uncached s", "speed-up"],
        rows,
    )


LONG_RANGE_VARIANTS = {
    "global relative": dict(attention="relative_global"),
    "local relative": dict(attention="relative_local", block_length=64),
    "local relative + compressed": dict(attention="local_compressed", block_length=64, compression_factor=3),
    "segment memory 256": dict(attention="relative_global", memory_length=256, segment_length=256),
}


def long_table(events_list):
    rows = []
    for name, settings in LONG_RANGE_VARIANTS.items():
        model = music_transformer(
            VOCAB_SIZE, preset="tiny", dropout=0.0, timing_signal=False, max_relative_position=128, **settings
        )
        primer = RNG.integers(2, VOCAB_SIZE, (1, 16)).astype("int32")
        for events in events_list:
            generate = tf.function(lambda p, n=events: continue_sequence(model, p, n, temperature=0))
            seconds = best_seconds(generate, primer, repeats=1)
            cache_bytes = sum(
                np.asarray(cache).nbytes
                for cache in tf.nest.flatten(model.initial_cache(1, 16 + events))
            )
            rows.append([name, events, 1000 * seconds / events, cache_bytes / 2**20])
    base = {row[1]: row for row in rows if row[0] == "global relative"}
    for row in rows:
        row += [row[2] / base[row[1]][2], row[3] / base[row[1]][3]]
    print_table(
        "Long generation: tiny width, batch 1, greedy, graph (XLA off)",
        ["attention", "events", "ms / event", "cache MiB", "time vs global", "cache vs global"],
        rows,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--xla", action="store_true", help="compile the cached generation with XLA")
    parser.add_argument("--quick", action="store_true", help="small sizes for a CPU")
    parser.add_argument("--tables", nargs="+", default=["music", "step", "image"])
    parser.add_argument("--presets", nargs="+", help="music table's presets (default: tiny maestro)")
    parser.add_argument("--batches", type=int, nargs="+", help="music table's batch sizes (default: 1 8)")
    parser.add_argument("--events", type=int, help="music table's new events (default: 1024; --quick: 128)")
    parser.add_argument("--primer", type=int, help="music table's primer length (default: 64)")
    parser.add_argument("--positions", type=int, nargs="+", help="step table's positions (default: 128 2048)")
    parser.add_argument("--step_preset", default="maestro", help="step table's preset")
    parser.add_argument("--image_size", type=int, default=32, help="image table's height and width (a multiple of 4)")
    parser.add_argument(
        "--long_events", type=int, nargs="+", default=[512, 2048, 8192], help="long table's generation lengths"
    )
    args = parser.parse_args()
    if args.quick:
        music = dict(presets=["tiny", "maestro"], batches=[1, 8], events=128, primer_length=64, samples=4)
        step = dict(positions=[128, 2048], k1=4, k2=12)
        image = dict(attentions=["local_1d", "local_2d"], uncached_passes=3)
    else:
        music = dict(presets=["tiny", "maestro"], batches=[1, 8], events=1024, primer_length=64, samples=8)
        step = dict(positions=[128, 2048], k1=8, k2=40)
        image = dict(attentions=["local_1d", "local_2d"], uncached_passes=10)
    for table, key, value in (
        (music, "presets", args.presets), (music, "batches", args.batches), (music, "events", args.events),
        (music, "primer_length", args.primer), (step, "positions", args.positions),
    ):
        if value is not None:
            table[key] = value
    step["preset"], image["size"] = args.step_preset, args.image_size
    if "music" in args.tables:
        music_table(xla=args.xla, **music)
    if "step" in args.tables:
        step_table(xla=args.xla, **step)
    if "image" in args.tables:
        image_table(xla=args.xla, **image)
    if "long" in args.tables:
        long_table(args.long_events)


if __name__ == "__main__":
    main()
