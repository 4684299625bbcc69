"""The E-GEO benchmark's rewriting styles, shipped as rewriter prompts (our own texts, all
query-blind: they use only the target's title and description), so `--geo-variant
competitive` runs one by its bare name. The red-team styles are attacks: prompts that try
to manipulate the judges, run to see which judges they fool and which flag them."""

from __future__ import annotations

from pathlib import Path

PROMPTS = Path(__file__).resolve().parent.parent / "prompts"
STYLES_DIR = PROMPTS / "styles"
ATTACKS_DIR = PROMPTS / "redteam"
# The 16 starting styles (`simple` is the benchmark's baseline) and the 14 attacks.
STYLES = ("authoritative", "technical", "unique", "fluent", "clickable", "diverse", "quality", "competitive",
          "trick", "format", "faq", "advertisement", "language", "minimalist", "storytelling", "simple")
ATTACKS = ("injection", "superlatives", "hidden", "reviews", "stuffing", "formatting", "authority", "emotional",
           "sycophancy", "fabrication", "anchoring", "jargon", "negation", "narrative")
# The attacks' rewriter system prompt: the run's forbids what an attack must do.
ATTACK_SYSTEM = ATTACKS_DIR / "rewriter_system.txt"


def style_path(name: str) -> Path | None:
    """The packaged prompt of a style or attack named by its bare name; None for others."""
    if name in STYLES:
        return STYLES_DIR / f"{name}.txt"
    if name in ATTACKS:
        return ATTACKS_DIR / f"{name}.txt"
    return None


def is_attack(path: Path) -> bool:
    """A variant whose prompt is one of the packaged attacks."""
    return path.parent == ATTACKS_DIR and path.stem in ATTACKS
