"""Melody-conditioned Music Transformer against an unconditioned one of the
same size: train both at equal steps, compare their held-out NLL, accompany a
held-out melody.

Data: as recipes/music.py, every .mid/.midi file under `--midi_dir` or by
default the 10 MAESTRO performances of the miditok 3.1.0 source distribution.
Each performance's melody is inferred by note-seq's melody inference
(`keras_selfattn.data.music.melody_events`), or with `--melody first_track`
read from each file's first track (the soprano of the Bach chorales that
`keras_selfattn.data.music.chorales.write_chorales_as_midi` writes), and
written in the performance events' vocabulary. Both models train on the same random crops of
`--sequence_length + 1` events for `--epochs` x `--steps_per_epoch` steps;
the melody-conditioned model (`MelodyConditionedMusicTransformer`) also reads
the melody's events in each crop's time span, the other
(`MusicTransformer`, the same preset) reads the performance alone.

The run prints and writes to `--model_dir`: both models' held-out NLL per
event on the same non-overlapping chunks of the held-out performances;
`accompaniment.mid` (the first `--primer_events` of a held-out performance,
then `--max_new_tokens` events the conditioned model plays to that
performance's melody), `melody.mid` (the melody), `unconditioned.mid` (the
unconditioned model continuing the same primer), `piano_roll.png` (melody
and accompaniment); `report.json` with the share of the melody's notes
after the primer that sound in each model's output; both trained `.keras`
models, checkpoints and TensorBoard logs; with `--export_dir` the
melody-conditioned model as a SavedModel for TF Serving (`accompany`: melody
in, performance out). A killed run started again with the same flags resumes
where it stopped.

    python recipes/music_accompaniment.py --model_dir runs/accompaniment --preset tiny --epochs 5
    python -c "from keras_selfattn.data.music.chorales import write_chorales_as_midi; write_chorales_as_midi('runs/chorales')"
    python recipes/music_accompaniment.py --model_dir runs/accompaniment_chorales --midi_dir runs/chorales \
        --melody first_track
"""

import math
import warnings

from recipes.common import harness  # sets up the environment before Keras is imported

# note-seq imports pydub, which warns that it has no ffmpeg; MIDI needs none.
warnings.filterwarnings("ignore", message="Couldn't find ffmpeg or avconv", category=RuntimeWarning)
import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_selfattn.models import (  # noqa: E402
    MELODY_PRESETS,
    MelodyConditionedMusicTransformer,
    music_transformer,
)
from recipes.common import plots  # noqa: E402
from recipes.common.music_recipes import (  # noqa: E402
    add_held_out_flag,
    add_note_rules_flag,
    compile_for_events,
    load_performances,
    note_event_ids,
)

CONDITIONED = "melody_conditioned"
UNCONDITIONED = "unconditioned"
# With --export_dir the melody-conditioned model is served as "accompaniment"
# (serving/models.config), its `accompany` signature keeping --note_rules.
SERVING_NAME = "accompaniment"


def build_parser():
    parser = harness.recipe_parser(__doc__)
    data = parser.add_argument_group("data")
    data.add_argument(
        "--midi_dir",
        default=None,
        help="folder of .mid/.midi files, searched recursively; a maestro-v3.0.0.csv (or v2) in it "
        "gives the split (default: the 10 MAESTRO performances from the miditok 3.1.0 sdist)",
    )
    data.add_argument(
        "--sequence_length",
        type=harness.positive_int,
        default=256,
        help="performance events per training crop and held-out chunk; the melody of a crop's time "
        "span is cut to as many events (it rarely has a fifth as many)",
    )
    data.add_argument(
        "--melody",
        choices=("inferred", "first_track"),
        default="inferred",
        help="inferred: note-seq's melody inference over each performance; first_track: each "
        "file's first track is the melody, given (the soprano of the Bach chorales that "
        "keras_selfattn.data.music.chorales.write_chorales_as_midi writes); a file without notes "
        "there is skipped and named",
    )
    add_held_out_flag(data)
    harness.add_renamed_flag(
        data,
        "--eval_examples",
        "--eval_chunks",
        type=harness.non_negative_int,
        default=0,
        help="evaluate on at most this many held-out chunks (spread over the held-out set); 0 means all",
    )
    model = parser.add_argument_group("model")
    model.add_argument(
        "--preset",
        default="tiny",
        choices=sorted(MELODY_PRESETS),
        help="size of both models: tiny (2 layers, width 64) or small (4 layers, width 128); the "
        "conditioned model adds as many encoder blocks over the melody",
    )
    model.add_argument(
        "--note_state",
        choices=("on", "off"),
        default="on",
        help="on: both decoders also see which pitches sound (note_event_ids); off: neither does",
    )
    harness.add_training_flags(parser, epochs=5, steps_per_epoch=100, batch_size=16, learning_rate=1e-3)
    generation = parser.add_argument_group("accompaniment")
    generation.add_argument(
        "--primer_events",
        type=harness.positive_int,
        default=16,
        help="events of the held-out performance given as the primer",
    )
    harness.add_max_new_tokens_flag(
        generation,
        default=512,
        help="events each model adds after the primer; the melody is that of the held-out "
        "performance's first --primer_events + --max_new_tokens events",
    )
    harness.add_sampling_flags(parser, temperature=1.0, top_k=0, top_p=0.95)
    add_note_rules_flag(generation)
    return parser


