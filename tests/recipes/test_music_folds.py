"""The decoding criterion the music recipes share, and the folds of
recipes/music_folds.py: each embedded performance held out once, the
setting chosen by its median worst ratio over the folds."""

import numpy as np
import pytest

from keras_selfattn.data import music as music_data
from recipes import music_folds
from recipes.common import music_recipes
from recipes.common.cli import UsageError

pytestmark = pytest.mark.backends("tensorflow", reason="the recipes' tf.data and tf.distribute harness")

HELD_OUT = {"median_note_seconds": 0.2, "share_of_notes_over_2s": 0.02, "p95_polyphony": 6.0}


def test_the_worst_ratio_is_the_largest_either_way():
    held_out = {"median_note_seconds": 0.2, "share_of_notes_over_2s": 0.02, "p95_polyphony": 6.0}
    near = {"median_note_seconds": 0.25, "share_of_notes_over_2s": 0.01, "p95_polyphony": 9.0}
    assert music_recipes.worst_ratio(near, held_out) == pytest.approx(2.0)  # 0.01 is half of 0.02
    assert music_recipes.worst_ratio({**near, "share_of_notes_over_2s": 0.0}, held_out) == float("inf")
    assert music_recipes.worst_ratio(held_out, held_out) == 1.0


def test_a_tie_on_the_worst_ratio_goes_to_the_closer_setting_overall():
    held_out = {"median_note_seconds": 0.2, "share_of_notes_over_2s": 0.02, "p95_polyphony": 6.0}
    far = {"median_note_seconds": 0.1, "share_of_notes_over_2s": 0.01, "p95_polyphony": 12.0}
    near = {"median_note_seconds": 0.2, "share_of_notes_over_2s": 0.02, "p95_polyphony": 12.0}
    assert music_recipes.mean_log_ratio(far, held_out) == pytest.approx(np.log(2.0))
    assert music_recipes.mean_log_ratio(near, held_out) == pytest.approx(np.log(2.0) / 3)
    for rows in ([("far", far), ("near", near)], [("near", near), ("far", far)]):
        assert music_recipes.closest_setting(rows, held_out) == "near"
    # 9 / 6 is 1.5 in floats, 0.15 / 0.1 1.4999999999999998: still a tie.
    held_out = {**held_out, "median_note_seconds": 0.15}
    short = {"median_note_seconds": 0.1, "share_of_notes_over_2s": 0.015, "p95_polyphony": 6.0}
    polyphonic = {"median_note_seconds": 0.15, "share_of_notes_over_2s": 0.02, "p95_polyphony": 9.0}
    assert music_recipes.worst_ratio(short, held_out) < music_recipes.worst_ratio(polyphonic, held_out) == 1.5
    assert music_recipes.closest_setting([("short", short), ("polyphonic", polyphonic)], held_out) == "polyphonic"
    # A smaller worst ratio wins, even with a larger mean log ratio (0.39 against 0.23).
    better = {"median_note_seconds": 0.15, "share_of_notes_over_2s": 0.015, "p95_polyphony": 11.0}
    assert music_recipes.closest_setting([("near", near), ("better", better)], held_out) == "better"


def test_each_fold_holds_one_performance_out_and_trains_on_the_other_nine(tmp_path, monkeypatch):
    monkeypatch.setattr(music_data.files, "default_midi_dir", lambda data_dir=None: tmp_path)
    folds = [music_data.fold_splits(fold) for fold in range(1, 11)]
    held_out = [fold["validation"][0].name for fold in folds]
    assert sorted(held_out) == sorted(music_data.files.DEFAULT_MIDI_NAMES)
    for fold, name in zip(folds, held_out):
        assert len(fold["train"]) == 9 and name not in {path.name for path in fold["train"]}
        assert fold["test"] == []
    assert music_data.fold_splits("Maestro_3.mid") == music_data.fold_splits(3)
    with pytest.raises(ValueError, match="held_out must name one of the embedded performances"):
        music_data.fold_splits(11)


def test_a_fold_takes_neither_a_folder_nor_the_test_split():
    parser = music_folds.build_parser()
    args = parser.parse_args(["--model_dir", "unused"])
    for midi_dir, held_out in (("my_folder", "validation"), (None, "test")):
        args.fold, args.midi_dir, args.held_out = 3, midi_dir, held_out
        with pytest.raises(UsageError, match="--fold holds out one embedded performance"):
            music_recipes._midi_splits(args, None, music_data, None)


def test_each_fold_trains_then_decodes_with_its_own_model():
    args = music_folds.build_parser().parse_args(["--model_dir", "study", "--folds", "4", "--seed", "7"])
    (train, train_argv, train_report), (decode, decode_argv, decode_report) = music_folds.fold_commands(args, 4)
    assert (train, decode) == ("music", "music_decoding")
    assert train_argv[train_argv.index("--fold") + 1] == decode_argv[decode_argv.index("--fold") + 1] == "4"
    assert decode_argv[decode_argv.index("--model") + 1] == str(train_report.parent / "music.keras")
    assert "--seed" in train_argv and train_argv[train_argv.index("--seed") + 1] == "7"
    assert train_report.parent != decode_report.parent


def _decoding(**settings):
    return {"held_out": HELD_OUT, "settings": settings}


def test_the_setting_chosen_across_folds_has_the_smallest_median_worst_ratio():
    # "steady" is 1.5x in every fold; "lucky" is 1.0x in one fold and 3x in the others:
    # the best in one fold, not across them.
    steady = {**HELD_OUT, "p95_polyphony": 9.0}
    lucky_fold = HELD_OUT
    unlucky_fold = {**HELD_OUT, "median_note_seconds": 0.6}
    decodings = [
        _decoding(steady=steady, lucky=lucky_fold),
        _decoding(steady=steady, lucky=unlucky_fold),
        _decoding(steady=steady, lucky=unlucky_fold),
    ]
    chosen, scores = music_folds.choose(decodings)
    assert chosen == "steady"
    assert scores["lucky"][0] == pytest.approx([1.0, 3.0, 3.0]) and scores["lucky"][1] == pytest.approx(3.0)
    assert scores["steady"][1] == pytest.approx(1.5)
    # A single fold chooses by its own worst ratio, as music_decoding does.
    assert music_folds.choose(decodings[:1])[0] == "lucky"


def test_a_tie_across_folds_goes_to_the_smaller_mean_log_ratio():
    near = {**HELD_OUT, "p95_polyphony": 12.0}
    far = {"median_note_seconds": 0.1, "share_of_notes_over_2s": 0.01, "p95_polyphony": 12.0}
    chosen, scores = music_folds.choose([_decoding(far=far, near=near)] * 2)
    assert scores["far"][1] == scores["near"][1] == pytest.approx(2.0)
    assert chosen == "near"


def test_only_settings_every_fold_ran_are_compared():
    decodings = [_decoding(a=HELD_OUT, b=HELD_OUT), _decoding(b={**HELD_OUT, "p95_polyphony": 7.0})]
    chosen, scores = music_folds.choose(decodings)
    assert list(scores) == ["b"] and chosen == "b"
    assert np.isclose(scores["b"][1], (1.0 + 7 / 6) / 2)
