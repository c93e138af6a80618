"""Transformer translation on real sentence pairs: train, score test BLEU
and chrF (greedy and beam search) against a copy-the-source baseline, export
for serving.

Data: by default the 23.6k German-English example sentences of the Ding
dictionary (Debian's `trans-de-en`, fetched once with `apt-get download`
into `--data_dir`); `--pairs_tsv FILE` for any language pair (one
`source<TAB>target` pair a line); `--wmt14 de-en` (or another config) for the
papers' WMT14 through tensorflow-datasets, prepared beforehand in
`--tfds_dir` (validation: newstest2013, test: newstest2014). Ding and TSV
pairs are split with `--held_out_fraction` of the distinct first-side
sentences held out (in either direction, so both directions hold out the
same pairs); the held-out pairs are split again by whole first-side
sentence into `--validation_pairs` pairs that validate training and the
test pairs, scored once at the end (when the held-out pairs are too few to
split, training runs without validation: the log and the report's
`splits` say so). `--direction`
chooses which side is the source. `--tasks both_directions` trains one
model on both directions of the pairs, mixed with
`keras_selfattn.data.mixing.mix_tasks` in proportion to their pairs, each
source led by its direction's token (Johnson et al. 2017's target-language
token): the text `<forward> ` or `<reverse> ` before a sentence, one
SentencePiece piece; the exported `translate` signature then takes each
row's `direction` (`forward` or `reverse`) beside its `text` and puts the
token before it. `--low_resource_fraction F` keeps only a fraction
of the `--direction` direction's training pairs (the other direction keeps
them all), to see whether the other direction's data helps a low-resource
one. One joint SentencePiece vocabulary is
trained on the training pairs' two sides and saved beside the model; the
model shares one matrix between the source embedding, the target embedding
and the output projection (Vaswani et al. 3.4). Batches hold at most
`--tokens_per_batch` tokens a side, bucketed by length as tensor2tensor does;
the loss is label-smoothed cross-entropy (0.1) and the learning rate the
paper's rsqrt warmup schedule with Adam (0.9, 0.98, 1e-9).

The run prints and writes to `--model_dir`: the validation loss, the test
corpus BLEU and chrF (sacrebleu) of greedy decoding, of beam search (`--beam_size`, `--alpha`)
and of copying the source, sample translations beside their references,
`attention.png` (the last decoder block's attention over the source for one
test sentence, one panel per head), `translations.tsv` (every test
source, reference, greedy and beam translation), `sentencepiece.model`, the
trained `.keras` model, `report.json` (its `splits` counts the train,
validation and test pairs), `splits.json` (the validation and test
first-side sentences), checkpoints, TensorBoard logs, and
with `--export_dir` a SavedModel for TF Serving whose `translate` signature
takes and returns strings.

    python recipes/translate.py --model_dir runs/ding --position shaw
    python recipes/translate.py --model_dir runs/wmt --wmt14 de-en --direction reverse \\
        --preset base --epochs 100 --steps_per_epoch 1000 --tokens_per_batch 4096 --vocabulary_size 32000 \\
        --mixed_precision --strategy mirrored --export_dir runs/serving
"""

from pathlib import Path

from recipes.common import harness  # sets up the environment before Keras is imported
import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_selfattn.models import (  # noqa: E402
    MaskedSparseCategoricalCrossentropy,
    NegativeLogLikelihoodPerToken,
    RsqrtWarmupSchedule,
    transformer_translation,
)
from keras_selfattn.generation import Translator  # noqa: E402
from keras_selfattn.models import TranslationTransformer  # noqa: E402
from keras_selfattn.models.metrics import translation_scores  # noqa: E402
from keras_selfattn.models.translation_transformer import POSITIONS, TRANSLATION_PRESETS  # noqa: E402
from recipes.common import plots, splits  # noqa: E402

# The trained model is <model_dir>/translation.keras and is served as "translation"
# (serving/models.config).
NAME = "translation"
SENTENCEPIECE_FILE = "sentencepiece.model"
DIRECTIONS = ("forward", "reverse")
DEFAULT_VALIDATION_PAIRS = splits.DEFAULT_VALIDATION  # held-out pairs that validate training
DEFAULT_VOCAB_SIZE = 8000
TASKS = ("one", "both_directions")


def direction_prefix(direction):
    """The text before a source that asks for `direction` (with `--tasks
    both_directions`): its direction token, then a space."""
    return f"<{direction}> "


def direction_piece(direction):
    """The SentencePiece piece that `direction_prefix` encodes to at a
    sentence's start (the word-boundary mark, then the token)."""
    return "\u2581" + direction_prefix(direction).strip()


def other_direction(direction):
    return DIRECTIONS[1 - DIRECTIONS.index(direction)]


