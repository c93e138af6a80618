"""Local 1D and 2D attention against global causal attention (Image Transformer).

A 32 x 32 x 3 image as 3072 sub-pixel positions (channels folded into the
width: 32 x 96), model width 256, 4 heads: forward+backward time and peak
memory of

- causal local 1D attention, block 256;
- causal local 2D attention, query (8, 32), flange (8, 16) on 32 x 96;
- global causal attention (`keras_selfattn.layers.MultiHeadAttention`,
  `use_causal_mask=True`) over the same 3072 positions,

with the ratios to global attention; then how each grows from 16 x 16 to
64 x 64 images (768 to 12288 positions).

Run: `.venv/bin/python -m benchmarks.local` (`KERAS_BACKEND=jax` for JAX).
`--comparison-size N` compares on N x N x 3 images instead of 32 x 32 x 3.
`--skip-global-above N` leaves global attention out beyond N positions
(64 x 64 x 3 needs about 7 GB and several seconds a step on a CPU).
"""

import argparse

from benchmarks.common import measure_in_turns, megabytes, print_table, random_inputs
from keras_selfattn.layers.local_attention_1d import LocalAttention1D
from keras_selfattn.layers.local_attention_2d import LocalAttention2D
from keras_selfattn.layers.multi_head_attention import MultiHeadAttention

WIDTH, HEADS, CHANNELS = 256, 4, 3
BLOCK_LENGTH = 256
QUERY_SHAPE, MEMORY_FLANGE = (8, 32), (8, 16)


def variants(image_size):
    """`{name: (layer, inputs, call_kwargs, memory positions per query)}` for one image size."""
    height, width = image_size, image_size * CHANNELS
    length = height * width
    sequence = random_inputs((1, length, WIDTH))
    image = sequence.reshape(1, height, width, WIDTH)
    key_dim = WIDTH // HEADS
    (qh, qw), (fh, fw) = QUERY_SHAPE, MEMORY_FLANGE
    return {
        "local 1D causal, block 256": (
            LocalAttention1D(HEADS, key_dim, BLOCK_LENGTH),
            {"query": sequence},
            {"use_causal_mask": True},
            2 * BLOCK_LENGTH,
        ),
        f"local 2D causal, query {QUERY_SHAPE}, flange {MEMORY_FLANGE}": (
            LocalAttention2D(HEADS, key_dim, QUERY_SHAPE, MEMORY_FLANGE),
            {"query": image},
            {"use_causal_mask": True},
            fh * (qw + 2 * fw) + qh * (qw + fw),
        ),
        "global causal (MultiHeadAttention)": (
            MultiHeadAttention(HEADS, key_dim),
            {"query": sequence, "value": sequence},
            {"use_causal_mask": True},
            length,
        ),
    }


def measure_variants(image_size, repeats, rounds, skip_global_above):
    """`{name: (seconds, peak_bytes, keys per query)}`.

    The variants are measured in turns (`measure_in_turns`).
    """
    length = image_size * image_size * CHANNELS
    chosen = {
        name: variant
        for name, variant in variants(image_size).items()
        if not (name.startswith("global") and length > skip_global_above)
    }
    results = measure_in_turns(
        {name: variant[:3] for name, variant in chosen.items()}, rounds=rounds, repeats=repeats
    )
    return {name: results[name] + (chosen[name][3],) for name in chosen}


def comparison_table(results, size):
    global_seconds, global_peak, _ = results["global causal (MultiHeadAttention)"]
    rows = []
    for name, (seconds, peak, memory) in results.items():
        rows.append(
            [
                name,
                memory,
                seconds * 1e3,
                megabytes(peak),
                global_seconds / seconds,
                peak / global_peak,
            ]
        )
    print_table(
        f"{size}x{size}x{CHANNELS} image = {size * size * CHANNELS} sub-pixel positions, "
        f"width {WIDTH}, {HEADS} heads, batch 1, forward+backward",
        ["variant", "keys/query", "ms", "peak MB", "speed-up vs global", "memory / global"],
        rows,
    )


def scaling_table(by_size):
    smallest = min(by_size)
    names = list(next(iter(by_size.values())))
    rows = []
    for name in names:
        base = by_size[smallest].get(name)
        for size, results in sorted(by_size.items()):
            if name not in results:
                rows.append([name, f"{size}x{size}", size * size * CHANNELS, "skipped", "", "", ""])
                continue
            seconds, peak, _ = results[name]
            rows.append(
                [
                    name,
                    f"{size}x{size}",
                    size * size * CHANNELS,
                    seconds * 1e3,
                    megabytes(peak),
                    seconds / base[0],
                    peak / base[1],
                ]
            )
    print_table(
        f"Scaling with the image (x{CHANNELS} sub-pixels), "
        f"growth relative to {smallest}x{smallest}",
        ["variant", "image", "positions", "ms", "peak MB", "time x", "memory x"],
        rows,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5, help="turns for the comparison image")
    parser.add_argument("--skip-global-above", type=int, default=12288)
    parser.add_argument(
        "--comparison-size", type=int, default=32, help="height and width of the comparison image (always measured)"
    )
    args = parser.parse_args()

    by_size = {}
    for size in sorted(set(args.sizes) | {args.comparison_size}):
        # Larger images get fewer timed calls: global attention on 64 x 64 x 3
        # takes seconds per step on a CPU.
        repeats = args.repeats if size <= 32 else 1
        rounds = args.rounds if size == args.comparison_size else 1
        by_size[size] = measure_variants(size, repeats, rounds, args.skip_global_above)
    comparison_table(by_size[args.comparison_size], args.comparison_size)
    scaling_table(by_size)


if __name__ == "__main__":
    main()
