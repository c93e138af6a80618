"""int8 quantization benchmark: `model.quantize("int8")` against float32, one run per family.

Each family's float32 model and a copy of it with the same weights quantized
to int8 (Keras's `model.quantize("int8")`: int8 kernels and embeddings with a
float scale per output channel or row, activations quantized per token), in
one process, on the same inputs. Two tables (TensorFlow backend, CPU, graph
mode with XLA off, as TensorFlow Serving runs):

1. The held-out metric, and the weights' size: the `.weights.h5` file
   `save_weights` writes and the bytes of the variables. Music: the shipped
   `maestro_small`, its NLL per event on the non-overlapping 256-event chunks
   of the embedded test performances (`--chunks` limits them), the card's
   1x figure. The other families: untrained models of their `tiny`
   presets on random inputs (the metric's change measures how far the
   rounding moves an untrained model's outputs, not a trained model's
   quality): NLL per token, bits per sub-pixel, the bug pointer's NLL, and
   for the graph encoder the mean relative change of its encodings.
2. Speed at batch 1: events, tokens or sub-pixels generated per second
   (`maestro_small` with its shipped decoding, the accompaniment and
   translation models greedy, the image models sampled), and for the graph
   families forward passes per second. Float32 and int8 are timed
   in turns, `--rounds` times, the fastest kept.

    python -m benchmarks.quantization            # the issue's sizes
    python -m benchmarks.quantization --quick    # fewer chunks, events and tokens
"""

import argparse
import gc
import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import keras
import numpy as np

from benchmarks.common import print_table
from keras_selfattn.models import (
    GraphTransformer,
    ImageTransformer,
    MelodyConditionedMusicTransformer,
    MusicTransformer,
    SuperResolutionTransformer,
    TranslationTransformer,
    VariableMisuseModel,
)

RNG = np.random.default_rng(0)
MUSIC_VOCABULARY = 310  # maestro_small's performance events
TEXT_VOCABULARY = 4000
GRAPH_VOCABULARY, RELATIONS, NODES = 1000, 8, 64


@dataclass
class Run:
    """One family's run: `build()` gives the float32 model; `metric(model)`
    its held-out metric; `generate(model)` generates once at batch 1 and
    returns how many units (`unit`) it made."""

    family: str
    model: str
    metric_name: str
    build: Callable
    metric: Callable
    generate: Callable
    unit: str


def nll(logits, targets, num_classes):
    """Mean NLL in nats of integer `targets` under `logits` (float64 log-softmax)."""
    logits = np.asarray(logits, "float64").reshape(-1, num_classes)
    log_probs = logits - logits.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    return float(-log_probs[np.arange(len(logits)), np.asarray(targets).reshape(-1)].mean())


def music_run(chunks, events):
    from keras_selfattn.data.music import evaluation_chunks, load_performances

    windows = evaluation_chunks(load_performances(progress=False)["test"], 257)[:chunks]

    def metric(model):
        logits = model.predict(windows[:, :-1], batch_size=16, verbose=0)
        return nll(logits, windows[:, 1:], MUSIC_VOCABULARY)

    def generate(model):
        model.generate(windows[:1, :64], events, seed=0, **model.generation_settings)
        return events

    build = lambda: MusicTransformer.from_preset("maestro_small")
    return Run("music", "maestro_small (trained)", "NLL/event", build, metric, generate, "events")


def accompaniment_run(tokens):
    melody = RNG.integers(1, MUSIC_VOCABULARY, (8, 64)).astype("int32")
    sequences = RNG.integers(1, MUSIC_VOCABULARY, (8, 129)).astype("int32")

    def metric(model):
        logits = model.predict({"melody": melody, "tokens": sequences[:, :-1]}, verbose=0)
        return nll(logits, sequences[:, 1:], MUSIC_VOCABULARY)

    def generate(model):
        model.generate(melody[:1], sequences[:1, :16], tokens, temperature=0)
        return tokens

    build = lambda: MelodyConditionedMusicTransformer.from_preset("tiny", vocabulary_size=MUSIC_VOCABULARY)
    return Run("accompaniment", "tiny, untrained", "NLL/event", build, metric, generate, "events")


