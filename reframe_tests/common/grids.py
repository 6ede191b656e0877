"""Process grids: how an application's Table I input scales with the rank count."""

import math


def factor(n: int, dims: int) -> list[int]:
    """``n`` ranks as a ``dims``-dimensional grid, as square as possible, largest first.

    AMG's Table I grids are this function: 8,192 ranks -> 32 x 16 x 16 and 32,768 -> 32 x 32 x 32.
    """
    if n < 1 or dims < 1:
        raise ValueError(f"cannot factor {n} ranks into {dims} dimensions")
    grid = [1] * dims
    for p in _prime_factors(n):
        grid[grid.index(min(grid))] *= p
    return sorted(grid, reverse=True)


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return sorted(out, reverse=True)


assert factor(8192, 3) == [32, 16, 16] and factor(32768, 3) == [32, 32, 32] and math.prod(factor(12, 4)) == 12
