"""Every benchmark program runs at a tiny size, as docs/benchmarks.md runs it
(`python -m benchmarks.<name> <flags>` from the repository root), and prints
its tables with finite ratios.

The programs need a fresh process (`benchmarks/__init__.py` picks
TensorFlow's CPU allocator before TensorFlow starts), so they run in one
child process per backend, one after another with `runpy` as `python -m`
runs them: TensorFlow is imported once for all of them. The GPU benchmark
runs on JAX in a process where TensorFlow and the packages that come with
it cannot be imported, as on the GPU machine.
"""

import json
import math
import os
import re
import subprocess
import sys

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.backends("tensorflow", reason="the programs pick their backends: one stage runs them"),
]

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEPARATOR = "##### benchmark:"

# name: (tiny flags, {title prefix: ratio columns of that table}).
PROGRAMS = {
    "benchmarks.attention": (
        ["--lengths", "16"],
        {
            "Causal self-attention, forward+backward": ["time ratio", "memory ratio"],
            "One decoding step at position L": ["speed-up"],
        },
    ),
    "benchmarks.relative": (
        ["--lengths", "16", "--repeats", "1", "--rounds", "1", "--memory"],
        {
            "Relative attention, forward+backward": ["x time", "x memory"],
            "Segment memory, forward+backward": ["x time", "x memory"],
        },
    ),
    "benchmarks.relational": (
        ["--nodes", "16", "--key_dims", "8", "--edges_per_node", "1", "--repeats", "1", "--rounds", "1"],
        {"Relational attention, forward+backward": ["x time", "x memory", "x unchecked"]},
    ),
    "benchmarks.local": (
        ["--sizes", "8", "--comparison-size", "8", "--repeats", "1", "--rounds", "1"],
        {
            "8x8x3 image = 192 sub-pixel positions": ["speed-up vs global", "memory / global"],
            "Scaling with the image": ["time x", "memory x"],
        },
    ),
    "benchmarks.generation": (
        ["--quick", "--presets", "tiny", "--batches", "1", "--events", "4", "--primer", "4",
         "--positions", "8", "--step_preset", "tiny", "--image_size", "4",
         "--tables", "music", "step", "image", "long", "--long_events", "8"],
        {
            "Music: 4 events from a 4-event primer": ["speed-up", "cached vs plain"],
            "Cached step of the tiny width by position": ["vs 8"],
            "Image 4x4x3 (tiny width), sampled": ["speed-up"],
            "Long generation: tiny width": ["time vs global", "cache vs global"],
        },
    ),
    "benchmarks.serving": (
        ["--primer", "4", "--new_tokens", "4", "--requests", "1", "--long_events", "4", "--long_preset", "tiny"],
        {
            "Generation latency, C API loader": ["p50 ratio"],
            "Loader under load": [],
            "Long generation: tiny preset": ["ratio"],
        },
    ),
    "benchmarks.quantization": (
        ["--quick", "--chunks", "2", "--events", "4", "--tokens", "4", "--image_size", "4", "--rounds", "1"],
        {
            "int8 against float32: held-out metric and weights": ["file ratio", "variables ratio"],
            "int8 against float32: speed at batch 1": ["int8 / float32"],
        },
    ),
}

# The same for the programs that run on JAX.
JAX_PROGRAMS = {
    "benchmarks.gpu": (
        ["--tiny"],
        {
            "Multi-head causal self-attention, forward+backward": ["time ratio", "memory ratio"],
            "Skew relative attention against fused causal attention": ["x time", "x memory"],
            "8x8x3 image = 192 sub-pixel positions": ["speed-up vs global", "memory / global"],
            "Music training tokens per second": ["x float32"],
            "Music cached generation": ["speed-up"],
        },
    ),
}

# The GPU machine has keras, jax and numpy, and none of these.
ABSENT_ON_GPU_MACHINE = ("tensorflow", "tensorflow_text", "note_seq", "tf_keras", "tensorflow_datasets")
ABSENT = f"""
import sys
class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {ABSENT_ON_GPU_MACHINE!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Absent())
"""

# Runs each `[name, *flags]` of argv[1] (JSON) as `python -m name *flags` would.
DRIVER = f"""
import json, runpy, sys
for name, *flags in json.loads(sys.argv[1]):
    print({SEPARATOR!r}, name, flush=True)
    sys.argv = [name, *flags]
    runpy.run_module(name, run_name="__main__", alter_sys=True)
"""


def _tables(output):
    """`{title: (header, rows)}` of the tables `print_table` printed, each
    row a list of cells (`""` for an empty one)."""
    tables, lines = {}, output.splitlines()
    for index, line in enumerate(lines):
        if "  (backend: " not in line:
            continue
        header = lines[index + 1]
        # Cells are right-aligned under their header and joined by two spaces.
        columns = [(m.group(), m.end()) for m in re.finditer(r"\S+(?: \S+)*", header)]
        rows = []
        for row in lines[index + 2:]:
            if not row.strip():
                break
            starts = [0] + [end + 2 for _, end in columns[:-1]]
            rows.append([row[start:end].strip() for start, (_, end) in zip(starts, columns)])
        tables[line.split("  (backend:")[0]] = ([name for name, _ in columns], rows)
    return tables


def _is_finite(cell):
    try:
        return math.isfinite(float(cell))
    except ValueError:
        return False


def _check_tiny_runs(programs, backend, timeout, prelude=""):
    """Runs `programs` on `backend` in one child process (after the code
    `prelude`) and checks that each prints its tables with finite ratios."""
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("KERAS_SELFATTN_BENCHMARK_XLA", None)
    runs = [[name, *flags] for name, (flags, _) in programs.items()]
    result = subprocess.run(
        [sys.executable, "-c", prelude + DRIVER, json.dumps(runs)],
        cwd=REPOSITORY,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}"

    sections = re.split(rf"^{re.escape(SEPARATOR)} (\S+)\n", result.stdout, flags=re.MULTILINE)
    outputs = dict(zip(sections[1::2], sections[2::2]))
    assert list(outputs) == list(programs)
    for name, (_, expected) in programs.items():
        tables = _tables(outputs[name])
        for prefix, ratio_columns in expected.items():
            titles = [title for title in tables if title.startswith(prefix)]
            assert len(titles) == 1, f"{name}: no table {prefix!r} in\n{outputs[name]}"
            header, rows = tables[titles[0]]
            assert rows, f"{name}: {titles[0]!r} has no rows"
            for column in ratio_columns:
                assert column in header, f"{name}: {titles[0]!r} has no column {column!r}: {header}"
                cells = [row[header.index(column)] for row in rows]
                assert any(map(_is_finite, cells)), f"{name}: {column!r} has no finite ratio: {cells}"
            if "same tokens" in header:  # serving: the loader's tokens equal in-process generation's
                assert {row[header.index("same tokens")] for row in rows} == {"yes"}, outputs[name]


def test_every_benchmark_prints_its_tables_at_a_tiny_size():
    _check_tiny_runs(PROGRAMS, "tensorflow", timeout=900)


def test_gpu_benchmark_runs_on_jax_without_tensorflow_at_a_tiny_size():
    _check_tiny_runs(JAX_PROGRAMS, "jax", timeout=300, prelude=ABSENT)
