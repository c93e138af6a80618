"""recipes/translate.py end to end on a small English-French TSV written here,
translated French to English: every output, train, validation and test
apart (by English sentence; fit validates on the validation pairs), the
test BLEU and chrF report against sacrebleu on the written translations, the exported `translate`
signature against the recipe's own translations, and the usage errors."""

import json
from pathlib import Path

import numpy as np
import pytest

import recipe_checks
from recipes import translate
from recipes.common.run import Run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.backends("tensorflow", reason="tf.data pipeline, beam search and SavedModel"),
]

ANIMALS = [("cat", "chat"), ("dog", "chien"), ("horse", "cheval"), ("bird", "oiseau")]
COLOURS = [("black", "noir"), ("white", "blanc"), ("green", "vert"), ("grey", "gris")]
MOODS = [("small", "petit"), ("tall", "grand"), ("happy", "content"), ("tired", "fatigué")]
SHORT_RUN_VALIDATION_DATA = []  # what `fit` validated on in the short run
TINY = [
    "--epochs", "2", "--steps_per_epoch", "2", "--tokens_per_batch", "256", "--max_length", "24",
    "--held_out_fraction", "0.1", "--beam_size", "2", "--decode_batch_size", "8",
    "--samples", "3", "--verbose", "0", "--seed", "1",
]


def _pairs():
    return [
        (f"The {colour} {animal} is {mood}.", f"Le {animal_fr} {colour_fr} est {mood_fr}.")
        for animal, animal_fr in ANIMALS
        for colour, colour_fr in COLOURS
        for mood, mood_fr in MOODS
    ]


@pytest.fixture(scope="module")
def pairs_tsv(tmp_path_factory):
    """English<TAB>French lines, with a blank line, a line without a tab and
    a repeated pair for the reader to skip."""
    lines = [f"{english}\t{french}" for english, french in _pairs()]
    lines[5:5] = ["", "a line without any tab", lines[0]]
    path = tmp_path_factory.mktemp("pairs") / "en_fr.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _main(argv):
    return recipe_checks.run_recipe(translate.main, argv)


@pytest.fixture(scope="module")
def short_run(pairs_tsv, tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("run")
    argv = [
        "--pairs_tsv", str(pairs_tsv), "--direction", "reverse", "--position", "shaw",
        "--model_dir", str(model_dir), "--export_dir", str(model_dir / "export"), *TINY,
    ]
    fit = Run.fit

    def recording_fit(self, model, train_data, *, validation_data=None, callbacks=()):
        SHORT_RUN_VALIDATION_DATA.append(validation_data)
        return fit(self, model, train_data, validation_data=validation_data, callbacks=callbacks)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Run, "fit", recording_fit)
        report, printed = _main(argv)
    return model_dir, report, printed


def _decoded(processor, ids):
    return processor.decode([int(i) for i in ids if i > 1])  # not padding (0) nor the end (1)


def test_validation_and_test_pairs_are_apart_and_fit_validates_on_validation(short_run):
    import sentencepiece

    model_dir, _, _ = short_run
    saved = json.loads((model_dir / "report.json").read_text())
    facts = saved["splits"]
    # 64 English sentences, 6 held out (0.1): 3 validate (at most half), 3 are the test.
    assert (facts["train"], facts["validation"], facts["test"]) == (58, 3, 3)
    assert facts["overlap_validation_test"] == 0 and "by whole first-side sentence" in facts["how"]
    identities = json.loads((model_dir / "splits.json").read_text())
    english = {english for english, _ in _pairs()}
    assert len(identities["validation"]) == 3 and len(identities["test"]) == 3
    assert set(identities["validation"]) <= english and set(identities["test"]) <= english
    assert not set(identities["validation"]) & set(identities["test"])
    # The test pairs scored are the test sentences' (reverse: the English side is the reference).
    assert {row[1] for row in _translations(model_dir)} == set(identities["test"])
    # fit validated on the validation pairs only: their French sources and English targets.
    processor = sentencepiece.SentencePieceProcessor(model_file=str(model_dir / translate.SENTENCEPIECE_FILE))
    [validation_data] = SHORT_RUN_VALIDATION_DATA
    targets = sorted(
        _decoded(processor, row) for inputs, target in validation_data for row in target.numpy()
    )
    # (pairs with a side over --max_length 24 pieces are left out, as in training)
    assert targets and set(targets) <= set(identities["validation"])
    assert not set(targets) & set(identities["test"])
    assert saved["validation"]["pairs"] == 3 and np.isfinite(saved["validation"]["nll_per_token"])
    assert len(saved["training"]["val_loss"]) == 2 and saved["test"]["pairs"] == 3


