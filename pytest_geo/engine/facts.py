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

Linear time on any text: every repetition in the patterns is bounded (a number has at
most 24 digits before its point, a model number at most 6 parts), so a match attempt at
one position reads a bounded stretch of text, and the original's facts are indexed
(sets, sorted lists) so each fact of the rewrite is checked in constant or logarithmic
time. Fast on any text too (`bench/bench_facts.py`): the pattern runs only near digits
and currency signs, far from letters a bare-number pattern stands in for it, each
written form is read once per text, and in ASCII text the scans for number words, marks
and claim words run only when a substring search finds one.

Not caught: facts without digits or a listed term (`waterproof`, `premium leather`),
number words other than two..twelve, changed meaning around a kept number (`up to 10 h`
-> `at least 10 h`), and facts moved between products.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import cached_property
from itertools import chain, repeat
from typing import NamedTuple

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

# Bounded repetitions only (see the module docstring): a longer digit run is no fact.
_NUM = r"(?:\d{1,3}(?:,\d{3}){1,7}(?:\.\d{1,12})?|\d{1,24}(?:\.\d{1,12})?(?:,\d{1,2}(?![\d,]))?|\.\d{1,12})"


def _trie(words: list[str]) -> str:
    """An alternation of `words` as a prefix tree, longer words first at every branch:
    `re` tries a flat alternation's branches one by one, which after every number in a
    text cost a hundred failed attempts."""
    if words == [""]:
        return ""
    heads: dict[str, list[str]] = {}
    for word in words:
        if word:
            heads.setdefault(word[0], []).append(word[1:])
    branches = [re.escape(head) + _trie(rests) for head, rests in sorted(heads.items())]
    if "" in words:
        branches.append("")  # the word may end here; tried after the longer ones
    return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"


_UNIT = _trie(sorted({*UNITS, *ALIASES} - {'"'})) + r"(?![\w°])|\"|%|per\ cent\b|percent\b"
_CUR_WORD = "|".join(CURRENCY_WORDS)
_SEP = r"\s?(?:x|×|by|-|–|—|to)\s?"
_UNIT_START = "[" + re.escape("".join(sorted({w[0] for w in {*UNITS, *ALIASES}} | {"%", "p"}))) + "]"
_CUR_START = "[" + re.escape("".join(sorted({w[0] for w in CURRENCY_WORDS}))) + "]"
# A letter and a digit within six parts.
_MODEL = (r"(?=(?:\d{0,24}+[-.]){0,5}+\d{0,24}+[A-Za-z])(?=(?:[A-Za-z]{0,24}+[-.]){0,5}+[A-Za-z]{0,24}+\d)"
          r"[A-Za-z\d]{1,24}(?:[-.][A-Za-z\d]{1,24}){0,5}\b")
