"""Train, validation and test apart: what image_generation.py, translate.py
and variable_misuse.py share. `fit` validates on the validation split only;
the test split is scored once, at the end. The report's `splits` counts the
three, with the overlap of validation and test computed from the items'
identities (image contents, source sentences, file paths), and
`splits.json` beside it lists those identities."""

import hashlib
import json

import numpy as np

DEFAULT_VALIDATION = 256  # validation items when the flag is not given (at most half the held-out ones)


def validation_count(held_out, requested, default=DEFAULT_VALIDATION):
    """How many of `held_out` items validate training: `requested` when
    given, else `default` at most half of them (none of a single one: it is
    the test item)."""
    return min(default, held_out // 2) if requested is None else requested


def seeded_parts(count, validation, seed):
    """`(validation_indices, test_indices)`, sorted: a `seed`ed random
    `validation` of `range(count)`, the rest test (no index in both)."""
    order = np.random.default_rng(seed).permutation(count)
    return np.sort(order[:validation]), np.sort(order[validation:])


def image_ids(pixels):
    """One identity per image: the sha256 (16 hex digits) of its pixels."""
    pixels = np.ascontiguousarray(np.asarray(pixels, "uint8"))
    return [hashlib.sha256(image.tobytes()).hexdigest()[:16] for image in pixels]


def splits_report(train, validation_ids, test_ids, how):
    """The report's `splits`: item counts (`train` a count), the number of
    identities in both validation and test (computed), and `how`."""
    return {
        "train": int(train),
        "validation": len(validation_ids),
        "test": len(test_ids),
        "overlap_validation_test": len(set(validation_ids) & set(test_ids)),
        "how": how,
    }


def write_identities(run, validation_ids, test_ids, unit):
    """Writes `splits.json`: the identities (`unit`) of the validation and
    test items, in order; returns its path."""
    path = run.path("splits.json")
    path.write_text(json.dumps(
        {"unit": unit, "validation": list(validation_ids), "test": list(test_ids)}, indent=1
    ) + "\n")
    return run.wrote("validation and test item identities", path)


def log_splits(run, splits):
    run.log(
        f"splits: {splits['train']} train, {splits['validation']} validation, {splits['test']} test "
        f"(validation and test share {splits['overlap_validation_test']}); {splits['how']}"
    )
