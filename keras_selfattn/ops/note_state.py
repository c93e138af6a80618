"""Which pitches sound after each performance event, and for how long.

A performance is a stream of note-on, note-off, time-shift and velocity
events. Whether a pitch still sounds, and since how many events, is a
function of the whole past; attention can only find it by searching for the
pitch's last note-on and note-off. These functions compute it directly, for
the generation rules and as an input of the Music Transformer.
"""

import math

from keras import ops

# Ages in events are read as log1p(age) / log1p(512): 1 for a note held 512 events.
_AGE_SCALE = math.log1p(512)
# Ages in time steps are read as log1p(steps) / log1p(1000): 1 for a note held 1,000 steps.
_TIME_AGE_SCALE = math.log1p(1000)


def note_id_ranges(note_event_ids, vocabulary_size):
    """`(note_on_id, note_off_id, num_pitches)` from `{"note_on": (first,
    last), "note_off": (first, last), ...}` (inclusive ids, as
    `keras_selfattn.data.music.event_id_ranges()` gives them; other keys are
    ignored).

    Raises:
        ValueError: when either range is missing, empty, of another size
            than the other, overlapping it, or outside `[0, vocabulary_size)`.
    """
    try:
        (on_first, on_last), (off_first, off_last) = (
            tuple(int(i) for i in note_event_ids[name]) for name in ("note_on", "note_off")
        )
    except (KeyError, TypeError, ValueError):
        on_first = None
    ranges_fit = on_first is not None and (
        0 <= on_first <= on_last < vocabulary_size
        and 0 <= off_first <= off_last < vocabulary_size
        and on_last - on_first == off_last - off_first
        and (on_last < off_first or off_last < on_first)
    )
    if not ranges_fit:
        raise ValueError(
            "`note_event_ids` must map 'note_on' and 'note_off' to (first id, last id) ranges "
            f"of one size, apart, inside the model's vocabulary [0, {vocabulary_size}) "
            "(as keras_selfattn.data.music.event_id_ranges() gives them). "
            f"Received: note_event_ids={note_event_ids!r}"
        )
    return on_first, off_first, on_last - on_first + 1


def time_shift_id_range(note_event_ids, vocabulary_size):
    """`(time_shift_id, num_time_shifts)` from the `"time_shift": (first,
    last)` range of `note_event_ids` (id `first + k` moves time on by `k +
    1` steps).

    Raises:
        ValueError: when the range is missing, empty or outside `[0,
            vocabulary_size)`.
    """
    try:
        first, last = (int(i) for i in note_event_ids["time_shift"])
    except (KeyError, TypeError, ValueError):
        first, last = -1, -2
    if not 0 <= first <= last < vocabulary_size:
        raise ValueError(
            "A timed note state needs `note_event_ids` to map 'time_shift' to its (first id, "
            f"last id) range inside the model's vocabulary [0, {vocabulary_size}) (as "
            f"keras_selfattn.data.music.event_id_ranges() gives it). Received: note_event_ids={note_event_ids!r}"
        )
    return first, last - first + 1


def elapsed_steps(tokens, time_shift_id, num_time_shifts):
    """int32 `[batch, length]`: the time steps that `tokens [batch,
    length]`'s time shifts add up to, up to and including each token."""
    steps = ops.cast(tokens, "int32") - (time_shift_id - 1)
    return ops.cumsum(ops.where((steps >= 1) & (steps <= num_time_shifts), steps, 0), axis=1)


def pitch_hits(tokens, note_on_id, note_off_id, num_pitches):
    """bool `[..., num_pitches]` each: which pitch each token turns on, off."""
    pitches = ops.arange(num_pitches, dtype="int32")
    # expand_dims, not `[..., None]`: exportable to LiteRT builtins (see masks.padding_attention_mask).
    tokens = ops.expand_dims(ops.cast(tokens, "int32"), -1)
    return ops.equal(tokens, note_on_id + pitches), ops.equal(tokens, note_off_id + pitches)


