"""Small models of every family, exported for serving, shared by the export
and the serving tests."""

import io

import numpy as np

from keras_selfattn.export import export_for_serving
from tests.generation.generation_models import SMALL, image_model, music_model, sharpen

SENTENCES = ["ich habe hunger", "das ist gut", "wir gehen nach hause", "i am hungry", "that is good"]
TRANSLATION_VOCABULARY = 24
# A model of both directions: each direction's name and the text before its
# sources (recipes/translate.py's `--tasks both_directions`).
DIRECTIONS = {"forward": "<forward> ", "reverse": "<reverse> "}
# Their tokens, as the vocabulary keeps them whole: the word-boundary mark, then the token.
DIRECTION_PIECES = ["\u2581" + prefix.strip() for prefix in DIRECTIONS.values()]
MAX_MELODY_LENGTH = 8
# Three rows' sampling settings of a continuation request (`generate`, `accompany`):
# greedy, top-k with a top-p cut, and a hot top-p draw.
ROW_SETTINGS = dict(
    temperature=np.array([0.0, 0.9, 1.2], "float32"),
    top_k=np.array([0, 5, 0], "int32"),
    top_p=np.array([1.0, 0.9, 0.8], "float32"),
    seed=np.array([1, 2, 3], "int32"),
)


def call_signature(loaded, signature, **inputs):
    """`loaded`'s `signature` on numpy `inputs`, its outputs as numpy."""
    import tensorflow as tf

    outputs = loaded.signatures[signature](**{k: tf.constant(v) for k, v in inputs.items()})
    return {k: v.numpy() for k, v in outputs.items()}


def sentencepiece_model(vocab_size=TRANSLATION_VOCABULARY, user_defined_symbols=()):
    """A small SentencePiece model with the ids the export expects: pad 0, EOS 1."""
    import sentencepiece

    model = io.BytesIO()
    symbols = {"user_defined_symbols": list(user_defined_symbols)} if user_defined_symbols else {}
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(SENTENCES * 20), model_writer=model, vocab_size=vocab_size,
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2, **symbols,
    )
    return model.getvalue()


def exported_music(export_base, max_length=16):
    """`(model, path)` of a relative music model whose logits are not flat."""
    model = sharpen(music_model("relative_global"), factor=2.0)
    return model, export_for_serving(model, export_base, name="music", max_length=max_length)


def melody_model(note_event_ids=None):
    """A small melody-conditioned model whose logits are not flat."""
    from keras_selfattn.models import MelodyConditionedMusicTransformer

    model = MelodyConditionedMusicTransformer(
        vocabulary_size=20, key_dim=8, max_relative_position=8, max_melody_length=MAX_MELODY_LENGTH,
        note_event_ids=note_event_ids, **SMALL,
    )
    return sharpen(model, factor=2.0)


def exported_accompaniment(export_base, max_length=16):
    """`(model, path)` of `melody_model()` exported as serving/models.config's `accompaniment`."""
    model = melody_model()
    return model, export_for_serving(model, export_base, name="accompaniment", max_length=max_length)


def exported_translation(export_base, beam_size=3, max_length=8):
    """`(model, path, tokenizer bytes)` of a Shaw translation model whose
    translations do not all end at once (its untied output layer's bias
    makes EOS less likely; recipes/translate.py's tests export tied models)."""
    tokenizer = sentencepiece_model()
    model = _translation_model()
    path = export_for_serving(
        model, export_base, name="translation", tokenizer=tokenizer, beam_size=beam_size, max_length=max_length
    )
    return model, path, tokenizer


def exported_translation_directions(export_base, beam_size=3, max_length=8):
    """`(model, path, tokenizer bytes)` of a translation model of both
    `DIRECTIONS`, its vocabulary holding their tokens as pieces of their
    own, exported with them: `translate(text, direction)`."""
    tokenizer = sentencepiece_model(user_defined_symbols=DIRECTION_PIECES)
    model = _translation_model()
    # Larger direction-token embeddings, so that the directions' translations
    # of one text differ.
    embeddings = model.get_layer("source_embedding").embeddings
    direction_rows = np.isin(np.arange(TRANSLATION_VOCABULARY), direction_token_ids(tokenizer))
    embeddings.assign(embeddings.numpy() * np.where(direction_rows, 16.0, 1.0)[:, None])
    path = export_for_serving(
        model, export_base, name="translation_directions", tokenizer=tokenizer, beam_size=beam_size,
        max_length=max_length, directions=DIRECTIONS,
    )
    return model, path, tokenizer


def direction_token_ids(tokenizer):
    """The ids of `DIRECTIONS`' tokens in the SentencePiece model `tokenizer`."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer)
    return [processor.piece_to_id(piece) for piece in DIRECTION_PIECES]


def _translation_model():
    """A Shaw translation model whose translations do not all end at once
    (its untied output layer's bias makes EOS less likely)."""
    from keras_selfattn.models import transformer_translation

    model = transformer_translation(
        TRANSLATION_VOCABULARY, TRANSLATION_VOCABULARY, preset="tiny", position="shaw",
        tie_output_projection=False, **SMALL
    )
    bias = model.get_layer("logits").bias
    bias.assign(bias.numpy() - 3.0 * (np.arange(TRANSLATION_VOCABULARY) == 1))
    return model


def exported_images(export_base):
    """`(model, path)` of a class-conditional local 2D image model."""
    model = sharpen(image_model("local_2d", num_classes=3), factor=2.0)
    return model, export_for_serving(model, export_base, name="images")


def source_tokens(tokenizer, texts):
    """The translation model's source ids for `texts`: SentencePiece ids,
    EOS, padding 0 (what the `translate` signature feeds the model)."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer)
    rows = [processor.encode(text) + [processor.eos_id()] for text in texts]
    width = max(map(len, rows))
    return np.array([row + [0] * (width - len(row)) for row in rows], "int32")


def exported_super_resolution(export_base):
    """`(model, path)` of a small super-resolution model."""
    from tests.generation.generation_models import super_resolution_model

    model = super_resolution_model()
    return model, export_for_serving(model, export_base, name="super_resolution")
