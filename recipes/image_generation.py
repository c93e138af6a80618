"""Image Transformer: fit on images, report held-out bits/dim, save the model.

The default data is scikit-learn's real 8x8 digits (offline, 20% held out);
`--dataset cifar10` or `imagenet32` reads tensorflow-datasets when the data
is downloaded or prepared in `--data_dir`.

    python recipes/image_generation.py --attention local_1d --epochs 10
    python recipes/image_generation.py --attention global --epochs 10
"""

import argparse
import json
import math
import os
import sys

import keras
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keras_selfattn.data.images import digits, marginal_bits_per_dim, tfds_images  # noqa: E402
from keras_selfattn.models import (  # noqa: E402
    BitsPerDimension,
    MaskedSparseCategoricalCrossentropy,
    image_transformer,
)

DIGITS_MODEL = dict(
    num_layers=4, hidden_dim=64, num_heads=4, feedforward_dim=256, block_length=16,
    query_shape=(4, 4), memory_flange=(2, 2),
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="digits", choices=["digits", "cifar10", "imagenet32"])
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--attention", default="local_1d", choices=["local_1d", "local_2d", "global"])
    parser.add_argument("--conditional", action="store_true", help="condition on the class label")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=2e-3)
    parser.add_argument("--output_dir", default="runs/image_generation")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def load(args):
    if args.dataset == "digits":
        return digits(seed=args.seed)
    return tfds_images(args.dataset, "train", args.data_dir), tfds_images(args.dataset, "test", args.data_dir)


def build(args, image_shape, num_classes):
    if args.dataset == "digits":
        return image_transformer(
            image_shape, preset="tiny", attention=args.attention, num_classes=num_classes, **DIGITS_MODEL
        )
    return image_transformer(image_shape, preset="cifar10", attention=args.attention, num_classes=num_classes)


def model_inputs(pixels, labels, conditional):
    return {"pixels": pixels, "class_label": labels} if conditional else {"pixels": pixels}


def main(argv=None):
    args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)
    (train_pixels, train_labels), (test_pixels, test_labels) = load(args)
    if args.conditional and train_labels is None:
        raise ValueError(
            f"`--conditional` needs class labels; the {args.dataset} data set has none."
        )
    num_classes = int(train_labels.max()) + 1 if args.conditional else None
    model = build(args, train_pixels.shape[1:], num_classes)
    model.compile(
        optimizer=keras.optimizers.Adam(args.learning_rate),
        loss=MaskedSparseCategoricalCrossentropy(pad_id=None),
        metrics=[BitsPerDimension()],
    )
    model.fit(
        model_inputs(train_pixels, train_labels, args.conditional),
        train_pixels,
        batch_size=args.batch_size,
        epochs=args.epochs,
        validation_data=(model_inputs(test_pixels, test_labels, args.conditional), test_pixels),
        verbose=2,
    )
    results = model.evaluate(
        model_inputs(test_pixels, test_labels, args.conditional), test_pixels, verbose=0, return_dict=True
    )
    report = {
        "dataset": args.dataset,
        "attention": args.attention,
        "parameters": model.count_params(),
        "held_out_bits_per_dim": results["bits_per_dim"],
        "uniform_bits_per_dim": math.log2(256),
        "pixel_histogram_bits_per_dim": marginal_bits_per_dim(train_pixels, test_pixels),
    }
    os.makedirs(args.output_dir, exist_ok=True)
    model.save(os.path.join(args.output_dir, f"image_transformer_{args.attention}.keras"))
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
