"""Image data: scikit-learn's digits offline, tensorflow-datasets otherwise.

Pixels are int32 values 0..255, `[count, height, width, channels]`.
"""

import numpy as np

TFDS_IMAGE_DATASETS = {
    # name: (tfds name, image key, label key)
    "cifar10": ("cifar10", "image", "label"),
    "imagenet32": ("downsampled_imagenet/32x32", "image", None),
}


def digits(holdout_fraction=0.2, seed=0):
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
    test_count = int(round(holdout_fraction * len(pixels)))
    test, train = order[:test_count], order[test_count:]
    return (pixels[train], data.target[train]), (pixels[test], data.target[test])


def tfds_images(name, split, data_dir=None):
    """Images and labels (`None` for unlabelled sets) of a tensorflow-datasets
    image set, as numpy arrays. Needs the data set downloaded or prepared in
    `data_dir`.
    """
    if name not in TFDS_IMAGE_DATASETS:
        raise ValueError(f"Unknown dataset {name!r}; valid: {sorted(TFDS_IMAGE_DATASETS)}")
    import tensorflow_datasets as tfds

    tfds_name, image_key, label_key = TFDS_IMAGE_DATASETS[name]
    examples = tfds.as_numpy(tfds.load(tfds_name, split=split, data_dir=data_dir, batch_size=-1))
    labels = examples[label_key].astype("int32") if label_key else None
    return examples[image_key].astype("int32"), labels


def marginal_bits_per_dim(train_pixels, test_pixels):
    """Bits/dim of the held-out pixels under the training pixel-value histogram
    (add-one smoothed): what a model ignoring all structure achieves."""
    counts = np.bincount(train_pixels.ravel(), minlength=256) + 1.0
    probabilities = counts / counts.sum()
    return float(-np.mean(np.log2(probabilities[test_pixels.ravel()])))