# One alternation, tried at every position of a window, read as the alternatives in
# order (price, standard, quantity, ordinal, model, number, number word, mark) but laid out
# for `re`'s speed on number-dense text, where it tries a match at almost every character:
# - a lookahead at the head of each branch sends a position to the alternatives that can
#   start with its character;
# - a price or quantity after a number shares one reading of the number (a shorter reading
#   is followed by a digit, a point or a comma, which no tail can follow) and is named by
#   an empty group at its end;
# - a lookahead before the units and currency words rejects a number followed by none
#   before `re` tries them one by one;
# - repetitions no shorter reading could rescue are possessive (`++`, `{0,2}+`).
# tests/test_facts.py checks it against the plain alternation on random and adversarial text.
PATTERN = re.compile(
    rf"""
    (?=[\d.])(?:
      \b{_NUM}(?:
         (?=\s?[{_CUR_START[1:-1]}€£])\s?(?:(?:{_CUR_WORD})\b|[€£])(?P<price>)
        |(?:{_SEP}{_NUM}){{0,2}}+\s?-?\s?(?={_UNIT_START})(?:{_UNIT})(?P<quantity>)
      )
     |(?P<ordinal>\b\d{{1,24}}(?:st|nd|rd|th)\b)
     |(?P<model>\b{_MODEL})
     |(?P<number>(?<![\w.]){_NUM}(?!\w))
    )
    |(?P<price_sign>(?:US\$|[$€£¥])\s?{_NUM})
    |\b(?=[a-z])(?:
      (?P<price_code>(?:USD|EUR|GBP)\s?{_NUM})
     |(?P<standard>(?:ISO|IEC|EN|IEEE|ANSI|ASTM|IP)\s?\d{{1,12}}(?:[-:.]\d{{1,12}}){{0,4}})
     |(?P<model_word>{_MODEL})
     |(?P<word>{_trie(sorted(NUMBER_WORDS))}\b)
     |(?P<mark>{_trie(sorted(CLAIM_MARKS))}\b)
    )
    """,
    re.VERBOSE | re.IGNORECASE,
)
_KIND = {name: name.split("_")[0] for name in PATTERN.groupindex}
# Every match but a bare number holds one of these within its span, and no match is
# longer than MAX_MATCH (three 44-character numbers, two separators and a unit), so more
# than MAX_MATCH characters from any of them the bare-number alternative alone finds what
# PATTERN finds, and much faster on number-dense text.
_RICH = r"[^\W\d_]|[$€£¥%\"°℃℉]"
MAX_MATCH = 160
LONGEST_NUMBER = 45  # _NUM's longest match and the character its lookahead reads
NUMBER = re.compile(rf"(?<![\w.]){_NUM}(?!\w)")
_PLAIN_RUN = re.compile(rf"(?:(?!{_RICH}).){{{5 * MAX_MATCH},}}", re.DOTALL)
# The last character (group 1) that no number covers and at which no number's reading
# changes if the text ends there: anything but a word character, a point or a comma, or
# a point before what is no digit. (A comma is no such place: `1,5,` is not `1,5`.)
_LAST_CUT = re.compile(r"(?s:.*)([^\w.,]|\.(?=[^\d]))")
# The lookahead lets `re` pass over most characters with one test, not a try of each word.
CLAIM_PATTERN = re.compile(
    "(?=[" + re.escape("".join({c for word in CLAIM_WORDS for c in (word[0].lower(), word[0].upper())})) + r"])"
    + r"(?<!\w)" + _trie(sorted(word.lower() for word in CLAIM_WORDS)) + r"(?!\w)",
    re.IGNORECASE,
)
_NUM_RE = re.compile(_NUM)
MAX_MODEL_PARTS = 8  # letter and digit runs: WH-1000XM5 has 4 (WH, 1000, XM, 5)
_MODEL_PART = re.compile(r"[A-Z]+|\d+|\.")
_COMMA_LIST = re.compile(r"\d+,\d{1,2}")
_DIGITS = re.compile(r"\d+")
_THOUSANDS = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?")


def _model_parts(unit: str) -> list[str]:
    return _MODEL_PART.findall(unit.upper())


class Fact(NamedTuple):
    """One claim: `kind` is number, quantity, percent, price, model, standard or claim;
    `unit` is a canonical unit, currency code, or the normalised code/term. (A tuple: a
    megabyte of text holds hundreds of thousands of them.)"""

    kind: str
    value: Decimal | None
    unit: str
    text: str


def _number(text: str, decimal_comma: bool = True) -> Decimal:
    if _THOUSANDS.fullmatch(text):
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


def _facts_of(kind: str, written: str) -> list[Fact]:
    """The facts of one match of PATTERN (`kind` is the group that matched)."""
    read = _READERS.get(kind)
    return [] if read is None else read(written)


# numbers, model numbers and words hold no whitespace; prices, quantities and standards may


def _number_facts(written: str) -> list[Fact]:
    if written.isdigit():  # the most common number, read without a pattern
        return [Fact("number", Decimal(written), "", written)]
    if _COMMA_LIST.fullmatch(written):  # "1,2" with no unit: a list, not a decimal
        return [Fact("number", _number(part), "", part) for part in written.split(",")]
    return [Fact("number", _number(written), "", written)]


