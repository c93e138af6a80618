"""Music Transformer on piano performances: train, evaluate at 1x, 2x and 4x the
training length, continue a held-out piece, export for serving.

Data: every .mid/.midi file under `--midi_dir` (MAESTRO's csv split honoured
when present), or by default the 10 MAESTRO performances shipped in the
miditok 3.1.0 source distribution, fetched with `pip download` into
`--data_dir`. Performances become note-seq performance events (note-on,
note-off, 10 ms time shifts, 32 velocity bins), cached on disk.

Held-out figures are scored on the validation performances (`--held_out
validation`, the default: where models, budgets and decoding are chosen);
`--held_out test` scores the test performances instead, once, for the
figures a results page reports. `fit` always validates on the validation
split.

The run prints and writes to `--model_dir`: the held-out NLL per event at the
training length and at 2x and 4x it (non-overlapping chunks), `continuation.mid`
and `continuation.wav` (the first `--primer_events` of a held-out
performance, then `--max_new_tokens` sampled events), `piano_roll.png` (primer and
continuation in two colours), `attention.png` (each head's attention of the
last generated events back over the sequence), the trained `.keras` model,
`report.json` (the split's counts under "splits"; sanity numbers of the continuation: notes per second,
pitch range, longest note against the piece's length; and its note
statistics beside the held-out data's: note lengths, polyphony, note-offs
that close a sounding note), checkpoints,
TensorBoard logs, and with `--export_dir` a SavedModel for TF Serving.

    python recipes/music.py --model_dir runs/music --preset tiny --epochs 5
    python recipes/music.py --model_dir runs/maestro --midi_dir ~/maestro-v3.0.0 \\
        --preset maestro --sequence_length 2048 --mixed_precision --strategy mirrored

The shipped model (`MusicTransformer.from_preset("maestro_small")`) was
trained by this command, 49.7 minutes on one CPU core; its card,
docs/models/maestro_small.md, gives its held-out figures:

    python recipes/music.py --model_dir runs/maestro_small_timed --held_out test --preset small \\
        --attention relative_global --max_relative_position 128 --timing_signal off --note_state timed \\
        --sequence_length 256 --batch_size 16 --epochs 18 --steps_per_epoch 250 \\
        --learning_rate 2e-3 --learning_rate_schedule cosine --warmup_steps 250
"""

import math
import warnings

from recipes.common import harness  # sets up the environment before Keras is imported

# note-seq imports pydub, which warns that it has no ffmpeg; MIDI needs none.
warnings.filterwarnings("ignore", message="Couldn't find ffmpeg or avconv", category=RuntimeWarning)
import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_selfattn.models import MusicTransformer, music_transformer  # noqa: E402
from keras_selfattn.models.music_transformer import ATTENTIONS, MUSIC_PRESETS  # noqa: E402
from keras_selfattn.models.segment_memory_evaluation import segment_memory_nll_per_event  # noqa: E402
from recipes.common import plots  # noqa: E402
from recipes.common.music_recipes import (  # noqa: E402
    EVALUATION_FACTORS,
    add_fold_flag,
    add_held_out_flag,
    add_note_rules_flag,
    compile_for_events,
    load_performances,
    note_event_ids,
)

# The trained model is <model_dir>/music.keras and is served as "music"
# (serving/models.config).
NAME = "music"
ATTENTION_QUERIES = 32  # the last generated events drawn in attention.png
VALIDATION_CHUNKS = 16  # chunks of the monitoring performances whose loss `fit` reports each epoch
# The music presets with trained weights, which --preset fine-tunes.
TRAINED_PRESETS = tuple(name for name, preset in MusicTransformer.presets.items() if preset["weights"])


