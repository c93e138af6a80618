"""recipes/music_decoding.py end to end with a small music model on a small
MIDI folder: every setting's statistics, MIDI and report, and the rules
kept where the setting says so."""

import json
from pathlib import Path

import numpy as np
import pytest

import recipe_checks
from keras_selfattn.data import music as music_data
from keras_selfattn.models import music_transformer
from recipes import music_decoding
from tests.recipes.test_music_recipe import FILES, _performance

pytestmark = [
    pytest.mark.slow,
    pytest.mark.backends("tensorflow", reason="the recipes' tf.data and tf.distribute harness"),
]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """`(root, argv)`: a small MIDI folder and an untrained model in `root`,
    the study's arguments for them."""
    root = tmp_path_factory.mktemp("decoding")
    midi_dir = root / "midi"
    midi_dir.mkdir()
    for index, name in enumerate(FILES):
        _performance(midi_dir / name, root=52 + 3 * index)
    model = music_transformer(music_data.MUSIC_VOCABULARY_SIZE, preset="tiny", num_layers=1, hidden_dim=32)
    model.save(root / "music.keras")
    argv = [
        "--model", str(root / "music.keras"), "--midi_dir", str(midi_dir), "--data_dir", str(root / "data"),
        "--primers", "3", "--primer_events", "24", "--max_new_tokens", "64", "--verbose", "0",
    ]
    return root, argv


def _run_study(argv):
    return recipe_checks.run_recipe(music_decoding.main, argv)


@pytest.fixture(scope="module")
def study(inputs):
    root, argv = inputs
    report, printed = _run_study([*argv, "--model_dir", str(root / "out"), "--held_out", "test"])
    return root / "out", report, printed


@pytest.fixture(scope="module")
def grid(inputs):
    """A grid of two temperatures, two top_p and two minimum note lengths on
    the validation file, two seeds pooled."""
    root, argv = inputs
    report, printed = _run_study([
        *argv, "--model_dir", str(root / "grid"), "--held_out", "validation",
        "--temperatures", "0.5", "1.5", "--top_ps", "0.6", "1.0", "--min_note_ms", "0", "54", "--seeds", "3", "4",
    ])
    return root, report, printed


def test_every_setting_is_tabled_written_and_reported(study):
    out, report, printed = study
    assert list(report["settings"]) == [name for name, *_ in music_decoding.SETTINGS]
    assert json.loads((out / "report.json").read_text())["settings"] == report["settings"]
    assert report["primers"] == 3
    table = printed[printed.index("setting "):printed.index("written:")]
    for name in [*report["settings"], *report["references"], "held out"]:
        assert f"] {name} " in table, name
    listing = printed[printed.index("written:"):].splitlines()[1:]
    assert len(listing) == len(music_decoding.SETTINGS) + 2  # a MIDI file per setting, continuations.npz, report
    for line in listing:
        assert Path(line.split()[-1]).is_file(), line


def test_the_rules_hold_only_where_the_setting_has_them(study):
    _, report, _ = study
    for setting in music_decoding.SETTINGS:
        name = setting.name
        statistics = report["settings"][name]
        if setting.note_rules:
            assert statistics["share_of_note_ons_on_a_sounding_pitch"] == 0.0, name
            # Every note-off closes a sounding note (a share of 0.0 would also
            # be what no closing note-off at all gives, so there must be some).
            assert statistics["note_offs"] > 0, name
            assert statistics["share_of_note_offs_closing_a_note"] == 1.0, name
    # An untrained model breaks them when nothing stops it.
    free = [report["settings"][setting.name] for setting in music_decoding.SETTINGS if not setting.note_rules]
    assert max(s["share_of_note_ons_on_a_sounding_pitch"] for s in free) > 0
    assert min(s["share_of_note_offs_closing_a_note"] for s in free) < 1


def test_references_are_the_primers_own_continuations_and_the_training_data(study):
    out, report, printed = study
    files = music_data.find_midi_files(out.parent / "midi")
    (held_out,), _ = music_data.encode_performances(files["test"], out.parent / "encoded")
    train, _ = music_data.encode_performances(files["train"], out.parent / "encoded")
    starts = np.arange(0, len(held_out) - (24 + 64) + 1, 24)
    chosen = starts[np.unique(np.linspace(0, len(starts) - 1, 3).round().astype(int))]
    continuations = music_data.performance_statistics(
        [held_out[start : start + 24 + 64] for start in chosen], starts=[24] * len(chosen)
    )
    assert report["references"] == {
        "held-out continuations": continuations,
        "training data": music_data.performance_statistics(train),
    }
    assert report["references"]["held-out continuations"] != report["held_out"]
    assert report["splits"]["held_out"] == "test" and report["splits"]["overlap_validation_test"] == 0
    assert [report["splits"][name] for name in ("train", "validation", "test")] == [
        len(files["train"]), len(files["validation"]), len(files["test"])
    ]
    assert [row["first_age"] for row in report["note_off_nll_by_age"]] == list(music_decoding.AGE_BINS)
    assert "held-out note-offs by the age of the note they close" in printed


