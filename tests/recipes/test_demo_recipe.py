"""recipes/demo.py end to end on a small MIDI folder: the continuations'
statistics against an independent recomputation, per performance and
pooled, every output, the length study's figures, and bad flags."""

import json

import numpy as np
import pytest

import recipe_checks
from keras_selfattn.data import music as music_data
from keras_selfattn.generation import continue_sequence
from keras_selfattn.models import music_transformer
from recipes import demo
from tests.recipes.test_music_recipe import _performance

pytestmark = [
    pytest.mark.slow,
    pytest.mark.backends("tensorflow", reason="the recipes' tf.data and tf.distribute harness"),
]

SPLITS = {"a.mid": "train", "b.mid": "train", "c.mid": "test", "d.mid": "test", "e.mid": "validation"}
PRIMER, NEW = 24, 40


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """`(root, argv)`: a MIDI folder with two test performances and an
    untrained model file."""
    root = tmp_path_factory.mktemp("demo")
    midi_dir = root / "midi"
    midi_dir.mkdir()
    for index, name in enumerate(SPLITS):
        _performance(midi_dir / name, root=50 + 4 * index, seconds=24.0)
    rows = [f"Composer,Piece {name},{split},2018,{name},{name}.wav,24.0" for name, split in SPLITS.items()]
    header = "canonical_composer,canonical_title,split,year,midi_filename,audio_filename,duration"
    (midi_dir / "maestro-v3.0.0.csv").write_text("\n".join([header, *rows]) + "\n")
    model = music_transformer(music_data.MUSIC_VOCABULARY_SIZE, preset="tiny", num_layers=1, hidden_dim=32)
    model.save(root / "music.keras")
    argv = [
        "--midi_dir", str(midi_dir), "--data_dir", str(root / "data"), "--primers_per_performance", "2",
        "--primer_events", str(PRIMER), "--max_new_tokens", str(NEW), "--verbose", "0",
    ]
    return root, argv


def _run(argv):
    return recipe_checks.run_recipe(demo.main, argv)


@pytest.fixture(scope="module")
def run(inputs):
    root, argv = inputs
    out = root / "out"
    report, printed = _run([
        *argv, "--model", str(root / "music.keras"), "--model_dir", str(out), "--seeds", "3", "4",
        "--temperature", "0.9", "--training_steps", "2", "--sequence_length", "32", "--eval_examples", "2",
    ])
    return out, report, printed


def test_statistics_are_those_of_the_continuations_recomputed(inputs, run):
    root, _ = inputs
    out, report, _ = run
    files = music_data.find_midi_files(root / "midi")
    test, _ = music_data.encode_performances(files["test"], root / "encoded")
    model = demo.keras.models.load_model(root / "music.keras")
    windows = [demo.primer_windows(p, 2, PRIMER + NEW) for p in test]
    primers = np.stack([w[:PRIMER] for found in windows for w in found])
    pieces = [
        np.asarray(continue_sequence(
            model, primers, NEW, temperature=0.9, top_p=0.95, seed=seed, note_event_ids=music_data.event_id_ranges()
        ))
        for seed in (3, 4)
    ]
    rows = report["continuations"]
    assert [r["name"] for r in rows] == ["performance 1", "performance 2", "pooled"]
    for index, row in enumerate(rows[:2]):
        own = [piece for seed_pieces in pieces for piece in seed_pieces[2 * index : 2 * index + 2]]
        assert row["continuations"] == 4
        assert row["statistics"] == music_data.performance_statistics(own, starts=[PRIMER] * 4)
        assert row["held_out_data"] == music_data.performance_statistics([test[index]])
    pooled = rows[2]
    assert pooled["statistics"] == music_data.performance_statistics(
        [piece for seed_pieces in pieces for piece in seed_pieces], starts=[PRIMER] * 8
    )
    assert pooled["held_out_data"] == music_data.performance_statistics(test)
    for key, ratio in pooled["ratios"].items():
        assert ratio == pytest.approx(pooled["statistics"][key] / pooled["held_out_data"][key])
    assert report["continuations_within"] == all(1 / 1.5 <= r <= 1.5 for r in pooled["ratios"].values())
    assert report["decoding"] == {"temperature": 0.9, "top_p": 0.95, "note_rules": True}


def test_every_output_is_written_and_listed(run):
    out, report, printed = run
    midi = sorted((out / "continuations").glob("*.mid"))
    assert len(midi) == 8
    first = music_data.midi_to_events(midi[0].read_bytes())
    assert len(first) > 0
    for path in midi:
        assert path.with_suffix(".wav").stat().st_size > 44, f"no audio beside {path.name}"  # 44: the header
    assert (out / "piano_roll.png").stat().st_size > 0
    assert json.loads((out / "report.json").read_text())["continuations"] == report["continuations"]
    for path in ("continuations", "piano_roll.png", "relative_global", "absolute", "report.json"):
        assert str(out / path) in printed


def test_the_length_study_reports_each_model_at_each_length(run):
    out, report, printed = run
    study = report["length_study"]
    for attention in ("relative_global", "absolute"):
        own = json.loads((out / attention / "report.json").read_text())
        assert study["nll_per_event"][attention] == own["held_out_nll_per_event"]
        assert own["model"]["attention"] == attention
        nll = {f: own["held_out_nll_per_event"][f]["nll_per_event"] for f in ("1x", "2x")}
        assert study["change_at_2x"][attention] == pytest.approx(nll["2x"] / nll["1x"] - 1)
    assert json.loads((out / "relative_global" / "report.json").read_text())["run"]["flags"]["timing_signal"] == "off"
    assert "relative attention at 2x within 1% of 1x" in printed


def test_the_shipped_preset_continues_with_its_own_decoding(inputs):
    from keras_selfattn.models import presets

    root, argv = inputs
    report, _ = _run([*argv, "--model_dir", str(root / "shipped"), "--length_study", "off"])
    settings = presets.TRAINED_PRESETS["maestro_small"].generation
    assert report["model"] == "maestro_small"
    assert report["decoding"] == {
        "temperature": settings["temperature"], "top_p": settings["top_p"],
        "min_note_steps": settings["min_note_steps"], "note_rules": True,
    }
    assert "length_study" not in report
    # 2 primers from each of the 2 test files, by the default seeds 0 and 1
    assert report["continuations"][-1]["continuations"] == 2 * 2 * 2


def test_flags_override_the_presets_decoding():
    preset = {"temperature": 0.95, "top_p": 1.0, "min_note_steps": 5}
    parse = demo.build_parser().parse_args
    kept = demo.decoding(parse(["--model_dir", "out"]), preset, music_data)
    assert kept == {**preset, "note_event_ids": music_data.event_id_ranges()}
    changed = demo.decoding(parse(["--model_dir", "out", "--min_note_ms", "34", "--top_p", "0.9"]), preset, music_data)
    assert (changed["temperature"], changed["top_p"], changed["min_note_steps"]) == (0.95, 0.9, 3)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--model", "no_such_preset"], "--model: `preset` must be one of"),
        (["--model", "missing.keras"], "--model 'missing.keras'"),
        (["--model", "{root}/music.keras", "--primer_events", "100000"], "no held-out performance is"),
    ],
)
def test_bad_flags_name_themselves(inputs, flags, message, capsys):
    root, argv = inputs
    flags = [flag.format(root=root) for flag in flags]
    with pytest.raises(SystemExit) as raised:
        demo.harness.run_cli(demo.main, [*argv, "--model_dir", str(root / "bad"), "--length_study", "off", *flags])
    assert raised.value.code == 2
    assert message in capsys.readouterr().err