def translation_run(tokens):
    source = RNG.integers(2, TEXT_VOCABULARY, (8, 32)).astype("int32")
    target = RNG.integers(2, TEXT_VOCABULARY, (8, 33)).astype("int32")

    def metric(model):
        logits = model.predict({"source_tokens": source, "target_tokens": target[:, :-1]}, verbose=0)
        return nll(logits, target[:, 1:], TEXT_VOCABULARY)

    def generate(model):
        # An untrained model may end early: count the tokens up to its EOS.
        translation = keras.ops.convert_to_numpy(model.generate(source[:1], tokens))[0]
        ends = np.flatnonzero(translation == 1)
        return int(ends[0]) + 1 if len(ends) else len(translation)

    build = lambda: TranslationTransformer.from_preset(
        "tiny", source_vocabulary_size=TEXT_VOCABULARY, target_vocabulary_size=TEXT_VOCABULARY
    )
    return Run("translation", "tiny, untrained", "NLL/token", build, metric, generate, "tokens")


def bits_per_sub_pixel(logits, pixels):
    return nll(logits, pixels, 256) / math.log(2.0)


def image_run(size):
    shape = (size, size, 3)
    pixels = RNG.integers(0, 256, (8,) + shape).astype("int32")

    def metric(model):
        return bits_per_sub_pixel(model.predict({"pixels": pixels}, verbose=0), pixels)

    def generate(model):
        model.generate(1, seed=0)
        return math.prod(shape)

    build = lambda: ImageTransformer.from_preset("tiny", image_shape=shape)
    model = f"tiny {size}x{size}, untrained"
    return Run("images", model, "bits/sub-pixel", build, metric, generate, "sub-pixels")


