"""Plain reference implementations the tests compare against."""

import math

import numpy as np


def plain_timing_signal(positions, channels, min_timescale=1.0, max_timescale=1.0e4):
    """tensor2tensor's layout, one number at a time."""
    half = channels // 2
    increment = math.log(max_timescale / min_timescale) / max(half - 1, 1)
    rows = []
    for position in positions:
        row = [0.0] * channels
        for k in range(half):
            angle = position * min_timescale * math.exp(-k * increment)
            row[k] = math.sin(angle)
            row[half + k] = math.cos(angle)
        rows.append(row)
    return np.array(rows)
