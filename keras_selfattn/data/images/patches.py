"""Super-resolution data that needs no download: square patches cut from
the photos bundled with scikit-image plus its `lfw_subset` faces, held out
by source picture; the low-resolution inputs and the interpolation
baselines (scikit-image).

Every photo and every face is one source: a held-out source gives no patch
to training, so the held-out numbers measure pictures never seen.
"""

from dataclasses import dataclass

import numpy as np

# The photographs bundled in the scikit-image 0.26 wheel (no download). `cat`
# is `chelsea` again; `colorwheel`, `logo` and `horse` are drawings.
PHOTOS = (
    "astronaut", "brick", "camera", "cell", "chelsea", "clock", "coffee", "coins", "grass",
    "gravel", "hubble_deep_field", "immunohistochemistry", "microaneurysms", "moon", "page",
    "retina", "rocket", "text",
)
FACES = 100  # lfw_subset(): 100 faces, then 100 non-faces
# Photos are cut at their own scale and at half of it (more content per patch).
PHOTO_SCALES = (1.0, 0.5)


@dataclass
class Patches:
    """Square image patches and the source picture of each.

    Attributes:
        pixels: int32 `[count, size, size, channels]`, values 0..255.
        sources: `[count]` str: the source picture's name (`"astronaut"`,
            `"lfw_face_017"`, ...).
    """

    pixels: np.ndarray
    sources: np.ndarray

    def __len__(self):
        return len(self.pixels)


def source_pictures(channels=1):
    """`{name: uint8 [H, W, channels]}`: the bundled photos and faces.

    Colour photos become grey (`skimage.color.rgb2gray`) for one channel;
    grey ones are repeated for three.
    """
    import skimage.data

    pictures = {name: _with_channels(getattr(skimage.data, name)(), channels) for name in PHOTOS}
    faces = skimage.data.lfw_subset()[:FACES]  # float 0..1, 25 x 25
    for index, face in enumerate(faces):
        pictures[f"lfw_face_{index:03d}"] = _with_channels(np.round(face * 255).astype("uint8"), channels)
    return pictures


def _with_channels(image, channels):
    from skimage.color import rgb2gray

    image = np.asarray(image)
    if image.ndim == 3 and image.shape[-1] == 4:
        image = image[..., :3]
    if channels == 1:
        if image.ndim == 3:
            image = np.round(rgb2gray(image) * 255)
        return image.astype("uint8")[..., None]
    if image.ndim == 2:
        image = np.repeat(image[..., None], 3, axis=-1)
    return image.astype("uint8")


def cut_patches(picture, size, max_patches=None, min_std=0.0):
    """Non-overlapping `size x size` patches of `picture [H, W, C]` (uint8).

    Patches whose pixel standard deviation is below `min_std` (flat sky or
    background, which every method restores alike) are dropped; with
    `max_patches`, that many are kept, evenly spread over the picture.
    """
    rows, columns = picture.shape[0] // size, picture.shape[1] // size
    tiles = picture[: rows * size, : columns * size].reshape(rows, size, columns, size, -1)
    tiles = tiles.transpose(0, 2, 1, 3, 4).reshape(rows * columns, size, size, picture.shape[-1])
    if min_std > 0:
        tiles = tiles[tiles.reshape(len(tiles), -1).std(axis=1) >= min_std]
    if max_patches is not None and len(tiles) > max_patches:
        tiles = tiles[np.linspace(0, len(tiles) - 1, max_patches).round().astype(int)]
    return tiles


def picture_patches(name, picture, size, max_patches_per_source=256, min_std=4.0):
    """The patches of one source: a face is resized to one patch; a photo is
    cut at each of `PHOTO_SCALES`."""
    from skimage.transform import rescale, resize

    if name.startswith("lfw_face_"):
        face = resize(picture, (size, size), order=3, preserve_range=True, anti_aliasing=False)
        return _to_uint8(face)[None]
    patches = []
    for scale in PHOTO_SCALES:
        scaled = picture if scale == 1.0 else _to_uint8(
            rescale(picture, scale, order=3, preserve_range=True, anti_aliasing=True, channel_axis=-1)
        )
        patches.append(cut_patches(scaled, size, max_patches_per_source // len(PHOTO_SCALES), min_std))
    return np.concatenate(patches)


def _to_uint8(image):
    return np.clip(np.round(image), 0, 255).astype("uint8")


def held_out_sources(names, held_out_fraction=0.2, seed=0):
    """The held-out source names: a seeded `held_out_fraction` of the photos
    and, separately, of the faces (so both kinds are in both splits)."""
    rng = np.random.default_rng(seed)
    held_out = set()
    for group in (
        [n for n in names if not n.startswith("lfw_face_")],
        [n for n in names if n.startswith("lfw_face_")],
    ):
        if len(group) < 2:
            continue
        count = min(max(1, int(round(held_out_fraction * len(group)))), len(group) - 1)
        held_out.update(rng.choice(sorted(group), count, replace=False).tolist())
    return held_out


def split_by_source(pictures, size, held_out_fraction=0.2, seed=0, **patch_options):
    """`(train, test)` `Patches` of `pictures` (`{name: [H, W, C]}`), no source
    in both. `patch_options` go to `picture_patches`."""
    held_out = held_out_sources(list(pictures), held_out_fraction, seed)
    splits = {True: ([], []), False: ([], [])}
    for name, picture in pictures.items():
        patches = picture_patches(name, picture, size, **patch_options)
        pixels, sources = splits[name in held_out]
        pixels.append(patches)
        sources.extend([name] * len(patches))
    train, test = (
        Patches(np.concatenate(pixels).astype("int32"), np.array(sources))
        for pixels, sources in (splits[False], splits[True])
    )
    return train, test


def embedded_patches(size=32, channels=1, held_out_fraction=0.2, seed=0):
    """The embedded super-resolution data: `(train, test)` `Patches` of
    scikit-image's bundled photos and `lfw_subset` faces, held out by source."""
    return split_by_source(source_pictures(channels), size, held_out_fraction, seed)


# ------------------------------------------- low resolution and baselines


def downsample(pixels, scale):
    """`[n, H, W, C]` images averaged over `scale x scale` blocks
    (`skimage.transform.downscale_local_mean`), rounded: `[n, H/s, W/s, C]`
    int32. This is how the low-resolution inputs are made."""
    from skimage.transform import downscale_local_mean

    pixels = np.asarray(pixels)
    if pixels.shape[1] % scale or pixels.shape[2] % scale:
        raise ValueError(
            f"`scale` {scale} must divide the image size {pixels.shape[1:3]}"
        )
    low = downscale_local_mean(pixels.astype("float64"), (1, scale, scale, 1))
    return np.clip(np.round(low), 0, 255).astype("int32")


UPSAMPLING_ORDERS = {"nearest": 0, "bilinear": 1, "bicubic": 3}


def upsample(low, size, method="bicubic"):
    """`[n, h, w, C]` images interpolated to `size = (H, W)`
    (`skimage.transform.resize`: nearest, bilinear or bicubic spline),
    rounded and clipped to 0..255 int32."""
    from skimage.transform import resize

    if method not in UPSAMPLING_ORDERS:
        raise ValueError(f"Unknown upsampling `method` {method!r}; valid: {', '.join(UPSAMPLING_ORDERS)}")
    low = np.asarray(low, dtype="float64")
    high = [
        resize(image, (*size, low.shape[-1]), order=UPSAMPLING_ORDERS[method],
               preserve_range=True, anti_aliasing=False, mode="edge")
        for image in low
    ]
    return np.clip(np.round(np.stack(high)), 0, 255).astype("int32")