def last_note_events(tokens, note_on_id, note_off_id, num_pitches, start=0, length=None):
    """int32 `[batch, length, num_pitches]` each: the position of every
    pitch's latest note-on, and of its latest note-off, at or before each of
    the `length` positions from `start` (default: all) of `tokens [batch,
    total]`; -1 where there is none yet. `start` may be a scalar tensor,
    and for one position (`length=1`) also one start a row, int `[batch]`."""
    on, off = pitch_hits(tokens, note_on_id, note_off_id, num_pitches)
    positions = ops.arange(ops.shape(tokens)[1], dtype="int32")[None, :, None]
    never = ops.full_like(positions, -1)
    if isinstance(length, int) and length == 1:
        # One cached step: a single reduction over the earlier positions.
        row_start = ops.reshape(ops.cast(start, "int32"), (-1, 1, 1))
        return tuple(
            ops.max(ops.where(hits & (positions <= row_start), positions, never), axis=1, keepdims=True)
            for hits in (on, off)
        )
    size = (ops.shape(tokens)[0], ops.shape(tokens)[1] if length is None else length, num_pitches)
    return tuple(
        ops.slice(running_max(ops.where(hits, positions, never)), (0, start, 0), size) for hits in (on, off)
    )


def running_max(values):
    """The running maximum of `values [batch, length, ...]` along axis 1.

    Hillis and Steele's scan: log2(length) steps, each taking the maximum
    with the values `shift` positions earlier. It shifts by slicing, which
    ONNX and LiteRT builtins run (LiteRT has no Roll). Unlike
    `keras.ops.associative_scan` on TensorFlow, XLA compiles it.
    """
    length = ops.shape(values)[1]

    def step(shift, values):
        # The first `shift` positions have nothing that far back: each is compared with itself.
        earlier = ops.concatenate([values[:, :shift], values[:, : length - shift]], axis=1)
        return shift * 2, ops.maximum(values, earlier)

    if isinstance(length, int):
        shift = 1
        while shift < length:
            shift, values = step(shift, values)
        return values
    return ops.while_loop(lambda shift, _: shift < length, step, (1, values))[1]


def note_state(tokens, note_on_id, note_off_id, num_pitches, start=0, length=None, time_shifts=None):
    """float32 `[batch, length, 2 * num_pitches]`: what sounds after each of
    the `length` tokens from position `start` (default: all of them), given
    every token of `tokens [batch, total]` before it.

    The first `num_pitches` features are 1 for each sounding pitch (one
    whose last note-on comes after its last note-off), 0 otherwise; the
    next `num_pitches` are each sounding pitch's age in events (0 right
    after its note-on) as `log1p(age) / log1p(512)`, and 0 for a silent one.
    `start` may be a scalar tensor.

    With `time_shifts=(time_shift_id, num_time_shifts)` (`time_shift_id_range`)
    the state is timed: `num_pitches` more features give each sounding
    pitch's age in time steps (those of the time shifts since its note-on)
    as `log1p(steps) / log1p(1000)`, 0 for a silent one: `[batch, length,
    3 * num_pitches]`.

    Example:

    >>> import numpy as np
    >>> tokens = np.array([[5, 6, 9, 7]])  # on 0, on 1, another event, off 0
    >>> state = np.asarray(note_state(tokens, note_on_id=5, note_off_id=7, num_pitches=2))
    >>> state[0, :, :2].tolist()
    [[1.0, 0.0], [1.0, 1.0], [1.0, 1.0], [0.0, 1.0]]
    >>> np.round(state[0, -1, 2:] * np.log1p(512), 4).tolist() == [0.0, round(np.log1p(2), 4)]
    True
    """
    last_on, last_off = last_note_events(tokens, note_on_id, note_off_id, num_pitches, start, length)
    if length is None:
        length = ops.shape(tokens)[1]
    state = _state_features(last_on, last_off, _positions(length, start))
    if time_shifts is None:
        return state
    on, _ = pitch_hits(tokens, note_on_id, note_off_id, num_pitches)
    clock = ops.expand_dims(elapsed_steps(tokens, *time_shifts), -1)
    struck_at = running_max(ops.where(on, clock, ops.full_like(clock, -1)))
    clock, struck_at = (
        ops.slice(x, (0, start, 0), (ops.shape(tokens)[0], length, ops.shape(x)[2])) for x in (clock, struck_at)
    )
    return ops.concatenate([state, _time_ages(last_on > last_off, clock - struck_at)], axis=-1)


