"""Shared timing and memory measurement for the benchmark programs.

Every program times the project's layers and their anchors in one process,
on the same shapes, with the same harness, and prints ratios. On TensorFlow
the step is a `tf.function` (graph mode, as `fit` runs it on a CPU; XLA, as
`fit` runs it on an accelerator, when `KERAS_SELFATTN_BENCHMARK_XLA=1`) and peak memory
comes from the CPU/GPU allocator's statistics; on JAX the step is `jax.jit`
and peak memory is the compiled program's temporary plus output buffers.
"""

import os
import statistics
import time

import keras
import numpy as np


def forward_backward(layer, inputs, call_kwargs=None):
    """A compiled function: the layer's output summed, differentiated with
    respect to its weights and its first input. Returns the gradients."""
    call_kwargs = call_kwargs or {}
    names = list(inputs)
    if keras.backend.backend() == "jax":
        return _jax_forward_backward(layer, names, call_kwargs)
    import tensorflow as tf

    @tf.function(jit_compile=os.environ.get("KERAS_SELFATTN_BENCHMARK_XLA") == "1")
    def step(*arrays):
        with tf.GradientTape() as tape:
            tape.watch(arrays[0])
            output = layer(**dict(zip(names, arrays)), **call_kwargs)
            loss = tf.reduce_sum(tf.cast(output, "float32"))
        return tape.gradient(loss, [arrays[0]] + layer.trainable_variables)

    return step


def _jax_forward_backward(layer, names, call_kwargs):
    import jax

    def loss(trainable, first, rest):
        output, _ = layer.stateless_call(
            trainable,
            [v.value for v in layer.non_trainable_variables],
            **dict(zip(names, (first,) + tuple(rest))),
            **call_kwargs,
        )
        return output.astype("float32").sum()

    gradient = jax.jit(jax.grad(loss, argnums=(0, 1)))

    def trainable_values(arrays):
        if not layer.built:  # `stateless_call` needs the variables created.
            # A symbolic call creates them without running the layer op by op.
            symbolic = [keras.KerasTensor(array.shape, array.dtype) for array in arrays]
            layer(**dict(zip(names, symbolic)), **call_kwargs)
        return [v.value for v in layer.trainable_variables]

    def step(*arrays):
        return gradient(trainable_values(arrays), arrays[0], arrays[1:])

    step.lower = lambda *arrays: gradient.lower(trainable_values(arrays), arrays[0], arrays[1:])
    return step


def compiled(function):
    """`function` as the backend runs it in `fit`/`predict`: a `tf.function`
    graph on TensorFlow, `jax.jit` on JAX."""
    if keras.backend.backend() == "jax":
        import jax

        return jax.jit(function)
    import tensorflow as tf

    return tf.function(function)


def _block(result):
    for leaf in keras.tree.flatten(result):
        keras.ops.convert_to_numpy(leaf)


def median_seconds(step, arrays, warmup=2, repeats=10):
    """Median wall time of `step(*arrays)` after `warmup` untimed calls."""
    for _ in range(warmup):
        _block(step(*arrays))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        _block(step(*arrays))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def best_seconds(function, *args, repeats=2):
    """Fastest of `repeats` timed calls, after one untimed (tracing) call."""
    np.asarray(function(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.asarray(function(*args))
        times.append(time.perf_counter() - start)
    return min(times)


def uncached_generation_seconds(forward, batch, primer_length, events, samples, vocabulary_size, rng):
    """The time of `events` uncached generation steps after a `primer_length`
    primer, each step `forward(tokens [batch, length])` over the whole
    sequence so far: the mean of one pass at `samples` evenly spaced lengths
    (random tokens below `vocabulary_size`), times `events`."""
    lengths = np.linspace(primer_length, primer_length + events - 1, samples).astype(int)
    per_pass = [
        best_seconds(forward, rng.integers(0, vocabulary_size, (batch, n)).astype("int32")) for n in lengths
    ]
    return float(np.mean(per_pass)) * events


def peak_memory_bytes(step, arrays):
    """Peak memory one call of `step` needs above what was live before it."""
    if keras.backend.backend() == "jax":
        analysis = step.lower(*arrays).compile().memory_analysis()
        return analysis.temp_size_in_bytes + analysis.output_size_in_bytes
    import tensorflow as tf

    device = "GPU:0" if tf.config.list_logical_devices("GPU") else "CPU:0"
    _block(step(*arrays))
    tf.config.experimental.reset_memory_stats(device)
    before = tf.config.experimental.get_memory_info(device)["current"]
    _block(step(*arrays))
    return tf.config.experimental.get_memory_info(device)["peak"] - before


def measure(step, arrays, repeats=10):
    """`(seconds, peak_bytes)` of one call of `step` (a `forward_backward`)."""
    return median_seconds(step, arrays, repeats=repeats), peak_memory_bytes(step, arrays)


def measure_in_turns(cases, rounds=3, repeats=10):
    """`{name: (seconds, peak_bytes)}` for `cases` `{name: (layer, inputs, call_kwargs)}`.

    The cases are measured in turns, `rounds` times, so that a slow spell of
    a shared machine or the first call's warm-up does not fall on one case:
    the time kept is the fastest round's median, the peak the median round's.
    Each case's step is compiled once, in its first round's warm-up.
    """
    steps = {}
    for name, (layer, inputs, call_kwargs) in cases.items():
        arrays = [keras.ops.convert_to_tensor(a) for a in inputs.values()]
        steps[name] = forward_backward(layer, inputs, call_kwargs), arrays
    samples = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (step, arrays) in steps.items():
            samples[name].append(measure(step, arrays, repeats=repeats))
    return {
        name: (
            min(seconds for seconds, _ in runs),
            statistics.median(peak for _, peak in runs),
        )
        for name, runs in samples.items()
    }


def random_inputs(shape, seed=0, dtype="float32"):
    return np.random.default_rng(seed).normal(size=shape).astype(dtype)


def print_table(title, header, rows):
    """Prints a fixed-width table; floats get three significant digits."""
    cells = [[_format(v) for v in row] for row in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in cells)) for i, h in enumerate(header)]
    mode = " + XLA" if os.environ.get("KERAS_SELFATTN_BENCHMARK_XLA") == "1" else ""
    print(f"\n{title}  (backend: {keras.backend.backend()}{mode})")
    print("  ".join(str(h).rjust(w) for h, w in zip(header, widths)))
    for row in cells:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths)))


def _format(value):
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def megabytes(num_bytes):
    return num_bytes / 2**20
