"""Image Transformer super-resolution: train on low/high-resolution pairs,
score held-out images against bicubic and nearest upsampling, export.

Data: by default 32 x 32 patches cut from the photos bundled with
scikit-image plus its `lfw_subset` faces, `--held_out_fraction` of the
photos and of the faces held out as whole pictures (no download);
`--dataset celeb_a` reads CelebA from tensorflow-datasets (prepared in
`--tfds_dir`), `--image_dir` any folder of PNG/JPEG files (held out by
file). The low-resolution input is the high-resolution image averaged over
`--scale x --scale` blocks. The held-out patches are split in two:
`--validation_images` of them are the validation data of training (what
settings are picked by), the others the test data that is scored.

Training has two stages when the model has an upsampler (every preset but
`celeba_paper`): first the upsampler (bicubic plus a convolutional
correction, the estimate the decoder refines) is fitted by L1 regression
for `--upsampler_epochs`, then frozen while the Image Transformer trains for
`--epochs`. A run resumed from its backup does not fit the upsampler again
(the backup holds it).

The run prints and writes to `--model_dir`: test bits/dim; on
`--eval_examples` test patches, PSNR (with a 95% bootstrap interval over the
patches, and its paired differences from bicubic's and the upsampler's,
with theirs) and SSIM of bicubic and
nearest upsampling, the upsampler alone, and the model decoding with the
posterior mean and at each of `--temperatures`, with the share of
sub-pixels where the decoder's output differs from the upsampler's
estimate; `super_resolution.png` (one row per scored example: low
resolution, bicubic, the upsampler, the model's outputs, the original),
`super_resolution_samples.npz` (the scored images: low resolution,
original and every method's output), the trained `.keras` model,
`report.json`, checkpoints, TensorBoard logs, and with `--export_dir` a
SavedModel for TF Serving with the `super_resolve` signature.

    python recipes/super_resolution.py --model_dir runs/super_resolution
    python recipes/super_resolution.py --model_dir runs/celeba --dataset celeb_a \\
        --tfds_dir ~/tensorflow_datasets --preset celeba_paper --mixed_precision
"""

from recipes.common import harness  # sets up the environment before Keras is imported
import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_selfattn.models import image_super_resolution  # noqa: E402
from recipes.common import image_plots, image_recipes  # noqa: E402

# The trained model is <model_dir>/super_resolution.keras and is served as "super_resolution"
# (serving/models.config).
NAME = "super_resolution"
DEFAULT_VALIDATION_IMAGES = 64
# image_super_resolution's presets, with what the recipe adds to each.
PRESETS = {
    # A CPU-sized model (3 + 2 layers of width 64, an upsampler of 6
    # convolutions): minutes per epoch on one core.
    "small": {},
    "tiny": {},
    # Parmar et al.'s CelebA 8x8 -> 32x32 model (no upsampler).
    "celeba_paper": {},
    # Its sizes plus the upsampler, interpolation prior and difference coding.
    "celeba_refiner": {},
}