def _model_facts(written: str) -> list[Fact]:
    unit = written.replace("-", "").upper()
    if len(unit) > MAX_MODEL_PARTS and len(_model_parts(unit)) > MAX_MODEL_PARTS:  # a hash, serial or slug
        return []
    return [Fact("model", None, unit, written)]


def _ordinal_facts(written: str) -> list[Fact]:
    return [Fact("number", Decimal(_DIGITS.findall(written)[0]), "", written)]


def _word_facts(written: str) -> list[Fact]:
    value = NUMBER_WORDS.get(written.lower())  # `re` matches case-insensitively beyond ASCII: `sİx` is no number word
    return [] if value is None else [Fact("number", Decimal(value), "", written)]


def _claim_facts(written: str) -> list[Fact]:
    return [Fact("claim", None, written.lower().replace("-", " "), written)]


def _mark_facts(written: str) -> list[Fact]:
    if written.isupper() or written in CLAIM_MARKS:  # "CE", not the word "ce"
        return [Fact("claim", None, written.upper(), written)]
    return []


def _price_facts(written: str) -> list[Fact]:
    text = " ".join(written.split())
    (number,), rest = _NUM_RE.findall(text), _NUM_RE.sub(" ", text).strip().lower()
    currency = CURRENCY_SIGNS.get(rest) or CURRENCY_WORDS.get(rest) or rest.upper()
    return [Fact("price", _number(number), currency, text)]


def _quantity_facts(written: str) -> list[Fact]:
    """One number, or a series (`30 x 20 cm`)."""
    text = " ".join(written.split())
    numbers, raw_unit = _split_unit(text)
    unit = _unit(raw_unit)
    fact_kind = "percent" if unit == "%" else "quantity"
    return [Fact(fact_kind, _number(n), unit, text) for n in numbers]


def _standard_facts(written: str) -> list[Fact]:
    text = " ".join(written.split())
    return [Fact("standard", None, re.sub(r"[-\s]", "", text).upper(), text)]


_READERS: dict[str, Callable[[str], list[Fact]]] = {
    "number": _number_facts, "model": _model_facts, "ordinal": _ordinal_facts, "word": _word_facts,
    "claim": _claim_facts, "mark": _mark_facts, "price": _price_facts, "quantity": _quantity_facts,
    "standard": _standard_facts,
}


# The tokens (between whitespace) around each token with a digit or a currency sign, two
# before and three after, merged where they overlap: the longest reach of a match from
# such a character (`USD 199`, `ISO 9001`; `45 per cent`, `30 x 20 x 10 cm`). Found from
# each first anchor in a few passes of `re` (the two tokens before it on the reversed
# text): a Python loop over tokens cost more than the matching on number-dense text, and
# a pattern tried at every token start cost more than the check on short prose.
_ANCHOR = re.compile(r"[\d$€£¥]")
_TOKENS_BEFORE = re.compile(r"\S*+(?:\s++\S++){0,2}")  # on the reversed text
_TOKENS_AFTER = re.compile(r"\S*+(?:(?:\s++\S++){0,4}\s++\S*?[\d$€£¥]\S*+)*(?:\s++\S++){0,3}")


def _windows(text: str) -> list[tuple[int, int]]:
    """Stretches of `text` that can hold a match of PATTERN with a digit or a currency
    sign. Every such match lies inside one, and PATTERN runs over them as over the whole
    text: each starts after and ends before whitespace. Text far from any digit, most
    prose, is never tried against PATTERN."""
    windows: list[tuple[int, int]] = []
    reversed_text = ""
    anchor = _ANCHOR.search(text)
    while anchor is not None:
        reversed_text = reversed_text or text[::-1]
        before = _TOKENS_BEFORE.match(reversed_text, len(text) - 1 - anchor.start())
        after = _TOKENS_AFTER.match(text, anchor.start())
        assert before is not None and after is not None  # both can match the empty string
        windows.append((len(text) - before.end(), after.end()))
        anchor = _ANCHOR.search(text, after.end())
    return windows


