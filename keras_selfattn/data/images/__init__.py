"""Image data: scikit-learn's digits offline, any folder of PNG/JPEG files,
tensorflow-datasets otherwise.

Pixels are int32 values 0..255, `[count, height, width, channels]`.
The super-resolution patches of scikit-image's photos and faces are in
`keras_selfattn.data.images.patches`; PSNR and SSIM, which score a model's
images against these, in `keras_selfattn.models.metrics`.
"""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

TFDS_IMAGE_DATASETS = {
    # name: (tfds name, image key, label key)
    "cifar10": ("cifar10", "image", "label"),
    "imagenet32": ("downsampled_imagenet/32x32", "image", None),
    "celeb_a": ("celeb_a", "image", None),
}
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
FIT_MODES = ("crop", "resize")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def digits(held_out_fraction=0.2, seed=0):
    """scikit-learn's 1,797 real 8x8 handwritten digits, split for held-out use.

    The 17 grey levels 0..16 are spread over 0..255 (`round(v * 255 / 16)`).

    Returns:
        `((train_pixels, train_labels), (test_pixels, test_labels))`, pixels
        `[count, 8, 8, 1]` int32.
    """
    from sklearn.datasets import load_digits

    data = load_digits()
    pixels = np.round(data.images * 255.0 / 16.0).astype("int32")[..., None]
    order = np.random.default_rng(seed).permutation(len(pixels))
    test_count = int(round(held_out_fraction * len(pixels)))
    test, train = order[:test_count], order[test_count:]
    return (pixels[train], data.target[train]), (pixels[test], data.target[test])


# ------------------------------------------------------------ image folders


@dataclass
class ImageFolder:
    """The images read from a folder.

    Attributes:
        pixels: int32 `[count, height, width, channels]`, values 0..255.
        labels: int32 `[count]` class ids (index into `class_names`), or
            `None` without `labels_from_folders`.
        class_names: the sub-folder name of each class id (sorted), or `()`.
        paths: the file each image came from.
        skipped: `[(path, reason)]` of the files that were not read.
    """

    pixels: np.ndarray
    labels: np.ndarray | None
    class_names: tuple = ()
    paths: list = field(default_factory=list)
    skipped: list = field(default_factory=list)


