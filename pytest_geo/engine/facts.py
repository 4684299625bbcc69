"""No new facts: the numeric and checkable claims a rewrite makes that its original lacks.

A rewrite may reorder, rephrase and reformat; it may not add a number, a quantity, a
price, a percentage, a model number, a standard (`ISO 9001`) or a certification word
(`CE`, `certified`, `best-selling`) that the original text does not state.

Formats are normalised before comparing: `1.5 kg` == `1.5kg` == `1,5 kg`, `16 GB` ==
`16gb`, `1,000` == `1000`, `$199` == `199 USD` == `$199.00`, `30 x 20 cm` == `30cm x 20cm`,
`WH-1000XM5` == `wh1000xm5`, `2-year` == `2 years`. A quantity in another unit of the
same kind counts as stated when it is within 3% of the original (`980 g` -> `0.98 kg`
or `2.2 lb`). A bare number in the rewrite counts as stated when the original holds that
value anywhere (`16` for `16GB`).

Not caught: facts without digits or a listed term (`waterproof`, `premium leather`),
number words other than two..twelve, changed meaning around a kept number (`up to 10 h`
-> `at least 10 h`), and facts moved between products.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

__all__ = ["Fact", "extract_facts", "new_facts"]

# kind, factor to the kind's base unit
UNITS: dict[str, tuple[str, float]] = {
    "mg": ("mass", 0.001), "g": ("mass", 1), "kg": ("mass", 1000), "lb": ("mass", 453.59237),
    "oz": ("mass", 28.349523125),
    "mm": ("length", 1), "cm": ("length", 10), "m": ("length", 1000), "km": ("length", 1e6),
    "inch": ("length", 25.4), "ft": ("length", 304.8),
    "ml": ("volume", 1), "cl": ("volume", 10), "l": ("volume", 1000), "gal": ("volume", 3785.411784),
    "kb": ("data", 1e3), "mb": ("data", 1e6), "gb": ("data", 1e9), "tb": ("data", 1e12),
    "mbps": ("rate", 1e6), "gbps": ("rate", 1e9),
    "hz": ("frequency", 1), "khz": ("frequency", 1e3), "mhz": ("frequency", 1e6), "ghz": ("frequency", 1e9),
    "w": ("power", 1), "kw": ("power", 1e3), "wh": ("energy", 1), "kwh": ("energy", 1e3),
    "mah": ("charge", 1), "v": ("voltage", 1),
    "s": ("time", 1), "min": ("time", 60), "h": ("time", 3600), "day": ("time", 86400),
    "week": ("time", 604800), "month": ("months", 1), "year": ("months", 12),
    "db": ("db", 1), "nits": ("nits", 1), "rpm": ("rpm", 1), "mp": ("mp", 1), "fps": ("fps", 1),
    "mph": ("speed", 1.609344), "km/h": ("speed", 1), "°c": ("celsius", 1), "°f": ("fahrenheit", 1),
    "k": ("k", 1), "p": ("p", 1), "core": ("core", 1), "star": ("star", 1),
}
ALIASES = {
    "lbs": "lb", "pound": "lb", "pounds": "lb", "ounce": "oz", "ounces": "oz",
    "inches": "inch", '"': "inch", "in.": "inch", "feet": "ft", "foot": "ft",
    "liter": "l", "liters": "l", "litre": "l", "litres": "l",
    "sec": "s", "secs": "s", "second": "s", "seconds": "s", "mins": "min", "minute": "min", "minutes": "min",
    "hr": "h", "hrs": "h", "hour": "h", "hours": "h", "days": "day", "weeks": "week",
    "months": "month", "yr": "year", "yrs": "year", "years": "year", "watt": "w", "watts": "w",
    "volt": "v", "volts": "v", "kmh": "km/h", "megapixel": "mp", "megapixels": "mp", "cores": "core",
    "stars": "star", "℃": "°c", "℉": "°f",
}
CURRENCY_SIGNS = {"$": "USD", "us$": "USD", "€": "EUR", "£": "GBP", "¥": "JPY"}
CURRENCY_WORDS = {"usd": "USD", "eur": "EUR", "gbp": "GBP", "dollars": "USD", "euros": "EUR", "euro": "EUR"}
PERCENT_WORDS = {"%", "percent", "per cent"}
NUMBER_WORDS = {w: i for i, w in enumerate(
    "two three four five six seven eight nine ten eleven twelve".split(), start=2)}
# Certification marks and marketing claims that need no digit to be a new fact.
CLAIM_MARKS = ("CE", "UL", "FCC", "RoHS", "ETL", "FDA", "NSF", "TÜV", "TUV", "GS", "CSA")
CLAIM_WORDS = ("certified", "certification", "approved", "award-winning", "award", "patented",
               "clinically proven", "energy star", "best-selling", "bestseller", "best seller",
               "number one", "#1", "bpa-free", "guaranteed")

_NUM = r"(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?(?:,\d{1,2}(?![\d,]))?|\.\d+)"
_UNIT_NAMES = sorted({*UNITS, *ALIASES} - {'"'}, key=len, reverse=True)
_UNIT = r"(?:" + "|".join(re.escape(u) for u in _UNIT_NAMES) + r")(?![\w°])|\"|%|per\ cent\b|percent\b"
_CUR_WORD = "|".join(CURRENCY_WORDS)
_SEP = r"\s?(?:x|×|by|-|–|—|to)\s?"
PATTERN = re.compile(
    rf"""
    (?P<price>(?:US\$|[$€£¥])\s?{_NUM}|\b(?:USD|EUR|GBP)\s?{_NUM}|\b{_NUM}\s?(?:{_CUR_WORD})\b|\b{_NUM}\s?[€£])
    |(?P<standard>\b(?:ISO|IEC|EN|IEEE|ANSI|ASTM|IP)\s?\d+(?:[-:.]\d+)*)
    |(?P<series>\b{_NUM}(?:{_SEP}{_NUM}){{1,2}}\s?-?\s?(?:{_UNIT}))
    |(?P<quantity>\b{_NUM}\s?-?\s?(?:{_UNIT}))
    |(?P<ordinal>\b\d+(?:st|nd|rd|th)\b)
    |(?P<model>\b(?=[\w.-]*[A-Za-z])(?=[\w.-]*\d)[A-Za-z\d]+(?:[-.][A-Za-z\d]+)*\b)
    |(?P<number>(?<![\w.]){_NUM}(?!\w))
    |(?P<word>\b(?:{"|".join(NUMBER_WORDS)})\b)
    |(?P<mark>\b(?:{"|".join(CLAIM_MARKS)})\b)
    """,
    re.VERBOSE | re.IGNORECASE,
)
CLAIM_PATTERN = re.compile(r"(?<!\w)(?:" + "|".join(re.escape(w) for w in CLAIM_WORDS) + r")(?!\w)", re.IGNORECASE)
_NUM_RE = re.compile(_NUM)


@dataclass(frozen=True)
class Fact:
    """One claim: `kind` is number, quantity, percent, price, model, standard or claim;
    `unit` is a canonical unit, currency code, or the normalised code/term."""

    kind: str
    value: Decimal | None
    unit: str
    text: str


def _number(text: str, decimal_comma: bool = True) -> Decimal:
    if re.fullmatch(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?", text):
        text = text.replace(",", "")
    elif "," in text:
        text = text.replace(",", ".") if decimal_comma else text.split(",")[0]
    try:
        return Decimal(text).normalize()
    except InvalidOperation:  # pragma: no cover - the pattern only yields numerals
        return Decimal(0)


def _unit(raw: str) -> str:
    unit = " ".join(raw.lower().split())
    if unit in PERCENT_WORDS:
        return "%"
    return ALIASES.get(unit, unit)


def _split_unit(text: str) -> tuple[list[str], str]:
    numbers = _NUM_RE.findall(text)
    tail = text[text.rfind(numbers[-1]) + len(numbers[-1]):]
    return numbers, tail.strip(" -")


def _facts_of(match: re.Match[str]) -> list[Fact]:
    kind = match.lastgroup or ""
    text = " ".join(match.group().split())
    if kind == "price":
        (number,), rest = _NUM_RE.findall(text), _NUM_RE.sub(" ", text).strip().lower()
        currency = CURRENCY_SIGNS.get(rest) or CURRENCY_WORDS.get(rest) or rest.upper()
        return [Fact("price", _number(number), currency, text)]
    if kind in ("series", "quantity"):
        numbers, raw_unit = _split_unit(text)
        unit = _unit(raw_unit)
        fact_kind = "percent" if unit == "%" else "quantity"
        return [Fact(fact_kind, _number(n), unit, text) for n in numbers]
    if kind == "ordinal":
        return [Fact("number", Decimal(re.match(r"\d+", text).group()), "", text)]  # type: ignore[union-attr]
    if kind == "model":
        return [Fact("model", None, re.sub(r"[-\s]", "", text).upper(), text)]
    if kind == "standard":
        return [Fact("standard", None, re.sub(r"[-\s]", "", text).upper(), text)]
    if kind == "number":
        if re.fullmatch(r"\d+,\d{1,2}", text):  # "1,2" with no unit: a list, not a decimal
            return [Fact("number", _number(part), "", part) for part in text.split(",")]
        return [Fact("number", _number(text), "", text)]
    if kind == "word":
        return [Fact("number", Decimal(NUMBER_WORDS[text.lower()]), "", text)]
    if kind == "mark":
        if text.isupper() or text in CLAIM_MARKS:  # "CE", not the word "ce"
            return [Fact("claim", None, text.upper(), text)]
        return []
    return []


def extract_facts(text: str) -> list[Fact]:
    """Every checkable fact in `text`, in order of appearance."""
    facts = [fact for match in PATTERN.finditer(text) for fact in _facts_of(match)]
    facts += [Fact("claim", None, m.group().lower().replace("-", " "), m.group()) for m in CLAIM_PATTERN.finditer(text)]
    return facts


def _same_quantity(fact: Fact, stated: Fact) -> bool:
    if fact.unit == stated.unit:
        return fact.value == stated.value
    if fact.unit not in UNITS or stated.unit not in UNITS:
        return False
    (kind, factor), (stated_kind, stated_factor) = UNITS[fact.unit], UNITS[stated.unit]
    if kind != stated_kind or fact.value is None or stated.value is None:
        return False
    mine, theirs = float(fact.value) * factor, float(stated.value) * stated_factor
    return abs(mine - theirs) <= 0.03 * abs(theirs)


def _supported(fact: Fact, original: list[Fact]) -> bool:
    if fact.kind == "number":
        if any(o.value == fact.value for o in original if o.value is not None):
            return True
        digits = str(fact.value)
        return any(re.search(rf"(?<!\d){re.escape(digits)}(?!\d)", o.unit) for o in original if o.kind == "model")
    if fact.kind == "quantity":
        return any(o.kind == "quantity" and _same_quantity(fact, o) for o in original)
    if fact.kind in ("percent", "price"):
        return any(o.kind == fact.kind and o.unit == fact.unit and o.value == fact.value for o in original)
    if fact.kind == "model":
        return any(o.kind == "model" and fact.unit in o.unit for o in original)
    return any(o.kind == fact.kind and o.unit == fact.unit for o in original)


def new_facts(original: str, rewrite: str) -> list[str]:
    """The facts in `rewrite` that `original` does not state, as written in the rewrite
    (each once, in order). Pass the title with the original: the rewriter sees it too."""
    stated = extract_facts(original)
    found: list[str] = []
    seen: set[tuple[str, Decimal | None, str]] = set()
    for fact in extract_facts(rewrite):
        key = (fact.kind, fact.value, fact.unit)
        if key not in seen and not _supported(fact, stated):
            seen.add(key)
            found.append(fact.text)
    return found
