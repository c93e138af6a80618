"""Serving benchmark: generation through TensorFlow's C API loader (the
server's SavedModel loader, XLA off) against in-process
`keras_selfattn.generation`, the same tokens from both.

For music (`tiny` relative model, `generate`) and translation (`tiny` Shaw
model, `translate` with beam search and in-graph SentencePiece), at batch 1
and 8: the p50 and p99 latency of `--requests` sequential requests each way,
their ratio, and a check that the tokens agree. Then the loader under load:
8 concurrent clients x 50 `generate` requests, failures and p50/p99. Then
long generation: `--long_events` (1,024) new events from the `--long_preset`
(`maestro`), batch 1, tokens per second through the loader and in-process.

    python -m benchmarks.serving             # the issue's sizes
    python -m benchmarks.serving --quick     # fewer requests

The loader is the TF Serving emulator's (serving/emulator).
"""

import argparse
import io
import tempfile
import time

import numpy as np
import sentencepiece

from benchmarks.common import print_table
from keras_selfattn.export import export_for_serving
from keras_selfattn.generation import continue_sequence, translate_tokens
from keras_selfattn.models import music_transformer, transformer_translation
from serving.emulator.c_api_loader import CApiSavedModel

MUSIC_VOCABULARY = 310
SENTENCES = [
    "ich habe hunger", "das ist gut", "wir gehen nach hause", "der hund schläft im garten",
    "i am hungry", "that is good", "we go home", "the dog sleeps in the garden",
]


def percentiles(latencies):
    return float(np.percentile(latencies, 50)), float(np.percentile(latencies, 99))


def timed(function, requests):
    """p50, p99 in ms of `requests` calls after one warm-up, and the last result."""
    result = function()
    latencies = []
    for _ in range(requests):
        start = time.perf_counter()
        result = function()
        latencies.append(1000 * (time.perf_counter() - start))
    return percentiles(latencies), result


def greedy_generate_inputs(primer, new_tokens):
    """`generate`'s inputs: every row its whole primer and `new_tokens`, greedy."""
    batch, width = primer.shape
    return dict(
        primer=primer, primer_length=np.full(batch, width, "int32"), max_new_tokens=np.full(batch, new_tokens, "int32"),
        temperature=np.zeros(batch, "float32"), top_k=np.zeros(batch, "int32"), top_p=np.ones(batch, "float32"),
        seed=np.zeros(batch, "int32"),
    )


def music_rows(args, base):
    model = music_transformer(MUSIC_VOCABULARY, preset="tiny")
    path = export_for_serving(model, base, name="music", max_length=args.primer + args.new_tokens)
    rng = np.random.default_rng(0)
    rows = []
    with CApiSavedModel(path) as loaded:
        for batch in (1, 8):
            primer = rng.integers(2, MUSIC_VOCABULARY, (batch, args.primer)).astype("int32")
            inputs = greedy_generate_inputs(primer, args.new_tokens)
            served, tokens = timed(lambda: loaded.run("generate", inputs)["tokens"], args.requests)
            local, expected = timed(
                lambda: np.asarray(continue_sequence(model, primer, args.new_tokens, temperature=0.0)), args.requests
            )
            rows.append(_row("music generate", batch, served, local, np.array_equal(tokens, expected)))
        load = loaded.load_test("generate", {k: v[:1] for k, v in inputs.items()}, clients=8, requests_per_client=50)
    return rows, load


def long_music_row(args, base):
    """Tokens per second of `--long_events` greedy events from the
    `--long_preset` width, one timed request each way after a warm-up."""
    model = music_transformer(MUSIC_VOCABULARY, preset=args.long_preset, dropout=0.0)
    total = args.primer + args.long_events
    path = export_for_serving(model, base, name="music_long", max_length=total)
    primer = np.random.default_rng(1).integers(2, MUSIC_VOCABULARY, (1, args.primer)).astype("int32")
    inputs = greedy_generate_inputs(primer, args.long_events)
    with CApiSavedModel(path) as loaded:
        (served, _), tokens = timed(lambda: loaded.run("generate", inputs)["tokens"], 1)
    (local, _), expected = timed(
        lambda: np.asarray(continue_sequence(model, primer, args.long_events, temperature=0.0)), 1
    )
    per_second = [1000 * args.long_events / milliseconds for milliseconds in (served, local)]
    return [args.long_events, *per_second, per_second[0] / per_second[1], "yes" if np.array_equal(tokens, expected) else "NO"]


def translation_rows(args, base):
    tokenizer = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(SENTENCES * 50), model_writer=tokenizer, vocab_size=40,
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2,
    )
    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.getvalue())
    model = transformer_translation(40, 40, preset="tiny", position="shaw")
    path = export_for_serving(
        model, base, name="translation", tokenizer=tokenizer.getvalue(), beam_size=4, max_length=args.new_tokens
    )
    rows = []
    with CApiSavedModel(path) as loaded:
        for batch in (1, 8):
            texts = [SENTENCES[i % len(SENTENCES)] for i in range(batch)]
            encoded = [processor.encode(text) + [1] for text in texts]
            width = max(map(len, encoded))
            source = np.array([row + [0] * (width - len(row)) for row in encoded], "int32")
            inputs = {"text": np.array(texts, object)}
            served, tokens = timed(lambda: loaded.run("translate", inputs)["tokens"], args.requests)
            local, expected = timed(
                lambda: np.asarray(translate_tokens(model, source, args.new_tokens, beam_size=4)), args.requests
            )
            rows.append(_row("translate (beam 4)", batch, served, local, np.array_equal(tokens, expected)))
    return rows


def _row(name, batch, served, local, same):
    return [name, batch, served[0], served[1], local[0], local[1], served[0] / local[0], "yes" if same else "NO"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--primer", type=int, default=64, help="music primer length (events)")
    parser.add_argument("--new_tokens", type=int, default=64, help="events generated; translation max_length")
    parser.add_argument("--requests", type=int, default=20, help="timed requests per row")
    parser.add_argument(
        "--long_events", type=int, default=1024, help="events of the long row; 0 skips it"
    )
    parser.add_argument("--long_preset", default="maestro", help="music preset of the long row")
    parser.add_argument("--quick", action="store_true", help="5 requests a row")
    args = parser.parse_args()
    if args.quick:
        args.requests = 5
    with tempfile.TemporaryDirectory() as base:
        rows, load = music_rows(args, base)
        rows += translation_rows(args, base)
        long_row = long_music_row(args, base) if args.long_events else None
    print_table(
        "Generation latency, C API loader (XLA off) vs in-process keras_selfattn.generation",
        ["signature", "batch", "loader p50 ms", "loader p99 ms", "in-process p50 ms", "in-process p99 ms",
         "p50 ratio", "same tokens"],
        rows,
    )
    print_table(
        "Loader under load: 8 concurrent clients x 50 `generate` requests (batch 1)",
        ["requests", "failures", "p50 ms", "p99 ms"],
        [[len(load["latencies_ms"]), load["failures"], load["p50_ms"], load["p99_ms"]]],
    )

    if long_row:
        print_table(
            f"Long generation: {args.long_preset} preset, {args.primer}-event primer, batch 1, greedy",
            ["new events", "loader tokens/s", "in-process tokens/s", "ratio", "same tokens"],
            [long_row],
        )


if __name__ == "__main__":
    main()
