"""Image Transformer super-resolution: train on low/high-resolution pairs,
score held-out images against bicubic and nearest upsampling, export.

Data: by default 32 x 32 patches cut from the photos bundled with
scikit-image plus its `lfw_subset` faces, held out by source picture (no
download); `--dataset celeb_a` reads CelebA from tensorflow-datasets
(prepared in `--tfds_dir`), `--image_dir` any folder of PNG/JPEG files
(held out by file). The low-resolution input is the high-resolution image
averaged over `--scale x --scale` blocks.

Training has two stages: first the model's upsampler (bicubic plus a
convolutional correction, the estimate the decoder refines) is fitted by
L1 regression for `--upsampler_epochs`, then frozen while the Image
Transformer trains for `--epochs`.

The run prints and writes to `--model_dir`: held-out bits/dim, PSNR and
SSIM (scikit-image) of the model's outputs at each of `--temperatures`
against bicubic and nearest upsampling and the upsampler alone,
`super_resolution.png` (one row per held-out example: low resolution,
bicubic, the upsampler, the model's samples, the original),
`super_resolution_samples.npz` (the scored images: low resolution,
original and every method's output), the trained `.keras` model,
`report.json`, checkpoints, TensorBoard logs, and with `--export_dir` a
SavedModel for TF Serving with the `super_resolve` signature.

    python recipes/super_resolution.py --model_dir runs/super_resolution
    python recipes/super_resolution.py --model_dir runs/celeba --dataset celeb_a \\
        --tfds_dir ~/tensorflow_datasets --preset celeba --mixed_precision
"""

from common import harness  # sets up the environment before Keras is imported
import keras
import numpy as np

from common import image_plots, image_recipes
from keras_selfattn.models import (
    BitsPerDimension,
    MaskedSparseCategoricalCrossentropy,
    image_super_resolution,
)

# The trained model is <model_dir>/super_resolution.keras and is served as "super_resolution"
# (serving/models.config).
NAME = "super_resolution"
PRESETS = {
    # A CPU-sized model (3 + 2 layers of width 64, an upsampler of 6
    # convolutions): minutes per epoch on one core.
    "small": dict(preset="small"),
    "tiny": dict(preset="tiny"),
    # The paper's CelebA 8x8 -> 32x32 configuration.
    "celeba": dict(preset="celeba"),
}