# ------------------------------------------------------------------- data


def with_melodies(args, run, music_data, performances, files):
    """`[(events, melody events)]` of each performance (`files`: their MIDI
    files), its melody inferred or, with `--melody first_track`, its file's
    first track; a file without notes there is skipped and named."""
    if args.melody == "inferred":
        run.log(f"inferring the melodies of {len(performances)} performances (note-seq) ...")
        return [(events, music_data.melody_events(events)) for events in performances]
    from keras_selfattn.data.music.chorales import first_track_melody_events

    run.log(f"reading the melodies of {len(performances)} performances from their files' first tracks ...")
    pieces = []
    for events, path in zip(performances, files):
        try:
            pieces.append((events, first_track_melody_events(str(path))))
        except ValueError as error:
            run.log(f"skipped {path}: {error}")
    if not pieces:
        raise harness.UsageError(f"--melody first_track: no file of {len(files)} has notes on its first track")
    return pieces


def melody_row(music_data, pieces, index, start, stop, width):
    """The melody of `pieces[index]`'s events `start .. stop - 1`, cut or
    padded (0) on the right to `width` events."""
    events, melody = pieces[index]
    window = music_data.melody.melody_window(melody, events, start, stop)[:width]
    return np.pad(window, (0, width - len(window)))


def training_dataset(args, music_data, pieces):
    """Endless batches `({"melody", "tokens"}, targets)` of random crops of
    `--sequence_length + 1` events and their melodies, drawn with `--seed`."""
    import tensorflow as tf

    length, batch_size = args.sequence_length, args.batch_size
    usable = [index for index, (events, _) in enumerate(pieces) if len(events) > length]
    if not usable:
        raise harness.UsageError(f"no training performance holds --sequence_length + 1 = {length + 1} events")
    weights = np.array([len(pieces[index][0]) - length for index in usable], "float64")

    def batches():
        rng = np.random.default_rng(args.seed)
        while True:
            melodies, tokens = [], []
            for index in rng.choice(usable, size=batch_size, p=weights / weights.sum()):
                start = int(rng.integers(0, len(pieces[index][0]) - length))
                tokens.append(pieces[index][0][start : start + length + 1])
                melodies.append(melody_row(music_data, pieces, index, start, start + length + 1, length))
            tokens = np.stack(tokens).astype("int32")
            yield {"melody": np.stack(melodies).astype("int32"), "tokens": tokens[:, :-1]}, tokens[:, 1:]

    spec = tf.TensorSpec((batch_size, length), tf.int32)
    return tf.data.Dataset.from_generator(batches, output_signature=({"melody": spec, "tokens": spec}, spec))