def build_parser():
    parser = harness.recipe_parser(__doc__)
    data = image_recipes.add_data_flags(
        parser,
        datasets=("default", "celeb_a"),
        dataset_help="default: patches of scikit-image's bundled photos and lfw_subset faces, held out "
        "by source picture (offline); celeb_a: CelebA faces from tensorflow-datasets, prepared "
        "in --tfds_dir (its train split for training, its test split held out)",
        labels=False,
        held_out_fraction=0.33,
        held_out_help="the fraction held out (seeded by --seed): of the default data's photos and, "
        "apart, of its faces, as whole pictures (0.33: 6 of the 18 photos and 33 of the 100 faces); "
        "of --image_dir's files",
    )
    harness.add_renamed_flag(
        data,
        "--image_size",
        "--size",
        type=harness.positive_int,
        default=32,
        help="side of the high-resolution images the model generates (square)",
    )
    data.add_argument(
        "--scale",
        type=harness.positive_int,
        default=4,
        help="upscaling factor: the low-resolution input is IMAGE_SIZE/SCALE on a side (32 / 4 = the "
        "paper's 8x8 -> 32x32)",
    )
    data.add_argument(
        "--channels",
        type=int,
        choices=(1, 3),
        default=None,
        help="1 grey or 3 RGB (default: 1 for the default data, whose faces and most photos are "
        "grey; 3 for celeb_a and --image_dir)",
    )
    data.add_argument(
        "--max_images",
        type=harness.positive_int,
        default=50000,
        help="celeb_a: read at most this many training images (and a fifth as many held out)",
    )
    model = image_recipes.add_model_flags(
        parser, PRESETS, default_preset="small", attentions=("local_2d", "local_1d", "relative_local_2d")
    )
    model.add_argument(
        "--pixel_dropout",
        type=harness.rate,
        default=None,
        help="rate at which training hides whole positions' previous pixel from the decoder, "
        "so that generation leans on the input image (default: the preset's, 0)",
    )
    training = harness.add_training_flags(
        parser, epochs=10, steps_per_epoch=100, batch_size=16, learning_rate=1e-3
    )
    training.add_argument(
        "--upsampler_epochs",
        type=harness.non_negative_int,
        default=20,
        help="epochs of --steps_per_epoch steps that fit the upsampler (the estimate the "
        "decoder refines) by L1 regression before the Image Transformer trains; 0 keeps plain "
        "bicubic interpolation",
    )
    evaluation = parser.add_argument_group("evaluation")
    harness.add_renamed_flag(
        evaluation,
        "--eval_examples",
        "--eval_images",
        type=harness.positive_int,
        default=64,
        help="test images the model super-resolves for PSNR and SSIM (a seeded random choice; "
        "all of them when there are fewer; bits/dim uses every test image)",
    )
    evaluation.add_argument(
        "--validation_images",
        type=harness.positive_int,
        default=None,
        help="held-out images that are the validation data of training (a seeded random choice); "
        "the other held-out images are the test data, scored (default: "
        f"{DEFAULT_VALIDATION_IMAGES}, at most half the held-out images; one held-out image is "
        "a test image and training runs without validation)",
    )
    evaluation.add_argument(
        "--temperatures",
        type=image_recipes.temperature_list,
        default=(0.0, 0.8, 1.0),
        help="comma-separated sampling temperatures the model is scored at (0 = greedy), "
        "besides its posterior-mean decoding",
    )
    evaluation.add_argument(
        "--grid_rows",
        type=harness.positive_int,
        default=8,
        help="held-out examples (rows) in super_resolution.png",
    )
    harness.add_sampling_flags(parser, temperature=None)
    return parser


def parse_args(argv=None):
    args = build_parser().parse_args(argv)
    if args.image_size % args.scale:
        raise harness.UsageError(f"--scale {args.scale} must divide --image_size {args.image_size}")
    if args.channels is None:
        args.channels = 1 if args.dataset == "default" and not args.image_dir else 3
    return args


# ------------------------------------------------------------------- data


