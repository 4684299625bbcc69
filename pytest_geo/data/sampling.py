"""Trying a few rows first: the first N rows of a dataset (`limit`) and N rows drawn with
the run's seed (`sample`), shared by the plugin (`--geo-limit/--geo-sample`) and `egeo`
(`--limit/--sample`), so both pick the same rows of the same file.

The draw depends only on the seed and each row's name (its node-id name: the query_id,
or `line<N>`): every process that sees the same rows picks the same ones, whatever its
state, which is what xdist needs (each worker collects and deselects on its own and the
controller checks they agree). A row's rank in the draw is the sha256 of seed and name,
so adding rows to a dataset changes the sample only where a new row outranks an old one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def draw_rank(seed: int, name: str) -> str:
    return hashlib.sha256(f"{seed}\0{name}".encode()).hexdigest()


def chosen_indices(names: Sequence[str], limit: int | None, sample: int | None, seed: int,
                   shard: tuple[int, int] | None = None) -> list[int]:
    """Indices of the rows to keep, in file order: the first `limit` rows, then `sample`
    of those drawn with `seed` (None: no bound), then those in `shard`."""
    kept = list(range(len(names)))[:limit]
    if sample is not None and sample < len(kept):
        ranked = sorted(kept, key=lambda i: (draw_rank(seed, names[i]), i))
        kept = sorted(ranked[:sample])
    return [i for i in kept if in_shard(shard, names[i])]


def in_shard(shard: tuple[int, int] | None, name: str) -> bool:
    """Whether a row is in the K-th of N shards (`--geo-shard K/N`): a hash of the row's
    name, so each row's shard depends on that row alone, in pytest and egeo alike."""
    if shard is None:
        return True
    index, count = shard
    digest = hashlib.sha256(f"shard\0{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % count == index - 1
