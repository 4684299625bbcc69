"""Writes the small E-GEO-format fixture beside it: 20 queries of 10 products, the
selected targets, and two judges' cached before-rankings (gpt5, claude). The layout and
shapes are the benchmark's (../shared/egeo-benchmark.md); the texts are made up here.

    python tests/egeo_fixture/make_fixture.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
THINGS = ["kettle", "backpack", "skillet", "boots", "umbrella", "thermos", "wallet", "desk lamp", "knife", "jacket"]
TRAITS = ["stainless steel", "waterproof", "cast iron", "leather", "lightweight", "insulated", "durable", "compact"]


def product(rng: random.Random, thing: str, n: int) -> dict[str, object]:
    trait = rng.choice(TRAITS)
    features = [f"{trait} {thing}", f"{rng.randint(1, 5)} year warranty"]
    description = [f"A {trait} {thing} built to last.", f"Model {n} of the range."]
    return {
        "title": f"{trait.title()} {thing.title()} {n}",
        # as the benchmark stores them: Python list literals in strings, or plain strings
        "features": repr(features) if n % 3 else "; ".join(features),
        "description": repr(description) if n % 2 else " ".join(description),
        "store": "Example Store",
    }


def main() -> None:
    rng = random.Random(2511)
    data, selected, gpt5, claude = {}, {}, {}, {}
    for q in range(20):
        query_id = str(10000 + q * 7)
        thing = THINGS[q % len(THINGS)]
        products = [product(rng, thing, n) for n in range(1, 11)]
        data[query_id] = {"query": f"what {thing} will last me a lifetime?", "products": products}
        ind = rng.randrange(10)
        selected[query_id] = {"ind": ind, "product": products[ind]}
        order = list(range(1, 11))
        rng.shuffle(order)
        gpt5[query_id] = {"results": {"ranking": list(order), "questionable_products": []}}
        rng.shuffle(order)
        # older caches hold the results as a JSON string; one query has none (dropped)
        claude[query_id] = ({"results": None} if q == 19 else
                            {"results": json.dumps({"ranking": order, "questionable_products": []})})
    files = {"test_data.json": data, "test_selected_products.json": selected,
             "initial_ranking/test_initial_ranking_gpt5.json": gpt5,
             "initial_ranking/test_initial_ranking_claude.json": claude}
    for name, content in files.items():
        (HERE / name).write_text(json.dumps(content, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