def initial_last_note_events(batch_size, num_pitches, timed=False):
    """int32 `[batch, 2, num_pitches]` of -1: no pitch has had a note-on
    (row 0) or a note-off (row 1) yet; the start of `note_state_after`.
    `timed`: `[batch, 4, num_pitches]`, with the time step of each pitch's
    latest note-on (row 2, -1) and the time so far (row 3, 0)."""
    rows = (-1, -1, -1, 0) if timed else (-1, -1)
    return ops.stack([ops.full((batch_size, num_pitches), row, dtype="int32") for row in rows], axis=1)


def note_state_after(last_events, tokens, note_on_id, note_off_id, num_pitches, start, time_shifts=None):
    """`(state, last_events)`: `note_state` of `tokens [batch, length]` at
    positions `start ...`, given the position of every pitch's latest
    note-on and note-off before them (`last_events`, int32 `[batch, 2,
    num_pitches]`, -1 for none), and those positions after them. With
    `time_shifts` the state is timed and `last_events` also holds the time
    step of every pitch's latest note-on and the time so far
    (`initial_last_note_events(..., timed=True)`).

    A loop of these equals `note_state` over the whole sequence, with a
    state of `2 * num_pitches` positions (4 rows timed) instead of the
    tokens so far: a cached step reads no earlier token.
    """
    on, off = pitch_hits(tokens, note_on_id, note_off_id, num_pitches)
    positions = _positions(ops.shape(tokens)[1], start)
    last_on, last_off = (
        _latest(hits, positions, last_events[:, row : row + 1]) for row, hits in enumerate((on, off))
    )
    state = _state_features(last_on, last_off, positions)
    rows = [last_on, last_off]
    if time_shifts is not None:
        clock = last_events[:, 3:4] + ops.expand_dims(elapsed_steps(tokens, *time_shifts), -1)
        struck_at = _latest(on, clock, last_events[:, 2:3])
        state = ops.concatenate([state, _time_ages(last_on > last_off, clock - struck_at)], axis=-1)
        rows += [struck_at, clock]
    # Each row's value before the tokens comes first, so that no tokens (a
    # one-token primer's empty prefill) leave `last_events` as they were.
    ends = [ops.concatenate([last_events[:, index : index + 1], row], axis=1)[:, -1] for index, row in enumerate(rows)]
    return state, ops.stack(ends, axis=1)


def _latest(hits, values, before):
    """Each pitch's value (`values`, nondecreasing along axis 1) at its
    latest hit so far, or `before` (`[batch, 1, pitches]`) where none."""
    return ops.maximum(running_max(ops.where(hits, values, ops.full_like(values, -1))), before)


def _positions(length, start):
    """int32 `[1, length, 1]`: the positions `start ... start + length - 1`."""
    return ops.arange(length, dtype="int32")[None, :, None] + ops.cast(start, "int32")


def _state_features(last_on, last_off, positions):
    """The `note_state` features from each pitch's latest note-on and note-off."""
    sounding = last_on > last_off
    age = ops.cast(positions - last_on, "float32")
    scaled_age = ops.where(sounding, _log1p_of_count(age) / _AGE_SCALE, ops.zeros_like(age))
    return ops.concatenate([ops.cast(sounding, "float32"), scaled_age], axis=-1)


def _time_ages(sounding, steps):
    """Each sounding pitch's age in time steps, scaled as `note_state` says."""
    steps = ops.cast(steps, "float32")
    return ops.where(sounding, _log1p_of_count(steps) / _TIME_AGE_SCALE, ops.zeros_like(steps))


def _log1p_of_count(count):
    """`log1p` of whole numbers >= 0 (float32, below 2**24) as `log(1 + count)`,
    the sum being exact: tf2onnx has no Log1p. A TensorFlow graph runs it as
    Log1p again (Grappler); run eagerly it may differ from log1p by an ulp."""
    return ops.log(count + 1.0)
