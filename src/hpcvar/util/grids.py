"""Process grids: ``n`` ranks as a ``d``-dimensional grid, as square as possible.

Used by the ReFrame suite (how an application's Table I input scales with the rank count) and by
the interference model (the halo pattern's rank grid).
"""

from __future__ import annotations


def factor(n: int, dims: int) -> list[int]:
    """``n`` ranks as a ``dims``-dimensional grid, as square as possible, largest first (as
    ``MPI_Dims_create``).

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