def build_parser():
    parser = harness.recipe_parser(__doc__)
    _add_data_flags(parser)
    _add_model_flags(parser)
    _add_training_flags(parser)
    _add_evaluation_flags(parser)
    return parser


def _add_data_flags(parser):
    data = parser.add_argument_group("data")
    source = data.add_mutually_exclusive_group()
    source.add_argument(
        "--pairs_tsv",
        default=None,
        help="UTF-8 file of `source<TAB>target` lines, any language pair (blank lines, lines "
        "without a tab, empty sides and repeated pairs are skipped and counted); default: the "
        "Ding dictionary's German-English example sentences, fetched into --data_dir",
    )
    source.add_argument(
        "--wmt14",
        default=None,
        metavar="CONFIG",
        help="WMT14 through tensorflow-datasets (wmt14_translate/CONFIG: cs-en, de-en, fr-en, "
        "hi-en, ru-en), prepared in --tfds_dir; trains on --wmt14_train_split, validates on "
        "newstest2013, tests on newstest2014",
    )
    data.add_argument(
        "--wmt14_train_split",
        default="train",
        help="with --wmt14: the training split, e.g. train or train[:10%%]",
    )
    data.add_argument(
        "--direction",
        default="forward",
        choices=DIRECTIONS,
        help="forward: the first side is the source (Ding: German to English; a TSV's first "
        "column; WMT14 de-en: German); reverse: the second side is the source",
    )
    data.add_argument(
        "--tasks",
        default="one",
        choices=TASKS,
        help="one: train on the --direction direction only; both_directions: one model trained on "
        "both directions of the pairs, mixed in proportion to their training pairs, each source led "
        "by its direction token (the text '<forward> ' or '<reverse> ', which the exported `translate` "
        "signature puts before each row's text from its `direction` input); the report adds each "
        "direction's test scores",
    )
    data.add_argument(
        "--low_resource_fraction",
        type=harness.probability,
        default=1.0,
        help="keep only this fraction of the --direction direction's training pairs (chosen with "
        "--seed); with --tasks both_directions the other direction keeps all of them",
    )
    data.add_argument(
        "--held_out_fraction",
        type=harness.fraction,
        default=0.05,
        help="Ding and --pairs_tsv: the fraction of distinct first-side sentences held out with all "
        "their pairs (none of them is trained on; the same pairs whichever --direction)",
    )
    data.add_argument(
        "--validation_pairs",
        type=harness.positive_int,
        default=None,
        help="held-out pairs that are the validation data of training, chosen by whole first-side "
        "sentence (seeded by --seed); the other held-out pairs are the test data, scored (default: "
        f"{DEFAULT_VALIDATION_PAIRS}, at most half the held-out pairs; held-out pairs too few to "
        "split are all test pairs and training runs without validation); --wmt14: at most this "
        f"many newstest2013 pairs (default {DEFAULT_VALIDATION_PAIRS})",
    )
    harness.add_renamed_flag(
        data,
        "--vocabulary_size",
        "--vocab_size",
        type=harness.positive_int,
        default=None,
        help="pieces of the joint SentencePiece vocabulary (ids 0 padding, 1 end, 2 unknown), "
        "trained on the training pairs and saved as MODEL_DIR/sentencepiece.model (a resumed run "
        f"reuses it); default: {DEFAULT_VOCAB_SIZE}, or as many as a small training text supports",
    )
    data.add_argument(
        "--max_length",
        type=harness.positive_int,
        default=64,
        help="longest side trained on, in pieces with the end token (longer pairs are left out "
        "of training); also the most pieces a translation may have",
    )


def _add_model_flags(parser):
    model = parser.add_argument_group("model")
    model.add_argument(
        "--preset",
        default="tiny",
        choices=sorted(TRANSLATION_PRESETS),
        help="model size: tiny (2 layers, width 64, pre-norm; CPU minutes), base (Vaswani et al.: "
        "6 layers, width 512, 8 heads) or big (width 1024, 16 heads)",
    )
    model.add_argument(
        "--position",
        default="sinusoidal",
        choices=POSITIONS,
        help="sinusoidal: the absolute position signal added to the embeddings (Vaswani et al.); "
        "shaw: relative position representations in every self-attention and no absolute signal "
        "(Shaw et al. 2018)",
    )
    model.add_argument(
        "--max_relative_position",
        type=harness.positive_int,
        default=None,
        help="with --position shaw: the distance beyond which relative positions are clipped "
        "(default: the preset's, 16 for base and big as in Shaw et al., 8 for tiny)",
    )
    model.add_argument(
        "--dropout",
        type=harness.rate,
        default=None,
        help="dropout rate of attention, residuals and feed-forward layers (default: the "
        "preset's: tiny 0.0, base 0.1, big 0.3)",
    )


