"""Sentence pairs, a SentencePiece vocabulary and `tf.data` batches for the
translation models (`transformer_translation`).

Pairs, as lists of `(source, target)` strings:

- `read_pairs_tsv(path)`: one `source<TAB>target` pair a line, any
  language pair; blank lines, lines without a tab, empty sides and
  duplicates are dropped and counted.
- `ding_pairs(data_dir=None)`: the embedded default, the German-English
  example sentences of the Ding dictionary in Debian's `trans-de-en` package
  (GPL-2+), fetched once with `apt-get download` and `dpkg-deb -x` into
  `~/.cache/keras_selfattn/text`: 23.6k pairs, 21.6k distinct German
  sentences, 7 words a side on average. `parse_ding_lines` documents the
  format and `is_natural_sentence` the rule that picks the sentences.
- `wmt14_pairs(data_dir, config="de-en", split="train")`: the papers' WMT14
  data through tensorflow-datasets, prepared in `data_dir`.
- `split_pairs(pairs, held_out_fraction, seed)`: a deterministic held-out
  split; no source sentence is in both parts. `split_pairs_by_source(pairs,
  count, seed)` cuts at most `count` pairs of whole sources out of them (the
  validation part of the held-out pairs).

Tokens: `train_sentencepiece(texts, model_prefix, vocabulary_size)` trains one
joint vocabulary (`PAD_ID = 0`, `EOS_ID = 1`, `UNK_ID = 2`, no BOS) and
`tokenizer_from_file(path)` loads it as a `tensorflow_text.SentencepieceTokenizer`
that appends EOS, the tokenizer of the pipeline and of the exported
`translate` signature.

Batches: `translation_dataset(pairs, tokenizer, tokens_per_batch, max_length)`
tokenizes in the graph and batches by token count over tensor2tensor's length
buckets, yielding `({"source_tokens", "target_tokens"}, labels)` with the
decoder input shifted right behind the start token 0. Its two stages,
`tokenized_pairs` and `length_bucketed_batches`, take tasks mixed in between
(`keras_selfattn.data.mixing.mix_tasks`, e.g. both directions of the pairs).

A recipe's data, in outline:

    pairs, counts = read_pairs_tsv(path)      # or ding_pairs(), wmt14_pairs(...)
    train, held_out = split_pairs(pairs, 0.05, seed=0)
    model_file = train_sentencepiece([text for pair in train for text in pair], "out/spm", 8000)
    dataset = translation_dataset(train, tokenizer_from_file(model_file), 4096, 256, seed=0)

Example:

>>> pairs = [("Guten Morgen.", "Good morning."), ("Danke.", "Thanks."), ("Danke.", "Thank you.")]
>>> train, held_out = split_pairs(pairs, 0.5, seed=0)
>>> {source for source, _ in train} & {source for source, _ in held_out}
set()
>>> len(train) + len(held_out)
3
"""

from keras_selfattn.data.text.ding import (
    DING_PACKAGE,
    DingDictionaryError,
    MIN_SENTENCE_WORDS,
    clean_ding_text,
    default_data_dir,
    ding_pairs,
    fetch_ding_dictionary,
    is_natural_sentence,
    parse_ding_lines,
)
from keras_selfattn.data.text.pairs import (
    WMT14_CONFIGS,
    read_pairs_tsv,
    split_pairs,
    split_pairs_by_source,
    wmt14_pairs,
)
from keras_selfattn.data.text.pipeline import (
    bucket_batch_sizes,
    bucket_boundaries,
    length_bucketed_batches,
    tokenized_pairs,
    translation_dataset,
)
from keras_selfattn.data.text.tokenizer import (
    EOS_ID,
    PAD_ID,
    UNK_ID,
    tokenizer_from_file,
    train_sentencepiece,
)

__all__ = [
    "DING_PACKAGE",
    "DingDictionaryError",
    "EOS_ID",
    "MIN_SENTENCE_WORDS",
    "PAD_ID",
    "UNK_ID",
    "WMT14_CONFIGS",
    "bucket_batch_sizes",
    "bucket_boundaries",
    "clean_ding_text",
    "default_data_dir",
    "ding_pairs",
    "fetch_ding_dictionary",
    "is_natural_sentence",
    "length_bucketed_batches",
    "parse_ding_lines",
    "read_pairs_tsv",
    "split_pairs",
    "split_pairs_by_source",
    "tokenized_pairs",
    "tokenizer_from_file",
    "train_sentencepiece",
    "translation_dataset",
    "wmt14_pairs",
]