def test_note_off_nll_is_binned_by_the_age_of_the_note_it_closes():
    ranges = music_data.event_id_ranges()
    on, off, shift = ranges["note_on"][0], ranges["note_off"][0], ranges["time_shift"][0]
    window = [on + 3, shift, on + 5, off + 3, off + 9, on + 3, on + 3] + [shift] * 20 + [off + 5, off + 3, off + 3]
    log_probs = -np.random.default_rng(0).uniform(0.1, 9.0, (1, len(window) - 1, music_data.MUSIC_VOCABULARY_SIZE))
    by_age = music_decoding.note_off_nll_by_age(music_data, [np.array(window)], log_probs)
    # off+3 at 3 closes the note-on at 0 (age 3); off+9 closes nothing; off+5 at 27
    # closes the one at 2 (age 25); off+3 at 28 and 29 close those at 5 and 6 (age 23).
    nll = lambda t, event: -log_probs[0, t - 1, event]  # noqa: E731
    assert [(first, last, count) for first, last, count, _ in by_age] == [
        (1, 15, 1), (16, 31, 3), (32, 63, 0), (64, 127, 0), (128, None, 0)
    ]
    assert by_age[0][3] == pytest.approx(nll(3, off + 3))
    assert by_age[1][3] == pytest.approx(np.mean([nll(27, off + 5), nll(28, off + 3), nll(29, off + 3)]))
    assert by_age[2][3] is None


def test_a_released_primer_leaves_no_note_sounding():
    ranges = music_data.event_id_ranges()
    on, off, shift = ranges["note_on"][0], ranges["note_off"][0], ranges["time_shift"][0]
    primer = np.array([on + 3, on + 7, shift + 9, off + 3, on + 1, shift + 4], "int32")
    released = music_decoding.released(music_data, primer)
    np.testing.assert_array_equal(released[:6], primer)
    assert sorted(released[6:]) == [off + 1, off + 7]  # pitch 3 was released already


def test_a_grid_on_the_validation_file_pools_its_seeds(inputs, grid):
    from keras_selfattn.generation import continue_sequence

    root, report, printed = grid
    assert list(report["settings"]) == [
        f"note rules, temp. {temperature}, top_p {top_p}{minimum}"
        for temperature in ("0.5", "1.5") for top_p in ("0.6", "1") for minimum in ("", ", min. note 54 ms")
    ]
    assert report["seeds"] == [3, 4]
    files = music_data.find_midi_files(root / "midi")
    validation, _ = music_data.encode_performances(files["validation"], root / "encoded")
    assert report["held_out"] == music_data.performance_statistics(validation)
    windows = music_decoding.held_out_windows(
        music_decoding.build_parser().parse_args([*inputs[1], "--model_dir", str(root / "grid")]), validation
    )
    model = music_decoding.keras.models.load_model(root / "music.keras")
    plain, minimum = "note rules, temp. 1.5, top_p 0.6", "note rules, temp. 1.5, top_p 0.6, min. note 54 ms"
    for min_note_steps, name in [(0, plain), (5, minimum)]:
        pieces = [
            np.asarray(continue_sequence(
                model, np.stack([w[:24] for w in windows]), 64, temperature=1.5, top_p=0.6, seed=seed,
                note_event_ids=music_data.event_id_ranges(), min_note_steps=min_note_steps,
            ))
            for seed in (3, 4)
        ]
        expected = music_data.performance_statistics(list(np.concatenate(pieces)), starts=[24] * 6)
        assert report["settings"][name] == expected, name
    assert report["settings"][minimum] != report["settings"][plain]


def test_the_closest_setting_has_the_smallest_worst_ratio(grid):
    _, report, printed = grid
    held_out = report["held_out"]
    # worst_ratio itself is checked on hand-made numbers below.
    expected = {name: music_decoding.worst_ratio(statistics, held_out) for name, statistics in report["settings"].items()}
    reported = {name: float("inf") if ratio is None else ratio for name, ratio in report["worst_ratio"].items()}
    assert reported == pytest.approx(expected)
    assert report["closest_setting"] in [name for name, ratio in expected.items() if ratio == min(expected.values())]
    assert f"closest to the held-out data: {report['closest_setting']} " in printed


def test_the_report_says_which_model_it_scored(inputs, study):
    root, _ = inputs
    _, report, _ = study
    model = music_decoding.keras.models.load_model(root / "music.keras")
    assert report["model_config"] == {
        "parameters": model.count_params(), "vocabulary_size": music_data.MUSIC_VOCABULARY_SIZE,
        "note_state": False,
    }
    assert report["model_path"] == str(root / "music.keras")
    assert report["model"]["class"] == "MusicTransformer" and report["model"]["parameters"] == model.count_params()


def test_default_windows_shrink_to_the_longest_held_out_performance():
    from types import SimpleNamespace

    def windows(primer, generate, longest):
        args = SimpleNamespace(primer_events=primer, max_new_tokens=generate)
        music_decoding.fit_window_defaults(args, SimpleNamespace(log=print), [np.zeros(longest)])
        return args.primer_events, args.max_new_tokens

    assert windows(None, None, 5000) == (256, 1024)
    assert windows(None, None, 640) == (128, 512)  # half of each
    assert windows(100, None, 640) == (100, 540) and windows(None, 600, 640) == (40, 600)
    assert windows(300, 700, 640) == (300, 700)  # given: held_out_windows names them if they do not fit


def test_the_held_out_split_must_be_in_the_folder(inputs, tmp_path):
    root, argv = inputs
    only_train = tmp_path / "midi"
    only_train.mkdir()
    for name in ("a.mid", "b.mid"):
        _performance(only_train / name, root=60)
    (only_train / "maestro-v3.0.0.csv").write_text(
        "canonical_composer,canonical_title,split,year,midi_filename,audio_filename,duration\n"
        "C,A,train,2018,a.mid,a.wav,14.0\nC,B,test,2018,b.mid,b.wav,14.0\n"
    )
    arguments = [*argv, "--midi_dir", str(only_train), "--model_dir", str(tmp_path / "out"), "--held_out", "validation"]
    with pytest.raises(music_decoding.harness.UsageError, match=r"one validation file \(--held_out validation\)"):
        music_decoding.main(arguments)