def find_image_files(folder):
    """Every PNG/JPEG file under `folder` (recursively), sorted."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise ValueError(f"`image_dir` must be a folder of PNG/JPEG files. Received: {str(folder)!r} is not a folder")
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def read_image(path, size, channels=3, fit="crop"):
    """One image file as uint8 `[height, width, channels]` (Pillow).

    A 16-bit PNG is scaled to 8 bits first: each sample `v` in 0..65535
    becomes `round(v * 255 / 65535)` (`(v + 128) // 257`; no value falls
    half-way), so 0 stays 0, 65535 becomes 255 and every 8-bit value `b`
    written as 16 bits (`b * 257`) comes back as `b`.

    Args:
        path: a PNG or JPEG file.
        size: `(height, width)` of the result.
        channels: 1 (grey) or 3 (RGB); other modes (palette, alpha, CMYK)
            are converted.
        fit: `"crop"`: the largest centred crop of the target's aspect ratio,
            resized (nothing stretched); `"resize"`: the whole picture resized
            (stretched when the aspect ratios differ).

    Raises:
        OSError: for a file Pillow cannot decode.
    """
    from PIL import Image, ImageOps

    _check_fit(fit, channels)
    height, width = size
    with Image.open(path) as image:
        image.load()  # decodes now, so a truncated file fails here
        if _is_16_bit_png(path):
            image = _png_to_8_bits(path, image.info)
        image = ImageOps.exif_transpose(image).convert("L" if channels == 1 else "RGB")
    if fit == "crop":
        image = ImageOps.fit(image, (width, height), method=Image.Resampling.LANCZOS)
    else:
        image = image.resize((width, height), resample=Image.Resampling.LANCZOS)
    pixels = np.asarray(image, dtype="uint8")
    return pixels[..., None] if channels == 1 else pixels


def _is_16_bit_png(path):
    """Whether `path` is a PNG of 16 bits a sample (its IHDR chunk's bit depth)."""
    with open(path, "rb") as handle:
        head = handle.read(25)
    return len(head) == 25 and head[:8] == PNG_SIGNATURE and head[12:16] == b"IHDR" and head[24] == 16


def _png_to_8_bits(path, info):
    """A 16-bit PNG as an 8-bit Pillow image (L, LA, RGB or RGBA) keeping its
    `info` (EXIF orientation included): `round(v * 255 / 65535)` a sample.
    Pillow alone clips 16-bit grey to 255 and truncates 16-bit colour."""
    import tensorflow as tf
    from PIL import Image

    try:
        samples = tf.io.decode_png(Path(path).read_bytes(), channels=0, dtype=tf.uint16).numpy()
    except tf.errors.InvalidArgumentError as error:  # a PNG Pillow read but libpng rejects
        raise OSError(f"cannot decode 16-bit PNG {str(path)!r}: {error.message}") from None
    eight_bits = ((samples.astype("uint32") + 128) // 257).astype("uint8")
    image = Image.fromarray(eight_bits[..., 0] if eight_bits.shape[-1] == 1 else eight_bits)
    image.info.update(info)
    return image


def _check_fit(fit, channels):
    if fit not in FIT_MODES:
        raise ValueError(f"Unknown `fit` {fit!r}; valid values: {', '.join(FIT_MODES)}")
    if channels not in (1, 3):
        raise ValueError(f"`channels` must be 1 (grey) or 3 (RGB). Received: channels={channels!r}")


def read_image_folder(folder, size, channels=3, *, labels_from_folders=False, fit="crop", log=None):
    """Reads every PNG/JPEG file under `folder` at one size.

    Unreadable files are skipped and named in `skipped` (and passed to
    `log`, if given, one line each); the others are read.

    Args:
        folder: the folder, searched recursively.
        size: `(height, width)` of every image.
        channels: 1 (grey) or 3 (RGB).
        labels_from_folders: label each image by the first sub-folder it is
            in (`folder/<class>/.../file.png`); files directly in `folder`
            are then skipped.
        fit: `"crop"` or `"resize"`, as in `read_image`.
        log: optional callable taking one message string.

    Returns:
        An `ImageFolder`.

    Raises:
        ValueError: if `folder` is not a folder, or holds no readable image
            (or, with labels, fewer than two classes).
    """
    _check_fit(fit, channels)
    root = Path(folder).expanduser()
    files = find_image_files(root)
    if not files:
        raise ValueError(
            f"`image_dir` {str(root)!r} holds no PNG/JPEG file ({', '.join(IMAGE_SUFFIXES)})"
        )
    images, paths, class_of, skipped = [], [], [], []
    for path in files:
        relative = path.relative_to(root)
        if labels_from_folders and len(relative.parts) < 2:
            skipped.append((path, "not inside a class sub-folder"))
            continue
        try:
            images.append(read_image(path, size, channels, fit))
        except (OSError, ValueError, SyntaxError) as error:  # PIL raises all three on broken files
            skipped.append((path, f"unreadable image ({type(error).__name__}: {error})"))
            continue
        paths.append(path)
        class_of.append(relative.parts[0] if labels_from_folders else None)
    if log is not None:
        for path, reason in skipped:
            log(f"skipped {path}: {reason}")
    if not images:
        raise ValueError(f"`image_dir` {str(root)!r}: none of its {len(files)} image files could be read")
    labels, class_names = None, ()
    if labels_from_folders:
        class_names = tuple(sorted(set(class_of)))
        if len(class_names) < 2:
            raise ValueError(
                f"`labels_from_folders` needs at least two class sub-folders in {str(root)!r}. "
                f"Received: {list(class_names)}"
            )
        index = {name: i for i, name in enumerate(class_names)}
        labels = np.array([index[name] for name in class_of], dtype="int32")
    pixels = np.stack(images).astype("int32")
    return ImageFolder(pixels, labels, class_names, paths, skipped)


def split_held_out(count, held_out_fraction=0.2, seed=0):
    """`(train_indices, test_indices)`: a seeded random `held_out_fraction`
    of `range(count)` held out (at least one of each when `count >= 2`)."""
    if not 0 < held_out_fraction < 1:
        raise ValueError(f"`held_out_fraction` must be in (0, 1). Received: {held_out_fraction!r}")
    if count < 2:
        raise ValueError(f"Splitting needs at least 2 images to hold one out. Received: {count}")
    order = np.random.default_rng(seed).permutation(count)
    test_count = min(max(1, int(round(held_out_fraction * count))), count - 1)
    return np.sort(order[test_count:]), np.sort(order[:test_count])


# ------------------------------------------------------ tensorflow-datasets


def tfds_images(name, split, data_dir=None, size=None, max_examples=None):
    """Images and labels (`None` for unlabelled sets) of a tensorflow-datasets
    image set, as numpy arrays. A data set not prepared in `data_dir` is
    downloaded and prepared there first (`download_and_prepare`).

    Args:
        name: a key of `TFDS_IMAGE_DATASETS` (`celeb_a`: the 218 x 178
            CelebA faces).
        split: a tfds split, e.g. `"train"` or `"test[:1000]"`.
        data_dir: where tfds keeps its prepared data.
        size: optional `(height, width)`: each image's largest centred crop
            of that aspect ratio, area-resized (CelebA to 32 x 32, say).
        max_examples: read at most this many.

    Raises:
        FileNotFoundError: the data set is not prepared in `data_dir` and
            downloading or preparing it failed (offline, a dead link, a
            checksum, a full disk); the message names the folder and the cause.
    """
    if name not in TFDS_IMAGE_DATASETS:
        raise ValueError(f"Unknown dataset {name!r}; valid: {sorted(TFDS_IMAGE_DATASETS)}")
    import tensorflow as tf
    import tensorflow_datasets as tfds

    tfds_name, image_key, label_key = TFDS_IMAGE_DATASETS[name]
    builder = tfds.builder(tfds_name, data_dir=data_dir)
    if not builder.is_prepared():
        _download_and_prepare(builder, tfds_name)
    dataset = builder.as_dataset(split=split)
    if max_examples is not None:
        dataset = dataset.take(max_examples)

    def pick(example):
        image = example[image_key]
        if size is not None:
            image = crop_and_resize(image, size)
        label = example[label_key] if label_key else tf.zeros((), tf.int64)
        return tf.cast(image, tf.int32), tf.cast(label, tf.int32)

    images, labels = [], []
    for image_batch, label_batch in tfds.as_numpy(dataset.map(pick).batch(1024)):
        images.append(image_batch)
        labels.append(label_batch)
    if not images:
        raise ValueError(f"tfds {tfds_name!r} split {split!r} is empty")
    return np.concatenate(images), np.concatenate(labels) if label_key else None


def _download_and_prepare(builder, tfds_name):
    """`builder.download_and_prepare()`; its failures to fetch or write the
    data become a `FileNotFoundError` (the data is not there), others propagate."""
    import tensorflow as tf
    from tensorflow_datasets.core.download.download_manager import NonMatchingChecksumError
    from tensorflow_datasets.core.download.extractor import ExtractError
    from tensorflow_datasets.core.download.util import DownloadError

    try:
        builder.download_and_prepare()
    except (OSError, DownloadError, NonMatchingChecksumError, ExtractError, tf.errors.OpError) as error:
        # OSError: no network (requests' errors are OSErrors), no space, no permission.
        first_line = (str(error).strip().splitlines() or [""])[0][:300]
        raise FileNotFoundError(
            f"tensorflow-datasets {tfds_name!r} is not prepared in {builder.data_dir_root} and could not be "
            f"downloaded and prepared there ({type(error).__name__}: {first_line})"
        ) from error


def crop_and_resize(image, size):
    """The largest centred crop of `image [H, W, C]` with the aspect ratio of
    `size`, area-resized to `size` (a TensorFlow op, for tf.data)."""
    import tensorflow as tf

    height, width = size
    shape = tf.shape(image)
    scale = tf.minimum(shape[0] / height, shape[1] / width)
    crop_height = tf.cast(tf.floor(height * scale), tf.int32)
    crop_width = tf.cast(tf.floor(width * scale), tf.int32)
    top, left = (shape[0] - crop_height) // 2, (shape[1] - crop_width) // 2
    crop = image[top:top + crop_height, left:left + crop_width]
    resized = tf.image.resize(tf.cast(crop, tf.float32), size, method="area")
    return tf.cast(tf.clip_by_value(tf.round(resized), 0, 255), tf.uint8)


def marginal_bits_per_dim(train_pixels, test_pixels):
    """Bits/dim of the held-out pixels under the training pixel-value histogram
    (add-one smoothed): what a model ignoring all structure achieves."""
    counts = np.bincount(train_pixels.ravel(), minlength=256) + 1.0
    probabilities = counts / counts.sum()
    return float(-np.mean(np.log2(probabilities[test_pixels.ravel()])))
