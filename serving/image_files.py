"""Image files and grids for the image commands of the client (Pillow)."""

from __future__ import annotations

import numpy as np


def read_image(path, channels=None):
    """A PNG/JPEG file as uint8 `[H, W, C]`; `channels` 1 or 3 converts (default:
    1 for greyscale files, else 3)."""
    from PIL import Image

    with Image.open(path) as image:
        if channels is None:
            channels = 1 if image.mode in ("1", "L", "I", "I;16", "F") else 3
        if channels not in (1, 3):
            raise ValueError(f"`channels` must be 1 or 3. Received: channels={channels}")
        image = image.convert("L" if channels == 1 else "RGB")
        array = np.asarray(image, dtype=np.uint8)
    return array[..., None] if channels == 1 else array


def image_grid(pixels, columns=None, border=2):
    """`[B, H, W, C]` uint8 images tiled into one `[rows*H', columns*W', C]` image."""
    pixels = np.asarray(pixels)
    if pixels.ndim != 4:
        raise ValueError(f"`pixels` must be [B, H, W, C]. Received shape {pixels.shape}")
    count, height, width, channels = pixels.shape
    columns = columns or int(np.ceil(np.sqrt(count)))
    rows = int(np.ceil(count / columns))
    grid = np.full(
        (rows * (height + border) + border, columns * (width + border) + border, channels),
        255,
        dtype=np.uint8,
    )
    for index in range(count):
        top = border + (index // columns) * (height + border)
        left = border + (index % columns) * (width + border)
        grid[top : top + height, left : left + width] = pixels[index]
    return grid


def write_image(path, pixels, scale=1):
    """Writes `[H, W, C]` uint8 (C = 1 or 3) as an image file (PNG by extension),
    each pixel repeated `scale` times in both directions."""
    from PIL import Image

    pixels = np.asarray(pixels, dtype=np.uint8)
    if scale > 1:
        pixels = pixels.repeat(scale, axis=0).repeat(scale, axis=1)
    mode = {1: "L", 3: "RGB"}.get(pixels.shape[-1])
    if mode is None:
        raise ValueError(f"Images need 1 or 3 channels. Received shape {pixels.shape}")
    Image.fromarray(pixels[..., 0] if mode == "L" else pixels, mode=mode).save(path)