def _add_training_flags(parser):
    training = parser.add_argument_group("training")
    training.add_argument(
        "--epochs", type=harness.positive_int, default=8,
        help="training epochs (optimizer steps in all: --epochs x --steps_per_epoch)",
    )
    training.add_argument(
        "--steps_per_epoch",
        type=harness.positive_int,
        default=250,
        help="optimizer steps per epoch (an epoch is also when checkpoints, backups, TensorBoard "
        "points and the held-out loss happen)",
    )
    training.add_argument(
        "--tokens_per_batch",
        type=harness.positive_int,
        default=2048,
        help="the most tokens a batch holds on each side (padding included), split across the "
        "strategy's replicas; pairs of similar length are batched together (tensor2tensor's "
        "buckets), so short sentences come in larger batches",
    )
    training.add_argument(
        "--warmup_steps",
        type=harness.positive_int,
        default=1000,
        help="steps of the rsqrt schedule's linear warmup (the paper: 4000); the rate then falls "
        "as 1/sqrt(step)",
    )
    training.add_argument(
        "--learning_rate",
        type=harness.positive_float,
        default=1.0,
        help="a multiplier on the schedule width**-0.5 * min(step**-0.5, step * warmup**-1.5) "
        "(1.0 is the paper's; tensor2tensor's learning_rate hyperparameter)",
    )
    training.add_argument(
        "--label_smoothing",
        type=harness.rate,
        default=0.1,
        help="label smoothing of the cross-entropy (the paper: 0.1)",
    )


def _add_evaluation_flags(parser):
    evaluation = parser.add_argument_group("evaluation")
    evaluation.add_argument(
        "--beam_size", type=harness.positive_int, default=4,
        help="beam width of the beam-search translations and of the exported `translate` "
        "signature (the paper: 4; 1 decodes greedily)",
    )
    evaluation.add_argument(
        "--alpha", type=harness.non_negative_float, default=0.6,
        help="beam search's length penalty exponent, ((5 + length) / 6) ** alpha (the paper: 0.6)",
    )
    harness.add_renamed_flag(
        evaluation, "--eval_examples", "--eval_pairs", type=harness.non_negative_int, default=0,
        help="score at most this many test pairs (evenly spread); 0 means all",
    )
    evaluation.add_argument(
        "--decode_batch_size", type=harness.positive_int, default=64,
        help="source sentences translated at once in the evaluation",
    )
    evaluation.add_argument(
        "--samples", type=harness.non_negative_int, default=8,
        help="test translations printed beside their sources and references",
    )
    evaluation.add_argument(
        "--bleu_tokenize", default="13a",
        help="sacrebleu's BLEU tokenizer: 13a (its default, for most languages), intl, zh, ja-mecab, "
        "ko-mecab, char, none, ...",
    )


def parse_args(argv=None):
    args = build_parser().parse_args(argv)
    if args.tokens_per_batch < args.max_length:
        raise harness.UsageError(
            f"`--tokens_per_batch` ({args.tokens_per_batch}) must be at least `--max_length` "
            f"({args.max_length}), so that a batch holds one pair of the longest length"
        )
    if args.max_length < 2:
        raise harness.UsageError(f"`--max_length` must be >= 2 (a piece and the end token); got {args.max_length}")
    return args


# ------------------------------------------------------------------- data


def load_pairs(args, run, text):
    """`(train, validation, test, facts, splits)`: sentence pairs as
    `(source, target)` in the `--direction` asked for, what the report says
    about them, and the report's `splits` (also written as splits.json)."""
    if args.wmt14:
        train, validation, test, how = _wmt14_pairs(args, run, text)
        return _directed_parts(args, run, train, validation, test, {
            "source": f"wmt14_translate/{args.wmt14}", "validation_split": "validation (newstest2013)",
            "test_split": "test (newstest2014)",
        }, how)
    if args.pairs_tsv:
        pairs, counts = _tsv_pairs(args, run, text)
        facts = {"source": str(Path(args.pairs_tsv).expanduser()), "line_counts": counts}
    else:
        data_dir = Path(args.data_dir).expanduser() / "text" if args.data_dir else text.default_data_dir()
        run.log(f"the Ding dictionary's German-English example sentences (Debian {text.DING_PACKAGE}) in {data_dir}")
        try:
            pairs = text.ding_pairs(data_dir)
        except (RuntimeError, text.DingDictionaryError) as error:  # fetching failed; a damaged cache
            raise harness.UsageError(str(error)) from None
        facts = {"source": f"Ding dictionary (Debian {text.DING_PACKAGE})"}
    try:
        train, held_out = text.split_pairs(pairs, args.held_out_fraction, seed=args.seed)
    except ValueError as error:
        raise harness.UsageError(f"{args.pairs_tsv or 'the Ding pairs'}: {error}") from None
    # Split before turning around: each direction holds out the same pairs.
    validation, test, how = split_held_out(args, text, held_out)
    return _directed_parts(args, run, train, validation, test, facts, how)


