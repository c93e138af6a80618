"""Image quality against a reference: PSNR and SSIM (scikit-image), averaged
over images, for values 0..255."""

import numpy as np

DATA_RANGE = 255.0
# An image equal to its reference has an infinite PSNR; it counts as this many dB.
MAX_PSNR = 100.0


def _checked_pairs(reference, images):
    reference, images = np.asarray(reference, "float64"), np.asarray(images, "float64")
    if reference.shape != images.shape or reference.ndim != 4:
        raise ValueError(
            "`reference` and `images` must both be [count, height, width, channels]. "
            f"Received: {reference.shape} and {images.shape}"
        )
    return reference, images


def psnr_per_image(reference, images):
    """Peak signal-to-noise ratio (dB) of each image against its reference
    (`skimage.metrics.peak_signal_noise_ratio`, data range 255), at most
    `MAX_PSNR`."""
    from skimage.metrics import peak_signal_noise_ratio

    reference, images = _checked_pairs(reference, images)
    values = []
    for true, test in zip(reference, images):
        if np.array_equal(true, test):
            values.append(MAX_PSNR)
            continue
        values.append(min(MAX_PSNR, peak_signal_noise_ratio(true, test, data_range=DATA_RANGE)))
    return np.array(values)


def ssim_per_image(reference, images):
    """Structural similarity of each image against its reference
    (`skimage.metrics.structural_similarity`, data range 255, 7 x 7 window,
    channels averaged)."""
    from skimage.metrics import structural_similarity

    reference, images = _checked_pairs(reference, images)
    if min(reference.shape[1:3]) < 7:
        raise ValueError(f"SSIM needs images of at least 7 x 7. Received: {reference.shape[1:3]}")
    return np.array(
        [
            structural_similarity(true, test, data_range=DATA_RANGE, channel_axis=-1)
            for true, test in zip(reference, images)
        ]
    )


def psnr(reference, images):
    """Mean PSNR (dB) over the images."""
    return float(np.mean(psnr_per_image(reference, images)))


def ssim(reference, images):
    """Mean SSIM over the images."""
    return float(np.mean(ssim_per_image(reference, images)))