def load_images(args, run):
    """`(train, test)` high-resolution int32 images `[n, size, size, C]`."""
    from keras_selfattn.data.images import patches as image_patches

    size = (args.image_size, args.image_size)
    if args.image_dir:
        (train, _), (test, _), _ = image_recipes.image_dir_split(args, run, size, args.channels)
        return train, test
    if args.dataset == "celeb_a":
        train = image_recipes.tfds_or_usage_error(
            args, run, "celeb_a", "train", size, args.max_images, args.channels
        )[0]
        test = image_recipes.tfds_or_usage_error(
            args, run, "celeb_a", "test", size, max(1, args.max_images // 5), args.channels
        )[0]
        return train, test
    run.log(
        f"embedded default: {args.image_size} x {args.image_size} patches of scikit-image's "
        f"{len(image_patches.PHOTOS)} bundled photos and {image_patches.FACES} lfw_subset faces"
    )
    train, test = image_patches.embedded_patches(
        args.image_size, args.channels, held_out_fraction=args.held_out_fraction, seed=args.seed
    )
    held_out = sorted(set(test.sources))
    photos = [name for name in held_out if not name.startswith("lfw_face_")]
    run.log(
        f"patches: {len(train)} training from {len(set(train.sources))} pictures, {len(test)} "
        f"held out from {len(held_out)} other pictures ({len(held_out) - len(photos)} faces and "
        f"the photos {', '.join(photos)})"
    )
    return train.pixels, test.pixels


def validation_count(count, validation_images):
    """How many of the `count` held-out images validate training:
    `--validation_images` when given, else `DEFAULT_VALIDATION_IMAGES` at
    most half of them (none of a single one: it is the test image)."""
    if validation_images is None:
        return min(DEFAULT_VALIDATION_IMAGES, count // 2)
    return validation_images


def held_out_parts(count, validation_images, eval_examples, seed):
    """`(validation, test, scored)` sorted indices: a seeded
    `validation_images` of the `count` held-out images validate training,
    the rest are the test data (no image in both), and `scored` indexes a
    seeded `eval_examples` of the test data (all of it when fewer) within it."""
    if validation_images >= count:
        raise harness.UsageError(
            f"--validation_images {validation_images} must leave test images: there are {count} "
            "held-out images"
        )
    order = np.random.default_rng(seed).permutation(count)
    validation, test = np.sort(order[:validation_images]), np.sort(order[validation_images:])
    scored = np.searchsorted(test, np.sort(order[validation_images:][:eval_examples]))
    return validation, test, scored


def pairs(high, scale):
    """`{"low_resolution", "pixels"}` model inputs for high-resolution images."""
    from keras_selfattn.data.images.patches import downsample

    return {"low_resolution": downsample(high, scale), "pixels": np.asarray(high, "int32")}


def upsampler_dataset(inputs, batch_size, seed):
    """`training_dataset`'s batches as (low resolution, float32 pixels): the
    upsampler's inputs and regression targets."""
    import tensorflow as tf

    return training_dataset(inputs, batch_size, seed).map(
        lambda example, target: (example["low_resolution"], tf.cast(target, "float32"))
    )


def training_dataset(inputs, batch_size, seed):
    """Shuffled, repeated batches of (inputs, target pixels), each pair in one
    of its 8 orientations at random (`orient`)."""
    return image_recipes.training_dataset(inputs, batch_size, seed, transform=orient)


def orient(example, target):
    """The pair `example` in one of its 8 orientations at random, flips and
    transposition (the same for both images, since a block mean commutes
    with them), and its oriented pixels as the target."""
    import tensorflow as tf

    flips = tf.random.uniform((3,)) < 0.5

    def oriented(image):
        image = tf.cond(flips[0], lambda: tf.reverse(image, [0]), lambda: image)
        image = tf.cond(flips[1], lambda: tf.reverse(image, [1]), lambda: image)
        return tf.cond(flips[2], lambda: tf.transpose(image, [1, 0, 2]), lambda: image)

    example = {k: oriented(v) for k, v in example.items()}
    return example, example["pixels"]


# ------------------------------------------------------------------ model


def build_model(args, low_shape, high_shape):
    options = {} if args.pixel_dropout is None else {"pixel_dropout": args.pixel_dropout}
    return image_recipes.build_model(
        args, PRESETS, image_super_resolution, low_shape, high_shape, image_shape=high_shape,
        adam_options=dict(beta_2=0.98, clipnorm=1.0), **options,
    )


UPSAMPLER_HISTORY = "upsampler_history.json"


def fit_upsampler(args, run, model, train, validation):
    """Fits the model's upsampler by L1 regression on the high-resolution
    images for `--upsampler_epochs` (validated on `validation` unless it is
    `None`), then freezes it again; returns its training history (`{}` when
    nothing was fitted).

    A run that will resume from its backup fits nothing: `BackupAndRestore`
    restores the upsampler with the rest of the model, and the history is
    read back from `upsampler_history.json`.
    """
    import json

    upsampler = model.upsampler
    if upsampler is None or not args.upsampler_epochs or not upsampler.weights:
        return {}
    saved = run.path(UPSAMPLER_HISTORY)
    if run.has_backup():
        run.log(f"not fitting the upsampler: the backup in {run.backup_dir()} holds it")
        return json.loads(saved.read_text()) if saved.is_file() else {}
    upsampler.trainable = True
    with run.strategy.scope():
        # A model of its own over the upsampler's layers, so that the saved
        # model holds no second optimizer.
        regression = keras.Model(upsampler.input, upsampler.output, name="upsampler_regression")
        regression.compile(
            optimizer=keras.optimizers.Adam(args.learning_rate), loss="mean_absolute_error"
        )
    run.log(
        f"fitting the upsampler ({upsampler.count_params():,} parameters): {args.upsampler_epochs} "
        f"epochs x {args.steps_per_epoch} steps of {args.batch_size}"
    )
    history = regression.fit(
        run.distribute(upsampler_dataset(train, args.batch_size, args.seed)),
        epochs=args.upsampler_epochs,
        steps_per_epoch=args.steps_per_epoch,
        validation_data=None if validation is None else (
            validation["low_resolution"], validation["pixels"].astype("float32")
        ),
        verbose=args.verbose if run.chief else 0,
        shuffle=False,  # a tf.data pipeline shuffles itself
    )
    upsampler.trainable = False
    history = {k: [float(x) for x in v] for k, v in history.history.items()}
    if run.chief:
        saved.write_text(json.dumps(history) + "\n")
    return history


# ------------------------------------------------------------- evaluation


def super_resolve(args, model, low, temperature=1.0, decoding="sample"):
    """The model's uint8 outputs for `low`, in batches of `--batch_size`:
    sampled at `temperature`, or its posterior means."""
    from keras_selfattn.generation import sample_images

    sampled = decoding == "sample" and temperature > 0
    outputs = []
    for start in range(0, len(low), args.batch_size):
        batch = low[start:start + args.batch_size]
        outputs.append(keras.ops.convert_to_numpy(sample_images(
            model, low_resolution=batch.astype("uint8"), temperature=temperature,
            top_k=args.top_k if sampled else 0, top_p=args.top_p if sampled else 1.0,
            seed=args.seed + start, decoding=decoding,
        )))
    return np.concatenate(outputs).astype("int32")


def upsampled(model, low):
    """The model's upsampler's estimates, rounded to uint8 values."""
    estimates = model.upsampler.predict(low, verbose=0)
    return np.clip(np.round(estimates), 0, 255).astype("int32")


def decoder_runs(temperatures):
    """`[(output name, label, sample_images settings)]` of the model's
    decodings: temperature 0 (when asked), the posterior mean, then the
    other temperatures."""
    runs = [
        (f"model_temperature_{t:g}", f"decoder T={t:g}" if t else "decoder T=0 (greedy)", dict(temperature=t))
        for t in temperatures
    ]
    greedy = sum(1 for t in temperatures[:1] if t == 0)
    runs.insert(greedy, ("model_posterior_mean", "decoder posterior mean", dict(decoding="posterior_mean")))
    return runs


def score(high, outputs, estimates=None, seed=0):
    """`{name: scores}` of each method's `outputs[name]` against `high`:
    mean PSNR and its 95% bootstrap interval over the images, the paired
    differences from bicubic's PSNR and (when scored) the upsampler's with
    their intervals, mean SSIM, and (with the upsampler's `estimates`) the
    share of sub-pixels that differ from them. An interval needs two images
    or more: `None` for one."""
    from keras_selfattn.models import metrics as image_metrics

    def interval(values):
        return list(image_metrics.bootstrap_interval(values, seed=seed)) if len(values) > 1 else None

    references = {name: image_metrics.psnr_per_image(high, outputs[name]) for name in REFERENCES if name in outputs}
    quality = {}
    for name, images in outputs.items():
        psnr = image_metrics.psnr_per_image(high, images)
        scores = {
            "psnr": float(np.mean(psnr)),
            "psnr_interval": interval(psnr),
        }
        for reference, reference_psnr in references.items():
            difference = psnr - reference_psnr
            scores[f"psnr_minus_{reference}"] = float(np.mean(difference))
            scores[f"psnr_minus_{reference}_interval"] = interval(difference)
        scores["ssim"] = image_metrics.ssim(high, images)
        scores["changed_share"] = None if estimates is None else float(np.mean(images != estimates))
        quality[name] = scores
    return quality


# The methods every other one is compared with, image by image.
REFERENCES = ("bicubic", "upsampler")


def quality_table(quality, labels):
    """The scores as printed lines, one per method."""
    references = [name for name in REFERENCES if f"psnr_minus_{name}" in next(iter(quality.values()))]
    header = f"  {'method':<24} {'PSNR dB':>7} {'(95%)':>13}"
    for reference in references:
        header += f" {'minus ' + reference + ' (95%)':>24}"
    lines = [header + f" {'SSIM':>6} {'changed':>7}"]
    for name, scores in quality.items():
        line = f"  {labels[name]:<24} {scores['psnr']:7.2f} {_interval_text(scores['psnr_interval'], '.2f'):>13}"
        for reference in references:
            interval = _interval_text(scores[f"psnr_minus_{reference}_interval"], "+.3f")
            line += f" {scores[f'psnr_minus_{reference}']:+7.3f} {f'({interval})':>16}"
        changed = "" if scores["changed_share"] is None else f"{100 * scores['changed_share']:6.1f}%"
        lines.append(line + f" {scores['ssim']:6.4f} {changed:>7}")
    return lines


def _interval_text(interval, spec):
    """`low..high`, or "n/a" for an interval one image cannot give."""
    if interval is None:
        return harness.figure(None)
    return f"{harness.figure(interval[0], spec)}..{harness.figure(interval[1], spec)}"


def evaluate(args, run, model, test, scored):
    """Bits/dim on every test image; on the `scored` ones, the scores of the
    interpolations, the upsampler and the model's decodings."""
    from keras_selfattn.data.images.patches import upsample

    results = model.evaluate(test, test["pixels"], batch_size=args.batch_size, verbose=0, return_dict=True)
    bits = float(results["bits_per_dim"])
    run.log(f"test bits/dim over {len(test['pixels'])} images: {bits:.4f}")
    low, high = test["low_resolution"][scored], test["pixels"][scored]
    size = high.shape[1:3]
    outputs = {"bicubic": upsample(low, size, "bicubic"), "nearest": upsample(low, size, "nearest")}
    labels = {"bicubic": "bicubic", "nearest": "nearest"}
    estimates = None
    if model.upsampler is not None:
        estimates = outputs["upsampler"] = upsampled(model, low)
        labels["upsampler"] = "upsampler alone"
    for name, label, settings in decoder_runs(args.temperatures):
        run.log(f"super-resolving {len(low)} test images: {label} ...")
        outputs[name] = super_resolve(args, model, low, **settings)
        labels[name] = label
    quality = score(high, outputs, estimates, seed=args.seed)
    changed = " (changed: sub-pixels where the output differs from the upsampler's estimate)"
    run.log(
        f"{len(low)} test images, PSNR with 95% bootstrap intervals over them"
        + (changed if estimates is not None else "")
    )
    for line in quality_table(quality, labels):
        run.log(line)
    report = {
        "bits_per_dim": bits, "images": int(len(test["pixels"])), "scored_images": int(len(low)),
        "labels": labels, "quality": quality,
    }
    return report, low, high, outputs


def write_grid(args, run, low, high, outputs):
    rows = min(args.grid_rows, len(high))
    names = [name for name in outputs if name != "nearest"]  # bicubic, upsampler, the decodings
    titles = [f"low {low.shape[1]}x{low.shape[2]}"] + [
        name.replace("model_temperature_", "model T=").replace("model_posterior_mean", "posterior mean")
        for name in names
    ] + ["original"]
    grid = [[low[i]] + [outputs[name][i] for name in names] + [high[i]] for i in range(rows)]
    path = image_plots.image_grid(
        run.path("super_resolution.png"), grid, column_titles=titles,
        title=f"held-out {low.shape[1]}x{low.shape[2]} -> {high.shape[1]}x{high.shape[2]} "
        f"({args.attention} decoder)",
    )
    return run.wrote("super-resolution grid", path)


# ------------------------------------------------------------------- main


def main(argv=None, callbacks=()):
    """Runs the recipe; returns the report dict."""
    args = parse_args(argv)
    run = harness.start(args, recipe=NAME)
    train_high, test_high = load_images(args, run)
    train, held_out = pairs(train_high, args.scale), pairs(test_high, args.scale)
    validation, test, scored = split_held_out(args, run, held_out)

    def train_model():
        return train_super_resolution(args, run, train, validation, callbacks)

    model, trained = run.trained_or_saved(NAME, train_model)
    upsampler_history, history = trained or (None, None)
    with run.evaluation(NAME):
        run.log("evaluating on the test images ...")
        held_out_report, low, high, outputs = evaluate(args, run, model, test, scored)
        held_out_report["validation_images"] = int(len(validation["pixels"])) if validation else 0
        write_grid(args, run, low, high, outputs)
        samples = run.path("super_resolution_samples.npz")
        np.savez_compressed(samples, low_resolution=low, original=high, **outputs)
        run.wrote("scored images (low resolution, original, each method's output)", samples)
        settings = image_recipes.model_settings(
            args, NAME,
            low_shape=list(train["low_resolution"].shape[1:]), high_shape=list(train["pixels"].shape[1:]),
        )
        report = {
            "data": image_recipes.data_report(args, train_high, test_high),
            "upsampler_training": upsampler_history,
            "training": history,
            "held_out": held_out_report,
        }
        run.export(model, NAME)
        report = run.write_report(report, model=model, model_settings=settings)
    run.finish()
    return report


def split_held_out(args, run, held_out):
    """`(validation, test, scored)`: the validation inputs (`None` when no
    held-out image is left for them), the test inputs, and the indices of
    the scored test images."""
    count = len(held_out["pixels"])
    validation_images = validation_count(count, args.validation_images)
    validation_indices, test_indices, scored = held_out_parts(
        count, validation_images, args.eval_examples, args.seed
    )
    chosen = "" if args.validation_images is not None else (
        f" (--validation_images default: {DEFAULT_VALIDATION_IMAGES}, at most half the held-out images)"
    )
    run.log(
        f"held out: {len(validation_indices)} validation images{chosen}, {len(test_indices)} test images, "
        f"{len(scored)} of them scored (--eval_examples {args.eval_examples})"
    )
    validation = {k: v[validation_indices] for k, v in held_out.items()} if len(validation_indices) else None
    return validation, {k: v[test_indices] for k, v in held_out.items()}, scored


def train_super_resolution(args, run, train, validation, callbacks):
    """Builds the model, fits its upsampler, then the whole model; returns
    `(model, (upsampler history, History))`."""
    low_shape, high_shape = train["low_resolution"].shape[1:], train["pixels"].shape[1:]
    with run.strategy.scope():
        model = build_model(args, low_shape, high_shape)
    run.log(
        f"{NAME} ({args.preset}, {args.attention} decoder): {model.count_params():,} "
        f"parameters; {low_shape} -> {high_shape}; training {args.epochs} epochs x "
        f"{args.steps_per_epoch} steps of {args.batch_size}"
    )
    upsampler_history = fit_upsampler(args, run, model, train, validation)
    history = image_recipes.fit(args, run, model, train, validation, callbacks, transform=orient)
    return model, (upsampler_history, history)


if __name__ == "__main__":
    harness.run_cli(main)