def _translations(model_dir):
    rows = (model_dir / "translations.tsv").read_text(encoding="utf-8").splitlines()
    assert rows[0].split("\t") == ["source", "reference", "greedy", "beam"]
    return [row.split("\t") for row in rows[1:]]


def test_help_explains_every_flag():
    parser = translate.build_parser()
    for action in parser._actions:
        assert action.help, f"{action.option_strings} has no help text"
    text = parser.format_help()
    for flag in (
        "--pairs_tsv", "--wmt14", "--direction", "--preset", "--position", "--tokens_per_batch",
        "--epochs", "--steps_per_epoch", "--warmup_steps", "--label_smoothing", "--beam_size", "--alpha", "--strategy",
        "--mixed_precision", "--model_dir", "--export_dir",
    ):
        assert flag in text


def test_short_run_writes_every_output_and_lists_it(short_run, pairs_tsv):
    model_dir, report, printed = short_run
    for name in (
        "translation.keras", "sentencepiece.model", "checkpoints/latest.keras", "report.json",
        "translations.tsv", "attention.png",
    ):
        assert (model_dir / name).is_file(), name
    assert list((model_dir / "logs").rglob("events.out.tfevents.*"))
    assert json.loads((model_dir / "report.json").read_text())["test"] == report["test"]
    listing = printed[printed.index("written:"):].splitlines()[1:]
    assert len(listing) == len(report["outputs"]) >= 9
    for line in listing:
        assert Path(line.split()[-1]).exists(), line
    assert f"{pairs_tsv}: 64 pairs from 67 lines; skipped: 1 blank, 1 no_tab, 1 duplicate" in printed
    assert report["data"]["line_counts"]["kept"] == 64


def test_french_sources_and_english_references(short_run):
    _, report, printed = short_run
    french = {french for _, french in _pairs()}
    english = {english for english, _ in _pairs()}
    test = report["test"]
    assert test["pairs"] == report["data"]["test_pairs"] == 3 and report["data"]["validation_pairs"] == 3
    for sample in report["samples"]:
        assert sample["source"] in french and sample["reference"] in english
        assert f"reference: {sample['reference']}" in printed


def test_bleu_and_chrf_report_is_sacrebleu_on_the_written_translations(short_run):
    import sacrebleu

    model_dir, report, _ = short_run
    rows = _translations(model_dir)
    sources, references = [row[0] for row in rows], [row[1] for row in rows]
    scores = report["test"]["scores"]
    for name, hypotheses in (("greedy", [r[2] for r in rows]), ("beam", [r[3] for r in rows]), ("copy_source", sources)):
        assert scores[name]["bleu"] == round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2)
        assert scores[name]["chrf"] == round(sacrebleu.corpus_chrf(hypotheses, [references]).score, 2)
    assert "nrefs:1" in scores["beam"]["bleu_signature"]


def test_the_model_is_tied_and_reloads(short_run):
    import keras

    model_dir, report, printed = short_run
    model = keras.models.load_model(model_dir / "translation.keras")
    logits = model.get_layer("logits")
    assert logits.embedding is model.get_layer("source_embedding")
    # The default --vocabulary_size, 8000, is more than the text supports: as many pieces as it does.
    supported = int(printed.split("the training text supports at most ")[1].split()[0])
    assert 40 < logits.units == report["model"]["vocabulary_size"] == supported < translate.DEFAULT_VOCAB_SIZE
    assert model.count_params() == report["model"]["parameters"]
    recipe_checks.assert_report_records_the_scored_model(model_dir, "translation")