def build_parser():
    parser = harness.recipe_parser(__doc__)
    data = parser.add_argument_group("data")
    data.add_argument(
        "--midi_dir",
        default=None,
        help="folder of .mid/.midi files, searched recursively; a maestro-v3.0.0.csv (or v2) "
        "in it gives the train/validation/test split (default: the 10 MAESTRO performances "
        "from the miditok 3.1.0 sdist, fetched into --data_dir)",
    )
    data.add_argument(
        "--sequence_length",
        type=harness.positive_int,
        default=256,
        help="events per training crop (the paper: 2048); evaluation runs at --evaluation_factors multiples of it",
    )
    data.add_argument(
        "--evaluation_factors",
        type=harness.positive_int,
        nargs="+",
        default=list(EVALUATION_FACTORS),
        help="held-out NLL per event is measured at these multiples of --sequence_length "
        "(e.g. 1 2 4 8: past the training length, where absolute positions fail)",
    )
    data.add_argument(
        "--augmentations",
        type=harness.non_negative_int,
        default=4,
        help="augmented copies of each training performance (random transposition by -3..3 "
        "semitones and time stretch by 0.95..1.05, note-seq), computed once and cached; 0: none",
    )
    add_held_out_flag(data)
    add_fold_flag(data)
    harness.add_renamed_flag(
        data,
        "--eval_examples",
        "--eval_chunks",
        type=harness.non_negative_int,
        default=0,
        help="evaluate on at most this many held-out chunks per length (spread over the "
        "held-out set); 0 means all",
    )
    model = parser.add_argument_group("model")
    model.add_argument(
        "--attention",
        default="relative_global",
        choices=ATTENTIONS,
        help="relative_global: the Music Transformer's relative attention (skew) over the "
        "whole sequence; relative_local: relative attention in local blocks; absolute: a "
        "plain Transformer with the sinusoidal position signal only; local_compressed: "
        "tensor2tensor's alternation, even layers relative_local, odd layers memory-compressed "
        "attention over the whole sequence (see --compression_factor)",
    )
    model.add_argument(
        "--preset",
        default="tiny",
        help="an architecture trained from scratch: tiny (2 layers, width 64; CPU minutes), small "
        "(4 layers, width 128; an hour on one CPU core) or maestro (Magenta's MAESTRO "
        f"configuration: 8 layers, width 384, 8 heads); or trained weights to fine-tune: "
        f"{', '.join(TRAINED_PRESETS)} (shipped with the package) or a preset folder that "
        "save_to_preset wrote (every run writes one, <model_dir>/preset). Fine-tuning keeps the "
        "weights' architecture: it takes none of the model flags below but --lora_rank",
    )
    model.add_argument(
        "--lora_rank",
        type=harness.non_negative_int,
        default=0,
        help="with trained weights (--preset): train only low-rank adapters of this rank on the "
        "attention's query and value and the feed-forward kernels (enable_lora), the rest "
        "frozen; 0 (the default): fine-tune every weight",
    )
    model.add_argument(
        "--timing_signal",
        choices=("preset", "on", "off"),
        default="preset",
        help="add the absolute sinusoidal timing signal to the embeddings (the presets keep it, "
        "as Magenta did; `off` leaves relative attention as the only position information, "
        "which is what lets a model run past its training length); `absolute` attention "
        "always has it",
    )
    model.add_argument(
        "--max_relative_position",
        type=int,
        default=None,
        help="relative attention's farthest distance (default: the preset's; relative_local: at "
        "most 2 x its block length)",
    )
    model.add_argument(
        "--block_length",
        type=harness.positive_int,
        default=None,
        help="relative_local: events per local block; each block attends to itself and the "
        "block before it (default: the preset's: tiny 16, maestro 512)",
    )
    model.add_argument(
        "--compression_factor",
        type=harness.positive_int,
        default=None,
        help="local_compressed: how many events the memory-compressed layers reduce to one key "
        "and value (a strided convolution), at least 2; an event sees a group from the group's "
        "last event on (default: the preset's, 3 as in tensor2tensor)",
    )
    model.add_argument(
        "--note_state",
        choices=("on", "timed", "off"),
        default="on",
        help="on: every event also sees which pitches sound after it and for how many events "
        "(music_transformer's note_event_ids); timed: and for how long in time (its "
        "timed_note_state); off: neither, and the model stops releasing notes older than a "
        "few dozen events",
    )
    model.add_argument(
        "--memory_length",
        type=harness.non_negative_int,
        default=0,
        help="segment memory (Transformer-XL): 0 (the default) trains on random crops as "
        "before; M > 0 trains on consecutive segments of --sequence_length events of each "
        "performance, every layer also attending to the M events before the segment "
        "(carried from the step before, no gradient, reset at a new performance; no "
        "validation during training), and generation keeps a window of M + "
        "--sequence_length events per layer however long it runs. Needs "
        "--attention relative_global, --timing_signal off and --note_state off",
    )
    training = harness.add_training_flags(
        parser, epochs=5, steps_per_epoch=100, batch_size=16, learning_rate=1e-3
    )
    training.add_argument(
        "--learning_rate_schedule",
        choices=("constant", "cosine"),
        default="constant",
        help="constant: --learning_rate throughout; cosine: a linear warmup over "
        "--warmup_steps to --learning_rate, then a cosine decay to 0 at the last step of "
        "--epochs x --steps_per_epoch (keras.optimizers.schedules.CosineDecay)",
    )
    training.add_argument(
        "--warmup_steps",
        type=harness.non_negative_int,
        default=0,
        help="cosine schedule: steps of its linear warmup from 0",
    )
    generation = parser.add_argument_group("continuation")
    generation.add_argument(
        "--primer_events",
        type=harness.positive_int,
        default=256,
        help="events of a held-out performance given as the primer",
    )
    harness.add_max_new_tokens_flag(generation, default=512, help="events the model adds after the primer")
    harness.add_sampling_flags(parser, temperature=1.0, top_k=0, top_p=0.95)
    add_note_rules_flag(generation)
    generation.add_argument(
        "--min_note_ms", type=harness.non_negative_int, default=0,
        help="with --note_rules on: no note-off before a note has sounded this long, rounded to the "
        "10 ms time steps (continue_sequence's min_note_steps; also kept by the exported generate "
        "signature); 0: no minimum",
    )
    return parser


