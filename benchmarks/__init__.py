"""Benchmark programs, run from the repository root as modules:
`python -m benchmarks.attention` (see each module's docstring)."""

import os

# TensorFlow keeps the CPU allocator's peak-memory statistics only with its
# BFC allocator, chosen when TensorFlow starts: set before any benchmark imports it.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
