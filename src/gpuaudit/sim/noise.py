"""Per-sample noise as a pure function: a counter-based hash (splitmix64) of (seed, GPU, second), so a point
query at a sample's timestamp gives exactly the value the bulk writer wrote."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

GOLDEN = 0x9E3779B97F4A7C15
M1 = 0xBF58476D1CE4E5B9
M2 = 0x94D049BB133111EB


def mix(x: np.ndarray) -> np.ndarray:
    import numpy as np

    x = x ^ (x >> np.uint64(30))
    x *= np.uint64(M1)
    x ^= x >> np.uint64(27)
    x *= np.uint64(M2)
    x ^= x >> np.uint64(31)
    return x


def uniforms(h: np.ndarray) -> list[np.ndarray]:
    """Four independent uniforms in [0, 1) from the four 16-bit words of a 64-bit hash."""
    import numpy as np

    out = []
    for i in range(4):
        w = (h >> np.uint64(16 * i)) & np.uint64(0xFFFF)
        out.append(w.astype(np.float32) * np.float32(1 / 65536))
    return out
