"""The GPU benchmark: the project's attention and music models on the JAX backend, in one run.

Five tables, each with ratios to the anchor it names, under the dtype policy
`--dtype_policy` (`mixed_bfloat16`: bfloat16 compute, float32 weights):

1. `MultiHeadAttention` against `keras.layers.MultiHeadAttention` with
   `flash_attention=True` where Keras runs flash attention on this backend
   and device (the header says whether it does; else Keras's default),
   causal self-attention, forward+backward, batch 1, 8 heads of 64, at each
   of `--lengths`.
2. Skew relative attention (`RelativeMultiHeadAttention`, the Music
   Transformer's skew over distances up to L) against that Keras layer's
   fused causal attention: time and peak memory at each of `--lengths`.
3. Local 1D and 2D attention against global causal attention on an
   `--image_size`^2 x 3 image (the Image Transformer's setting, as
   `benchmarks.local` compares them).
4. Training tokens per second of `music_transformer` at each of
   `--presets` (`maestro` is Magenta's base configuration), `jit_compile=True`,
   in float32 (the baseline row) and under `--dtype_policy`: the fastest of
   `--train_steps` `train_on_batch` steps on random events, after one
   untimed step that compiles (compile time excluded).
5. Cached generation events per second of the `--generation_preset` model
   (`MusicTransformer.generate`, greedy, under `jax.jit`) at each of
   `--batches`, against the uncached loop that re-runs the model on the
   whole sequence for every event (`benchmarks.generation`'s estimate).

It needs only keras, jax and numpy besides this checkout; the backend is
JAX unless `KERAS_BACKEND` names another (then it stops). On a GPU machine
with JAX (CUDA), from the repository root:

    python -m benchmarks.gpu

The default sizes are meant for one H100 or H200, estimated at about 5
minutes, most of it compiling; `--tiny` runs every table at a tiny size on
a CPU.
"""

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import argparse  # noqa: E402
import contextlib  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks import attention, local, relative  # noqa: E402
from benchmarks.common import (  # noqa: E402
    best_seconds,
    compiled,
    print_table,
    random_inputs,
    uncached_generation_seconds,
)
from keras_selfattn.data.music import MUSIC_VOCABULARY_SIZE, PAD_ID  # noqa: E402
from keras_selfattn.models import music_transformer  # noqa: E402
from keras_selfattn.models.losses import MaskedSparseCategoricalCrossentropy  # noqa: E402

RNG = np.random.default_rng(0)
TABLES = ["attention", "skew", "local", "training", "generation"]
FULL = dict(
    lengths=[1024, 4096, 8192], image_size=32, presets=["small", "maestro"], train_batch=4,
    train_length=2048, train_steps=10, generation_preset="small", batches=[1, 8], primer=64,
    events=512, samples=4, repeats=10, rounds=3,
)
TINY = dict(
    lengths=[16], image_size=8, presets=["tiny"], train_batch=2, train_length=16, train_steps=1,
    generation_preset="tiny", batches=[2], primer=4, events=4, samples=2, repeats=1, rounds=1,
)


@contextlib.contextmanager
def dtype_policy(name):
    """Builds layers under the global dtype policy `name` while open."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def flash_attention_absence(length):
    """Why Keras runs no flash attention for causal `[1, length, 8, 64]` in
    the policy's compute dtype here, or `None` where it does."""
    shape = (1, length, relative.NUM_HEADS, relative.KEY_DIM)
    query = keras.ops.zeros(shape, keras.config.dtype_policy().compute_dtype)
    try:
        keras.ops.dot_product_attention(query, query, query, is_causal=True, flash_attention=True)
    except (RuntimeError, ValueError, ImportError) as error:
        return f"{type(error).__name__}: {str(error).strip().splitlines()[0]}"
    return None


def attention_table(lengths, keras_options, kernel, repeats, rounds):
    print_table(
        f"Multi-head causal self-attention, forward+backward, ours / keras ({kernel})",
        attention.TRAINING_COLUMNS,
        [attention.training_row(length, rounds, repeats, **keras_options) for length in lengths],
    )


def skew_table(lengths, keras_options, kernel, repeats, rounds):
    anchor, causal = "keras causal (anchor)", {"use_causal_mask": True}
    rows = []
    for length in lengths:
        x = random_inputs((1, length, relative.WIDTH))
        inputs = {"query": x, "value": x}
        fused = keras.layers.MultiHeadAttention(relative.NUM_HEADS, relative.KEY_DIM, **keras_options)
        cases = {anchor: (fused, inputs, causal), "skew": (relative.skew_attention(length), inputs, causal)}
        rows += relative.anchored_rows(length, cases, anchor, repeats, rounds)
    print_table(
        f"Skew relative attention against fused causal attention ({kernel}), forward+backward, "
        f"batch 1, {relative.NUM_HEADS} heads of {relative.KEY_DIM}",
        relative.COLUMNS,
        rows,
    )