def split_held_out(args, text, held_out):
    """`(validation, test, how)`: the held-out pairs split by whole
    first-side sentence, a seeded `--validation_pairs` of them (by default
    at most half) validating training, the rest the test pairs."""
    wanted = splits.validation_count(len(held_out), args.validation_pairs, DEFAULT_VALIDATION_PAIRS)
    if wanted >= len(held_out):
        raise harness.UsageError(
            f"--validation_pairs {wanted} must leave test pairs: there are {len(held_out)} held-out pairs"
        )
    validation, test = text.split_pairs_by_source(held_out, wanted, seed=args.seed)
    source = "--pairs_tsv" if args.pairs_tsv else "the Ding pairs"
    held = (
        f"{source} split by whole first-side sentence: --held_out_fraction {args.held_out_fraction} of "
        "the sentences held out with all their pairs, never trained on"
    )
    if not validation:
        return [], test, (
            f"{held}; the {len(held_out)} held-out pairs are too few to split again: all are test pairs "
            "and training runs without validation data (the test pairs are never validated on)"
        )
    chosen = "" if args.validation_pairs is not None else (
        f" (--validation_pairs default: {DEFAULT_VALIDATION_PAIRS}, at most half of them)"
    )
    return validation, test, (
        f"{held}; of those, a seeded random {len(validation)} pairs' sentences validate{chosen}, "
        f"the other {len(test)} pairs are the test"
    )


def _directed_parts(args, run, train, validation, test, facts, how):
    """The parts in the `--direction` asked for, and the report's `splits`
    (identities: the first-side sentences, whichever the direction)."""
    validation_ids = list(dict.fromkeys(first for first, _ in validation))
    test_ids = list(dict.fromkeys(first for first, _ in test))
    facts_of_splits = splits.splits_report(len(train), validation_ids, test_ids, how)
    # Counted in pairs; the overlap in first-side sentences.
    facts_of_splits.update(validation=len(validation), test=len(test))
    splits.log_splits(run, facts_of_splits)
    splits.write_identities(run, validation_ids, test_ids, "first-side sentence (all its pairs go together)")
    parts = (_directed(part, args.direction) for part in (train, validation, test))
    return (*parts, facts, facts_of_splits)


def _tsv_pairs(args, run, text):
    try:
        pairs, counts = text.read_pairs_tsv(args.pairs_tsv)
    except FileNotFoundError:
        raise harness.UsageError(f"`--pairs_tsv` {args.pairs_tsv!r} does not exist") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise harness.UsageError(f"--pairs_tsv: {error}") from None
    skipped = {reason: count for reason, count in counts.items() if reason not in ("lines", "kept") and count}
    run.log(
        f"{args.pairs_tsv}: {counts['kept']:,} pairs from {counts['lines']:,} lines"
        + (f"; skipped: {', '.join(f'{count} {reason}' for reason, count in skipped.items())}" if skipped else "")
    )
    return pairs, counts


def _wmt14_pairs(args, run, text):
    if args.wmt14 not in text.WMT14_CONFIGS:
        raise harness.UsageError(f"`--wmt14` must be one of {', '.join(text.WMT14_CONFIGS)}; got {args.wmt14!r}")
    tfds_dir = args.tfds_dir or str(Path.home() / "tensorflow_datasets")
    parts = {}
    for name, split in (("train", args.wmt14_train_split), ("validation", "validation"), ("test", "test")):
        run.log(f"reading wmt14_translate/{args.wmt14} {split} from {tfds_dir} ...")
        try:
            parts[name] = text.wmt14_pairs(tfds_dir, args.wmt14, split)
        except FileNotFoundError as error:
            raise harness.UsageError(f"--wmt14 / --tfds_dir: {error}") from None
    validation = spread(parts["validation"], args.validation_pairs or DEFAULT_VALIDATION_PAIRS)
    how = (
        f"wmt14_translate/{args.wmt14}'s own splits: {args.wmt14_train_split} trained on, "
        f"{len(validation)} newstest2013 pairs (evenly spread) validate, newstest2014 is the test"
    )
    return parts["train"], validation, parts["test"], how


def _directed(pairs, direction):
    return list(pairs) if direction == "forward" else [(target, source) for source, target in pairs]


def low_resource_pairs(pairs, fraction, seed):
    """`round(fraction * len(pairs))` (at least 1) of `pairs`, chosen with
    `seed`, in their order; all of them at `fraction` 1."""
    if fraction >= 1:
        return list(pairs)
    count = max(1, int(round(fraction * len(pairs))))
    kept = set(np.random.default_rng(seed).permutation(len(pairs))[:count].tolist())
    return [pair for index, pair in enumerate(pairs) if index in kept]


