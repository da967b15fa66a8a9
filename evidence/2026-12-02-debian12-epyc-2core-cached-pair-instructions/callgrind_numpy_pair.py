"""np.empty(4096, np.uint8) + del per iteration, for callgrind (summary.md: N = 0 and 100000)."""

import sys

import numpy as np

empty, u8 = np.empty, np.uint8


def pair(k: int) -> None:
    for _ in range(k):
        a = empty(4096, u8)
        del a


pair(1000)
pair(int(sys.argv[1]))