def _window_matches(text: str, start: int, end: int) -> list[tuple[str, str]]:
    """(kind, text) of PATTERN's matches in one window, as its scan of the whole text finds
    them. Inside a long run without letters or signs (`1-1-1-...`) the scan is handed to
    NUMBER and back, each time at a position the whole-text scan tries too, so from there
    both agree."""
    found: list[tuple[str, str]] = []
    at = start
    if end - start < 5 * MAX_MATCH:  # too short to hold a plain run: PATTERN alone
        return _named(PATTERN.finditer(text, start, end))
    for run in _PLAIN_RUN.finditer(text, start, end):
        inside, outside = run.start() + MAX_MATCH, run.end() - MAX_MATCH  # only numbers start here
        head = list(PATTERN.finditer(text, at, inside + 2 * MAX_MATCH))
        number_from = _handover(head, inside, inside + MAX_MATCH)
        found += _named(m for m in head if m.start() < number_from)
        # the numbers as strings (no match objects: a megabyte holds half a million), up
        # to a character no number covers, else up to a hand-over found from the positions
        # of the last ones
        cut = _LAST_CUT.match(text, max(number_from, outside - 2 * LONGEST_NUMBER), outside)
        if cut:
            at = cut.start(1)
            numbers = NUMBER.findall(text, number_from, at)
        else:
            numbers = NUMBER.findall(text, number_from, outside)
            last = list(deque(NUMBER.finditer(text, number_from, outside), maxlen=2 * LONGEST_NUMBER))
            at = _handover(last, outside - 2 * LONGEST_NUMBER, outside - LONGEST_NUMBER)
            del numbers[len(numbers) - sum(m.start() >= at for m in last):]
        found += zip(repeat("number", len(numbers)), numbers, strict=True)
    found += _named(PATTERN.finditer(text, at, end))
    return found


def _named(matches: Iterable[re.Match[str]]) -> list[tuple[str, str]]:
    """(kind, text) of each of PATTERN's matches."""
    return [(_KIND[m.lastgroup or ""], m[0]) for m in matches]


def _handover(matches: list[re.Match[str]], zone_start: int, zone_end: int) -> int:
    """A position the whole-text scan tries, from a scan that agrees with it on matches
    starting in [zone_start, zone_end), a zone longer than any number: the end of the last
    match starting there, else the zone's last position (no match covers it)."""
    for match in reversed(matches):
        if match.start() < zone_start:
            break
        if match.start() < zone_end:
            return match.end()
    return zone_end - 1


# Number words and certification marks as whole words outside the windows: `\w` is
# `str.isalnum()` or `_`, as `\b` reads it; the words in any ASCII case (never `ſix`),
# the marks as listed or in capitals (`CE`, not `ce`). One scan finds both: each match is
# a whole run of word characters, so a word and a mark never overlap.
_WORD_STARTS = {c for w in NUMBER_WORDS for c in (w[0], w[0].upper())}
_MARK_FORMS = sorted({form for mark in CLAIM_MARKS for form in (mark, mark.upper())})
_WORD_OR_MARK = re.compile("(?=[" + "".join(sorted(_WORD_STARTS | {f[0] for f in _MARK_FORMS})) + r"])(?<!\w)"
                           + r"(?:(?P<word>(?ai:" + _trie(sorted(NUMBER_WORDS)) + r"))|(?P<mark>"
                           + _trie(_MARK_FORMS) + r"))(?!\w)")


# In ASCII text `re` folds case as ASCII does, so a number word or claim word it finds is
# a substring of the lowered text, and a mark one of the text: a few substring searches
# (a pass of memchr each) tell most prose holds none, for less than a scan of `re` that
# tries every position. Beyond ASCII `re` folds more (`ſ` is `s`, `ı` is `i`): the scans run.
_CLAIM_WORDS_LOWER = tuple(word.lower() for word in CLAIM_WORDS)