def training_tasks(args, train):
    """`{direction: (source, target) pairs}` trained on: the `--direction`
    direction's pairs (cut to `--low_resource_fraction`) and, with `--tasks
    both_directions`, all of `train` turned around for the other direction."""
    tasks = {args.direction: low_resource_pairs(train, args.low_resource_fraction, args.seed)}
    if args.tasks == "both_directions":
        tasks[other_direction(args.direction)] = _directed(train, "reverse")
    return tasks


def held_out_tasks(args, held_out):
    """The held-out pairs in each trained direction: `{direction: pairs}`."""
    tasks = {args.direction: list(held_out)}
    if args.tasks == "both_directions":
        tasks[other_direction(args.direction)] = _directed(held_out, "reverse")
    return tasks


def sentencepiece_file(args, run, text, train):
    """The joint vocabulary's `.model` file in the model folder, trained on
    the training pairs' two sides (with `--tasks both_directions`, and the
    direction tokens as pieces of their own) unless a resumed run left one
    there (`--evaluate_only` needs the trained model's)."""
    path = run.path(SENTENCEPIECE_FILE)
    if path.is_file():
        run.log(f"reusing the SentencePiece vocabulary {path}")
    elif args.evaluate_only:
        raise harness.UsageError(
            f"--evaluate_only needs the trained model's vocabulary {path}: train first with the same "
            "--model_dir (without --evaluate_only)"
        )
    else:
        train_vocabulary(args, run, text, train, path)
    if args.tasks == "both_directions":
        check_direction_pieces(path)
    return run.wrote("SentencePiece vocabulary", path)


def vocabulary_symbols(args):
    """The pieces the vocabulary keeps whole: the direction tokens with
    `--tasks both_directions`."""
    return [direction_piece(direction) for direction in DIRECTIONS] if args.tasks == "both_directions" else []