def held_out_chunks(args, music_data, pieces):
    """`(melodies, chunks)`: the non-overlapping chunks of `--sequence_length
    + 1` events of each held-out performance (`evaluation_chunks`), at most
    `--eval_examples` evenly spread, and each chunk's melody."""
    length = args.sequence_length + 1
    places = [
        (index, start) for index, (events, _) in enumerate(pieces) for start in range(0, len(events) - length + 1, length)
    ]
    if args.eval_examples and len(places) > args.eval_examples:
        places = [places[i] for i in np.linspace(0, len(places) - 1, args.eval_examples).round().astype(int)]
    chunks = np.array([pieces[index][0][start : start + length] for index, start in places], "int32")
    melodies = np.array(
        [melody_row(music_data, pieces, index, start, start + length, args.sequence_length) for index, start in places],
        "int32",
    )
    return melodies.reshape(-1, args.sequence_length), chunks.reshape(-1, length)


# ------------------------------------------------------------------ models


def build_model(args, music_data, name):
    """The compiled melody-conditioned model (`name == CONDITIONED`) or the
    unconditioned one: Adam, cross-entropy and NLL per event that skip padding."""
    note_event_ids = music_data.event_id_ranges() if args.note_state == "on" else None
    size = music_data.MUSIC_VOCABULARY_SIZE
    if name == CONDITIONED:
        model = MelodyConditionedMusicTransformer.from_preset(
            args.preset, vocabulary_size=size, note_event_ids=note_event_ids, max_melody_length=args.sequence_length
        )
    else:
        model = music_transformer(size, preset=args.preset, note_event_ids=note_event_ids)
    compile_for_events(model, args.learning_rate, music_data.PAD_ID)
    return model


def train(args, run, music_data, pieces, callbacks):
    """`{name: (model, history)}` of both models, trained on the same crops
    for the same steps (or loaded with `--evaluate_only`). A run killed while
    training the second model resumes it from its backup when started again."""
    models = {}
    dataset = training_dataset(args, music_data, pieces)
    for name in (CONDITIONED, UNCONDITIONED):

        def fit(name=name):
            with run.strategy.scope():
                model = build_model(args, music_data, name)
            run.log(
                f"{name} ({args.preset}, note state {args.note_state}): {model.count_params():,} parameters; "
                f"training {args.epochs} epochs x {args.steps_per_epoch} steps of {args.batch_size} x "
                f"{args.sequence_length} events"
            )
            data = dataset if name == CONDITIONED else dataset.map(lambda inputs, targets: (inputs["tokens"], targets))
            return model, run.fit(model, data, callbacks=callbacks)

        if not args.evaluate_only and run.has_backup() and run.saved_model_path(name).is_file():
            # A killed run saved this model, then stopped training the next one,
            # whose epochs the backup holds: keep this one, resume that one.
            run.log(f"{name} was trained and saved before the run stopped: loading {run.saved_model_path(name)}")
            models[name] = (keras.saving.load_model(run.saved_model_path(name)), run.saved_history(name))
            continue
        models[name] = run.trained_or_saved(name, fit)
    return models


def nll_per_event(model, inputs, targets, batch_size):
    results = model.evaluate(inputs, targets, batch_size=batch_size, verbose=0, return_dict=True)
    return float(results["nll_per_event"])


def evaluate(args, run, models, music_data, held_out):
    """Both models' held-out NLL per event on the same chunks."""
    melodies, chunks = held_out_chunks(args, music_data, held_out)
    if not len(chunks):
        raise harness.UsageError(
            f"no held-out performance holds --sequence_length + 1 = {args.sequence_length + 1} events"
        )
    report = {"length": args.sequence_length, "chunks": int(len(chunks))}
    for name, (model, _) in models.items():
        inputs = {"melody": melodies, "tokens": chunks[:, :-1]} if name == CONDITIONED else chunks[:, :-1]
        report[name] = nll_per_event(model, inputs, chunks[:, 1:], args.batch_size)
        run.log(
            f"held-out NLL per event, {name}: {report[name]:.4f} nats (perplexity {math.exp(report[name]):.1f}; "
            f"{len(chunks)} chunks of {args.sequence_length} events)"
        )
    return report


# ----------------------------------------------------------- accompaniment


