"""What the image recipes (image_generation.py, super_resolution.py) share:
the data, image-folder and model flags, the model built from them and
compiled, the training pipeline and fit, held-out splits of a folder,
tensorflow-datasets reading with a clear error, temperature lists, the
report's data and model settings."""

import argparse
import math

from recipes.common import harness  # sets up the environment before Keras is imported
import keras  # noqa: E402
import numpy as np  # noqa: E402

# Presets that keep the query blocks and flanges of their paper, whatever the image size.
PAPER_PRESETS = ("celeba_paper", "celeba_refiner", "cifar10")

ATTENTION_HELP = {
    "local_1d": "local 1D: raster order cut into blocks of --block_length sub-pixels, each "
    "attending to itself and the block before",
    "local_2d": "local 2D: --block_shape blocks in block-raster order, each attending to a "
    "--memory_flange around it (above and to the left)",
    "global": "global: every earlier sub-pixel",
    "relative_local_2d": "relative local 2D: local_2d plus learned logits for each key's row and "
    "column offset from the query (2D relative attention, Bello et al. 2019)",
}


def _int_pair(minimum, expected):
    """An argparse type: `"8,8"` -> `(8, 8)`, two integers >= `minimum`."""

    def parse(text):
        try:
            values = tuple(int(part) for part in text.split(","))
        except ValueError:
            values = ()
        if len(values) != 2 or min(values) < minimum:
            raise argparse.ArgumentTypeError(f"expected {expected} as HEIGHT,WIDTH, got {text!r}")
        return values

    parse.__name__ = "HEIGHT,WIDTH"
    return parse


pair = _int_pair(1, "two positive integers")
non_negative_pair = _int_pair(0, "two integers >= 0")


