"""Client for keras_selfattn models served by TensorFlow Serving (REST and gRPC).

The command line of `serving/`; its helpers live in sibling modules of the
`serving` package (`from serving import client`, the project installed) and are
importable from here too:

- `predict_requests`: `predict_request(model_name, signature_name, inputs)` (a gRPC
  `PredictRequest`), `rest_body(signature_name, inputs, form="instances" | "inputs")`
  (the JSON body of `POST /v1/models/<name>:predict`), `parse_rest_response(response)`
  and `parse_predict_response(response)` (the outputs as `{name: numpy array}`,
  strings as `bytes` in object arrays, as `tf.make_ndarray` gives them).
- `server_calls`: `predict(...)`, one request over either protocol; `rest_call`,
  `grpc_predict`.
- `client_errors`: `ClientError`, `ServerUnreachable`, `ServerError`, `RowError` (a row
  the server refused: its `status` output names the problem).
- `model_signatures`: the models of `models.config` and their signatures.
- `image_files`: `read_image`, `image_grid`, `write_image`.

Command line (`python serving/client.py --help`):

    python serving/client.py music --primer in.mid --out out.mid
    python serving/client.py translate "Ich habe Hunger." [--direction forward]
    python serving/client.py sample --out grid.png
    python serving/client.py complete in.png --known_rows 4 --out grid.png
    python serving/client.py super_resolve in.png out.png [--decoding posterior_mean]

The REST path needs only the standard library and numpy; gRPC needs `grpcio`
and `tensorflow-serving-api` (which imports TensorFlow).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from serving.client_errors import ClientError, RowError, ServerError, ServerUnreachable
from serving.image_files import image_grid, read_image, write_image
from serving.model_signatures import MODEL_NAMES, MODEL_SIGNATURES, OPTIONAL_INPUTS, SIGNATURES
from serving.predict_requests import (
    parse_predict_response,
    parse_rest_response,
    predict_request,
    read_json,
    rest_body,
)
from serving.server_calls import (
    DEFAULT_GRPC_PORT,
    DEFAULT_HOST,
    DEFAULT_REST_PORT,
    DEFAULT_TIMEOUT,
    GRPC_MAX_MESSAGE_BYTES,
    check_row_status,
    grpc_predict,
    model_path,
    predict,
    rest_call,
    rest_predict,
)

__all__ = [
    "ClientError", "RowError", "ServerError", "ServerUnreachable",
    "image_grid", "read_image", "write_image",
    "MODEL_NAMES", "MODEL_SIGNATURES", "OPTIONAL_INPUTS", "SIGNATURES",
    "parse_predict_response", "parse_rest_response", "predict_request", "read_json", "rest_body",
    "DEFAULT_GRPC_PORT", "DEFAULT_HOST", "DEFAULT_REST_PORT", "DEFAULT_TIMEOUT",
    "GRPC_MAX_MESSAGE_BYTES", "check_row_status", "grpc_predict", "model_path", "predict", "rest_call",
    "rest_predict",
    "build_parser", "main",
]


def _connection(args):
    return dict(
        protocol=args.protocol,
        host=args.host,
        rest_port=args.rest_port,
        grpc_port=args.grpc_port,
        timeout=args.timeout,
        version=args.model_version,
        rest_form=args.rest_form,
    )


def _column(value, dtype, rows):
    return np.full([rows], value, dtype=dtype)


def _continuation_length(tokens, primer_length):
    """Tokens after the primer up to the last non-zero one: the signature
    fills a row past its own count with zeros (PAD)."""
    generated = np.asarray(tokens[primer_length:])
    nonzero = np.flatnonzero(generated)
    return 0 if nonzero.size == 0 else int(nonzero[-1]) + 1


def run_music(args):
    try:
        from keras_selfattn.data.music import events_to_midi, events_to_wav, midi_to_events
    except ImportError as error:
        raise ClientError(
            f"the music command needs keras_selfattn.data.music ({error}); "
            "install the project with its music extra: pip install -e '.[music]'"
        ) from None
    events = np.asarray(midi_to_events(args.primer), dtype=np.int32).reshape(-1)
    if args.primer_tokens is not None:
        events = events[: args.primer_tokens]
    if events.size == 0:
        raise ClientError(f"no events in the primer {args.primer} (an empty MIDI file?)")
    inputs = {
        "primer": events[None],
        "primer_length": _column(events.size, np.int32, 1),
        "max_new_tokens": _column(args.max_new_tokens, np.int32, 1),
        "temperature": _column(args.temperature, np.float32, 1),
        "top_k": _column(args.top_k, np.int32, 1),
        "top_p": _column(args.top_p, np.float32, 1),
        "seed": _column(args.seed, np.int32, 1),
    }
    tokens = predict(args.model_name, "generate", inputs, **_connection(args))["tokens"][0]
    generated = _continuation_length(tokens, events.size)
    piece = np.asarray(tokens[: events.size + generated], dtype=np.int32)
    events_to_midi(piece, args.out)
    print(f"wrote {args.out}: {events.size} primer events + {generated} generated events")
    wav = _wav_beside(args.out)
    try:
        events_to_wav(piece, wav)
    except ValueError as error:  # the events are valid (the MIDI was written) but hold no note
        print(f"wrote no audio: {error}")
    else:
        print(f"wrote {wav}: the same as audio (16 kHz mono WAV)")


def _wav_beside(midi_path):
    """`out.mid` -> `out.wav`; `out.wav` -> `out.wav.wav`, never the MIDI file itself."""
    path = Path(midi_path)
    wav = path.with_suffix(".wav")
    return wav if wav != path else path.with_name(path.name + ".wav")


def run_translate(args):
    inputs = {"text": np.array([line.encode("utf-8") for line in args.text], dtype=object)}
    if args.direction is not None:
        inputs["direction"] = _column(args.direction.encode("utf-8"), object, len(args.text))
    outputs = predict(args.model_name, "translate", inputs, **_connection(args))
    for translation, score in zip(outputs["translation"], outputs["score"]):
        print(f"{bytes(translation).decode('utf-8', 'replace')}\t(score {float(score):.4f})")


def _image_sampling_inputs(args):
    """`seed` (seed + row), `temperature` and, when given, `class_label` per row."""
    inputs = {
        "seed": args.seed + np.arange(args.batch, dtype=np.int32),
        "temperature": _column(args.temperature, np.float32, args.batch),
    }
    if args.class_label is not None:
        inputs["class_label"] = _column(args.class_label, np.int32, args.batch)
    return inputs


def run_sample(args):
    inputs = _image_sampling_inputs(args)
    pixels = predict(args.model_name, "sample", inputs, **_connection(args))["pixels"]
    write_image(args.out, image_grid(pixels), scale=args.scale)
    print(f"wrote {args.out}: {len(pixels)} samples of {'x'.join(map(str, pixels.shape[1:]))}")


def run_complete(args):
    image = read_image(args.image, args.channels)
    if not 0 <= args.known_rows <= image.shape[0]:
        raise ClientError(
            f"--known_rows must be in [0, {image.shape[0]}] for {args.image}; got {args.known_rows}"
        )
    inputs = {
        "pixels": np.repeat(image[None], args.batch, axis=0),
        "known_rows": _column(args.known_rows, np.int32, args.batch),
        **_image_sampling_inputs(args),
    }
    pixels = predict(args.model_name, "complete", inputs, **_connection(args))["pixels"]
    write_image(args.out, image_grid(np.concatenate([image[None], pixels])), scale=args.scale)
    print(f"wrote {args.out}: the input, then {len(pixels)} completions")


def run_super_resolve(args):
    image = read_image(args.input, args.channels)
    inputs = {
        "low_resolution": image[None],
        "seed": _column(args.seed, np.int32, 1),
        "temperature": _column(args.temperature, np.float32, 1),
        "decoding": np.array([args.decoding.encode("utf-8")], dtype=object),
    }
    pixels = predict(args.model_name, "super_resolve", inputs, **_connection(args))["pixels"][0]
    write_image(args.output, pixels)
    print(
        f"wrote {args.output}: {pixels.shape[1]}x{pixels.shape[0]} from "
        f"{image.shape[1]}x{image.shape[0]}"
    )


def _positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text}")
    return value


def _add_connection_flags(parser, model_name):
    group = parser.add_argument_group("server")
    group.add_argument("--host", default=DEFAULT_HOST, help="server host (default: %(default)s)")
    group.add_argument(
        "--rest_port", type=int, default=DEFAULT_REST_PORT, help="REST port (default: %(default)s)"
    )
    group.add_argument(
        "--grpc_port", type=int, default=DEFAULT_GRPC_PORT, help="gRPC port (default: %(default)s)"
    )
    group.add_argument(
        "--protocol",
        choices=("rest", "grpc"),
        default="rest",
        help="REST (JSON over HTTP) or gRPC (default: %(default)s)",
    )
    group.add_argument(
        "--rest_form",
        choices=("instances", "inputs"),
        default="instances",
        help="REST request form: row (instances) or columnar (inputs) (default: %(default)s)",
    )
    group.add_argument(
        "--model_name",
        default=model_name,
        help="model name in models.config (default: %(default)s)",
    )
    group.add_argument(
        "--model_version", type=int, default=None, help="model version (default: the latest)"
    )
    group.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help="seconds to wait for an answer (default: %(default)s)",
    )


def _add_sampling_flags(parser, temperature=1.0):
    parser.add_argument(
        "--temperature",
        type=float,
        default=temperature,
        help="sampling temperature; 0 = greedy (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")


def _add_image_generation_flags(parser, class_label_help):
    """The flags `sample` and `complete` share, after their own: sampling, class, grid scale."""
    _add_sampling_flags(parser)
    parser.add_argument("--class_label", type=int, default=None, help=class_label_help)
    parser.add_argument(
        "--scale",
        type=_positive_int,
        default=4,
        help="pixel repeat factor of the grid (default: %(default)s)",
    )
    _add_connection_flags(parser, MODEL_NAMES["image_generation"])


def _add_channels_flag(parser):
    parser.add_argument(
        "--channels", type=int, choices=(1, 3), default=None, help="1 or 3 (default: from the file)"
    )


def _add_music_command(commands):
    music = commands.add_parser(
        "music",
        help="continue a MIDI primer (signature `generate`)",
        description="Continue a MIDI performance: the primer's events go to the `generate` "
        "signature; the output MIDI holds the primer followed by the continuation.",
    )
    music.add_argument("--primer", required=True, help="primer MIDI file")
    music.add_argument(
        "--out", required=True, help="output MIDI file; its audio is written beside it as a .wav"
    )
    music.add_argument(
        "--primer_tokens",
        type=_positive_int,
        default=None,
        help="keep only the first N primer events (default: all; the model's maximum "
        "length bounds primer + new tokens)",
    )
    music.add_argument(
        "--max_new_tokens",
        type=_positive_int,
        default=256,
        help="events to generate (default: %(default)s)",
    )
    _add_sampling_flags(music)
    music.add_argument(
        "--top_k",
        type=int,
        default=0,
        help="sample among the k most likely events; 0 = all (default: %(default)s)",
    )
    music.add_argument(
        "--top_p",
        type=float,
        default=1.0,
        help="nucleus sampling mass in (0, 1]; 1 = all (default: %(default)s)",
    )
    _add_connection_flags(music, MODEL_NAMES["music"])
    music.set_defaults(run=run_music)


def _add_translate_command(commands):
    translate = commands.add_parser(
        "translate",
        help="translate text (signature `translate`)",
        description="Translate one or more sentences; prints one line per sentence: the "
        "translation, a tab, and the beam-search score.",
    )
    translate.add_argument("text", nargs="+", help="sentence(s) to translate")
    translate.add_argument(
        "--direction",
        default=None,
        help="the direction of every sentence, for a model of several directions (exported with "
        "`directions`, e.g. by recipes/translate.py --tasks both_directions): forward or reverse "
        "(default: none sent, for a model of one direction)",
    )
    _add_connection_flags(translate, MODEL_NAMES["translation"])
    translate.set_defaults(run=run_translate)


def _add_sample_command(commands):
    sample = commands.add_parser(
        "sample",
        help="sample images into a PNG grid (signature `sample`)",
        description="Sample a batch of images (row i uses seed + i) and write them as one grid.",
    )
    sample.add_argument("--out", required=True, help="output image (PNG)")
    sample.add_argument(
        "--batch", type=_positive_int, default=4, help="images to sample (default: %(default)s)"
    )
    _add_image_generation_flags(sample, "class to sample, for class-conditional models")
    sample.set_defaults(run=run_sample)


def _add_complete_command(commands):
    complete = commands.add_parser(
        "complete",
        help="complete the lower rows of an image (signature `complete`)",
        description="Keep the top --known_rows rows of an image (of the model's size) and "
        "generate the rest; writes the input and the completions as one grid.",
    )
    complete.add_argument("image", help="input image, of the model's height, width and channels")
    complete.add_argument("--out", required=True, help="output image (PNG)")
    complete.add_argument("--known_rows", type=int, required=True, help="rows kept from the input")
    complete.add_argument(
        "--batch", type=_positive_int, default=4, help="completions (default: %(default)s)"
    )
    _add_channels_flag(complete)
    _add_image_generation_flags(complete, "class of the image, for class-conditional models")
    complete.set_defaults(run=run_complete)


def _add_super_resolve_command(commands):
    super_resolve = commands.add_parser(
        "super_resolve",
        help="upscale an image (signature `super_resolve`)",
        description="Upscale a low-resolution image of the model's input size.",
    )
    super_resolve.add_argument("input", help="low-resolution input image")
    super_resolve.add_argument("output", help="output image (PNG)")
    _add_channels_flag(super_resolve)
    _add_sampling_flags(super_resolve)
    super_resolve.add_argument(
        "--decoding",
        choices=("sample", "posterior_mean"),
        default="sample",
        help="sample: each sub-pixel drawn at --temperature (0 = greedy); posterior_mean: the "
        "rounded expected value of the model's distribution, deterministic (default: %(default)s)",
    )
    _add_connection_flags(super_resolve, MODEL_NAMES["super_resolution"])
    super_resolve.set_defaults(run=run_super_resolve)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="client.py",
        description=(
            "Send requests to keras_selfattn models served by TensorFlow Serving "
            "(start the server with `docker compose up` in serving/; see serving/README.md). "
            "Each command calls one generation signature over REST or gRPC."
        ),
        epilog=(
            "examples:\n"
            "  python serving/client.py music --primer in.mid --out out.mid --max_new_tokens 512\n"
            '  python serving/client.py translate "Ich habe Hunger." --protocol grpc\n'
            "  python serving/client.py sample --out grid.png --batch 16 --temperature 0.9\n"
            "  python serving/client.py complete digit.png --known_rows 4 --out grid.png\n"
            "  python serving/client.py super_resolve in.png out.png\n"
            "Run `python serving/client.py COMMAND --help` for a command's flags."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_command in (
        _add_music_command,
        _add_translate_command,
        _add_sample_command,
        _add_complete_command,
        _add_super_resolve_command,
    ):
        add_command(commands)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    start = time.perf_counter()
    try:
        args.run(args)
    except (ClientError, OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"({args.protocol}, {time.perf_counter() - start:.2f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
