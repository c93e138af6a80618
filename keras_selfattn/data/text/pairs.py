"""Sentence pairs for `keras_selfattn.data.text`: TSV files, WMT14 through
tensorflow-datasets, the held-out split and the validation part of it."""

import logging
from pathlib import Path

import numpy as np

logger = logging.getLogger("keras_selfattn.data.text")

WMT14_CONFIGS = ("cs-en", "de-en", "fr-en", "hi-en", "ru-en")


def read_pairs_tsv(path):
    """Sentence pairs from a file of `source<TAB>target` lines, any languages.

    The file is UTF-8 (a byte order mark is ignored). Each side is stripped
    of surrounding white space; a line's fields after the second are ignored
    (so Tatoeba-style files with an attribution column read as they are).
    Dropped and counted: blank lines, lines without a tab, lines with an
    empty side, and repeats of an earlier `(source, target)` pair.

    Args:
        path: the file.

    Returns:
        `(pairs, counts)`: a list of `(source, target)` string tuples in file
        order, and a dict of line counts: `"lines"`, `"kept"`, `"blank"`,
        `"no_tab"`, `"empty_side"`, `"duplicate"`.

    Raises:
        ValueError: no pair is left; the message names the file and the
            counts.
    """
    path = Path(path).expanduser()
    counts = dict.fromkeys(("lines", "kept", "blank", "no_tab", "empty_side", "duplicate"), 0)
    pairs = {}
    with open(path, encoding="utf-8-sig", newline=None) as handle:
        for line in handle:
            counts["lines"] += 1
            verdict = _read_line(line, pairs)
            counts[verdict] += 1
    logger.info("%s: %s", path, ", ".join(f"{count} {name}" for name, count in counts.items()))
    if not pairs:
        raise ValueError(
            f"{path} holds no sentence pair: each line must be `source<TAB>target` with both sides "
            f"non-empty. Line counts: {counts}"
        )
    return list(pairs), counts


def _read_line(line, pairs):
    line = line.rstrip("\r\n")
    if not line.strip():
        return "blank"
    fields = line.split("\t")
    if len(fields) < 2:
        return "no_tab"
    pair = (fields[0].strip(), fields[1].strip())
    if not pair[0] or not pair[1]:
        return "empty_side"
    if pair in pairs:
        return "duplicate"
    pairs[pair] = None
    return "kept"


def split_pairs(pairs, held_out_fraction, seed):
    """A deterministic held-out split in which no source appears on both sides.

    Pairs are grouped by source sentence; the distinct sources (in
    first-seen order) are permuted by `numpy.random.default_rng(seed)` and
    the first `round(held_out_fraction * number_of_sources)` (at least 1)
    are held out with all their pairs. Both parts keep the input order.

    Args:
        pairs: a sequence of `(source, target)` tuples.
        held_out_fraction: the fraction of distinct sources held out, in
            `(0, 1)`.
        seed: int seed; the same pairs and seed give the same split.

    Returns:
        `(train_pairs, held_out_pairs)`, two lists.

    Raises:
        ValueError: a fraction outside `(0, 1)`, or fewer than 2 distinct
            sources.
    """
    if not 0 < held_out_fraction < 1:
        raise ValueError(f"`held_out_fraction` must be in (0, 1). Received: held_out_fraction={held_out_fraction!r}")
    pairs = [tuple(pair) for pair in pairs]
    sources = list(dict.fromkeys(source for source, _ in pairs))
    if len(sources) < 2:
        raise ValueError(f"`pairs` must hold at least 2 distinct source sentences to split; it holds {len(sources)}")
    count = min(len(sources) - 1, max(1, int(round(held_out_fraction * len(sources)))))
    order = np.random.default_rng(seed).permutation(len(sources))
    held_out_sources = {sources[index] for index in order[:count]}
    train = [pair for pair in pairs if pair[0] not in held_out_sources]
    held_out = [pair for pair in pairs if pair[0] in held_out_sources]
    return train, held_out


def split_pairs_by_source(pairs, count, seed):
    """Splits `pairs` in two by whole source sentence: `(chosen, rest)`.

    The distinct sources (first-seen order) are permuted by
    `numpy.random.default_rng(seed)`; each source in turn is chosen with all
    its pairs while the chosen pairs stay at most `count`. No source appears
    on both sides; both parts keep the input order.

    Args:
        pairs: a sequence of `(source, target)` tuples.
        count: the most pairs chosen, >= 0.
        seed: int seed; the same pairs and seed give the same split.

    Returns:
        `(chosen_pairs, other_pairs)`, two lists.
    """
    if count < 0:
        raise ValueError(f"`count` must be >= 0. Received: count={count!r}")
    pairs = [tuple(pair) for pair in pairs]
    sizes = {}
    for source, _ in pairs:
        sizes[source] = sizes.get(source, 0) + 1
    sources = list(sizes)
    chosen, total = set(), 0
    for index in np.random.default_rng(seed).permutation(len(sources)):
        if total >= count:
            break
        if total + sizes[sources[index]] <= count:
            chosen.add(sources[index])
            total += sizes[sources[index]]
    return [pair for pair in pairs if pair[0] in chosen], [pair for pair in pairs if pair[0] not in chosen]


def wmt14_pairs(data_dir, config="de-en", split="train"):
    """WMT14 sentence pairs (the papers' data) through tensorflow-datasets.

    Reads `wmt14_translate/<config>` prepared in `data_dir`; nothing is
    downloaded here (prepare it where the internet is reachable:
    `tfds build wmt14_translate/de-en --data_dir DIR`, then copy `DIR`).

    Args:
        data_dir: the tensorflow-datasets data folder.
        config: one of `WMT14_CONFIGS`: `"de-en"` (Vaswani et al.'s
            English-German) or `"fr-en"`, ...
        split: a tensorflow-datasets split: `"train"` (4.5M pairs for
            de-en), `"validation"` (newstest2013), `"test"` (newstest2014),
            or a slice like `"train[:100000]"`.

    Returns:
        A list of `(source, target)` string tuples in the config's order:
        `(german, english)` for `"de-en"`.

    Raises:
        ValueError: an unknown `config`.
        FileNotFoundError: the data is not prepared in `data_dir`.
    """
    if config not in WMT14_CONFIGS:
        raise ValueError(f"`config` must be one of {WMT14_CONFIGS}. Received: config={config!r}")
    import tensorflow_datasets as tfds

    name = f"wmt14_translate/{config}"
    builder = tfds.builder(name, data_dir=str(Path(data_dir).expanduser()))
    try:
        dataset = builder.as_dataset(split=split)
    except AssertionError as error:  # tfds's "could not find data in ..."
        raise FileNotFoundError(
            f"`{name}` is not prepared in data_dir={data_dir!s} (looked for {builder.data_dir}). Prepare it "
            f"where the internet is reachable (`tfds build {name} --data_dir DIR`) and pass that folder, "
            f"or use `--pairs_tsv FILE`. tensorflow-datasets said: {error}"
        ) from None
    source_language, target_language = config.split("-")
    return [
        (example[source_language].decode("utf-8"), example[target_language].decode("utf-8"))
        for example in tfds.as_numpy(dataset)
    ]