def temperature_list(text):
    """`"0,0.8,1"` -> `(0.0, 0.8, 1.0)`, each finite and >= 0 (`nan` and
    `inf` are refused here, not after training)."""
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        values = ()
    if not values or not all(math.isfinite(value) and value >= 0 for value in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated finite numbers >= 0, got {text!r}")
    return values


temperature_list.__name__ = "temperatures"


# ------------------------------------------------------------------ flags


def add_data_flags(parser, *, datasets, dataset_help, **image_dir_options):
    """The "data" group: `--dataset` (one of `datasets`, the first the
    default) and the image-folder flags (`add_image_dir_flags` with
    `image_dir_options`); returns the group."""
    group = parser.add_argument_group("data")
    group.add_argument("--dataset", default=datasets[0], choices=datasets, help=dataset_help)
    add_image_dir_flags(group, **image_dir_options)
    return group


def add_image_dir_flags(group, *, labels, held_out_fraction=0.2, held_out_help=None):
    """`--image_dir`, `--fit`, `--held_out_fraction` (default `held_out_fraction`,
    help `held_out_help` for a recipe that holds out more than files) and with
    `labels` `--labels_from_folders`."""
    group.add_argument(
        "--image_dir",
        default=None,
        help="a folder of PNG/JPEG files (searched recursively) to use instead of --dataset; "
        "each image is fitted to the model's size (--fit); unreadable files are skipped, "
        "counted and named; --held_out_fraction of the files are held out",
    )
    group.add_argument(
        "--fit",
        choices=("crop", "resize"),
        default="crop",
        help="--image_dir: crop (the largest centred crop of the model's aspect ratio, resized) "
        "or resize (the whole picture, stretched)",
    )
    if labels:
        group.add_argument(
            "--labels_from_folders",
            action="store_true",
            help="--image_dir: each image's class is its first sub-folder's name "
            "(IMAGE_DIR/<class>/...); needed for --conditional",
        )
    group.add_argument(
        "--held_out_fraction",
        type=harness.fraction,
        default=held_out_fraction,
        help=held_out_help or "--image_dir: the fraction of files held out for evaluation (seeded by --seed)",
    )


def add_model_flags(parser, presets, *, default_preset, attentions):
    """The "model" group: `--attention` (one of `attentions`, the first the
    default), `--preset` (a name in `presets`: `{builder preset: what the
    recipe adds to it}`), `--block_length`, `--block_shape` (`--query_shape`
    still accepted) and `--memory_flange`; returns the group."""
    group = parser.add_argument_group("model")
    group.add_argument(
        "--attention",
        default=attentions[0],
        choices=attentions,
        help="the decoder's masked self-attention: "
        + "; ".join(ATTENTION_HELP[name] for name in attentions),
    )
    group.add_argument(
        "--preset",
        default=default_preset,
        choices=sorted(presets),
        help="model size: "
        + "; ".join(f"{name}: {_describe(name, additions)}" for name, additions in presets.items()),
    )
    group.add_argument(
        "--block_length",
        type=harness.positive_int,
        default=None,
        help="local_1d: sub-pixels per block (default: the preset's)",
    )
    harness.add_renamed_flag(
        group,
        "--block_shape",
        "--query_shape",
        type=pair,
        default=None,
        help="local_2d, relative_local_2d: query block HEIGHT,WIDTH in pixels (the width counts "
        "each pixel's channels as positions; default: the --preset's block_shape if it names one, "
        "else 8,8, capped at the image; the paper presets keep their own)",
    )
    group.add_argument(
        "--memory_flange",
        type=non_negative_pair,
        default=None,
        help="local_2d, relative_local_2d: memory flange HEIGHT,WIDTH in pixels around a query "
        "block (default: half the query block; the paper presets keep their own)",
    )
    return group


def _describe(preset, additions):
    names = {"block_pixels": "block_shape (pixels)"}
    shown = {names.get(k, k): v for k, v in additions.items()}
    base = f"keras_selfattn's {preset!r} preset"
    return base + (" with " + ", ".join(f"{k}={v}" for k, v in shown.items()) if shown else "")


def model_overrides(args, presets, image_shape):
    """Builder keyword arguments for `--preset`, `--attention`,
    `--block_length`, `--block_shape` and `--memory_flange`."""
    additions = dict(presets[args.preset])
    default_block = additions.pop("block_pixels", (8, 8))
    overrides = dict(preset=args.preset, **additions, attention=args.attention)
    height, width, channels = image_shape
    block, flange = args.block_shape, args.memory_flange
    own_blocks = args.preset in PAPER_PRESETS
    if block is None and not own_blocks:
        block = (min(default_block[0], height), min(default_block[1], width))
    if flange is None and not own_blocks:
        base = block if block is not None else (height, width)
        flange = (base[0] // 2, base[1] // 2)
    if block is not None:
        overrides["block_shape"] = (block[0], block[1] * channels)
    if flange is not None:
        overrides["memory_flange"] = (flange[0], flange[1] * channels)
    if args.block_length is not None:
        overrides["block_length"] = args.block_length
    return overrides


def build_model(args, presets, builder, *shapes, image_shape, adam_options=None, **options):
    """`builder(*shapes, **options)` with the model flags' overrides
    (`model_overrides` for `image_shape`), compiled for pixels: Adam at
    `--learning_rate` (plus `adam_options`), the pixels' cross-entropy and
    bits/dim. A configuration the builder refuses is a `UsageError` naming
    the model flags."""
    from keras_selfattn.models import BitsPerDimension, MaskedSparseCategoricalCrossentropy

    overrides = model_overrides(args, presets, image_shape)
    try:
        model = builder(*shapes, **options, **overrides)
    except ValueError as error:
        raise harness.UsageError(
            f"--preset / --attention / --block_length / --block_shape / --memory_flange: {error}"
        ) from None
    model.compile(
        optimizer=keras.optimizers.Adam(args.learning_rate, **(adam_options or {})),
        loss=MaskedSparseCategoricalCrossentropy(pad_id=None),
        metrics=[BitsPerDimension()],
    )
    return model


# --------------------------------------------------------------- training


def training_dataset(inputs, batch_size, seed, transform=None):
    """Shuffled, repeated batches of `(inputs, target pixels)`, each example
    passed through `transform(example, target)` first when given."""
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices((inputs, inputs["pixels"]))
    dataset = dataset.shuffle(len(inputs["pixels"]), seed=seed).repeat()
    if transform is not None:
        dataset = dataset.map(transform)
    return dataset.batch(batch_size, drop_remainder=True).prefetch(2)


def fit(args, run, model, train, validation, callbacks, transform=None):
    """`run.fit` on `training_dataset` of the inputs `train` (`--batch_size`,
    `--seed`, `transform`), validated on the inputs `validation` (none when
    `None`); returns the `History`."""
    return run.fit(
        model, training_dataset(train, args.batch_size, args.seed, transform),
        validation_data=None if validation is None else (validation, validation["pixels"]),
        callbacks=callbacks,
    )


# ------------------------------------------------------------------- data


def image_dir_split(args, run, size, channels):
    """`((train_pixels, train_labels), (test_pixels, test_labels),
    class_names)` of `--image_dir`, `--held_out_fraction` of the files held
    out; labels are `None` (and `class_names` empty) without
    `--labels_from_folders`."""
    from keras_selfattn.data.images import read_image_folder, split_held_out

    labels_from_folders = getattr(args, "labels_from_folders", False)
    run.log(f"reading {args.image_dir} at {size[0]} x {size[1]} ({args.fit}) ...")
    try:
        folder = read_image_folder(
            args.image_dir, size, channels, labels_from_folders=labels_from_folders,
            fit=args.fit, log=run.log,
        )
        train, test = split_held_out(len(folder.pixels), args.held_out_fraction, args.seed)
    except ValueError as error:
        raise harness.UsageError(f"--image_dir: {error}") from None
    classes = f", {len(folder.class_names)} classes ({', '.join(folder.class_names)})" if folder.class_names else ""
    run.log(
        f"--image_dir: {len(folder.pixels)} images read, {len(folder.skipped)} skipped{classes}; "
        f"{len(train)} for training, {len(test)} held out"
    )
    labels = folder.labels
    return (
        (folder.pixels[train], None if labels is None else labels[train]),
        (folder.pixels[test], None if labels is None else labels[test]),
        list(folder.class_names),
    )


def tfds_or_usage_error(args, run, name, split, size, max_examples, channels):
    """`(pixels, labels)` of a tensorflow-datasets split, fitted to `size`
    (`None`: as stored) and `channels`; a `UsageError` naming `--dataset` and
    `--tfds_dir` when the data set is not prepared and cannot be downloaded
    (`tfds_images`'s `FileNotFoundError`). Other errors propagate."""
    from keras_selfattn.data.images import TFDS_IMAGE_DATASETS, tfds_images

    run.log(f"reading tensorflow-datasets {name} {split} from {args.tfds_dir or 'its default folder'} ...")
    try:
        pixels, labels = tfds_images(name, split, args.tfds_dir, size=size, max_examples=max_examples)
    except FileNotFoundError as error:
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0][:400]
        raise harness.UsageError(
            f"--dataset {name}: tensorflow-datasets could not give its {split!r} split "
            f"({first_line}). Download and prepare it into --tfds_dir (e.g. "
            f"`tfds build {TFDS_IMAGE_DATASETS[name][0]} --data_dir DIR` on a machine online), or use "
            "the default data or --image_dir."
        ) from error
    return to_channels(pixels, channels), labels


def to_channels(pixels, channels):
    """int32 `[n, H, W, C]` images with 1 (luma) or 3 channels."""
    if pixels.shape[-1] == channels:
        return pixels
    if channels == 3:
        return np.repeat(pixels, 3, axis=-1)
    luma = pixels.astype("float64") @ np.array([0.2125, 0.7154, 0.0721])  # skimage's rgb2gray
    return np.clip(np.round(luma), 0, 255).astype("int32")[..., None]


def data_source(args):
    """Where a run's images came from, for the report."""
    if getattr(args, "image_dir", None):
        return f"image_dir {args.image_dir}"
    return args.dataset


# ----------------------------------------------------------------- report


def data_report(args, train_images, held_out_images):
    """The report's `data`: where the images came from and how many there are."""
    return {
        "source": data_source(args),
        "train_images": int(len(train_images)),
        "held_out_images": int(len(held_out_images)),
    }


def model_settings(args, name, **shapes):
    """The report's model settings: `name`, `--preset`, `--attention` and the recipe's `shapes`."""
    return {"name": name, "preset": args.preset, "attention": args.attention, **shapes}