def super_resolution_run(size):
    low_shape, high_shape = (size // 2, size // 2, 3), (size, size, 3)
    low = RNG.integers(0, 256, (8,) + low_shape).astype("int32")
    high = RNG.integers(0, 256, (8,) + high_shape).astype("int32")

    def metric(model):
        return bits_per_sub_pixel(model.predict({"low_resolution": low, "pixels": high}, verbose=0), high)

    def generate(model):
        model.generate(low[:1].astype("uint8"), seed=0)
        return math.prod(high_shape)

    build = lambda: SuperResolutionTransformer.from_preset("tiny", low_shape=low_shape, high_shape=high_shape)
    model = f"tiny {size // 2}x{size // 2} -> {size}x{size}, untrained"
    return Run("super_resolution", model, "bits/sub-pixel", build, metric, generate, "sub-pixels")


def graph_inputs(batch):
    token_ids = RNG.integers(1, GRAPH_VOCABULARY, (batch, NODES)).astype("int32")
    relations = RNG.integers(0, RELATIONS + 1, (batch, NODES, NODES)).astype("int32")
    return {"token_ids": token_ids, "relations": relations}


def forward_passes(inputs, count=16):
    """`run.generate` of a graph family: `count` forward passes over `inputs`
    (one pass of a small graph is too short to time alone)."""

    def forward(model):
        for _ in range(count):
            model.predict_on_batch(inputs)
        return count

    return forward


def graph_run():
    inputs, one = graph_inputs(8), graph_inputs(1)
    reference = {}

    def metric(model):
        # The float model runs first: later calls measure against its encodings.
        encodings = model.predict(inputs, verbose=0)
        expected = reference.setdefault("encodings", encodings)
        return float(np.abs(encodings - expected).mean() / np.abs(expected).mean())

    build = lambda: GraphTransformer.from_preset(
        "tiny", vocabulary_size=GRAPH_VOCABULARY, num_relations=RELATIONS
    )
    model = f"tiny, {NODES} nodes, untrained"
    return Run("graph", model, "rel. encoding change", build, metric, forward_passes(one), "graphs")


def variable_misuse_run():
    inputs, one = graph_inputs(8), graph_inputs(1)
    bugs = RNG.integers(0, NODES, (8,))

    def metric(model):
        return nll(model.predict(inputs, verbose=0)["bug"], bugs, NODES)

    build = lambda: VariableMisuseModel.from_preset(
        "tiny", vocabulary_size=GRAPH_VOCABULARY, num_relations=RELATIONS
    )
    model = f"tiny, {NODES} nodes, untrained"
    return Run("variable_misuse", model, "bug NLL", build, metric, forward_passes(one), "graphs")


def quantized_copy(model):
    """A copy of `model` with its weights, quantized to int8. Keras collects
    garbage in full for each weight it replaces; the objects alive before are
    frozen meanwhile (`gc.freeze`), so that each pass looks at new ones only."""
    copy = type(model).from_config(model.get_config())
    copy.set_weights(model.get_weights())
    gc.freeze()
    try:
        copy.quantize("int8")
    finally:
        gc.unfreeze()
    return copy


def weights_bytes(model):
    """`(size of the .weights.h5 file save_weights writes, bytes of the variables)`."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.weights.h5")
        model.save_weights(path)
        file_bytes = os.path.getsize(path)
    return file_bytes, sum(np.asarray(keras.ops.convert_to_numpy(v)).nbytes for v in model.weights)


def units_per_second(run, models, rounds):
    """`[units per second]` of `run.generate` for each of `models`, timed in
    turns `rounds` times after one untimed (tracing) call each, the fastest
    round kept."""
    for model in models:
        run.generate(model)
    best = [math.inf] * len(models)
    counts = [0] * len(models)
    for _ in range(rounds):
        for index, model in enumerate(models):
            start = time.perf_counter()
            counts[index] = run.generate(model)
            best[index] = min(best[index], time.perf_counter() - start)
    return [count / seconds for count, seconds in zip(counts, best)]


def measure(run, rounds):
    """`(metric row, speed row)` of `run`: float32 against int8."""
    float_model = run.build()
    int8_model = quantized_copy(float_model)
    float_metric, int8_metric = run.metric(float_model), run.metric(int8_model)
    (float_file, float_variables), (int8_file, int8_variables) = map(weights_bytes, (float_model, int8_model))
    metric_row = [
        run.family, run.model, run.metric_name, f"{float_metric:.4f}", f"{int8_metric:.4f}",
        f"{int8_metric - float_metric:+.4f}",
        float_file / 2**20, int8_file / 2**20, int8_file / float_file, int8_variables / float_variables,
    ]
    float_speed, int8_speed = units_per_second(run, [float_model, int8_model], rounds)
    speed_row = [run.family, run.model, run.unit, float_speed, int8_speed, int8_speed / float_speed]
    return metric_row, speed_row


def runs(args):
    every = {
        "music": lambda: music_run(args.chunks, args.events),
        "accompaniment": lambda: accompaniment_run(args.tokens),
        "translation": lambda: translation_run(args.tokens),
        "images": lambda: image_run(args.image_size),
        "super_resolution": lambda: super_resolution_run(args.image_size),
        "graph": graph_run,
        "variable_misuse": variable_misuse_run,
    }
    return [every[family]() for family in args.families]


FAMILIES = ["music", "accompaniment", "translation", "images", "super_resolution", "graph", "variable_misuse"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: 32 chunks, 64 events, 16 tokens")
    parser.add_argument("--families", nargs="+", default=FAMILIES, choices=FAMILIES)
    parser.add_argument("--chunks", type=int, help="music: held-out chunks (default: all 520)")
    parser.add_argument("--events", type=int, help="music: events generated (default: 256)")
    parser.add_argument(
        "--tokens", type=int, help="accompaniment and translation: tokens generated (default: 64)"
    )
    parser.add_argument("--image_size", type=int, default=8, help="image height and width (even; default 8)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds of each model")
    args = parser.parse_args()
    quick = dict(chunks=32, events=64, tokens=16) if args.quick else dict(chunks=None, events=256, tokens=64)
    for name, value in quick.items():
        if getattr(args, name) is None:
            setattr(args, name, value)

    keras.utils.set_random_seed(0)  # the untrained models' weights
    metric_rows, speed_rows = zip(*(measure(run, args.rounds) for run in runs(args)))
    print_table(
        "int8 against float32: held-out metric and weights",
        ["family", "model", "metric", "float32", "int8", "change", "file MiB f32", "file MiB int8",
         "file ratio", "variables ratio"],
        metric_rows,
    )
    print_table(
        "int8 against float32: speed at batch 1, CPU, graph (XLA off)",
        ["family", "model", "unit", "float32 /s", "int8 /s", "int8 / float32"],
        speed_rows,
    )


if __name__ == "__main__":
    main()