def _may_hold_words(text: str, lowered: str | None) -> bool:
    """False when `text` surely holds no number word and no mark (`lowered`: the text
    lowered when it is ASCII, else None)."""
    if lowered is None:
        return True
    for word in NUMBER_WORDS:
        if word in lowered:
            return True
    for form in _MARK_FORMS:
        if form in text:
            return True
    return False


def _may_hold_claims(lowered: str | None) -> bool:
    """False when the text (`lowered` as for _may_hold_words) surely holds no claim word."""
    if lowered is None:
        return True
    for word in _CLAIM_WORDS_LOWER:
        if word in lowered:
            return True
    return False


def _words(text: str, windows: list[tuple[int, int]], lowered: str | None = None) -> list[tuple[int, str, str]]:
    """Number words and certification marks outside the windows (inside, PATTERN finds
    them): the only matches PATTERN can make without a digit."""
    found: list[tuple[int, str, str]] = []
    if not _may_hold_words(text, lowered):
        return found
    window_starts = [start for start, _ in windows]
    for match in _WORD_OR_MARK.finditer(text):
        at = match.start()
        inside = bisect_left(window_starts, at + 1) - 1
        if not (inside >= 0 and at < windows[inside][1]):
            found.append((at, match.lastgroup or "", match[0]))
    return found


def _matches(text: str, lowered: str | None = None) -> list[tuple[str, str]]:
    """(PATTERN group, text) of every match, in order, as PATTERN.finditer over the whole
    text would give them, in time linear in the text (`lowered`: see _may_hold_words)."""
    windows = _windows(text)
    words = _words(text, windows, lowered)  # outside the windows
    if not words:  # the windows' matches, already in order
        return [match for start, end in windows for match in _window_matches(text, start, end)]
    blocks = [(start, _window_matches(text, start, end)) for start, end in windows]
    blocks += [(at, [(kind, written)]) for at, kind, written in words]
    blocks.sort(key=lambda block: block[0])
    return list(chain.from_iterable(block for _, block in blocks))


def _written_forms(text: str) -> list[tuple[str, str]]:
    """(kind, text) of every match, in order, then of every claim word."""
    lowered = text.lower() if text.isascii() else None
    forms = _matches(text, lowered)
    if _may_hold_claims(lowered):
        forms += [("claim", m[0]) for m in CLAIM_PATTERN.finditer(text)]
    return forms


def _forms(text: str) -> dict[tuple[str, str], None]:
    """Each written form once, in order of first appearance: repeated text (a number a
    thousand times) costs a set lookup, not a parse."""
    return dict.fromkeys(_written_forms(text))


def _facts(forms: Iterable[tuple[str, str]]) -> list[Fact]:
    return [fact for kind, written in forms for fact in _facts_of(kind, written)]


def extract_facts(text: str) -> list[Fact]:
    """Every checkable fact in `text`, in order of appearance (claim words last)."""
    return _facts(_written_forms(text))


TOLERANCE = 0.03  # another unit of the same kind: within 3% of the stated quantity


def _digit_strings(unit: str) -> set[str]:
    """The numbers a model number states: `V2.1` states 2, 1 and 2.1 (never 21)."""
    found: set[str] = set()
    for run in re.findall(r"\d+(?:\.\d+)*", unit):
        groups = run.split(".")
        found.update(groups)
        found.update(f"{a}.{b}" for a, b in zip(groups, groups[1:], strict=False))
    return found


def _plain(value: Decimal) -> str:
    """`1000`, not `1E+3` (what normalize() gives)."""
    return format(value, "f")