def build_parser():
    parser = harness.recipe_parser(__doc__)
    data = parser.add_argument_group("data")
    data.add_argument(
        "--dataset",
        default="default",
        choices=("default", "celeb_a"),
        help="default: patches of scikit-image's bundled photos and lfw_subset faces, held out "
        "by source picture (offline); celeb_a: CelebA faces from tensorflow-datasets, prepared "
        "in --tfds_dir (its train split for training, its test split held out)",
    )
    image_recipes.add_image_dir_flags(data, labels=False)
    data.add_argument(
        "--size",
        type=harness.positive_int,
        default=32,
        help="side of the high-resolution images the model generates (square)",
    )
    data.add_argument(
        "--scale",
        type=harness.positive_int,
        default=4,
        help="upscaling factor: the low-resolution input is SIZE/SCALE on a side (32 / 4 = the "
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
    evaluation.add_argument(
        "--eval_images",
        type=harness.positive_int,
        default=64,
        help="held-out images the model super-resolves for PSNR and SSIM (a seeded random "
        "choice; bits/dim uses every held-out image)",
    )
    evaluation.add_argument(
        "--temperatures",
        type=image_recipes.temperature_list,
        default=(0.0, 0.8, 1.0),
        help="comma-separated sampling temperatures the model is scored at (0 = greedy)",
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
    if args.size % args.scale:
        raise harness.UsageError(f"--scale {args.scale} must divide --size {args.size}")
    if args.channels is None:
        args.channels = 1 if args.dataset == "default" and not args.image_dir else 3
    return args


# ------------------------------------------------------------------- data


def load_images(args, run):
    """`(train, test)` high-resolution int32 images `[n, size, size, C]`."""
    from keras_selfattn.data.images import patches as image_patches

    size = (args.size, args.size)
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
        f"embedded default: {args.size} x {args.size} patches of scikit-image's "
        f"{len(image_patches.PHOTOS)} bundled photos and {image_patches.FACES} lfw_subset faces"
    )
    train, test = image_patches.embedded_patches(args.size, args.channels, seed=args.seed)
    run.log(
        f"patches: {len(train)} training from {len(set(train.sources))} pictures, {len(test)} "
        f"held out from {len(set(test.sources))} other pictures"
    )
    return train.pixels, test.pixels


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
    of its 8 orientations at random (flips and transposition: the same for
    both images, since a block mean commutes with them)."""
    import tensorflow as tf

    def orient(example, target):
        flips = tf.random.uniform((3,)) < 0.5

        def oriented(image):
            image = tf.cond(flips[0], lambda: tf.reverse(image, [0]), lambda: image)
            image = tf.cond(flips[1], lambda: tf.reverse(image, [1]), lambda: image)
            return tf.cond(flips[2], lambda: tf.transpose(image, [1, 0, 2]), lambda: image)

        example = {k: oriented(v) for k, v in example.items()}
        return example, example["pixels"]

    dataset = tf.data.Dataset.from_tensor_slices((inputs, inputs["pixels"]))
    dataset = dataset.shuffle(len(inputs["pixels"]), seed=seed).repeat().map(orient)
    return dataset.batch(batch_size, drop_remainder=True).prefetch(2)


# ------------------------------------------------------------------ model


def build_model(args, low_shape, high_shape):
    overrides = image_recipes.model_overrides(args, PRESETS, high_shape)
    if args.pixel_dropout is not None:
        overrides["pixel_dropout"] = args.pixel_dropout
    try:
        model = image_super_resolution(low_shape, high_shape, **overrides)
    except ValueError as error:
        raise harness.UsageError(f"--preset / --attention / --query_shape / --memory_flange: {error}") from None
    model.compile(
        optimizer=keras.optimizers.Adam(args.learning_rate, beta_2=0.98, clipnorm=1.0),
        loss=MaskedSparseCategoricalCrossentropy(pad_id=None),
        metrics=[BitsPerDimension()],
    )
    return model


def fit_upsampler(args, run, model, train, validation):
    """Fits the model's upsampler by L1 regression on the high-resolution
    images for `--upsampler_epochs`, then freezes it again; returns its
    training history (`{}` when nothing was fitted)."""
    upsampler = model.get_layer("upsampler")
    if not args.upsampler_epochs or not upsampler.weights:
        return {}
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
        validation_data=(validation["low_resolution"], validation["pixels"].astype("float32")),
        verbose=args.verbose if run.chief else 0,
        shuffle=False,  # a tf.data pipeline shuffles itself
    )
    upsampler.trainable = False
    return {k: [float(x) for x in v] for k, v in history.history.items()}


# ------------------------------------------------------------- evaluation


def super_resolve(args, model, low, temperature):
    """The model's uint8 outputs for `low`, in batches of `--batch_size`."""
    from keras_selfattn.generation import sample_images

    outputs = []
    for start in range(0, len(low), args.batch_size):
        batch = low[start:start + args.batch_size]
        outputs.append(keras.ops.convert_to_numpy(sample_images(
            model, low_resolution=batch.astype("uint8"), temperature=temperature,
            top_k=args.top_k if temperature else 0, top_p=args.top_p if temperature else 1.0,
            seed=args.seed + start,
        )))
    return np.concatenate(outputs).astype("int32")


def upsampled(model, low):
    """The model's upsampler's estimates, rounded to uint8 values."""
    estimates = model.get_layer("upsampler").predict(low, verbose=0)
    return np.clip(np.round(estimates), 0, 255).astype("int32")


def evaluate(args, run, model, test):
    """Bits/dim on every held-out image; PSNR and SSIM of the model at each
    temperature and of the interpolations on `--eval_images` of them."""
    from keras_selfattn.data.images.patches import upsample
    from keras_selfattn.models import metrics as image_metrics

    results = model.evaluate(test, test["pixels"], batch_size=args.batch_size, verbose=0, return_dict=True)
    bits = float(results["bits_per_dim"])
    run.log(f"held-out bits/dim over {len(test['pixels'])} images: {bits:.4f}")
    chosen = np.sort(np.random.default_rng(args.seed).permutation(len(test["pixels"]))[: args.eval_images])
    low, high = test["low_resolution"][chosen], test["pixels"][chosen]
    size = high.shape[1:3]
    outputs = {
        "nearest": upsample(low, size, "nearest"),
        "bicubic": upsample(low, size, "bicubic"),
        "upsampler": upsampled(model, low),
    }
    for temperature in args.temperatures:
        run.log(f"super-resolving {len(low)} held-out images at temperature {temperature:g} ...")
        outputs[f"model_temperature_{temperature:g}"] = super_resolve(args, model, low, temperature)
    quality = {}
    for name, images in outputs.items():
        quality[name] = {"psnr": image_metrics.psnr(high, images), "ssim": image_metrics.ssim(high, images)}
        run.log(f"  {name:<24} PSNR {quality[name]['psnr']:6.2f} dB   SSIM {quality[name]['ssim']:.4f}")
    report = {"bits_per_dim": bits, "images": int(len(test["pixels"])), "scored_images": int(len(low)), "quality": quality}
    return report, low, high, outputs


def write_grid(args, run, low, high, outputs):
    rows = min(args.grid_rows, len(high))
    names = [name for name in outputs if name != "nearest"]
    titles = [f"low {low.shape[1]}x{low.shape[2]}"] + [
        name.replace("model_temperature_", "model T=") for name in names
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
    run = harness.start(args, recipe="super_resolution")
    train_high, test_high = load_images(args, run)
    train, test = pairs(train_high, args.scale), pairs(test_high, args.scale)
    low_shape, high_shape = train["low_resolution"].shape[1:], train["pixels"].shape[1:]
    with run.strategy.scope():
        model = build_model(args, low_shape, high_shape)
    run.log(
        f"{NAME} ({args.preset}, {args.attention} decoder): {model.count_params():,} "
        f"parameters; {low_shape} -> {high_shape}; training {args.epochs} epochs x "
        f"{args.steps_per_epoch} steps of {args.batch_size}"
    )
    # Held-out patches come grouped by picture: validate on some of each.
    picked = np.random.default_rng(args.seed).permutation(len(test["pixels"]))[: 4 * args.batch_size]
    validation = {k: v[picked] for k, v in test.items()}
    upsampler_history = fit_upsampler(args, run, model, train, validation)
    history = run.fit(
        model, training_dataset(train, args.batch_size, args.seed),
        validation_data=(validation, validation["pixels"]), callbacks=callbacks,
    )
    run.save_model(model, NAME)
    run.log("evaluating on the held-out images ...")
    held_out, low, high, outputs = evaluate(args, run, model, test)
    write_grid(args, run, low, high, outputs)
    samples = run.path("super_resolution_samples.npz")
    np.savez_compressed(samples, low_resolution=low, original=high, **outputs)
    run.wrote("scored images (low resolution, original, each method's output)", samples)
    report = {
        "model": {
            "name": NAME, "preset": args.preset, "attention": args.attention,
            "low_shape": list(low_shape), "high_shape": list(high_shape),
            "parameters": model.count_params(),
        },
        "data": {
            "source": image_recipes.data_source(args),
            "train_images": int(len(train_high)),
            "held_out_images": int(len(test_high)),
        },
        "upsampler_training": upsampler_history,
        "training": {k: [float(x) for x in v] for k, v in history.history.items()},
        "held_out": held_out,
    }
    run.export(model, NAME)
    report = run.write_report(report)
    run.finish()
    return report


if __name__ == "__main__":
    harness.run_cli(main)
