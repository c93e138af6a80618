"""The shipped model's card, recomputed: the note statistics of its test
continuations for one seed (the card's held-out NLL is recomputed in
tests/models/test_presets.py)."""

import re
from pathlib import Path

import pytest

from keras_selfattn.models.presets import TRAINED_PRESETS

ROOT = Path(__file__).resolve().parents[1]
CARD = ROOT / TRAINED_PRESETS["maestro_small"].card
SECTION = "## Continuations of the test performances"
SEED_ROW = re.compile(r"^\| seed (\d) \((\d+)\) \| ([\d.]+) s / ([\d.]+)% / (\d+) \|", re.MULTILINE)


def card_seed_rows():
    """`{seed: (continuations, median note s, % over 2 s, p95 polyphony)}` of
    the shipped decoding's per-seed table (not the superseded decoding's)."""
    text = CARD.read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n### ")]
    return {
        int(seed): (int(count), float(median), float(share), int(p95))
        for seed, count, median, share, p95 in SEED_ROW.findall(section)
    }


def test_the_card_gives_each_seed_alone():
    assert sorted(card_seed_rows()) == [0, 1, 2]


@pytest.mark.slow
@pytest.mark.backends("tensorflow", reason="the embedded data's encoding (note-seq) and long generation")
def test_the_cards_continuations_of_seed_0_reproduce(tmp_path):
    """22 primers of 256 events from each test performance, continued by 512
    events with the shipped decoding and seed 0, as `recipes/demo.py` does;
    their pooled median note, share of notes over 2 s and 95th-percentile
    polyphony against the card's seed-0 row."""
    from keras_selfattn.data import music
    from keras_selfattn.models import MusicTransformer
    from recipes import demo

    count, median, share, p95 = card_seed_rows()[0]
    args = demo.build_parser().parse_args(
        ["--model_dir", str(tmp_path), "--length_study", "off", "--primers_per_performance", "22", "--seeds", "0"]
    )
    model = MusicTransformer.from_preset("maestro_small")
    settings = demo.decoding(args, model.generation_settings, music)
    window = args.primer_events + args.max_new_tokens
    windows = [w for p in music.load_performances(progress=False)["test"] for w in demo.primer_windows(p, 22, window)]
    assert len(windows) == count
    (pieces,) = demo.continue_windows(args, model, settings, windows)
    measured = music.performance_statistics(pieces, starts=[args.primer_events] * len(pieces))
    assert measured["median_note_seconds"] == pytest.approx(median, abs=0.005)
    assert 100 * measured["share_of_notes_over_2s"] == pytest.approx(share, abs=0.05)
    assert measured["p95_polyphony"] == p95