@dataclass
class _Stated:
    """The original's facts, indexed so that checking one fact of the rewrite costs
    constant or logarithmic time, whatever the number of facts on either side. The model
    numbers' index is built on first use: most rewrites keep every model number as written."""

    values: set[Decimal] = field(default_factory=set)
    exact: set[tuple[str, Decimal | None, str]] = field(default_factory=set)  # (kind, value, unit)
    labels: set[tuple[str, str]] = field(default_factory=set)  # (kind, unit) for models, standards, claims
    models: dict[str, None] = field(default_factory=dict)  # each model number once
    by_unit: dict[str, list[float]] = field(default_factory=dict)  # unit -> sorted amounts in base units

    @classmethod
    def of(cls, facts: list[Fact]) -> _Stated:
        stated = cls()
        amounts: dict[str, set[float]] = {}
        for fact in facts:
            stated.exact.add((fact.kind, fact.value, fact.unit))
            stated.labels.add((fact.kind, fact.unit))
            if fact.value is not None:
                stated.values.add(fact.value)
            if fact.kind == "quantity" and fact.value is not None and fact.unit in UNITS:
                amounts.setdefault(fact.unit, set()).add(float(fact.value) * UNITS[fact.unit][1])
            if fact.kind == "model":
                stated.models[fact.unit] = None
        stated.by_unit = {unit: sorted(values) for unit, values in amounts.items()}
        return stated

    @cached_property
    def model_numbers(self) -> set[str]:
        """The numbers the model numbers state (`V2.1`: 2, 1 and 2.1)."""
        return {number for unit in self.models for number in _digit_strings(unit)}

    @cached_property
    def model_runs(self) -> set[str]:
        """Runs of whole parts of each model number (`XM5`, `1000XM` of `WH-1000XM5`)."""
        runs: set[str] = set()
        for unit in self.models:
            parts = _model_parts(unit)
            for start, first in enumerate(parts):
                run = first
                runs.add(run)
                for part in parts[start + 1:]:
                    run += part
                    runs.add(run)
        return runs

    def supports(self, fact: Fact) -> bool:
        if fact.kind == "number":
            return fact.value in self.values or (fact.value is not None and _plain(fact.value) in self.model_numbers)
        if fact.kind == "quantity":
            return ("quantity", fact.value, fact.unit) in self.exact or self._converted(fact)
        if fact.kind in ("percent", "price"):
            return (fact.kind, fact.value, fact.unit) in self.exact
        if fact.kind == "model":
            # a shorter form of a stated model number (`XM5` of `WH-1000XM5`), in whole
            # parts only: `X100` is not `X1000`
            return ("model", fact.unit) in self.labels or "".join(_model_parts(fact.unit)) in self.model_runs
        return (fact.kind, fact.unit) in self.labels

    def _converted(self, fact: Fact) -> bool:
        """The same amount stated in another unit of the same kind, within TOLERANCE."""
        if fact.unit not in UNITS or fact.value is None:
            return False
        kind, factor = UNITS[fact.unit]
        mine = float(fact.value) * factor
        low = mine / (1 + TOLERANCE)
        for unit, amounts in self.by_unit.items():
            if unit == fact.unit or UNITS[unit][0] != kind:
                continue
            index = bisect_left(amounts, low * (1 - 1e-12))
            for theirs in amounts[index:index + 2]:  # the range's edges, then inside it
                if abs(mine - theirs) <= TOLERANCE * abs(theirs):
                    return True
        return False


def new_facts(original: str, rewrite: str) -> list[str]:
    """The facts in `rewrite` that `original` does not state, as written in the rewrite
    (each once, in order). Pass the title with the original: the rewriter sees it too."""
    stated_forms = _forms(original)
    stated: _Stated | None = None  # the original's facts, read on first need: a rewrite
    # that keeps every fact as written (the forms it shares are skipped) needs none of them
    found: list[str] = []
    seen: set[tuple[str, Decimal | None, str]] = set()
    for kind, written in _forms(rewrite):
        if (kind, written) in stated_forms:
            continue  # written as in the original: its facts are the original's own
        for fact in _facts_of(kind, written):
            key = (fact.kind, fact.value, fact.unit)
            if key not in seen:
                seen.add(key)  # each distinct fact is checked once
                if stated is None:
                    stated = _Stated.of(_facts(stated_forms))
                if not stated.supports(fact):
                    found.append(fact.text)
    return found
