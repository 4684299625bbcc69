"""The E-GEO styles and red-team attacks ship as rewriter prompts, run by their bare names."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from pytest_geo.engine.styles import ATTACKS, STYLES, style_path
from pytest_geo.engine.variants import load_variant
from pytest_geo.options import variant
from pytest_geo.templates import placeholders

FIXTURE = Path(__file__).parent / "egeo_fixture"
STARTING = ["authoritative", "technical", "unique", "fluent", "clickable", "diverse", "quality", "competitive",
            "trick", "format", "faq", "advertisement", "language", "minimalist", "storytelling", "simple"]
RED_TEAM = ["injection", "superlatives", "hidden", "reviews", "stuffing", "formatting", "authority", "emotional",
            "sycophancy", "fabrication", "anchoring", "jargon", "negation", "narrative"]


@pytest.mark.unit
def test_the_benchmarks_styles_and_attacks_are_all_packaged_and_query_blind() -> None:
    assert list(STYLES) == STARTING and list(ATTACKS) == RED_TEAM
    for name in STARTING + RED_TEAM:
        path = style_path(name)
        assert path is not None and path.is_file(), name
        assert placeholders(path.read_text(encoding="utf-8")) == {"title", "description"}, name


@pytest.mark.unit
def test_a_bare_style_name_is_a_variant_and_an_unknown_one_is_refused() -> None:
    name, path = variant("competitive")
    assert name == "competitive" and Path(path).name == "competitive.txt"
    assert variant("mine = x/y.txt") == ("mine", "x/y.txt")
    with pytest.raises(argparse.ArgumentTypeError, match="'fancy' is not NAME=PATH, nor the name of a packaged style"):
        variant("fancy")


@pytest.mark.unit
def test_an_attack_brings_its_own_system_prompt_and_a_style_keeps_the_runs() -> None:
    attack = load_variant("injection", Path(variant("injection")[1]))
    style = load_variant("faq", Path(variant("faq")[1]))
    assert attack.rewriter_system is not None and "manipulative style" in attack.rewriter_system
    assert style.rewriter_system is None


@pytest.mark.plugin
def test_all_sixteen_styles_run_in_one_run_on_the_same_rows(pytester: pytest.Pytester) -> None:
    shutil.copytree(FIXTURE, pytester.path / "egeo")
    args = [arg for name in STARTING for arg in ("--geo-variant", name)]
    result = pytester.runpytest("--geo-dataset", "egeo/test_data.json", "--geo-mock", "-k", "10000 or 10007",
                                "-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=32, deselected=288)
    # Paired on the same rows: every pair of styles is compared over both rows.
    result.stdout.re_match_lines([r".*(competitive [-=] simple|simple [-=] competitive).*: n=2 .*"])
