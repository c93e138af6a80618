"""Image Transformer: train on images, report held-out bits/dim, draw
samples, completions and attention, export for serving.

Data: by default scikit-learn's real 8x8 digits (offline, 20% held out);
`--dataset photos` patches of scikit-image's bundled photos and faces (offline,
held out by picture); `--dataset cifar10` or `imagenet32` reads
tensorflow-datasets (downloaded or prepared in `--tfds_dir`); `--image_dir`
any folder of PNG/JPEG files, with classes from sub-folder names under
`--labels_from_folders`.

The held-out images are split in two (a seeded random choice of whole
images): `--validation_images` of them are the validation data of training,
the others the test data, scored once at the end (with a single held-out
image there is no validation: the log and the report's `splits` say so).

The run prints and writes to `--model_dir`: validation and test bits/dim,
the test's next to the uniform and pixel-histogram baselines, `samples.png` (unconditional: a grid
of samples; `--conditional`: one row per class), `completions.png` (test
images with the top half given and the rest sampled three times, the
original beside them, as in the paper's figure; the images in
`completions.npz`), `attention.png` (for `--attention_pixel` of a test
image, each head's attention weights over the image in the last block; for
local 2D and relative local 2D its memory block outlined), the trained
`.keras` model, `report.json` (its `splits` counts train, validation and
test images and how they were split), `splits.json` (each validation and
test image's pixel hash), checkpoints, TensorBoard logs, and with
`--export_dir` a SavedModel for TF Serving with the `sample` and `complete`
signatures.

    python recipes/image_generation.py --model_dir runs/digits --attention local_1d
    python recipes/image_generation.py --model_dir runs/digits_2d --attention local_2d --conditional
    python recipes/image_generation.py --model_dir runs/photos --dataset photos --image_size 16 --channels 1
    python recipes/image_generation.py --model_dir runs/mine --image_dir ~/photos --image_size 16
"""

import math

from recipes.common import harness  # sets up the environment before Keras is imported
import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_selfattn.models import image_transformer  # noqa: E402
from recipes.common import image_plots, image_recipes, splits  # noqa: E402

# The trained model is <model_dir>/image_generation.keras and is served as "image_generation"
# (serving/models.config).
NAME = "image_generation"
HELD_OUT_SPLITS = {"cifar10": "test", "imagenet32": "validation"}
COMPLETIONS_PER_IMAGE = 3
DEFAULT_VALIDATION_IMAGES = splits.DEFAULT_VALIDATION  # held-out images that validate training
# image_transformer's presets, with what the recipe adds to each.
PRESETS = {
    # The digits model: 4 layers of width 64, 2D query blocks of 4 x 4 pixels.
    "small": dict(block_pixels=(4, 4)),
    "tiny": {},
    # The paper's CIFAR-10 configuration.
    "cifar10": {},
}


def build_parser():
    parser = harness.recipe_parser(__doc__)
    data = image_recipes.add_data_flags(
        parser,
        datasets=("digits", "photos", "cifar10", "imagenet32"),
        dataset_help="digits: scikit-learn's 1,797 8x8 digits, 20%% held out (offline); photos: "
        "--image_size patches of scikit-image's bundled photos and faces, --held_out_fraction "
        "of the pictures held out with all their patches (offline); cifar10, "
        "imagenet32: tensorflow-datasets, prepared in --tfds_dir (held out: cifar10's test, "
        "imagenet32's validation split)",
        labels=True,
        held_out_help="--image_dir: the fraction of files held out for evaluation; photos: of the "
        "photos and, apart, of the faces (seeded by --seed)",
    )
    data.add_argument(
        "--image_size",
        type=harness.positive_int,
        default=32,
        help="--image_dir, photos: side of the square images the model generates",
    )
    data.add_argument(
        "--channels",
        type=int,
        choices=(1, 3),
        default=3,
        help="--image_dir, photos: 1 grey or 3 RGB",
    )
    data.add_argument(
        "--max_images",
        type=harness.positive_int,
        default=None,
        help="cifar10, imagenet32: read at most this many training images (and a fifth as "
        "many held out); default: all",
    )
    data.add_argument(
        "--validation_images",
        type=harness.positive_int,
        default=None,
        help="held-out images that are the validation data of training (a seeded random choice); "
        "the other held-out images are the test data, scored (default: "
        f"{DEFAULT_VALIDATION_IMAGES}, at most half the held-out images; one held-out image is "
        "a test image and training runs without validation)",
    )
    data.add_argument(
        "--conditional",
        action="store_true",
        help="condition on the class label (digits, cifar10, or --image_dir with "
        "--labels_from_folders); samples.png then has one row per class",
    )
    image_recipes.add_model_flags(
        parser, PRESETS, default_preset="small",
        attentions=("local_1d", "local_2d", "global", "relative_local_2d"),
    )
    harness.add_training_flags(parser, epochs=10, steps_per_epoch=45, batch_size=32, learning_rate=2e-3)
    harness.add_sampling_flags(parser, temperature=1.0, top_k=0, top_p=1.0)
    figures = parser.add_argument_group("figures")
    figures.add_argument(
        "--samples",
        type=harness.positive_int,
        default=8,
        help="samples per row of samples.png (unconditional: 4 rows; conditional: one row per class)",
    )
    figures.add_argument(
        "--completions",
        type=harness.positive_int,
        default=6,
        help="held-out images completed from their top half in completions.png (one row each)",
    )
    figures.add_argument(
        "--attention_pixel",
        type=image_recipes.non_negative_pair,
        default=None,
        help="ROW,COLUMN of the query pixel drawn in attention.png (default: the image's centre)",
    )
    return parser