def check_direction_pieces(path):
    """A `UsageError` when a reused vocabulary lacks the direction tokens
    (it was trained for `--tasks one`)."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=str(path))
    missing = [d for d in DIRECTIONS if processor.piece_to_id(direction_piece(d)) == processor.unk_id()]
    if missing:
        raise harness.UsageError(
            f"--tasks both_directions needs the direction tokens in the vocabulary, but {path} (from an earlier "
            f"--tasks one run) has none for {missing}: use a new --model_dir"
        )


def direction_token_ids(processor):
    """`{direction: id}` of the direction tokens in the vocabulary."""
    return {direction: processor.piece_to_id(direction_piece(direction)) for direction in DIRECTIONS}


def train_vocabulary(args, run, text, train, path):
    """Trains the vocabulary of `--vocabulary_size` pieces, or by default of
    `DEFAULT_VOCAB_SIZE` or as many as the training text supports."""
    import sentencepiece

    sides = [side for pair in train for side in pair]
    size = args.vocabulary_size or DEFAULT_VOCAB_SIZE
    run.log(f"training a joint SentencePiece vocabulary of {size} pieces on {len(train):,} pairs ...")
    try:
        text.train_sentencepiece(
            sides, path, size, seed=args.seed, user_defined_symbols=vocabulary_symbols(args),
            exact_size=args.vocabulary_size is not None,
        )
    except ValueError as error:
        raise harness.UsageError(str(error)) from None
    trained = sentencepiece.SentencePieceProcessor(model_file=str(path)).get_piece_size()
    if trained < size:
        run.log(f"the training text supports at most {trained} pieces: --vocabulary_size default {trained}")


def counted(dataset):
    """`dataset` with its number of batches known (Keras warns that a
    dataset of unknown length "ran out of data" at the end of each pass)."""
    import tensorflow as tf

    batches = sum(1 for _ in dataset)
    return dataset.apply(tf.data.experimental.assert_cardinality(batches))


def spread(items, limit):
    """At most `limit` of `items` (0 = all), evenly spread, in order."""
    if not limit or len(items) <= limit:
        return list(items)
    return [items[index] for index in np.linspace(0, len(items) - 1, limit).round().astype(int)]


# ------------------------------------------------------------------ model


def build_model(args, vocabulary_size):
    """The compiled model: one matrix for both embeddings and the logits,
    Adam on the rsqrt warmup schedule, label-smoothed cross-entropy (`run.fit`
    builds the optimizer, `build_optimizer`)."""
    overrides = {"share_embeddings": True, "tie_output_projection": True}
    if args.dropout is not None:
        overrides["dropout"] = args.dropout
    if args.max_relative_position is not None:
        overrides["max_relative_position"] = args.max_relative_position
    model = transformer_translation(
        vocabulary_size, vocabulary_size, preset=args.preset, position=args.position, **overrides
    )
    width = model.get_config()["hidden_dim"]
    schedule = RsqrtWarmupSchedule(width, warmup_steps=args.warmup_steps, scale=args.learning_rate)
    model.compile(
        optimizer=keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
        loss=MaskedSparseCategoricalCrossentropy(label_smoothing=args.label_smoothing, pad_id=0),
        metrics=[NegativeLogLikelihoodPerToken(pad_id=0, name="nll_per_token")],
    )
    return model


def model_setting(args, name):
    """The flag's value, else the preset's."""
    value = getattr(args, name)
    return TRANSLATION_PRESETS[args.preset][name] if value is None else value


# ------------------------------------------------------------- evaluation


def evaluate(args, run, translator, held_out, prefix=""):
    """Scores greedy, beam and copy-the-source translations of the held-out
    pairs (at most `--eval_examples`, one reference each; a source held out
    with several targets is translated once), each source translated with
    `prefix` before it (a direction token).

    Returns:
        `(report, scored pairs, {"greedy" | "beam": {source: (text, ids)}})`.
    """
    pairs = spread(held_out, args.eval_examples)
    sources = list(dict.fromkeys(source for source, _ in pairs))
    references = [target for _, target in pairs]
    decodings = {"greedy": 1, "beam": args.beam_size}
    translations, report = {}, {"pairs": len(pairs), "distinct_sources": len(sources)}
    for name, beam_size in decodings.items():
        run.log(f"translating {len(sources):,} test sources, {name} (beam {beam_size}) ...")
        texts, tokens = translator.translate([prefix + source for source in sources], beam_size)
        translations[name] = dict(zip(sources, zip(texts, tokens)))
    hypotheses = {
        name: [translations[name][source][0] for source, _ in pairs] for name in decodings
    }
    hypotheses["copy_source"] = [source for source, _ in pairs]
    report["scores"] = {}
    for name, texts in hypotheses.items():
        scores = translation_scores(texts, references, args.bleu_tokenize)
        report["scores"][name] = scores
        run.log(f"test {name:<11}: BLEU {scores['bleu']:5.2f}  chrF {scores['chrf']:5.2f}")
    report["beam_size"], report["alpha"] = args.beam_size, args.alpha
    return report, pairs, translations


def sample_lines(pairs, translations, count):
    """`[{source, reference, greedy, beam}]` of `count` held-out pairs, evenly spread."""
    samples = []
    for source, reference in spread(pairs, count):
        samples.append(
            {
                "source": source,
                "reference": reference,
                "greedy": translations["greedy"][source][0],
                "beam": translations["beam"][source][0],
            }
        )
    return samples


def print_samples(run, samples):
    run.log(f"{len(samples)} held-out translations:")
    for sample in samples:
        for label in ("source", "reference", "greedy", "beam"):
            print(f"  {label:>9}: {sample[label]}")
        print()


def write_translations(run, pairs, translations):
    path = run.path("translations.tsv")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("source\treference\tgreedy\tbeam\n")
        for source, reference in pairs:
            row = (source, reference, translations["greedy"][source][0], translations["beam"][source][0])
            handle.write("\t".join(" ".join(field.split()) for field in row) + "\n")
    return run.wrote("held-out translations (TSV)", path)


def cross_attention(model, source_ids, target_ids, block_index=-1):
    """`[heads, target, source]` attention weights of one decoder block over
    the source, for the model's decoder inputs (start token, then
    `target_ids`)."""
    model = TranslationTransformer.from_model(model)
    source = keras.ops.convert_to_tensor(np.asarray(source_ids, "int32")[None])
    decoder_inputs = keras.ops.convert_to_tensor(np.asarray([0] + list(target_ids), "int32")[None])
    scores = model.attention_scores(source, decoder_inputs, block_index)["cross"]
    return keras.ops.convert_to_numpy(keras.ops.cast(scores, "float32"))[0]


def attention_figure(run, model, translator, samples, prefix=""):
    """attention.png for the first sample of 4 to 20 source pieces (else the
    first): its beam translation's attention over its source (after
    `prefix`, a direction token)."""
    processor = translator.sentencepiece
    fitting = [s for s in samples if 4 <= len(translator.source_ids(prefix + s["source"])) <= 20]
    sample = (fitting or samples)[0]
    source_ids = translator.source_ids(prefix + sample["source"])
    target_ids = processor.encode(sample["beam"]) + [processor.eos_id()]
    # Query i predicts target piece i: its row is labelled with that piece.
    weights = cross_attention(model, source_ids, target_ids)[:, : len(target_ids)]
    figure = plots.token_attention(
        run.path("attention.png"), weights, [processor.id_to_piece(i) for i in target_ids],
        [processor.id_to_piece(i) for i in source_ids],
        title=f"last decoder block's attention over the source: {sample['source']!r}",
    )
    return run.wrote("attention over the source (PNG)", figure), sample["source"]


# ------------------------------------------------------------------- main


def main(argv=None, callbacks=()):
    """Runs the recipe; returns the report dict.

    `callbacks` are extra Keras callbacks for `fit` (after the harness's own).
    """
    args = parse_args(argv)
    run = harness.start(args, recipe="translate")
    import sentencepiece

    from keras_selfattn.data import text

    all_train, validation, test, data_facts, split_facts = load_pairs(args, run, text)
    tasks = training_tasks(args, all_train)
    train = tasks[args.direction]
    run.log(
        f"{len(train):,} training pairs, {len(validation):,} validation and {len(test):,} test pairs "
        f"({args.direction})"
    )
    if args.tasks == "both_directions":
        run.log(f"and {len(all_train):,} training pairs the other way: both directions mixed, a token each")
    vocabulary = sentencepiece_file(args, run, text, all_train if args.tasks == "both_directions" else train)
    processor = sentencepiece.SentencePieceProcessor(model_file=str(vocabulary))

    def train_model():
        return train_translation(args, run, text, processor, vocabulary, tasks, validation, callbacks)

    model, history = run.trained_or_saved(NAME, train_model)
    with run.evaluation(NAME):
        translator = Translator(
            model, processor, args.max_length, batch_size=args.decode_batch_size, alpha=args.alpha
        )
        prefix = direction_prefix(args.direction) if args.tasks == "both_directions" else ""
        validation_report = validation_figures(args, run, text, processor, vocabulary, model, validation)
        evaluation, scored_pairs, translations = evaluate(args, run, translator, test, prefix)
        samples = sample_lines(scored_pairs, translations, max(args.samples, 1))
        print_samples(run, samples[: args.samples])
        write_translations(run, scored_pairs, translations)
        _, attention_source = attention_figure(run, model, translator, samples, prefix)
        exported = run.export(
            model, NAME, tokenizer=str(vocabulary), beam_size=args.beam_size, alpha=args.alpha,
            max_length=args.max_length, directions=served_directions(args),
        )
        settings = {
            "name": NAME,
            "preset": args.preset,
            "position": args.position,
            "max_relative_position": model_setting(args, "max_relative_position"),
            "dropout": model_setting(args, "dropout"),
            "vocabulary_size": processor.get_piece_size(),
        }
        report = {
            "data": {
                **data_facts,
                "direction": args.direction,
                "train_pairs": len(train),
                "validation_pairs": len(validation),
                "test_pairs": len(test),
                **task_facts(args, tasks),
            },
            "splits": split_facts,
            "training": history,
            "validation": validation_report,
            "test": evaluation,
            **directions_report(args, run, translator, test, evaluation),
            "samples": samples[: args.samples],
            "attention_sentence": attention_source,
            **export_report(args, run, exported),
        }
        report = run.write_report(report, model=model, model_settings=settings)
    run.finish()
    return report


def served_directions(args):
    """The exported `translate` signature's `directions`: with `--tasks
    both_directions`, each direction's name and its prefix, which the
    signature puts before the text of a row of that `direction`."""
    if args.tasks != "both_directions":
        return None
    return {direction: direction_prefix(direction) for direction in DIRECTIONS}


def export_report(args, run, path):
    """With `--export_dir`: `{"export": {"path", "translate_inputs"}}`, the
    written signature's inputs, also printed; nothing otherwise."""
    if path is None:
        return {}
    from keras_selfattn.export.contract import signature_inputs

    inputs = signature_inputs(path)["translate"]
    directions = served_directions(args)
    accepted = f" (`direction`: {' or '.join(directions)})" if directions else ""
    run.log(f"the exported `translate` signature takes {', '.join(f'`{name}`' for name in inputs)}{accepted}")
    return {"export": {"path": str(path), "translate_inputs": inputs}}


def task_facts(args, tasks):
    """What the report says about `--tasks` and `--low_resource_fraction`
    (nothing at their defaults)."""
    facts = {}
    if args.low_resource_fraction < 1:
        facts["low_resource_fraction"] = args.low_resource_fraction
    if args.tasks != "one":
        facts["tasks"] = args.tasks
        facts["train_pairs_by_direction"] = {direction: len(pairs) for direction, pairs in tasks.items()}
        facts["direction_prefixes"] = {direction: direction_prefix(direction) for direction in tasks}
    return facts


def directions_report(args, run, translator, test, evaluation):
    """With `--tasks both_directions`: `{"test_by_direction": {direction:
    scores}}`, the `--direction` scores already in `evaluation` and the other
    direction's scored here; nothing otherwise."""
    if args.tasks != "both_directions":
        return {}
    other = other_direction(args.direction)
    run.log(f"the other direction, {other}:")
    reverse, _, _ = evaluate(args, run, translator, _directed(test, "reverse"), direction_prefix(other))
    return {"test_by_direction": {args.direction: evaluation["scores"], other: reverse["scores"]}}


def validation_batches(args, text, processor, tokenizer, validation):
    """`(dataset, what)`: one pass of the validation pairs' batches (in each
    direction trained), `None` when there is none that fits, and a phrase
    that says so."""
    if not validation:
        return None, "no validation pairs: no validation"
    if args.tasks == "both_directions":
        dataset = counted(direction_batches(
            args, text, processor, tokenizer, held_out_tasks(args, validation), training=False
        ))
    else:
        dataset = counted(text.translation_dataset(
            validation, tokenizer, args.tokens_per_batch, args.max_length, shuffle=False
        ))
    if not dataset.cardinality():
        return None, f"no validation pair fits --max_length {args.max_length}: no validation"
    return dataset, f"{int(dataset.cardinality())} batches of the {len(validation)} validation pairs validate training"


def validation_figures(args, run, text, processor, vocabulary, model, validation):
    """The report's `validation`: the pairs and the model's loss and NLL per
    token on their batches (`None` without any)."""
    dataset, what = validation_batches(args, text, processor, text.tokenizer_from_file(vocabulary), validation)
    if dataset is None:
        run.log(f"validation: {what}")
        return {"pairs": len(validation), "loss": None, "nll_per_token": None}
    results = model.evaluate(dataset, verbose=0, return_dict=True)
    figures = {"pairs": len(validation), "loss": float(results["loss"]),
               "nll_per_token": float(results["nll_per_token"])}
    run.log(f"validation over {len(validation):,} pairs: loss {figures['loss']:.4f}, "
            f"NLL per token {figures['nll_per_token']:.4f}")
    return figures


def train_translation(args, run, text, processor, vocabulary, tasks, validation, callbacks):
    """Builds and fits the model, validated on the validation pairs (in
    each direction trained); returns `(model, History)`."""
    train = tasks[args.direction]
    check_some_pair_fits(args, processor, train)
    tokenizer = text.tokenizer_from_file(vocabulary)
    if args.tasks == "both_directions":
        dataset = direction_batches(args, text, processor, tokenizer, tasks, training=True)
    else:
        dataset = text.translation_dataset(
            train, tokenizer, args.tokens_per_batch, args.max_length, shuffle=True, seed=args.seed
        ).repeat()
    validation, validated = validation_batches(args, text, processor, tokenizer, validation)
    with run.strategy.scope():
        model = build_model(args, processor.get_piece_size())
    run.log(
        f"{NAME} ({args.preset}, {args.position}): {model.count_params():,} parameters; "
        f"training {args.epochs} epochs x {args.steps_per_epoch} steps of at most "
        f"{args.tokens_per_batch} tokens a side; {validated}"
    )
    return model, run.fit(model, dataset, validation_data=validation, callbacks=callbacks)


def direction_batches(args, text, processor, tokenizer, tasks, training):
    """Token-count batches of the `{direction: pairs}` tasks mixed in
    proportion to their pairs, each source led by its direction token;
    shuffled and repeated for `training`, one pass otherwise. Pairs whose
    source, token included, is longer than `--max_length` are left out."""
    import tensorflow as tf

    from keras_selfattn.data.mixing import mix_tasks

    datasets = {}
    for direction, pairs in tasks.items():
        dataset = text.tokenized_pairs(pairs, tokenizer, args.max_length).cache()
        if training:
            dataset = dataset.shuffle(len(pairs), seed=args.seed, reshuffle_each_iteration=True).repeat()
        datasets[direction] = dataset
    tokens = direction_token_ids(processor)
    mixed = mix_tasks(
        datasets, task_token_ids={direction: tokens[direction] for direction in tasks},
        sizes={direction: len(pairs) for direction, pairs in tasks.items()}, seed=args.seed,
    )
    mixed = mixed.filter(lambda source, target: tf.size(source) <= args.max_length)
    return text.length_bucketed_batches(mixed, args.tokens_per_batch, args.max_length)


def check_some_pair_fits(args, processor, train):
    """A `UsageError` naming `--max_length` when no training pair has both
    sides within it (the repeated training data would be empty, and `fit`
    would wait for its first batch forever)."""
    for pair in train:
        if all(len(processor.encode(side)) + 1 <= args.max_length for side in pair):
            return
    raise harness.UsageError(
        f"--max_length {args.max_length}: no training pair fits, each has a side longer than "
        f"{args.max_length} pieces with the end token; raise --max_length"
    )


if __name__ == "__main__":
    harness.run_cli(main)
