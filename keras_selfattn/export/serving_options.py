"""What `export_for_serving` asks of a model: its serving signatures, given
the export's options. `family_endpoints` answers for each model class."""

import dataclasses
import os

from keras_selfattn.layers.argument_checks import check_length

# Which family each option belongs to, named when another family gets it.
_OPTION_OWNERS = {
    "tokenizer": "translation", "directions": "translation", "note_event_ids": "music and accompaniment",
    "min_note_steps": "music", "melody_onsets": "accompaniment",
}


@dataclasses.dataclass(frozen=True)
class ServingOptions:
    """`export_for_serving`'s options (see its Args)."""

    tokenizer: object = None
    beam_size: int = 4
    alpha: float = 0.6
    max_length: int = None
    note_event_ids: dict = None
    directions: dict = None
    min_note_steps: int = None
    melody_onsets: bool = None

    def refuse_others(self, family, *accepted):
        """`ValueError` for a family option given to another family's model."""
        for name, owner in _OPTION_OWNERS.items():
            if name not in accepted and getattr(self, name) is not None:
                raise ValueError(f"`{name}` is for {owner} models only. Received a {family} model")

    def length_for(self, model, default):
        """The longest sequence a signature generates: `max_length`, checked
        against the model's own maximum, else that maximum, else `default`."""
        limit = model.max_length
        if self.max_length is None:
            return limit or default
        check_length("max_length", self.max_length, limit, minimum=2)
        return self.max_length


def forward_endpoint(model, output_name):
    """`serving_default`: the forward pass -> `{output_name: outputs}`, or
    with `output_name=None` the model's own dict of named outputs."""
    import tensorflow as tf

    specs = [tf.TensorSpec((None,) + tuple(t.shape[1:]), t.dtype, name=t.name) for t in model.inputs]
    names = [spec.name for spec in specs]

    def forward(inputs):
        outputs = model(inputs if isinstance(model.input, dict) else inputs[names[0]], training=False)
        if output_name is None:
            return {name: tf.cast(output, "float32") for name, output in outputs.items()}
        return {output_name: tf.cast(outputs, "float32")}

    return "serving_default", forward, [dict(zip(names, specs))]


def sentencepiece_tokenizer(tokenizer):
    """A tensorflow-text tokenizer holding the SentencePiece model, and its EOS id."""
    import tensorflow_text

    model, processor = _sentencepiece_model(tokenizer)
    return tensorflow_text.SentencepieceTokenizer(model=model, add_eos=True), processor.eos_id()


def direction_prefixes(directions, tokenizer):
    """`directions` checked: `{name: prefix}`, each direction's name (what a
    request's `direction` row holds) and the text its sources start with,
    every prefix made of pieces the SentencePiece `tokenizer` knows."""
    example = "e.g. {'forward': '<forward> ', 'reverse': '<reverse> '}"
    if not isinstance(directions, dict) or not directions:
        raise ValueError(
            "`directions` must be a dict of at least one direction's name to the text its sources start "
            f"with, {example}. Received: directions={directions!r}"
        )
    for name, prefix in directions.items():
        if not isinstance(name, str) or not name or not isinstance(prefix, str) or not prefix.strip():
            raise ValueError(
                "`directions` must map non-empty names to non-empty prefix texts, "
                f"{example}. Received: {name!r}: {prefix!r}"
            )
    _, processor = _sentencepiece_model(tokenizer)
    for name, prefix in directions.items():
        if processor.unk_id() in processor.encode(prefix):
            raise ValueError(
                f"`directions`' prefix {prefix!r} of {name!r} holds text that `tokenizer` does not know "
                "(its unknown piece): pass the vocabulary the model was trained with, with its direction tokens"
            )
    return dict(directions)


def _sentencepiece_model(tokenizer):
    """The SentencePiece model's bytes and a processor of it."""
    import sentencepiece

    if isinstance(tokenizer, (str, os.PathLike)):
        with open(tokenizer, "rb") as file:
            tokenizer = file.read()
    if not isinstance(tokenizer, bytes):
        raise ValueError(
            "`tokenizer` must be a SentencePiece model file: a path or its bytes. "
            f"Received: {type(tokenizer).__name__}"
        )
    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer)
    if processor.pad_id() != 0 or processor.eos_id() < 1:
        raise ValueError(
            "`tokenizer` must be a SentencePiece model with pad_id=0 (the models' padding) and "
            f"an end-of-sentence id. Received: pad_id={processor.pad_id()}, eos_id={processor.eos_id()}"
        )
    return tokenizer, processor