def parse_args(argv=None):
    args = build_parser().parse_args(argv)
    if args.labels_from_folders and not args.image_dir:
        raise harness.UsageError("--labels_from_folders reads classes from --image_dir; give --image_dir")
    return args


# ------------------------------------------------------------------- data


def load(args, run):
    """`((train_pixels, train_labels), (test_pixels, test_labels), class_names)`."""
    from keras_selfattn.data.images import digits

    if args.image_dir:
        size = (args.image_size, args.image_size)
        return image_recipes.image_dir_split(args, run, size, args.channels)
    if args.dataset == "digits":
        run.log("embedded default: scikit-learn's 8x8 digits, 20% held out")
        train, test = digits(seed=args.seed)
        return train, test, [str(i) for i in range(10)]
    if args.dataset == "photos":
        return photo_patches(args, run)
    held_out_limit = None if args.max_images is None else max(1, args.max_images // 5)
    train = image_recipes.tfds_or_usage_error(args, run, args.dataset, "train", None, args.max_images, 3)
    test = image_recipes.tfds_or_usage_error(
        args, run, args.dataset, HELD_OUT_SPLITS[args.dataset], None, held_out_limit, 3
    )
    labels = train[1]
    return train, test, [] if labels is None else [str(i) for i in range(int(labels.max()) + 1)]


def photo_patches(args, run):
    """The `photos` split: patches held out by the picture they were cut from."""
    from keras_selfattn.data.images.patches import embedded_patches

    train, test = embedded_patches(args.image_size, args.channels, args.held_out_fraction, args.seed)
    pictures = len(set(train.sources) | set(test.sources))
    run.log(
        f"embedded photos: {len(train)} training and {len(test)} held-out {args.image_size} x "
        f"{args.image_size} patches of {pictures} scikit-image pictures, held out by picture"
    )
    return (train.pixels, None), (test.pixels, None), []


def model_inputs(pixels, labels, conditional):
    return {"pixels": pixels, "class_label": labels} if conditional else {"pixels": pixels}


# ------------------------------------------------------------------ model


def build_model(args, image_shape, num_classes):
    return image_recipes.build_model(
        args, PRESETS, image_transformer, image_shape, image_shape=image_shape, num_classes=num_classes
    )


# ---------------------------------------------------------------- figures


def sample(args, model, count, class_labels=None, known_pixels=None, known_rows=0, seed_offset=0):
    from keras_selfattn.generation import sample_images

    extra = {}
    if class_labels is not None:
        extra["class_labels"] = np.asarray(class_labels, "int32")
    if known_pixels is not None:
        extra.update(known_pixels=np.asarray(known_pixels).astype("uint8"), known_rows=known_rows)
    images = sample_images(
        model, count, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
        seed=args.seed + seed_offset, **extra,
    )
    return keras.ops.convert_to_numpy(images)


def write_samples(args, run, model, class_names):
    if args.conditional:
        classes = np.repeat(np.arange(len(class_names)), args.samples)
        run.log(f"sampling {args.samples} images of each of {len(class_names)} classes ...")
        images = sample(args, model, len(classes), class_labels=classes)
        row_titles = [f"class {name}" for name in class_names]
    else:
        run.log(f"sampling {4 * args.samples} images ...")
        images = sample(args, model, 4 * args.samples)
        row_titles = None
    rows = [list(images[i:i + args.samples]) for i in range(0, len(images), args.samples)]
    path = image_plots.image_grid(
        run.path("samples.png"), rows, row_titles=row_titles,
        title=f"{args.attention} Image Transformer samples (temperature {args.temperature:g})",
    )
    return run.wrote("samples grid", path)


def write_completions(args, run, model, test_pixels, test_labels):
    """Completes test images from their top half, three times each."""
    count = min(args.completions, len(test_pixels))
    originals = test_pixels[:count]
    known_rows = originals.shape[1] // 2
    run.log(f"completing {count} test images from their top {known_rows} rows ...")
    given = np.repeat(originals, COMPLETIONS_PER_IMAGE, axis=0)
    labels = np.repeat(test_labels[:count], COMPLETIONS_PER_IMAGE) if args.conditional else None
    completed = sample(args, model, len(given), class_labels=labels, known_pixels=given,
                       known_rows=known_rows, seed_offset=1)
    completed = completed.reshape(count, COMPLETIONS_PER_IMAGE, *originals.shape[1:])
    shown_given = originals.copy()
    shown_given[:, known_rows:] = 128  # the part left to the model, drawn grey
    rows = [[shown_given[i], *completed[i], originals[i]] for i in range(count)]
    titles = ["given"] + [f"completion {k + 1}" for k in range(COMPLETIONS_PER_IMAGE)] + ["original"]
    path = image_plots.image_grid(
        run.path("completions.png"), rows, column_titles=titles,
        title=f"test images completed from their top {known_rows} rows",
    )
    run.wrote("completions grid", path)
    arrays = run.path("completions.npz")
    np.savez_compressed(arrays, originals=originals, known_rows=known_rows, completions=completed)
    run.wrote("completions (originals, known_rows, completions)", arrays)
    return {"images": count, "known_rows": known_rows, "per_image": COMPLETIONS_PER_IMAGE}


def write_attention(args, run, model, image, label=None):
    from recipes.common.image_attention import attention_map

    height, width = image.shape[:2]
    pixel = args.attention_pixel or (height // 2, width // 2)
    if not (pixel[0] < height and pixel[1] < width):
        raise harness.UsageError(
            f"--attention_pixel {pixel[0]},{pixel[1]} must lie in the {height} x {width} image"
        )
    weights, box = attention_map(model, image, pixel, class_label=label)
    path = image_plots.attention_over_image(
        run.path("attention.png"), image, weights, pixel, memory_box=box,
        title=f"last block's attention of pixel {tuple(pixel)} over a test image ({args.attention})",
    )
    return run.wrote("attention weights over an image", path)


# ------------------------------------------------------------------- main


def main(argv=None, callbacks=()):
    """Runs the recipe; returns the report dict."""
    args = parse_args(argv)
    run = harness.start(args, recipe=NAME)
    (train_pixels, train_labels), (test_pixels, test_labels), class_names = load(args, run)
    if args.conditional and train_labels is None:
        raise harness.UsageError(
            f"--conditional needs class labels; {image_recipes.data_source(args)} has none "
            "(for --image_dir, add --labels_from_folders)"
        )
    num_classes = len(class_names) if args.conditional else None
    train = model_inputs(train_pixels, train_labels, args.conditional)
    held_out = model_inputs(test_pixels, test_labels, args.conditional)
    validation, test, split_facts = split_held_out(args, run, len(train_pixels), held_out)
    test_pixels = test["pixels"]
    test_labels = test.get("class_label")

    def train_model():
        return train_image_transformer(args, run, train, validation, num_classes, callbacks)

    model, history = run.trained_or_saved(NAME, train_model)
    with run.evaluation(NAME):
        settings = image_recipes.model_settings(
            args, NAME, image_shape=list(train_pixels.shape[1:]), num_classes=num_classes
        )
        report = {
            "data": image_recipes.data_report(args, train_pixels, held_out["pixels"]),
            "splits": split_facts,
            "training": history,
            "validation": validation_bits(args, run, model, validation),
            "test": test_bits(args, run, model, train_pixels, test),
            "uniform_bits_per_dim": math.log2(256),
            "sampling": {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p},
        }
        write_samples(args, run, model, class_names)
        report["completions"] = write_completions(args, run, model, test_pixels, test_labels)
        write_attention(args, run, model, test_pixels[0], test_labels[0] if args.conditional else None)
        run.export(model, NAME)
        report = run.write_report(report, model=model, model_settings=settings)
    run.finish()
    return report


def split_held_out(args, run, train_count, held_out):
    """`(validation, test, splits)`: the validation inputs (`None` when a
    single held-out image leaves none for them), the test inputs, and the
    report's `splits`: a seeded `--validation_images` of the held-out images
    validate, the others are the test images."""
    count = len(held_out["pixels"])
    wanted = splits.validation_count(count, args.validation_images)
    if wanted >= count:
        raise harness.UsageError(
            f"--validation_images {wanted} must leave test images: there are {count} held-out images"
        )
    validation_rows, test_rows = splits.seeded_parts(count, wanted, args.seed)
    validation = {k: v[validation_rows] for k, v in held_out.items()} if wanted else None
    test = {k: v[test_rows] for k, v in held_out.items()}
    validation_ids = splits.image_ids(held_out["pixels"][validation_rows])
    test_ids = splits.image_ids(test["pixels"])
    source = image_recipes.data_source(args)
    if wanted:
        chosen = "" if args.validation_images is not None else (
            f" (--validation_images default: {DEFAULT_VALIDATION_IMAGES}, at most half of them)"
        )
        how = (
            f"{source}: the held-out images (none trained on) split by whole image, a seeded random "
            f"{wanted} validation{chosen}, the other {len(test_rows)} test"
        )
    else:
        how = (
            f"{source}: only {count} held-out image, too few to split: it is the test image, and "
            "training runs without validation data (the test image is never validated on)"
        )
    facts = splits.splits_report(train_count, validation_ids, test_ids, how)
    splits.log_splits(run, facts)
    splits.write_identities(run, validation_ids, test_ids, "sha256 of the image's pixels (16 hex digits)")
    return validation, test, facts


def train_image_transformer(args, run, train, validation, num_classes, callbacks):
    """Builds and fits the model, validated on the validation images (none
    when `validation` is `None`); returns `(model, History)`."""
    image_shape = train["pixels"].shape[1:]
    with run.strategy.scope():
        model = build_model(args, image_shape, num_classes)
    validated = (
        f"{len(validation['pixels'])} validation images validate training" if validation is not None
        else "no validation"
    )
    run.log(
        f"{NAME} ({args.preset}, {args.attention}{', conditional' if num_classes else ''}): "
        f"{model.count_params():,} parameters; {len(train['pixels'])} training images of {image_shape}, "
        f"{validated}; training {args.epochs} epochs x {args.steps_per_epoch} steps of {args.batch_size}"
    )
    return model, image_recipes.fit(args, run, model, train, validation, callbacks)


def bits_per_dim(args, model, inputs):
    results = model.evaluate(inputs, inputs["pixels"], batch_size=args.batch_size, verbose=0, return_dict=True)
    return float(results["bits_per_dim"])


def validation_bits(args, run, model, validation):
    """The report's `validation`: bits/dim over the validation images (`None` without any)."""
    if validation is None:
        run.log(f"validation bits/dim: {harness.figure(None)}, no validation image")
        return {"images": 0, "bits_per_dim": None}
    bits = bits_per_dim(args, model, validation)
    run.log(f"validation bits/dim over {len(validation['pixels'])} images: {bits:.4f}")
    return {"images": int(len(validation["pixels"])), "bits_per_dim": bits}


def test_bits(args, run, model, train_pixels, test):
    """The report's `test`: bits/dim over the test images, scored once,
    beside the pixel-histogram baseline (and the uniform one, 8)."""
    from keras_selfattn.data.images import marginal_bits_per_dim

    test_pixels = test["pixels"]
    bits = bits_per_dim(args, model, test)
    histogram = marginal_bits_per_dim(train_pixels, test_pixels)
    run.log(
        f"test bits/dim over {len(test_pixels)} images: {bits:.4f} (uniform {math.log2(256):.1f}, "
        f"pixel histogram {histogram:.4f})"
    )
    return {"images": int(len(test_pixels)), "bits_per_dim": bits, "pixel_histogram_bits_per_dim": histogram}


if __name__ == "__main__":
    harness.run_cli(main)
