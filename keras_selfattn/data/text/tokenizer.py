"""The SentencePiece vocabulary of `keras_selfattn.data.text`: trained with the
`sentencepiece` package, used through `tensorflow_text.SentencepieceTokenizer`."""

import os
import re
from pathlib import Path

PAD_ID = 0
EOS_ID = 1
UNK_ID = 2
MODEL_SUFFIX = ".model"
MAX_TRAINING_SENTENCES = 2_000_000
_LIMIT = re.compile(r"<= (\d+)")


def _model_prefix(model_prefix):
    """`"dir/spm"` and `"dir/spm.model"` both mean the prefix `"dir/spm"`."""
    path = Path(model_prefix).expanduser()
    return path.with_suffix("") if path.suffix == MODEL_SUFFIX else path


def _vocabulary_size_error(vocabulary_size, error):
    """A `ValueError` naming `--vocabulary_size` for SentencePiece's size errors,
    `None` for other errors."""
    message = str(error)
    if "Vocabulary size too high" in message:
        limit = _LIMIT.search(message)
        at_most = f"at most {limit.group(1)}" if limit else "smaller"
        return ValueError(
            f"`--vocabulary_size` {vocabulary_size} is larger than the training text supports: SentencePiece finds "
            f"{at_most} pieces in it. Use a smaller `--vocabulary_size` or more text. SentencePiece said: {message}"
        )
    if "Vocabulary size is smaller than required_chars" in message:
        return ValueError(
            f"`--vocabulary_size` {vocabulary_size} is smaller than the number of characters the training text needs. "
            f"Use a larger `--vocabulary_size`. SentencePiece said: {message}"
        )
    return None


def train_sentencepiece(texts, model_prefix, vocabulary_size, *, model_type="unigram",
                        max_sentences=MAX_TRAINING_SENTENCES, seed=0, user_defined_symbols=(), exact_size=True):
    """Trains one joint SentencePiece vocabulary on `texts` and saves it.

    Ids: `PAD_ID = 0` (`<pad>`), `EOS_ID = 1` (`</s>`), `UNK_ID = 2`
    (`<unk>`), no BOS — the translation models pad with 0, start decoding
    from 0 and stop at 1. Text is normalised with SentencePiece's default
    `nmt_nfkc` rule.

    Args:
        texts: iterable of strings, e.g. the training pairs' sources and
            targets together for a joint vocabulary; empty strings are
            skipped.
        model_prefix: where to save: `"dir/spm"` writes `dir/spm.model` and
            `dir/spm.vocab` (a `".model"` path is taken as its prefix).
        vocabulary_size: the number of pieces, the ids `0 .. vocabulary_size - 1`
            (with `exact_size=False`, the most pieces).
        model_type: `"unigram"` (SentencePiece's default) or `"bpe"`.
        max_sentences: at most this many sentences, sampled, train the
            model (`input_sentence_size`), so WMT-sized text fits in memory.
        seed: the sampling seed.
        user_defined_symbols: pieces always kept whole, with the ids after
            `UNK_ID` in this order (e.g. task tokens; a piece `"\u2581<2en>"`
            is what the text `"<2en> "` at a sentence's start encodes to, so
            that `"<2en> " + text` encodes as that id followed by `text`'s).
        exact_size: `True`: exactly `vocabulary_size` pieces, an error when
            the text supports fewer; `False`: as many pieces as the text
            supports, at most `vocabulary_size` (SentencePiece's
            `hard_vocab_limit=false`: the same model as asking for that
            number exactly).

    Returns:
        The `Path` of the `.model` file.

    Raises:
        ValueError: `vocabulary_size` is more than the text supports (with
            `exact_size=True`) or fewer than its characters (the message names `--vocabulary_size`), or
            `texts` holds no text.
    """
    import sentencepiece

    if isinstance(vocabulary_size, bool) or not isinstance(vocabulary_size, int) or vocabulary_size < 4:
        raise ValueError(f"`--vocabulary_size` must be an int >= 4. Received: vocabulary_size={vocabulary_size!r}")
    if model_type not in ("unigram", "bpe"):
        raise ValueError(f"`model_type` must be one of ('unigram', 'bpe'). Received: model_type={model_type!r}")
    sentences = [text for text in texts if text and not text.isspace()]
    if not sentences:
        raise ValueError("`texts` holds no non-empty string to train SentencePiece on")
    prefix = _model_prefix(model_prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    sentencepiece.set_random_generator_seed(seed)
    symbols = {"user_defined_symbols": list(user_defined_symbols)} if user_defined_symbols else {}
    try:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences), model_prefix=str(prefix), vocab_size=vocabulary_size,
            model_type=model_type, pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID, bos_id=-1,
            input_sentence_size=max_sentences, shuffle_input_sentence=True,
            num_threads=max(1, min(16, os.cpu_count() or 1)), minloglevel=2, hard_vocab_limit=exact_size,
            **symbols,
        )
    except RuntimeError as error:
        clear = _vocabulary_size_error(vocabulary_size, error)
        if clear is None:
            raise
        raise clear from None
    return prefix.with_suffix(MODEL_SUFFIX)


def tokenizer_from_file(path, *, add_eos=True):
    """A `tensorflow_text.SentencepieceTokenizer` on a SentencePiece model file.

    `add_eos=True` (the default) ends every sequence with `EOS_ID`, as the
    translation models take sources and targets: the labels are the target
    tokens with their EOS, the decoder input is the same shifted right
    behind the start token 0 (`translation_dataset`), and the exported
    `translate` signature tokenizes its sources the same way.

    Args:
        path: a `.model` file written by `train_sentencepiece` (or any
            SentencePiece model with `pad_id=0` and `eos_id=1`).
        add_eos: append `EOS_ID` to each tokenized string.

    Returns:
        The `tensorflow_text.SentencepieceTokenizer`; its `detokenize` drops
        the padding and EOS ids.

    Raises:
        ValueError: the model's padding or EOS id is not 0 or 1.
    """
    import sentencepiece

    model = Path(path).expanduser().read_bytes()
    processor = sentencepiece.SentencePieceProcessor(model_proto=model)
    if processor.pad_id() != PAD_ID or processor.eos_id() != EOS_ID:
        raise ValueError(
            f"`path` must be a SentencePiece model with pad_id={PAD_ID} and eos_id={EOS_ID} (the models' "
            f"padding and end token; see `train_sentencepiece`). {path} has pad_id={processor.pad_id()}, "
            f"eos_id={processor.eos_id()}"
        )
    import tensorflow_text

    return tensorflow_text.SentencepieceTokenizer(model=model, add_eos=add_eos)