def accompany(args, run, models, music_data, held_out):
    """Both models' output after the primer of the longest held-out
    performance, the conditioned one playing to its melody; writes the MIDI
    files and the piano roll; returns the report's part."""
    from keras_selfattn.data.music.melody import melody_notes_sounding
    from keras_selfattn.generation import continue_sequence

    index = max(range(len(held_out)), key=lambda i: len(held_out[i][0]))
    events = held_out[index][0]
    primer = np.asarray(events[: args.primer_events], "int32")[None]
    span = min(len(events), args.primer_events + args.max_new_tokens)
    melody = melody_row(music_data, held_out, index, 0, span, args.sequence_length)
    melody = melody[melody != 0][None]
    sampling = dict(
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
        note_event_ids=note_event_ids(args, music_data),
    )
    run.log(
        f"accompanying a {melody.shape[1]}-event held-out melody after a {primer.shape[1]}-event primer: "
        f"{args.max_new_tokens} events from each model (temperature {args.temperature}, top_p {args.top_p}) ..."
    )
    outputs = {
        CONDITIONED: models[CONDITIONED][0].generate(melody, primer, args.max_new_tokens, **sampling),
        UNCONDITIONED: continue_sequence(models[UNCONDITIONED][0], primer, args.max_new_tokens, **sampling),
    }
    outputs = {name: keras.ops.convert_to_numpy(tokens)[0] for name, tokens in outputs.items()}
    for label, name, tokens in (
        ("accompaniment MIDI (primer + melody-conditioned events)", "accompaniment.mid", outputs[CONDITIONED]),
        ("melody MIDI", "melody.mid", melody[0]),
        ("unconditioned continuation MIDI", "unconditioned.mid", outputs[UNCONDITIONED]),
    ):
        run.wrote(label, music_data.events_to_midi(tokens, str(run.path(name))))
    primer_steps = music_data.melody.total_steps(primer[0])
    steps_per_second = music_data.STEPS_PER_SECOND
    melody_notes = [
        (start / steps_per_second, end / steps_per_second, pitch, 100)
        for pitch, start, end in music_data.melody.performance_notes(melody[0])
    ]
    roll = plots.piano_roll(
        run.path("piano_roll.png"), melody_notes, music_data.decoded_notes(outputs[CONDITIONED]),
        boundary_seconds=primer_steps / steps_per_second, labels=("melody", "accompaniment"),
        title="melody-conditioned Music Transformer: a held-out melody (blue), its accompaniment (orange)",
    )
    run.wrote("piano roll", roll)
    report = {"primer_events": int(primer.shape[1]), "melody_events": int(melody.shape[1])}
    for name, tokens in outputs.items():
        report[name] = melody_notes_sounding(melody[0], tokens, from_step=primer_steps)
        share = report[name]["share"]
        run.log(
            f"melody notes after the primer sounding in the {name} output: {report[name]['sounding']} of "
            f"{report[name]['melody_notes']} ({harness.figure(share, '.2f')})"
        )
    return report


# ------------------------------------------------------------------- main


def main(argv=None, callbacks=()):
    """Runs the recipe; returns the report dict."""
    args = build_parser().parse_args(argv)
    run = harness.start(args, recipe="music_accompaniment")
    from keras_selfattn.data import music as music_data

    performances = load_performances(args, run, music_data, args.held_out)
    train_pieces = with_melodies(args, run, music_data, performances.train, performances.files["train"])
    held_out = with_melodies(args, run, music_data, performances.held_out, performances.files["held_out"])
    models = train(args, run, music_data, train_pieces, callbacks)
    with run.evaluation(CONDITIONED):
        report = {
            "data": {
                "train_performances": len(train_pieces),
                "train_events": int(sum(len(events) for events, _ in train_pieces)),
                "train_melody_events": int(sum(len(melody) for _, melody in train_pieces)),
                "held_out_performances": len(held_out),
            },
            "splits": performances.splits,
            "training": {name: history for name, (_, history) in models.items()},
            "parameters": {name: int(model.count_params()) for name, (model, _) in models.items()},
            "held_out_nll_per_event": evaluate(args, run, models, music_data, held_out),
            "accompaniment": accompany(args, run, models, music_data, held_out),
        }
        run.export(models[CONDITIONED][0], SERVING_NAME, note_event_ids=note_event_ids(args, music_data))
        settings = {"name": CONDITIONED, "preset": args.preset, "note_state": args.note_state, "melody": args.melody}
        report = run.write_report(report, model=models[CONDITIONED][0], model_settings=settings)
    run.finish()
    return report


if __name__ == "__main__":
    harness.run_cli(main)
