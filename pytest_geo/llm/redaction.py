"""Finding a secret in text in every form the text can carry it to a file.

An answer is decoded before anything in it reaches a report: a key the model wrote as
`sk-\\u0070roj...` or `sk-proj\\/...` is not in the raw text, yet it is in the decoded
rewrite, its `new facts` and the ids of an error message. So the key is searched for as
written, and in the text with its escapes decoded: JSON string escapes (what our answer
parsing undoes), HTML character references and URL percent-encoding (the forms a proxy or
a page echoing a request uses), nested twice (`\\\\u0070`, `%2570`), and as
base64 at any alignment (`Authorization: Basic ...` echoed back). A match in a decoded view
is mapped back to the raw characters it came from, and those are replaced, so decoding the
result can never give the key back.

Other transformations (the key reversed, spaced out, split across values) are not
searched for: no reader of a report would decode them into a key either."""

from __future__ import annotations

import base64
import bisect
import functools
import html
import itertools
import re
from collections.abc import Callable, Iterable

REPLACEMENT = "[key]"
ESCAPE = re.compile(
    r"\\u[0-9A-Fa-f]{4}|\\[\\/\"bfnrt]"  # JSON
    r"|&#[0-9]{1,7};|&#[xX][0-9A-Fa-f]{1,6};|&[A-Za-z][A-Za-z0-9]{1,31};"  # HTML
    r"|%[0-9A-Fa-f]{2}"  # URL
)
ESCAPE_SPLIT = re.compile(f"({ESCAPE.pattern})")
JSON_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
MAX_LAYERS = 2
MIN_BASE64_SECRET = 8  # shorter, a base64 fragment of it would match unrelated text

Span = tuple[int, int]
Finder = Callable[[str], Iterable[Span]]


@functools.lru_cache(maxsize=4096)
def _decode(escape: str) -> str:
    if escape.startswith("\\u"):
        return chr(int(escape[2:], 16))
    if escape.startswith("\\"):
        return JSON_ESCAPES.get(escape[1], escape[1])
    if escape.startswith("%"):
        return chr(int(escape[1:], 16))
    return html.unescape(escape)  # an unknown name stays as written


class DecodedView:
    """`text` with every escape decoded, and the way back from its offsets to the text's.

    Pieces alternate: literal text (even indices), then one escape (odd), as `re.split`
    with a group gives them, so the work is done in C; the offsets, running sums of their
    lengths, are computed only for a text where something was found."""

    def __init__(self, text: str) -> None:
        self.raw = ESCAPE_SPLIT.split(text)
        self.pieces = self.raw[:]
        self.pieces[1::2] = map(_decode, self.raw[1::2])
        self.decoded = "".join(self.pieces)

    @functools.cached_property
    def raw_starts(self) -> list[int]:
        return [0, *itertools.accumulate(map(len, self.raw))]

    @functools.cached_property
    def decoded_starts(self) -> list[int]:
        return [0, *itertools.accumulate(map(len, self.pieces))]

    def raw_span(self, start: int, end: int) -> Span:
        """The raw characters that decode to `decoded[start:end]` (whole escapes)."""
        return self._raw(start, first=True), self._raw(end - 1, first=False)

    def _raw(self, offset: int, first: bool) -> int:
        piece = bisect.bisect_right(self.decoded_starts, offset) - 1
        if piece % 2:  # an escape: all of it
            return self.raw_starts[piece] if first else self.raw_starts[piece + 1]
        at = self.raw_starts[piece] + offset - self.decoded_starts[piece]
        return at if first else at + 1


@functools.lru_cache(maxsize=8)  # a run has one key: computed once, not per answer
def base64_forms(secret: str) -> tuple[str, ...]:
    """The base64 characters that encode only `secret`'s bytes, for each of the three
    alignments it can have inside a longer encoded string, standard and URL-safe."""
    data = secret.encode("utf-8")
    if len(data) < MIN_BASE64_SECRET:
        return ()
    forms = []
    for shift in range(3):
        encoded = base64.b64encode(bytes(shift) + data).decode("ascii")
        core = encoded[-(-8 * shift // 6):8 * (shift + len(data)) // 6]
        forms += [core, core.translate(str.maketrans("+/", "-_"))]
    return tuple(dict.fromkeys(forms))


def spans_in(text: str, finders: list[Finder], layers: int = MAX_LAYERS) -> list[list[Span]]:
    """For each finder, where it matches `text` or any decoding of it, as spans of `text`."""
    found = [list(find(text)) for find in finders]
    if layers and ESCAPE.search(text):
        view = DecodedView(text)
        for spans, deeper in zip(found, spans_in(view.decoded, finders, layers - 1), strict=True):
            spans += [view.raw_span(start, end) for start, end in deeper]
    return found


def _merged(spans: list[Span]) -> list[Span]:
    """The spans sorted, overlapping and touching ones joined."""
    merged: list[Span] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def replace_spans(text: str, spans: list[Span]) -> str:
    """`text` with each span (overlapping ones merged) replaced by REPLACEMENT."""
    pieces, position = [], 0
    for start, end in _merged(spans):
        pieces += [text[position:start], REPLACEMENT]
        position = end
    return "".join(pieces) + text[position:]


def _finding(forms: list[str]) -> Finder:
    def find(text: str) -> Iterable[Span]:
        for form in forms:
            start = text.find(form)
            while start != -1:
                yield start, start + len(form)
                start = text.find(form, start + 1)

    return find


def redact(text: str, secret: str, pattern: re.Pattern[str]) -> str:
    """`text` with `secret` (as written and in base64) and `pattern`'s matches replaced,
    in every form listed above. The secret goes first: a match of the pattern that
    overlaps it is left out (`sk-abc.` is `[key].`, not `[key]` for a pattern taking dots)."""
    by_secret = _finding([secret, *base64_forms(secret)] if secret else [])
    secrets, patterns = spans_in(text, [by_secret, lambda t: (m.span() for m in pattern.finditer(t))])
    covered = _merged(secrets)
    starts = [start for start, _ in covered]

    def overlaps_secret(span: Span) -> bool:
        at = bisect.bisect_left(starts, span[1]) - 1  # the last secret starting before the span ends
        return at >= 0 and covered[at][1] > span[0]

    spans = covered + [span for span in patterns if not overlaps_secret(span)]
    return replace_spans(text, spans) if spans else text