def test_exported_translate_equals_the_recipes_translations(short_run):
    import tensorflow as tf

    model_dir, report, _ = short_run
    assert report["export"]["translate_inputs"] == ["text"]
    rows = _translations(model_dir)
    assert any(row[3] for row in rows), "every beam translation is empty: the test would check nothing"
    versions = list((model_dir / "export" / "translation").iterdir())
    assert [v.name for v in versions] == ["1"]
    served = tf.saved_model.load(str(versions[0])).signatures["translate"]
    outputs = served(text=tf.constant([row[0] for row in rows]))
    translations = [" ".join(t.decode("utf-8").split()) for t in outputs["translation"].numpy()]
    assert translations == [row[3] for row in rows]
    assert outputs["tokens"].shape[1] == 24


def test_attention_picture_has_one_panel_per_head(short_run):
    import matplotlib.image

    model_dir, report, _ = short_run
    picture = matplotlib.image.imread(model_dir / "attention.png")
    # The tiny preset's 4 heads side by side: a wide figure.
    assert picture.shape[1] > 3 * picture.shape[0] * 0.8 and picture.std() > 0
    assert report["attention_sentence"] in {french for _, french in _pairs()}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--tokens_per_batch", "8", "--max_length", "16"], "`--tokens_per_batch` (8) must be at least `--max_length`"),
        (["--pairs_tsv", "/no/such/file.tsv"], "`--pairs_tsv` '/no/such/file.tsv' does not exist"),
    ],
    ids=["tokens", "missing_file"],
)
def test_bad_flags_are_usage_errors(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as raised:
        translate.harness.run_cli(translate.main, ["--model_dir", str(tmp_path), *argv])
    assert raised.value.code == 2
    assert message in capsys.readouterr().err


def test_a_vocabulary_too_large_for_the_text_names_the_flag(pairs_tsv, tmp_path):
    with pytest.raises(translate.harness.UsageError, match="`--vocabulary_size` 5000 is larger"):
        translate.main(["--pairs_tsv", str(pairs_tsv), "--model_dir", str(tmp_path), "--vocabulary_size", "5000",
                        "--verbose", "0"])


def test_flag_values_out_of_range_are_rejected(capsys):
    for flag, value in (("--held_out_fraction", "1.5"), ("--dropout", "1"), ("--label_smoothing", "-0.1")):
        with pytest.raises(SystemExit):
            translate.build_parser().parse_args(["--model_dir", "m", flag, value])
        assert "expected a number in" in capsys.readouterr().err
    assert np.isclose(translate.build_parser().parse_args(["--model_dir", "m"]).label_smoothing, 0.1)


def test_evaluate_only_reproduces_the_held_out_figures(short_run, pairs_tsv, tmp_path):
    model_dir, report, _ = short_run
    argv = ["--pairs_tsv", str(pairs_tsv), "--direction", "reverse", "--position", "shaw", *TINY]
    again, _ = recipe_checks.evaluate_only(
        translate.main, argv, model_dir, tmp_path / "again", ["translation.keras", translate.SENTENCEPIECE_FILE]
    )
    assert again["test"] == report["test"] and again["samples"] == report["samples"]
    assert again["validation"] == report["validation"] and again["splits"] == report["splits"]
    with pytest.raises(translate.harness.UsageError, match="--evaluate_only needs the trained model's vocabulary"):
        translate.main([*argv, "--model_dir", str(tmp_path / "empty"), "--evaluate_only"])


def test_training_pairs_longer_than_max_length_name_the_flag(pairs_tsv, tmp_path):
    argv = ["--pairs_tsv", str(pairs_tsv), "--model_dir", str(tmp_path), "--max_length", "3", "--verbose", "0"]
    with pytest.raises(translate.harness.UsageError, match="--max_length 3: no training pair fits"):
        translate.main(argv)


@pytest.fixture(scope="module")
def both_directions_run(pairs_tsv, tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("both")
    argv = [
        "--pairs_tsv", str(pairs_tsv), "--direction", "reverse", "--tasks", "both_directions",
        "--low_resource_fraction", "0.5", "--model_dir", str(model_dir), "--export_dir", str(model_dir / "export"),
        *TINY, "--eval_examples", "4",
    ]
    report, printed = _main(argv)
    return model_dir, report, printed


def test_both_directions_report_each_directions_test_scores(both_directions_run):
    _, report, printed = both_directions_run
    data = report["data"]
    assert data["tasks"] == "both_directions" and data["low_resource_fraction"] == 0.5
    # --direction reverse (French to English) keeps half its 58 training pairs; forward keeps them all.
    assert data["train_pairs_by_direction"] == {"reverse": 29, "forward": 58} and data["train_pairs"] == 29
    assert data["direction_prefixes"] == {"reverse": "<reverse> ", "forward": "<forward> "}
    by_direction = report["test_by_direction"]
    assert by_direction["reverse"] == report["test"]["scores"]
    assert set(by_direction["forward"]) == {"greedy", "beam", "copy_source"}
    for scores in by_direction.values():
        assert 0 <= scores["beam"]["bleu"] <= 100 and "nrefs:1" in scores["beam"]["bleu_signature"]
    english = {english for english, _ in _pairs()}
    assert all(sample["reference"] in english for sample in report["samples"])
    assert "the other direction, forward:" in printed


def test_both_directions_trains_on_direction_tokens_of_the_vocabulary(both_directions_run):
    import sentencepiece

    model_dir, report, _ = both_directions_run
    processor = sentencepiece.SentencePieceProcessor(model_file=str(model_dir / translate.SENTENCEPIECE_FILE))
    tokens = translate.direction_token_ids(processor)
    assert sorted(tokens.values()) == [3, 4]  # the first ids after padding, end and unknown
    # The prefix a client writes encodes to the token, then the sentence as it encodes alone.
    for direction, token in tokens.items():
        sentence = "Le chat noir est petit."
        assert processor.encode(translate.direction_prefix(direction) + sentence) == [token] + processor.encode(sentence)
    assert report["model"]["vocabulary_size"] == processor.get_piece_size()


def test_both_directions_export_takes_each_rows_direction(both_directions_run):
    import tensorflow as tf

    model_dir, report, printed = both_directions_run
    assert report["export"]["translate_inputs"] == ["direction", "text"]
    assert "the exported `translate` signature takes `direction`, `text` (`direction`: forward or reverse)" in printed
    rows = _translations(model_dir)  # --direction reverse: French sources, translated after '<reverse> '
    assert any(row[3] for row in rows), "every beam translation is empty: the test would check nothing"
    served = tf.saved_model.load(report["export"]["path"]).signatures["translate"]
    directions = ["reverse"] * len(rows) + ["backward"]
    outputs = served(text=tf.constant([row[0] for row in rows] + [rows[0][0]]), direction=tf.constant(directions))
    translations = [" ".join(t.decode("utf-8").split()) for t in outputs["translation"].numpy()]
    assert translations == [row[3] for row in rows] + [""]
    assert outputs["status"].numpy().tolist()[-1] == b"`direction` must be one of 'forward', 'reverse'"


def test_training_tasks_cut_one_direction_and_turn_the_pairs_around():
    pairs = [(f"s{index}", f"t{index}") for index in range(10)]
    args = translate.parse_args(["--model_dir", "m", "--low_resource_fraction", "0.3", "--seed", "2"])
    (direction, kept), = translate.training_tasks(args, pairs).items()
    assert direction == "forward" and len(kept) == 3 and kept == sorted(kept, key=pairs.index)
    assert kept == translate.training_tasks(args, pairs)["forward"]
    args = translate.parse_args(["--model_dir", "m", "--tasks", "both_directions", "--direction", "reverse"])
    tasks = translate.training_tasks(args, pairs)
    assert tasks == {"reverse": pairs, "forward": [(target, source) for source, target in pairs]}
    assert translate.training_tasks(translate.parse_args(["--model_dir", "m"]), pairs) == {"forward": pairs}


def test_both_directions_batches_lead_each_source_with_its_direction_token(both_directions_run):
    import sentencepiece

    from keras_selfattn.data import text

    model_dir, _, _ = both_directions_run
    vocabulary = model_dir / translate.SENTENCEPIECE_FILE
    processor = sentencepiece.SentencePieceProcessor(model_file=str(vocabulary))
    args = translate.parse_args(["--model_dir", "m", "--direction", "reverse", "--tasks", "both_directions", *TINY])
    french_english = [(french, english) for english, french in _pairs()]
    tasks = translate.training_tasks(args, french_english)
    batches = translate.direction_batches(
        args, text, processor, text.tokenizer_from_file(vocabulary), tasks, training=False
    )
    tokens = translate.direction_token_ids(processor)
    sources = {"reverse": [], "forward": []}
    for inputs, _ in batches:
        for row in inputs["source_tokens"].numpy().tolist():
            direction = {token: name for name, token in tokens.items()}[row[0]]
            sources[direction].append(processor.decode([i for i in row[1:] if i not in (0, 1)]))
    for direction, pairs in tasks.items():
        # The token, the source's pieces and the end within --max_length 24; the target's pieces and end too.
        fitting = [s for s, t in pairs if len(processor.encode(s)) + 2 <= 24 and len(processor.encode(t)) + 1 <= 24]
        assert len(fitting) > 10
        assert sorted(sources[direction]) == sorted(fitting)



def test_both_directions_hold_out_the_same_pairs(tmp_path):
    """Split by the first side whichever the direction: a reverse split by
    French sentences would part the two French variants of an English one."""
    from keras_selfattn.data import text

    pairs_tsv = tmp_path / "variants.tsv"
    pairs_tsv.write_text("".join(
        f"{english}\t{french}{ending}\n" for english, french in _pairs() for ending in ("", " !")
    ), encoding="utf-8")

    def split(direction):
        argv = ["--model_dir", str(tmp_path / "out"), "--pairs_tsv", str(pairs_tsv), "--direction", direction, *TINY]
        train, validation, test, _, facts = translate.load_pairs(translate.parse_args(argv), recipe_checks.StubRun(tmp_path), text)
        return train, validation, test, facts

    forward, reverse = split("forward"), split("reverse")
    for forward_part, reverse_part in zip(forward[:3], reverse[:3]):
        assert forward_part and reverse_part == [(target, source) for source, target in forward_part]
    assert forward[3] == reverse[3]
    # Both French variants of an English sentence land in one part.
    assert not {english for english, _ in forward[1]} & {english for english, _ in forward[2]}


def test_held_out_pairs_too_few_to_split_are_all_test_and_say_so(tmp_path):
    from keras_selfattn.data import text

    pairs_tsv = tmp_path / "few.tsv"
    # 4 English sentences, the held-out one with two French variants: no validation fits in 1 pair.
    pairs_tsv.write_text("".join(
        f"{english}\t{french}{ending}\n" for english, french in _pairs()[:4] for ending in ("", " !")
    ), encoding="utf-8")
    argv = ["--model_dir", str(tmp_path), "--pairs_tsv", str(pairs_tsv), "--held_out_fraction", "0.25"]
    run = recipe_checks.StubRun(tmp_path)
    train, validation, test, _, facts = translate.load_pairs(translate.parse_args(argv), run, text)
    assert (len(train), validation, len(test)) == (6, [], 2)
    assert (facts["train"], facts["validation"], facts["test"], facts["overlap_validation_test"]) == (6, 0, 2, 0)
    assert "training runs without validation data" in facts["how"] and facts["how"] in "\n".join(run.lines)
    with pytest.raises(translate.harness.UsageError, match="--validation_pairs 2 must leave test pairs"):
        translate.load_pairs(translate.parse_args([*argv, "--validation_pairs", "2"]), run, text)


def test_split_pairs_by_source_keeps_sources_whole():
    from keras_selfattn.data import text

    pairs = [(f"s{index // 2}", f"t{index}") for index in range(20)]
    chosen, rest = text.split_pairs_by_source(pairs, 5, seed=0)
    assert len(chosen) == 4 and len(rest) == 16 and chosen + rest != pairs
    assert not {s for s, _ in chosen} & {s for s, _ in rest}
    assert sorted(chosen + rest) == sorted(pairs)
    assert (chosen, rest) == text.split_pairs_by_source(pairs, 5, seed=0)
