"""PNG figures of the image recipes: grids of images, attention over an image
(matplotlib, Agg backend: no display needed)."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from recipes.common.plots import save_figure  # noqa: E402

CELL_INCHES = 1.1


def _show(axis, image):
    image = np.asarray(image)
    if image.ndim == 3 and image.shape[-1] == 1:
        axis.imshow(image[..., 0], cmap="gray", vmin=0, vmax=255, interpolation="nearest")
    else:
        axis.imshow(image.astype("uint8"), interpolation="nearest")
    axis.set_xticks([])
    axis.set_yticks([])


def image_grid(path, rows, *, column_titles=None, row_titles=None, title=None):
    """Draws images in a grid, each cell scaled to the same size.

    Args:
        path: the PNG file to write.
        rows: a list of rows, each a list of uint8 `[H, W, C]` images
            (C = 1 or 3; sizes may differ between columns).
        column_titles: optional text above each column.
        row_titles: optional text left of each row.
        title: the figure title.

    Returns:
        `path`.
    """
    if not rows or not rows[0]:
        raise ValueError("`rows` must hold at least one image")
    count, columns = len(rows), max(len(row) for row in rows)
    figure, axes = plt.subplots(
        count, columns, figsize=(CELL_INCHES * columns + 0.6, CELL_INCHES * count + 0.6),
        dpi=100, squeeze=False,
    )
    for r, row in enumerate(rows):
        for c in range(columns):
            axis = axes[r, c]
            if c < len(row):
                _show(axis, row[c])
            else:
                axis.axis("off")
        if row_titles:
            axes[r, 0].set_ylabel(str(row_titles[r]), fontsize=8)
    for c, text in enumerate(column_titles or ()):
        axes[0, c].set_title(str(text), fontsize=8)
    if title:
        figure.suptitle(title, fontsize=9)
    return save_figure(figure, path)


def attention_over_image(path, image, weights, query_pixel, *, memory_box=None, title=None):
    """Draws each head's attention weights over the image, one panel per head.

    Args:
        path: the PNG file to write.
        image: uint8 `[H, W, C]`, the image the attention ran on.
        weights: `[heads, H, W]` attention weights of one query, spread over
            the pixels (zero where the query cannot attend).
        query_pixel: `(row, column)` of the query, marked with a cross.
        memory_box: optional `(top, left, bottom, right)` (exclusive ends)
            outlined: the memory block of local attention.
        title: the figure title.

    Returns:
        `path`.
    """
    weights = np.asarray(weights, dtype="float32")
    if weights.ndim != 3 or weights.shape[1:] != tuple(np.asarray(image).shape[:2]):
        raise ValueError(
            f"`weights` must be [heads, {np.asarray(image).shape[0]}, {np.asarray(image).shape[1]}]; "
            f"got shape {weights.shape}"
        )
    heads = weights.shape[0]
    figure, axes = plt.subplots(1, heads, figsize=(2.6 * heads, 3.0), dpi=100, squeeze=False)
    grey = np.asarray(image, dtype="float32").mean(-1)
    for head, axis in enumerate(axes[0]):
        axis.imshow(grey, cmap="gray", vmin=0, vmax=255, interpolation="nearest")
        # Square root: small far weights are what the figure is about.
        shown = np.sqrt(np.clip(weights[head], 0.0, None))
        overlay = axis.imshow(
            np.ma.masked_where(shown <= 0, shown), cmap="magma", alpha=0.75,
            vmin=0.0, vmax=max(float(shown.max()), 1e-6), interpolation="nearest",
        )
        if memory_box is not None:
            top, left, bottom, right = memory_box
            axis.add_patch(
                Rectangle((left - 0.5, top - 0.5), right - left, bottom - top,
                          fill=False, edgecolor="cyan", linewidth=1.2)
            )
        axis.plot(query_pixel[1], query_pixel[0], marker="x", color="lime", markersize=8, mew=2)
        axis.set_title(f"head {head + 1}", fontsize=9)
        axis.set_xticks([])
        axis.set_yticks([])
        figure.colorbar(overlay, ax=axis, fraction=0.046, pad=0.02, label="sqrt(weight)")
    if title:
        figure.suptitle(title, fontsize=9)
    return save_figure(figure, path)
