"""Benchmark programs, run from the repository root as modules:
`python -m benchmarks.attention` (see each module's docstring)."""