# The flags that set the architecture, which trained weights already fix.
ARCHITECTURE_FLAGS = (
    "--attention", "--timing_signal", "--max_relative_position", "--block_length", "--compression_factor",
    "--note_state", "--memory_length",
)


def parse_args(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.min_note_ms and args.note_rules == "off":
        parser.error("--min_note_ms: a minimum note length is one of the note rules; it needs --note_rules on")
    args.initial_weights = initial_weights(parser, args)
    return args


def initial_weights(parser, args):
    """The trained preset or preset folder `--preset` names, else None
    (an architecture trained from scratch)."""
    from keras_selfattn.models.preset_folders import is_preset_folder

    if args.preset in MUSIC_PRESETS:
        if args.lora_rank:
            parser.error(f"--lora_rank adapts trained weights; --preset {args.preset} is an untrained architecture")
        return None
    if args.preset not in TRAINED_PRESETS and not is_preset_folder(args.preset):
        parser.error(
            f"--preset must be an architecture ({', '.join(sorted(MUSIC_PRESETS))}), trained weights "
            f"({', '.join(TRAINED_PRESETS)}) or a preset folder. Received: {args.preset!r}"
        )
    given = getattr(args, harness.COMMAND_LINE)
    fixed = [flag for flag in ARCHITECTURE_FLAGS if any(a == flag or a.startswith(flag + "=") for a in given)]
    if fixed:
        parser.error(f"{' / '.join(fixed)}: the weights of --preset {args.preset} fix the architecture")
    return args.preset


# ------------------------------------------------------------------- data


def held_out_chunks(music_data, performances, length, limit):
    """Non-overlapping held-out chunks of `length + 1` events (inputs and
    next-event targets of `length`), at most `limit` (0 = all), evenly spread."""
    chunks = music_data.evaluation_chunks(performances, length + 1)
    if limit and len(chunks) > limit:
        chunks = chunks[np.linspace(0, len(chunks) - 1, limit).round().astype(int)]
    return chunks


# ------------------------------------------------------------------ model


def build_model(args, vocabulary_size, pad_id, note_event_ids):
    """The compiled model: Adam, cross-entropy and NLL per event that skip
    padding; the weights of `--preset` (LoRA on them with `--lora_rank`)
    when it names trained weights."""
    if args.initial_weights:
        model = initial_model(args, vocabulary_size)
        compile_music_model(model, args, pad_id)
        return model
    overrides = {}
    if args.timing_signal != "preset":
        overrides["timing_signal"] = args.timing_signal == "on"
    if args.max_relative_position is not None:
        overrides["max_relative_position"] = args.max_relative_position
    if args.block_length is not None:
        overrides["block_length"] = args.block_length
    if args.compression_factor is not None:
        overrides["compression_factor"] = args.compression_factor
    if args.memory_length:
        overrides.update(memory_length=args.memory_length, segment_length=args.sequence_length)
    try:
        model = music_transformer(
            vocabulary_size, preset=args.preset, attention=args.attention,
            note_event_ids=note_event_ids if args.note_state != "off" else None,
            timed_note_state=args.note_state == "timed", **overrides,
        )
    except ValueError as error:
        raise harness.UsageError(
            "--attention / --max_relative_position / --block_length / --compression_factor / "
            f"--memory_length / --timing_signal / --note_state: {error}"
        ) from None
    compile_music_model(model, args, pad_id)
    return model


def model_description(args):
    if args.initial_weights:
        return f"from {args.initial_weights}" + (f", LoRA of rank {args.lora_rank}" if args.lora_rank else "")
    return f"{args.preset}, {args.attention}, note state {args.note_state}"


def initial_model(args, vocabulary_size):
    """The model of `--preset`'s trained weights, LoRA enabled at
    `--lora_rank` (when not 0), uncompiled."""
    try:
        model = MusicTransformer.from_preset(args.initial_weights)
    except ValueError as error:
        raise harness.UsageError(f"--preset: {error}") from None
    if model.vocabulary_size != vocabulary_size:
        raise harness.UsageError(
            f"--preset {args.initial_weights}: its model embeds {model.vocabulary_size} ids; "
            f"the performance events have {vocabulary_size}"
        )
    if args.lora_rank:
        model.enable_lora(args.lora_rank)
    return model


def fine_tuning_start(args, run, music_data, held_out):
    """`report.json`'s `"fine_tuning"` before training: the initial weights,
    their held-out NLL per event at the training length (the chunks the
    1x figure after training is measured on) and how many parameters
    train."""
    model = initial_model(args, music_data.MUSIC_VOCABULARY_SIZE)
    compile_music_model(model, args, music_data.PAD_ID)
    chunks = held_out_chunks(music_data, held_out, args.sequence_length, args.eval_examples)
    before = nll_per_event(model, chunks, args.batch_size) if len(chunks) else None
    trainable = sum(int(np.prod(variable.shape)) for variable in model.trainable_variables)
    run.log(
        f"fine-tuning {args.initial_weights}"
        + (f" with LoRA of rank {args.lora_rank}" if args.lora_rank else "")
        + f": {trainable:,} of {model.count_params():,} parameters train; held-out NLL per event "
        f"before: {harness.figure(before, '.4f')} nats ({len(chunks)} chunks of {args.sequence_length} events)"
    )
    return {
        "initial_weights": str(args.initial_weights),
        "lora_rank": args.lora_rank,
        "held_out_nll_before": before,
        "trainable_parameters": trainable,
    }


def compile_music_model(model, args, pad_id):
    """Adam, cross-entropy and NLL per event that skip padding."""
    compile_for_events(model, learning_rate(args), pad_id)


def learning_rate(args):
    """`--learning_rate`, or its cosine schedule over the run's steps."""
    if args.learning_rate_schedule == "constant":
        return args.learning_rate
    total_steps = args.epochs * args.steps_per_epoch
    if args.warmup_steps >= total_steps:
        raise harness.UsageError(
            f"--warmup_steps must be below --epochs x --steps_per_epoch ({total_steps}). "
            f"Received: {args.warmup_steps}"
        )
    return keras.optimizers.schedules.CosineDecay(
        0.0 if args.warmup_steps else args.learning_rate,
        decay_steps=total_steps - args.warmup_steps,
        warmup_target=args.learning_rate if args.warmup_steps else None,
        warmup_steps=args.warmup_steps,
    )


def nll_per_event(model, chunks, batch_size, segment_length=None):
    """Mean NLL (nats) per predicted event over `chunks [n, length + 1]`.
    A model with segment memory reads each chunk as training did: segment
    by segment (`segment_length` events), each with the memory the one
    before left (Transformer-XL's evaluation)."""
    if getattr(model, "memory_length", 0):
        return segment_memory_nll_per_event(model, chunks, batch_size, segment_length)
    results = model.evaluate(
        chunks[:, :-1], chunks[:, 1:], batch_size=batch_size, verbose=0, return_dict=True
    )
    return float(results["nll_per_event"])


def evaluate(args, run, model, music_data, held_out):
    """NLL per event on held-out chunks at each `--evaluation_factors`
    multiple of the training length (1x, 2x and 4x by default)."""
    report = {}
    for factor in args.evaluation_factors:
        length = factor * args.sequence_length
        chunks = held_out_chunks(music_data, held_out, length, args.eval_examples)
        if len(chunks) == 0:
            # Left out of the report (recipes/demo.py reads only the lengths measured).
            run.log(f"held-out NLL per event at {factor}x the training length ({length} events): "
                    f"{harness.figure(None)}, no held-out performance holds {length + 1} events")
            continue
        nll = nll_per_event(model, chunks, max(1, args.batch_size // factor), args.sequence_length)
        report[f"{factor}x"] = {
            "length": length,
            "chunks": int(len(chunks)),
            "nll_per_event": nll,
            "perplexity": math.exp(nll),
        }
        run.log(
            f"held-out NLL per event at {factor}x the training length ({length} events, "
            f"{len(chunks)} chunks): {nll:.4f} nats (perplexity {math.exp(nll):.1f})"
        )
    return report


# ---------------------------------------------------------- continuation


def note_rules(args, music_data):
    """`continue_sequence`'s (and `export_for_serving`'s) note rules keywords."""
    return {
        "note_event_ids": note_event_ids(args, music_data),
        "min_note_steps": music_data.milliseconds_to_steps(args.min_note_ms),
    }


def continue_primer(args, run, model, music_data, held_out):
    """Primes with the start of the longest held-out performance and samples."""
    from keras_selfattn.generation import continue_sequence

    source = max(held_out, key=len)
    primer = np.asarray(source[: args.primer_events], dtype="int32")[None]
    run.log(
        f"continuing a {primer.shape[1]}-event held-out primer with {args.max_new_tokens} "
        f"events (temperature {args.temperature}, top_k {args.top_k}, top_p {args.top_p}, "
        f"note rules {args.note_rules}, minimum note {args.min_note_ms} ms) ..."
    )
    tokens = continue_sequence(
        model, primer, args.max_new_tokens, temperature=args.temperature,
        top_k=args.top_k, top_p=args.top_p, seed=args.seed, **note_rules(args, music_data),
    )
    return primer[0], keras.ops.convert_to_numpy(tokens)[0]


def sanity(notes, piece_seconds):
    """Listen-free checks of generated notes (`None` where there is no note
    to measure)."""
    if not notes:
        return {
            "notes": 0, "seconds": piece_seconds, "notes_per_second": None, "pitch_range": None,
            "longest_note_seconds": None, "piece_seconds": piece_seconds, "longest_note_over_piece": None,
        }
    start = min(n[0] for n in notes)
    end = max(n[1] for n in notes)
    seconds = max(end - start, 1e-6)
    pitches = [n[2] for n in notes]
    longest = max(n[1] - n[0] for n in notes)
    return {
        "notes": len(notes),
        "seconds": seconds,
        "notes_per_second": len(notes) / seconds,
        "pitch_range": [min(pitches), max(pitches)],
        "longest_note_seconds": longest,
        "piece_seconds": piece_seconds,
        "longest_note_over_piece": longest / max(piece_seconds, 1e-6),
    }


def attention_weights(model, tokens, block_index=-1):
    """`[heads, length, keys]` self-attention weights of one decoder block
    for `tokens [length]`: keys are the events (`keys = length`), or the
    memory entries of a memory-compressed block (`attention_keys`)."""
    model = MusicTransformer.from_model(model)
    tokens = keras.ops.convert_to_tensor(np.asarray(tokens, dtype="int32")[None])
    scores = model.attention_scores(tokens, block_index)
    return keras.ops.convert_to_numpy(keras.ops.cast(scores, "float32"))[0]


def attention_keys(model, primer_length, block_index=-1):
    """`(key_labels, boundary)` of `attention_weights`' keys: events, the
    primer ending before event `primer_length`; or, for a memory-compressed
    block (`local_compressed`), its memory entries (event 0, then one per
    `compression_factor` events), the first one after the primer."""
    attention = MusicTransformer.from_model(model).decoder_blocks[block_index].self_attention
    factor = getattr(attention, "compression_factor", None)
    if factor is None:
        return "event", primer_length
    return "compressed memory entry", 1 + math.ceil(primer_length / factor)


def write_continuation(args, run, model, music_data, held_out):
    primer, tokens = continue_primer(args, run, model, music_data, held_out)
    midi_path = run.path("continuation.mid")
    music_data.events_to_midi(tokens, str(midi_path))
    run.wrote("continuation MIDI (primer + continuation)", midi_path)
    wav_path = run.path("continuation.wav")
    music_data.events_to_wav(tokens, wav_path)
    run.wrote("continuation audio (WAV, 16 kHz mono)", wav_path)
    primer_notes, new_notes = music_data.split_continuation_notes(primer, tokens)
    primer_seconds = music_data.performance_seconds(primer)
    piece_seconds = music_data.performance_seconds(tokens)
    roll = plots.piano_roll(
        run.path("piano_roll.png"), primer_notes, new_notes, boundary_seconds=primer_seconds,
        title=f"{args.attention} Music Transformer: held-out primer (blue), continuation (orange)",
    )
    run.wrote("piano roll", roll)

    weights = attention_weights(model, tokens)
    queries = np.arange(len(tokens) - min(ATTENTION_QUERIES, args.max_new_tokens), len(tokens))
    key_labels, boundary = attention_keys(model, len(primer))
    figure = plots.attention_heads(
        run.path("attention.png"), weights[:, queries, :], queries, boundary=boundary,
        title=f"last block's attention of the last {len(queries)} generated events "
        "(dashed: end of the primer)", key_labels=key_labels,
    )
    run.wrote("attention weights", figure)
    checks = sanity(new_notes, piece_seconds)
    run.log(
        f"continuation: {checks['notes']} new notes over {checks['seconds']:.1f} s"
        + (
            f", {checks['notes_per_second']:.1f} notes/s, pitches "
            f"{checks['pitch_range'][0]}..{checks['pitch_range'][1]}, longest note "
            f"{checks['longest_note_seconds']:.2f} s of a {piece_seconds:.1f} s piece"
            if checks["notes"] else ""
        )
    )
    statistics = {
        "continuation": music_data.performance_statistics([tokens], starts=[len(primer)]),
        "held_out": music_data.performance_statistics(held_out),
    }
    log_statistics(run, statistics)
    return {
        "primer_events": int(len(primer)),
        "generated_events": int(len(tokens) - len(primer)),
        "primer_seconds": primer_seconds,
        "primer_notes": len(primer_notes),
        "sanity": checks,
        "note_statistics": statistics,
    }


STATISTICS_SHOWN = {
    "median_note_seconds": "median note length (s)",
    "share_of_notes_over_2s": "share of notes over 2 s",
    "share_of_notes_under_50ms": "share of notes under 50 ms",
    "mean_polyphony": "mean polyphony (notes at once)",
    "p95_polyphony": "95th-percentile polyphony",
    "notes_per_second": "notes per second",
    "share_of_note_offs_closing_a_note": "share of note-offs closing a note",
}


def log_statistics(run, statistics):
    """The continuation's note statistics beside the held-out data's."""
    run.log(f"{'note statistics':34s} {'continuation':>12s} {'held out':>10s}")
    for key, label in STATISTICS_SHOWN.items():
        run.log(f"{label:34s} {statistics['continuation'][key]:12.2f} {statistics['held_out'][key]:10.2f}")


# ------------------------------------------------------------------- main


def main(argv=None, callbacks=()):
    """Runs the recipe; returns the report dict.

    `callbacks` are extra Keras callbacks for `fit` (after the harness's own).
    """
    args = parse_args(argv)
    run = harness.start(args, recipe="music")
    from keras_selfattn.data import music as music_data

    performances = load_performances(args, run, music_data, args.held_out)
    train, held_out = performances.train, performances.held_out

    fine_tuning = fine_tuning_start(args, run, music_data, held_out) if args.initial_weights else None

    def train_model():
        return train_music_transformer(args, run, music_data, performances, callbacks)

    model, history = run.trained_or_saved(NAME, train_model)
    with run.evaluation(NAME):
        run.log(f"evaluating on the {args.held_out} performances ...")
        settings = {
            "name": NAME,
            "preset": args.preset,
            "lora_rank": args.lora_rank,
            "attention": args.attention,
            "timing_signal": args.timing_signal,
            "max_relative_position": args.max_relative_position,
            "block_length": args.block_length,
            "compression_factor": args.compression_factor,
            "note_state": args.note_state,
            "memory_length": args.memory_length,
        }
        report = {
            "data": {
                "train_performances": len(train),
                "train_events": int(sum(len(p) for p in train)),
                "held_out_performances": len(held_out),
                "held_out_events": int(sum(len(p) for p in held_out)),
            },
            "splits": performances.splits,
            "training": history,
            "held_out_nll_per_event": evaluate(args, run, model, music_data, held_out),
            "uniform_nll_per_event": math.log(music_data.MUSIC_VOCABULARY_SIZE),
        }
        if fine_tuning:
            after = report["held_out_nll_per_event"].get("1x", {}).get("nll_per_event")
            report["fine_tuning"] = {**fine_tuning, "held_out_nll_after": after}
            run.log(
                f"held-out NLL per event at 1x: {harness.figure(fine_tuning['held_out_nll_before'], '.4f')} "
                f"before fine-tuning, {harness.figure(after, '.4f')} after"
            )
        report["continuation"] = write_continuation(args, run, model, music_data, held_out)
        preset_dir = model.save_to_preset(run.path("preset"), training_command=run.training_command())
        run.wrote(f"preset folder (MusicTransformer.from_preset({str(preset_dir)!r}))", preset_dir)
        run.export(model, NAME, **note_rules(args, music_data))
        report = run.write_report(report, model=model, model_settings=settings)
    run.finish()
    return report


def train_music_transformer(args, run, music_data, performances, callbacks):
    """Builds and fits the model on random crops of the training
    performances, validated on up to `VALIDATION_CHUNKS` chunks of the
    monitoring ones; returns `(model, History)`."""
    if args.augmentations:
        run.log(f"augmenting: {args.augmentations} variants of each training performance ...")
    if args.memory_length:
        return train_with_segment_memory(args, run, music_data, performances, callbacks)
    dataset = music_data.training_dataset(
        performances.train, args.sequence_length, args.batch_size, seed=args.seed,
        augment=args.augmentations, cache_dir=performances.data_dir / "encoded",
    )
    validation = held_out_chunks(music_data, performances.monitor, args.sequence_length, VALIDATION_CHUNKS)
    with run.strategy.scope():
        model = build_model(
            args, music_data.MUSIC_VOCABULARY_SIZE, music_data.PAD_ID, music_data.event_id_ranges()
        )
    validated = (
        f"{len(validation)} chunks of {args.sequence_length + 1} monitoring events validate training"
        if len(validation) else f"no monitoring performance holds {args.sequence_length + 1} events: no validation"
    )
    run.log(
        f"{NAME} ({model_description(args)}): "
        f"{model.count_params():,} parameters; "
        f"training {args.epochs} epochs x {args.steps_per_epoch} steps of {args.batch_size} x "
        f"{args.sequence_length} events; {validated}"
    )
    history = run.fit(
        model,
        dataset,
        validation_data=(validation[:, :-1], validation[:, 1:]) if len(validation) else None,
        callbacks=callbacks,
    )
    return model, history


def train_with_segment_memory(args, run, music_data, performances, callbacks):
    """`--memory_length > 0`: fits the model through a `SegmentMemoryTrainer`
    over consecutive segments of the training performances and their
    `--augmentations` variants (repeated, every pass starting each slot
    anew); returns `(model, History)`."""
    from keras_selfattn.models import SegmentMemoryTrainer

    variants = music_data.augmented_performances(
        performances.train, args.augmentations, seed=args.seed, cache_dir=performances.data_dir / "encoded"
    )
    dataset = music_data.segment_dataset(
        list(performances.train) + variants, args.sequence_length, args.batch_size
    ).repeat()
    with run.strategy.scope():
        model = build_model(args, music_data.MUSIC_VOCABULARY_SIZE, music_data.PAD_ID, music_data.event_id_ranges())
        try:
            trainer = SegmentMemoryTrainer(model, batch_size=args.batch_size)
        except ValueError as error:
            raise harness.UsageError(f"--batch_size: {error}") from None
        compile_music_model(trainer, args, music_data.PAD_ID)
    run.log(
        f"{NAME} ({args.preset}, {args.attention}, memory {args.memory_length}): "
        f"{model.count_params():,} parameters; training {args.epochs} epochs x "
        f"{args.steps_per_epoch} steps of {args.batch_size} consecutive segments of "
        f"{args.sequence_length} events; no validation"
    )
    history = run.fit(trainer, dataset, callbacks=callbacks)
    return model, history


if __name__ == "__main__":
    harness.run_cli(main)
