"""keras_selfattn.data.text: sentence pairs, the Ding default, SentencePiece, batches."""

import collections
import hashlib
import itertools
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import sentencepiece

from keras_selfattn.data import text
from keras_selfattn.data.text import ding as text_ding

# French-English pairs written for these tests: a language pair other than
# the German-English default, with accents, apostrophes and a guillemet.
FRENCH_ENGLISH = [
    ("Où est la gare ?", "Where is the station?"),
    ("Je voudrais un café, s'il vous plaît.", "I would like a coffee, please."),
    ("Il fait très beau aujourd'hui.", "The weather is very nice today."),
    ("Nous allons à la plage demain.", "We are going to the beach tomorrow."),
    ("Elle lit un livre dans le jardin.", "She is reading a book in the garden."),
    ("Le train part à huit heures.", "The train leaves at eight o'clock."),
    ("Pouvez-vous m'aider, s'il vous plaît ?", "Can you help me, please?"),
    ("J'ai perdu mes clés hier soir.", "I lost my keys last night."),
    ("Les enfants jouent dans la rue.", "The children are playing in the street."),
    ("Ce restaurant est trop cher pour nous.", "This restaurant is too expensive for us."),
    ("Mon frère habite à Montréal depuis dix ans.", "My brother has lived in Montreal for ten years."),
    ("Il a dit « bonjour » à tout le monde.", "He said hello to everyone."),
    ("Quelle heure est-il ?", "What time is it?"),
    ("Je ne comprends pas la question.", "I do not understand the question."),
    ("La réunion commence à neuf heures et demie.", "The meeting starts at half past nine."),
    ("Ils ont acheté une nouvelle voiture.", "They bought a new car."),
    ("Le musée est fermé le lundi.", "The museum is closed on Mondays."),
    ("Tu as faim ?", "Are you hungry?"),
    ("Tu as faim ?", "Are you hungry now?"),
    ("Nous avons mangé des crêpes à Noël.", "We ate pancakes at Christmas."),
    ("Cette chanson me rappelle mon enfance.", "This song reminds me of my childhood."),
    ("Le médecin arrive dans une heure.", "The doctor arrives in an hour."),
    ("Il pleut depuis ce matin.", "It has been raining since this morning."),
    ("Fermez la fenêtre, s'il vous plaît.", "Close the window, please."),
]
VOCAB_SIZE = 96
TF_ONLY = pytest.mark.backends("tensorflow", reason="tf.data and tensorflow-text")


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "fr-en.tsv"
    path.write_text("".join(f"{source}\t{target}\n" for source, target in FRENCH_ENGLISH), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def model_file(pairs_file):
    pairs, _ = text.read_pairs_tsv(pairs_file)
    return text.train_sentencepiece([side for pair in pairs for side in pair], pairs_file.parent / "spm", VOCAB_SIZE)


def test_read_pairs_tsv_drops_and_counts(tmp_path):
    lines = [
        "\ufeffHallo.\tHello.",            # byte order mark ignored
        "  Guten Tag.  \t Good day. \r",   # sides stripped, CRLF
        "",                                 # blank
        "   ",                              # blank
        "no tab on this line",              # no_tab
        "\tonly a target",                  # empty_side
        "only a source\t   ",               # empty_side
        "Hallo.\tHello.",                   # duplicate
        "Hallo.\tHi.",                      # same source, other target: kept
        "Ja.\tYes.\tCC-BY 2.0 (France) Attribution: tatoeba.org",  # extra column ignored
        " Guten Tag.\tGood day.",           # duplicate after stripping
    ]
    path = tmp_path / "pairs.tsv"
    path.write_bytes("\n".join(lines).encode("utf-8"))
    pairs, counts = text.read_pairs_tsv(path)
    assert pairs == [("Hallo.", "Hello."), ("Guten Tag.", "Good day."), ("Hallo.", "Hi."), ("Ja.", "Yes.")]
    assert counts == {"lines": 11, "kept": 4, "blank": 2, "no_tab": 1, "empty_side": 2, "duplicate": 2}


def test_read_pairs_tsv_without_pairs_names_the_file(tmp_path):
    path = tmp_path / "nothing.tsv"
    path.write_text("no tab\n\n\tempty\n", encoding="utf-8")
    with pytest.raises(ValueError, match="nothing.tsv.*no sentence pair"):
        text.read_pairs_tsv(path)


def test_split_pairs_is_disjoint_by_source_and_deterministic():
    rng = np.random.default_rng(1)
    pairs = [(f"source {rng.integers(300)}", f"target {index}") for index in range(1000)]
    train, held_out = text.split_pairs(pairs, 0.1, seed=3)
    assert not {s for s, _ in train} & {s for s, _ in held_out}
    assert collections.Counter(train + held_out) == collections.Counter(pairs)
    assert train == [pair for pair in pairs if pair in set(train)]  # input order kept
    distinct = len({s for s, _ in pairs})
    assert len({s for s, _ in held_out}) == round(0.1 * distinct)
    assert text.split_pairs(pairs, 0.1, seed=3) == (train, held_out)
    assert text.split_pairs(pairs, 0.1, seed=4) != (train, held_out)


@pytest.mark.parametrize("fraction", [0, 1, -0.5, 1.5])
def test_split_pairs_rejects_fractions_outside_0_1(fraction):
    with pytest.raises(ValueError, match="held_out_fraction"):
        text.split_pairs([("a", "x"), ("b", "y")], fraction, seed=0)


def test_split_pairs_needs_two_sources():
    with pytest.raises(ValueError, match="2 distinct source"):
        text.split_pairs([("a", "x"), ("a", "y")], 0.5, seed=0)


# Lines in the format of Debian's trans-de-en (abridged from real entries).
DING_LINES = [
    "# Version :: devel 2023-01-30",
    "blank; pur; rein {adj} | blanker Hohn | Es war purer Zufall. | Das ist blanker Unsinn. [ugs.] :: "
    "sheer; pure; plain <purer> | sheer/pure mockery | It was sheer/pure coincidence. | That is sheer nonsense.",
    "Leidenschaft {f} | eine Leidenschaft für etw. haben | Ich habe seinen Namen (akustisch) nicht verstanden. :: "
    "passion | to have a passion for sth. | I didn’t get his name. [coll.]",
    "Das kann ich bestätigen.; Das kann ich bezeugen. :: I can attest to this.",
    "Hilfe! {f} | Hau ab! :: Help! | Take a hike! /TAH/",
    "Stellenangebot {n} | Das Stellenangebot / Jobangebot steht noch. :: job offer | The job offer still stands.",
    "Mein Schmerz lässt sich nicht in Worte fassen. / kennt keine Worte. :: My pain cannot be put into words.",
    "Was ist das Besondere an …? :: What’s so special about …?",
    "„Bist du sicher?“ „Ganz sicher.“ :: 'Are you sure?' 'Quite sure.'",
    "a line without the separator",
    "Haus {n} | Häuser {pl} :: house",
]


def test_parse_ding_lines_picks_example_sentences():
    pairs, counts = text.parse_ding_lines(DING_LINES)
    assert pairs == [
        ("Es war purer Zufall.", "It was sheer coincidence."),
        ("Das ist blanker Unsinn.", "That is sheer nonsense."),
        ("Ich habe seinen Namen nicht verstanden.", "I didn’t get his name."),
        ("Das kann ich bestätigen.", "I can attest to this."),
        ("Das kann ich bezeugen.", "I can attest to this."),
        ("Hau ab!", "Take a hike!"),
        ("Das Stellenangebot steht noch.", "The job offer still stands."),
        ("Mein Schmerz lässt sich nicht in Worte fassen.", "My pain cannot be put into words."),
        ("„Bist du sicher?“ „Ganz sicher.“", "'Are you sure?' 'Quite sure.'"),
    ]
    assert counts == {"entries": 8, "skipped_lines": 2, "pairs": 9}


def test_parse_ding_lines_all_sub_entries():
    pairs, _ = text.parse_ding_lines(DING_LINES[:3], sentences_only=False)
    assert pairs[:6] == [
        ("blank", "sheer"), ("blank", "pure"), ("blank", "plain"), ("pur", "sheer"), ("pur", "pure"), ("pur", "plain")
    ]
    assert ("blanker Hohn", "sheer mockery") in pairs
    assert ("eine Leidenschaft für etw. haben", "to have a passion for sth.") in pairs
    assert ("Es war purer Zufall.", "It was sheer coincidence.") in pairs


@pytest.mark.parametrize(
    "sentence, natural",
    [
        ("Es war purer Zufall.", True),
        ("Hau ab!", True),
        ("Wie spät ist es?", True),
        ("„Ganz sicher.“", True),
        ("1992 hat die Partei gewonnen.", True),
        ("Hilfe!", False),  # one word
        ("Ich ging nach Hause", False),  # no final punctuation
        ("it wouldn’t be right.", False),  # lower-case start
        ("Er hat etw. gesagt.", False),  # pattern slot
        ("I’m pleased to announce … .", False),  # omission
    ],
)
def test_is_natural_sentence(sentence, natural):
    assert text.is_natural_sentence(sentence) is natural


def test_ding_without_apt_names_the_package_and_pairs_tsv(tmp_path, monkeypatch):
    monkeypatch.setattr(text_ding.shutil, "which", lambda tool: None)
    with pytest.raises(RuntimeError, match=r"trans-de-en.*--pairs_tsv"):
        text.ding_pairs(tmp_path)


def _cached_dictionary(data_dir, content):
    """A Ding dictionary file where `fetch_ding_dictionary` keeps it, holding `content`."""
    dictionary = data_dir / text.DING_PACKAGE / text_ding.DING_MEMBER
    dictionary.parent.mkdir(parents=True)
    dictionary.write_bytes(content)
    return dictionary


def _fake_apt(monkeypatch, content):
    """`apt-get download` and `dpkg-deb -x` stand-ins giving a package whose
    dictionary holds `content`."""
    monkeypatch.setattr(text_ding.shutil, "which", lambda tool: f"/usr/bin/{tool}")

    def run(command, cwd, **kwargs):
        if command[0] == "apt-get":
            (Path(cwd) / f"{text.DING_PACKAGE}_1.9-6_all.deb").write_bytes(b"a package")
        else:  # dpkg-deb -x PACKAGE FOLDER
            member = Path(command[3]) / text_ding.DING_MEMBER
            member.parent.mkdir(parents=True)
            member.write_bytes(content)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(text_ding.subprocess, "run", run)


@pytest.mark.parametrize(
    "content",
    [b"\xff\xfe\x00\x81 binary", "Zufall {m} :: chance\n".encode() + "Haus".encode("utf-16"), b"", b"no ding here\n"],
    ids=["binary", "cut_utf8", "empty", "not_ding"],
)
def test_a_damaged_cached_dictionary_names_the_file_and_how_to_fetch_it_again(tmp_path, content):
    dictionary = _cached_dictionary(tmp_path, content)
    with pytest.raises(text.DingDictionaryError) as raised:
        text.ding_pairs(tmp_path)
    message = str(raised.value)
    assert str(dictionary) in message and f"rm -r {tmp_path / text.DING_PACKAGE}" in message
    assert "apt-get download trans-de-en" in message and "--pairs_tsv" in message


def test_a_cached_dictionary_cut_short_is_caught_by_its_recorded_sha256(tmp_path, monkeypatch):
    content = "\n".join(DING_LINES).encode("utf-8") + b"\n"
    _fake_apt(monkeypatch, content)
    pairs = text.ding_pairs(tmp_path)
    assert pairs == text.parse_ding_lines(DING_LINES)[0]
    dictionary = tmp_path / text.DING_PACKAGE / text_ding.DING_MEMBER
    expected = hashlib.sha256(content).hexdigest()
    assert (tmp_path / text.DING_PACKAGE / text_ding.DING_CHECKSUM).read_text().strip() == expected
    assert text.ding_pairs(tmp_path) == pairs  # verified and reused
    dictionary.write_bytes(content[: len(content) * 2 // 3])  # still parses, with fewer pairs
    with pytest.raises(text.DingDictionaryError, match=r"damaged \(sha256 [0-9a-f]{64}, extracted as " + expected):
        text.ding_pairs(tmp_path)


@pytest.mark.slow
def test_ding_pairs_fetched_with_apt_and_reused(tmp_path, monkeypatch):
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        pytest.skip("apt-get and dpkg-deb are needed to fetch trans-de-en")
    if subprocess.run(["apt-cache", "show", "trans-de-en"], capture_output=True).returncode != 0:
        pytest.skip("apt's package lists do not know trans-de-en (apt-get update)")
    pairs = text.ding_pairs(tmp_path)
    assert 20_000 <= len(pairs) <= 30_000
    assert len(set(pairs)) == len(pairs)
    assert all(text.is_natural_sentence(german) and text.is_natural_sentence(english) for german, english in pairs)
    monkeypatch.setattr(text_ding.subprocess, "run", None)  # a second fetch would fail
    assert text.ding_pairs(tmp_path) == pairs


def test_train_sentencepiece_ids_and_file(model_file):
    assert model_file.name == "spm.model" and model_file.is_file()
    processor = sentencepiece.SentencePieceProcessor(model_file=str(model_file))
    assert processor.get_piece_size() == VOCAB_SIZE
    assert (processor.pad_id(), processor.eos_id(), processor.unk_id(), processor.bos_id()) == (0, 1, 2, -1)


def test_vocabulary_larger_than_the_text_names_vocab_size(pairs_file, tmp_path):
    pairs, _ = text.read_pairs_tsv(pairs_file)
    with pytest.raises(ValueError, match=r"--vocabulary_size.* 5000 .*at most \d+"):
        text.train_sentencepiece([side for pair in pairs for side in pair], tmp_path / "spm", 5000)


def test_a_vocabulary_size_that_is_not_exact_gives_as_many_pieces_as_the_text_supports(pairs_file, tmp_path):
    pairs, _ = text.read_pairs_tsv(pairs_file)
    sides = [side for pair in pairs for side in pair]
    path = text.train_sentencepiece(sides, tmp_path / "soft", 5000, exact_size=False)
    supported = sentencepiece.SentencePieceProcessor(model_file=str(path)).get_piece_size()
    assert 4 < supported < 5000
    exact_path = text.train_sentencepiece(sides, tmp_path / "exact", supported)
    soft, exact = (sentencepiece.SentencePieceProcessor(model_file=str(file)) for file in (path, exact_path))
    assert exact.get_piece_size() == supported
    assert [soft.id_to_piece(i) for i in range(supported)] == [exact.id_to_piece(i) for i in range(supported)]


def test_tokenizer_rejects_other_special_ids(pairs_file, tmp_path):
    sentencepiece.SentencePieceTrainer.train(  # SentencePiece's defaults: unk 0, bos 1, eos 2, no pad
        input=str(pairs_file), model_prefix=str(tmp_path / "default"), vocab_size=VOCAB_SIZE, minloglevel=2
    )
    with pytest.raises(ValueError, match="pad_id=0 and eos_id=1"):
        text.tokenizer_from_file(tmp_path / "default.model")


@TF_ONLY
def test_sentencepiece_round_trip_through_tensorflow_text(model_file):
    tokenizer = text.tokenizer_from_file(model_file)
    processor = sentencepiece.SentencePieceProcessor(model_file=str(model_file))
    sentences = [side for pair in FRENCH_ENGLISH for side in pair] + ["La gare est fermée à huit heures."]
    ids = tokenizer.tokenize(sentences)
    assert ids.to_list() == [processor.encode(sentence) + [text.EOS_ID] for sentence in sentences]
    decoded = [value.decode("utf-8") for value in tokenizer.detokenize(ids).numpy()]
    assert decoded == sentences


def _batches(dataset):
    return [
        (inputs["source_tokens"].numpy(), inputs["target_tokens"].numpy(), labels.numpy())
        for inputs, labels in dataset
    ]


def _unpadded(row):
    return [int(token) for token in row if token != text.PAD_ID]


@TF_ONLY
def test_translation_dataset_batches_by_token_count(model_file):
    processor = sentencepiece.SentencePieceProcessor(model_file=str(model_file))
    joined = [(a + " " + b, c + " " + d) for (a, c), (b, d) in itertools.product(FRENCH_ENGLISH, repeat=2)]
    pairs = FRENCH_ENGLISH + joined  # 600 pairs of 14 .. 77 ids a side
    tokens_per_batch, max_length = 256, 64
    dataset = text.translation_dataset(pairs, model_file, tokens_per_batch, max_length, seed=0)
    batches = _batches(dataset)
    seen = []
    for source, target_inputs, labels in batches:
        assert source.dtype == target_inputs.dtype == labels.dtype == np.int32
        assert source.size <= tokens_per_batch and labels.size <= tokens_per_batch
        assert target_inputs.shape == labels.shape and len(source) == len(labels)
        np.testing.assert_array_equal(target_inputs[:, 0], 0)
        np.testing.assert_array_equal(target_inputs[:, 1:], labels[:, :-1])
        for source_row, label_row in zip(source, labels):
            assert _unpadded(source_row)[-1] == _unpadded(label_row)[-1] == text.EOS_ID
            seen.append((processor.decode(_unpadded(source_row)), processor.decode(_unpadded(label_row))))
    expected = [pair for pair in pairs if max(len(processor.encode(side)) + 1 for side in pair) <= max_length]
    assert 0 < len(expected) < len(pairs)  # the length filter is exercised
    assert sorted(seen) == sorted(expected)
    # Buckets fill up: batches use the budget, not one pair each.
    assert max(max(source.size, labels.size) for source, _, labels in batches) > 0.75 * tokens_per_batch
    again = _batches(text.translation_dataset(pairs, model_file, tokens_per_batch, max_length, seed=0))
    assert all(np.array_equal(a, b) for first, second in zip(batches, again) for a, b in zip(first, second))
    other = _batches(text.translation_dataset(pairs, model_file, tokens_per_batch, max_length, seed=1))
    assert not all(np.array_equal(a[0], b[0]) for a, b in zip(batches, other))


@TF_ONLY
def test_translation_dataset_feeds_transformer_translation_fit(pairs_file, model_file):
    import keras

    from keras_selfattn.models import MaskedSparseCategoricalCrossentropy, transformer_translation

    pairs, _ = text.read_pairs_tsv(pairs_file)
    train, _ = text.split_pairs(pairs, 0.2, seed=0)
    dataset = text.translation_dataset(train, text.tokenizer_from_file(model_file), 256, 32, seed=0)
    model = transformer_translation(VOCAB_SIZE, VOCAB_SIZE, preset="tiny")
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=MaskedSparseCategoricalCrossentropy(), jit_compile=False)
    history = model.fit(dataset.take(1), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][-1])


@TF_ONLY
def test_translation_dataset_argument_errors(model_file):
    with pytest.raises(ValueError, match="tokens_per_batch.*max_length"):
        text.translation_dataset(FRENCH_ENGLISH, model_file, 16, 32)
    with pytest.raises(ValueError, match="max_length"):
        text.translation_dataset(FRENCH_ENGLISH, model_file, 16, 0)
    no_eos = text.tokenizer_from_file(model_file, add_eos=False)
    with pytest.raises(ValueError, match="add_eos=True"):
        text.translation_dataset(FRENCH_ENGLISH, no_eos, 64, 32)



@TF_ONLY
def test_the_pipeline_stages_give_translation_datasets_batches(model_file):
    tokenizer = text.tokenizer_from_file(model_file)
    whole = text.translation_dataset(FRENCH_ENGLISH, tokenizer, 64, 16, shuffle=False)
    examples = text.tokenized_pairs(FRENCH_ENGLISH, tokenizer, 16)
    assert all(source[-1] == target[-1] == text.EOS_ID for source, target in examples.as_numpy_iterator())
    staged = text.length_bucketed_batches(examples, 64, 16)
    for (source, target, labels), (source_2, target_2, labels_2) in zip(_batches(whole), _batches(staged), strict=True):
        assert (source == source_2).all() and (target == target_2).all() and (labels == labels_2).all()
    with pytest.raises(ValueError, match="tokens_per_batch.*max_length"):
        text.length_bucketed_batches(examples, 8, 16)
    with pytest.raises(ValueError, match="add_eos=True"):
        text.tokenized_pairs(FRENCH_ENGLISH, text.tokenizer_from_file(model_file, add_eos=False), 16)


def test_user_defined_symbols_are_whole_pieces_after_the_special_ids(pairs_file, tmp_path):
    pairs, _ = text.read_pairs_tsv(pairs_file)
    sides = [side for pair in pairs for side in pair]
    symbols = ["\u2581<2en>", "\u2581<2fr>"]
    path = text.train_sentencepiece(sides, tmp_path / "spm", VOCAB_SIZE, user_defined_symbols=symbols)
    processor = sentencepiece.SentencePieceProcessor(model_file=str(path))
    assert [processor.piece_to_id(symbol) for symbol in symbols] == [3, 4]
    # "<2en> " at a sentence's start encodes to the symbol's id, then the sentence as alone.
    assert processor.encode("<2en> Où est la gare ?") == [3] + processor.encode("Où est la gare ?")


def test_wmt14_rejects_unknown_config(tmp_path):
    with pytest.raises(ValueError, match="config.*de-en"):
        text.wmt14_pairs(tmp_path, config="en-de")


@TF_ONLY
def test_wmt14_pairs_through_tensorflow_datasets(tmp_path):
    import tensorflow_datasets as tfds

    with pytest.raises(FileNotFoundError, match=f"wmt14_translate/de-en.*{tmp_path}.*tfds build"):
        text.wmt14_pairs(tmp_path, "de-en", "validation")
    with tfds.testing.mock_data(num_examples=3):
        pairs = text.wmt14_pairs(tmp_path, "fr-en", "test")
    assert len(pairs) == 3
    assert all(isinstance(source, str) and isinstance(target, str) for source, target in pairs)
