"""PNG figures of the recipes (matplotlib, Agg backend: no display needed)."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.collections import PatchCollection  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402

PRIMER_COLOUR = "#1f77b4"
CONTINUATION_COLOUR = "#ff7f0e"
_NOTE_NAMES = ("C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B")


def note_name(pitch):
    """`60 -> "C4"` (scientific pitch notation, MIDI 60 = middle C)."""
    return f"{_NOTE_NAMES[pitch % 12]}{pitch // 12 - 1}"


def piano_roll(
    path, primer_notes, continuation_notes, *, boundary_seconds=None, title=None, labels=("primer", "continuation")
):
    """Draws notes as bars (time x pitch): the primer and the continuation in
    two colours, with a dashed line where the continuation starts.

    Args:
        path: the PNG file to write.
        primer_notes, continuation_notes: sequences of `(start_seconds,
            end_seconds, pitch, velocity)`.
        boundary_seconds: where the primer ends, drawn as a vertical line.
        title: the figure title.
        labels: the legend's names of the two kinds of notes.

    Returns:
        `path`.
    """
    figure, axes = plt.subplots(figsize=(14, 5), dpi=100)
    all_notes = list(primer_notes) + list(continuation_notes)
    for notes, colour in ((primer_notes, PRIMER_COLOUR), (continuation_notes, CONTINUATION_COLOUR)):
        bars = [Rectangle((start, pitch - 0.4), max(end - start, 1e-3), 0.8) for start, end, pitch, _ in notes]
        alphas = [0.35 + 0.65 * velocity / 127.0 for *_, velocity in notes]
        collection = PatchCollection(bars, facecolor=colour, edgecolor="none")
        collection.set_alpha(None)
        if bars:
            colours = np.tile(matplotlib.colors.to_rgba(colour), (len(bars), 1))
            colours[:, 3] = alphas
            collection.set_facecolor(colours)
        axes.add_collection(collection)
    if all_notes:
        pitches = [pitch for _, _, pitch, _ in all_notes]
        end = max(end for _, end, _, _ in all_notes)
        axes.set_xlim(0, max(end, 1e-3) * 1.01)
        axes.set_ylim(min(pitches) - 2, max(pitches) + 2)
        low, high = min(pitches) - 2, max(pitches) + 2
        octaves = [p for p in range(low, high + 1) if p % 12 == 0]
        axes.set_yticks(octaves, [note_name(p) for p in octaves])
    if boundary_seconds is not None:
        axes.axvline(boundary_seconds, color="black", linestyle="--", linewidth=1)
    axes.set_xlabel("time (seconds)")
    axes.set_ylabel("pitch")
    axes.grid(axis="y", alpha=0.2)
    axes.legend(
        handles=[
            Patch(color=PRIMER_COLOUR, label=f"{labels[0]} ({len(primer_notes)} notes)"),
            Patch(color=CONTINUATION_COLOUR, label=f"{labels[1]} ({len(continuation_notes)} notes)"),
        ],
        loc="upper right",
    )
    if title:
        axes.set_title(title)
    return save_figure(figure, path)


def attention_heads(path, weights, query_positions, *, boundary=None, title=None, key_labels="event"):
    """Draws each head's attention weights of some queries over the keys, one
    panel per head (rows: queries, columns: keys).

    Args:
        path: the PNG file to write.
        weights: `[heads, queries, keys]` attention weights (rows sum to 1).
        query_positions: the position of each query row (for the labels).
        boundary: a key position drawn as a dashed line (e.g. where the
            primer ends).
        title: the figure title.
        key_labels: what a key position is called on the x axis.

    Returns:
        `path`.
    """
    weights = np.asarray(weights, dtype="float32")
    if weights.ndim != 3:
        raise ValueError(f"`weights` must be [heads, queries, keys], got shape {weights.shape}")
    heads, queries, keys = weights.shape
    figure, axes = plt.subplots(heads, 1, figsize=(14, 1.0 + 1.6 * heads), dpi=100, squeeze=False)
    first, last = int(query_positions[0]), int(query_positions[-1])
    for head, axis in enumerate(axes[:, 0]):
        # Square root: long-range weights are small but are what the figure is about.
        shown = np.sqrt(np.clip(weights[head], 0.0, None))
        image = axis.imshow(
            shown,
            aspect="auto",
            interpolation="nearest",
            cmap="magma",
            extent=(-0.5, keys - 0.5, last + 0.5, first - 0.5),
            vmin=0.0,
            vmax=max(float(shown.max()), 1e-6),
        )
        if boundary is not None:
            axis.axvline(boundary - 0.5, color="cyan", linestyle="--", linewidth=1)
        axis.set_ylabel(f"head {head + 1}\nquery")
        figure.colorbar(image, ax=axis, pad=0.01, label="sqrt(weight)")
    axes[-1, 0].set_xlabel(f"key {key_labels} position")
    if title:
        axes[0, 0].set_title(title)
    return save_figure(figure, path)


def token_attention(
    path, weights, query_tokens, key_tokens, *, title=None, query_label="target", key_label="source"
):
    """Draws each head's attention of the query tokens over the key tokens,
    one panel per head side by side, the tokens written on the axes (e.g. a
    translation's cross-attention: target pieces over source pieces).

    Args:
        path: the PNG file to write.
        weights: `[heads, queries, keys]` attention weights (rows sum to 1).
        query_tokens: one label per query row.
        key_tokens: one label per key column.
        title: the figure title.
        query_label, key_label: the axis names of the queries and the keys.

    Returns:
        `path`.
    """
    weights = np.asarray(weights, dtype="float32")
    if weights.ndim != 3 or weights.shape[1:] != (len(query_tokens), len(key_tokens)):
        raise ValueError(
            f"`weights` must be [heads, {len(query_tokens)} queries, {len(key_tokens)} keys], "
            f"got shape {weights.shape}"
        )
    heads, queries, keys = weights.shape
    panel = (1.0 + 0.28 * keys, 1.0 + 0.28 * queries)
    figure, axes = plt.subplots(
        1, heads, figsize=(max(4.0, panel[0]) * heads, max(3.0, panel[1]) + 1.0), dpi=100, squeeze=False
    )
    for head, axis in enumerate(axes[0]):
        axis.imshow(weights[head], aspect="auto", interpolation="nearest", cmap="magma", vmin=0.0, vmax=1.0)
        axis.set_xticks(range(keys), key_tokens, rotation=90, fontsize=8)
        axis.set_yticks(range(queries), query_tokens if head == 0 else [""] * queries, fontsize=8)
        axis.set_title(f"head {head + 1}")
    axes[0, 0].set_ylabel(query_label)
    for axis in axes[0]:
        axis.set_xlabel(key_label)
    if title:
        figure.suptitle(title)
    return save_figure(figure, path)


def save_figure(figure, path):
    """Lays `figure` out, writes it to `path` as PNG, frees it; returns `path`."""
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path