def training_table(presets, batch, length, steps, policy):
    tokens = RNG.integers(0, MUSIC_VOCABULARY_SIZE, (batch, length + 1)).astype("int32")
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    rows = []
    for preset in presets:
        tokens_per_second = {}
        for name in dict.fromkeys(["float32", policy]):
            with dtype_policy(name):
                model = music_transformer(MUSIC_VOCABULARY_SIZE, preset=preset)
            model.compile(
                optimizer="adam", loss=MaskedSparseCategoricalCrossentropy(pad_id=PAD_ID), jit_compile=True
            )
            seconds = best_seconds(model.train_on_batch, inputs, labels, repeats=steps)
            tokens_per_second[name] = batch * length / seconds
        baseline = tokens_per_second["float32"]
        rows += [[preset, name, tps, tps / baseline] for name, tps in tokens_per_second.items()]
    print_table(
        f"Music training tokens per second, batch {batch} x {length} events, XLA, "
        f"fastest of {steps} steps (compile excluded)",
        ["preset", "policy", "tokens/s", "x float32"],
        rows,
    )


def generation_table(preset, batches, primer_length, events, samples):
    model = music_transformer(MUSIC_VOCABULARY_SIZE, preset=preset, dropout=0.0)
    generate = compiled(lambda primer: model.generate(primer, events, temperature=0))
    forward = compiled(lambda tokens: keras.ops.argmax(model(tokens)[:, -1], axis=-1))
    rows = []
    for batch in batches:
        primer = RNG.integers(0, MUSIC_VOCABULARY_SIZE, (batch, primer_length)).astype("int32")
        cached = best_seconds(generate, primer)
        uncached = uncached_generation_seconds(
            forward, batch, primer_length, events, samples, MUSIC_VOCABULARY_SIZE, RNG
        )
        rows.append([batch, batch * events / cached, batch * events / uncached, uncached / cached])
    print_table(
        f"Music cached generation, {preset} preset, {events} events from a {primer_length}-event "
        "primer, greedy, jax.jit",
        ["batch", "cached events/s", "uncached events/s", "speed-up"],
        rows,
    )


def _shown(value):
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="tiny sizes, for a CPU")
    parser.add_argument("--tables", nargs="+", choices=TABLES, default=TABLES, help="the tables to print (all)")
    parser.add_argument(
        "--dtype_policy",
        default="mixed_bfloat16",
        help="Keras dtype policy of every table; the training table adds float32 rows (mixed_bfloat16)",
    )
    for name, kind, text in [
        ("lengths", int, "attention and skew tables' sequence lengths"),
        ("image_size", int, "local table's image height and width"),
        ("presets", str, "training table's music presets"),
        ("train_batch", int, "training table's batch size"),
        ("train_length", int, "training table's events per sequence"),
        ("train_steps", int, "training table's timed steps"),
        ("generation_preset", str, "generation table's music preset"),
        ("batches", int, "generation table's batch sizes"),
        ("primer", int, "generation table's primer length"),
        ("events", int, "generation table's new events"),
        ("samples", int, "generation table's uncached passes timed"),
        ("repeats", int, "timed calls per measurement (attention, skew, local)"),
        ("rounds", int, "turns over the compared layers (attention, skew, local)"),
    ]:
        nargs = "+" if isinstance(FULL[name], list) else None
        parser.add_argument(
            f"--{name}", type=kind, nargs=nargs, help=f"{text} ({_shown(FULL[name])}; --tiny: {_shown(TINY[name])})"
        )
    parser.set_defaults(**(TINY if parser.parse_known_args()[0].tiny else FULL))
    args = parser.parse_args()
    if keras.backend.backend() != "jax":
        parser.error(f"runs on the JAX backend; KERAS_BACKEND is {keras.backend.backend()!r}")
    import jax

    keras.config.set_dtype_policy(args.dtype_policy)
    absence = flash_attention_absence(max(args.lengths))
    keras_options = {} if absence else {"flash_attention": True}
    kernel = "its default: no flash attention here" if absence else "flash attention"
    print(f"backend: {keras.backend.backend()}; devices: {jax.devices()}; dtype policy: {args.dtype_policy}")
    print(f"Keras flash attention: {'no (' + absence + ')' if absence else 'yes'}")
    if "attention" in args.tables:
        attention_table(args.lengths, keras_options, kernel, args.repeats, args.rounds)
    if "skew" in args.tables:
        skew_table(args.lengths, keras_options, kernel, args.repeats, args.rounds)
    if "local" in args.tables:
        results = local.measure_variants(args.image_size, args.repeats, args.rounds, float("inf"))
        local.comparison_table(results, args.image_size)
    if "training" in args.tables:
        training_table(args.presets, args.train_batch, args.train_length, args.train_steps, args.dtype_policy)
    if "generation" in args.tables:
        generation_table(args.generation_preset, args.batches, args.primer, args.events, args.samples)


if __name__ == "__main__":
    keras.utils.set_random_seed(0)
    main()
