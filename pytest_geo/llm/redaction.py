"""Finding a secret in text in every form the text can carry it to a file.

An answer is decoded before anything in it reaches a report: a key the model wrote as
`sk-\\u0070roj...` or `sk-proj\\/...` is not in the raw text, yet it is in the decoded
rewrite, its `new facts` and the ids of an error message. So the key is searched for as
written and in the text with these decoded, up to three layers deep (`%252570` is `p`
percent-encoded three times), in any mix:

- JSON and JavaScript string escapes: `\\u0070`, `\\x70`, `\\/`, `\\n` (what our answer
  parsing undoes, or a log viewer showing a repr);
- HTML character references, numeric ones with or without their `;` (`&#112`, `&#x70`,
  `&amp;`): a browser reads both;
- URL percent-encoding (`%70`);
- quoted-printable (`=70`, and `=` line breaks), decoded on its own, since `=00` is also
  ordinary text;
- fullwidth forms of ASCII characters (`ｓｋ－`), which NFKC folding and many fonts turn
  back into the key;
- invisible characters between the key's characters (zero-width spaces and joiners, the
  word joiner, the byte order mark, soft hyphens): a browser shows the key, and copying
  it gives the key's characters with invisible ones between;

and, encoded as a whole, at any alignment inside a longer encoded string: base64
(standard and URL-safe: `Authorization: Basic ...` echoed back), base32 (upper and lower
case), base85 (Python's and Ascii85), and hex (upper and lower case). A match in a
decoded view is mapped back to the raw characters it came from, and those are replaced,
so decoding the result can never give the key back.

Other transformations (the key reversed, spaced out with visible characters, split
across values, encrypted) are not searched for: no reader of a report would decode
them into a key either."""

from __future__ import annotations

import base64
import bisect
import functools
import html
import itertools
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar, cast

REPLACEMENT = "[key]"
ESCAPE = re.compile(
    r"\\(?:u[0-9A-Fa-f]{4}|x[0-9A-Fa-f]{2}|[\\/\"bfnrt])"  # JSON, JavaScript
    r"|&#(?:[0-9]{1,7}|[xX][0-9A-Fa-f]{1,6});?|&[A-Za-z][A-Za-z0-9]{1,31};"  # HTML
    r"|%[0-9A-Fa-f]{2}"  # URL
)
WIDE = "[\uFF01-\uFF5E\u00AD\u180E\u200B-\u200F\u2060-\u2064\uFEFF]"  # fullwidth ASCII, invisible
QUOTED_PRINTABLE = re.compile(r"=[0-9A-Fa-f]{2}|=\r?\n")
JSON_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
FULLWIDTH_OFFSET = 0xFEE0  # U+FF01..U+FF5E are U+0021..U+007E shifted by this
MAX_LAYERS = 3
KEY_ENV = "OPENAI_API_KEY"
# A secret key's shape, in answers and files alike: `sk-` and 16 or more characters, long
# enough that no prose or id in a dataset has it (`key-ring` and `token-based` are words).
SECRET_KEY_LIKE = re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}")
MAY_ESCAPE = re.compile(r"[\\&%=]")  # in ASCII text, what an escape starts with
MIN_ENCODED_SECRET = 8  # shorter, an encoded fragment of it would match unrelated text

V = TypeVar("V")
Span = tuple[int, int]
Finder = Callable[[str], Iterable[Span]]


@functools.lru_cache(maxsize=4096)
def _decode(escape: str) -> str:
    if escape.startswith(("\\u", "\\x")):
        return chr(int(escape[2:], 16))
    if escape.startswith("\\"):
        return JSON_ESCAPES.get(escape[1], escape[1])
    if escape.startswith("%"):
        return chr(int(escape[1:], 16))
    if escape.startswith("&"):
        return html.unescape(escape)  # an unknown name stays as written
    if "\uFF01" <= escape <= "\uFF5E":
        return chr(ord(escape) - FULLWIDTH_OFFSET)
    return ""  # an invisible character


@functools.lru_cache(maxsize=512)
def _decode_quoted_printable(escape: str) -> str:
    return chr(int(escape[1:], 16)) if escape[1] not in "\r\n" else ""


@dataclass(frozen=True)
class Decoding:
    """Escapes as one group (re.split then alternates text and escape), and how each
    decodes; `wide` also takes non-ASCII characters, and is used only for a text that
    has some (most answers are ASCII, and the narrower pattern splits them faster)."""

    split: re.Pattern[str]
    decode: Callable[[str], str]
    wide: re.Pattern[str] | None = None

    def splitter(self, text: str) -> re.Pattern[str]:
        return self.split if self.wide is None or text.isascii() else self.wide


DECODINGS = (Decoding(re.compile(f"({ESCAPE.pattern})"), _decode, re.compile(f"({ESCAPE.pattern}|{WIDE})")),
             Decoding(re.compile(f"({QUOTED_PRINTABLE.pattern})"), _decode_quoted_printable))


class DecodedView:
    """`text` with every escape decoded, and the way back from its offsets to the text's.

    Pieces alternate: literal text (even indices), then one escape (odd), as `re.split`
    with a group gives them, so the work is done in C; the offsets, running sums of their
    lengths, are computed only for a text where something was found."""

    def __init__(self, text: str, decoding: Decoding) -> None:
        self.raw = decoding.splitter(text).split(text)
        self.pieces = self.raw[:]
        self.pieces[1::2] = map(decoding.decode, self.raw[1::2])
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
def encoded_forms(secret: str) -> tuple[str, ...]:
    """The characters that encode only `secret`'s bytes in base64 (standard and URL-safe),
    base32, base85 and hex, for each alignment it can have inside a longer encoded string.
    Each encoding turns groups of bytes into groups of characters (3 into 4, 5 into 8, 4
    into 5, 1 into 2) independently of the others: the groups made of the secret's bytes
    alone read the same wherever it sits, one set per offset of its first whole group."""
    data = secret.encode("utf-8")
    if len(data) < MIN_ENCODED_SECRET:
        return ()
    forms = [data.hex(), data.hex().upper()]
    for group, encode in ((3, base64.b64encode), (5, base64.b32encode), (4, base64.b85encode),
                          (4, base64.a85encode)):
        for offset in range(group):
            whole = data[offset:]
            core = encode(whole[:len(whole) // group * group]).decode("ascii")
            forms.append(core)
            if encode is base64.b64encode:
                forms.append(core.translate(str.maketrans("+/", "-_")))
            if encode is base64.b32encode:
                forms.append(core.lower())
    return tuple(dict.fromkeys(form for form in forms if form))


def spans_in(text: str, finders: list[Finder], layers: int = MAX_LAYERS) -> list[list[Span]]:
    """For each finder, where it matches `text` or any decoding of it, as spans of `text`."""
    found = [list(find(text)) for find in finders]
    if not layers:
        return found
    for decoding in DECODINGS:
        if not decoding.splitter(text).search(text):
            continue
        view = DecodedView(text, decoding)
        if view.decoded == text:  # only unknown HTML names: nothing to decode
            continue
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
    """`text` with `secret` (as written and encoded) and `pattern`'s matches replaced,
    in every form listed above. The secret goes first: a match of the pattern that
    overlaps it is left out (`sk-abc.` is `[key].`, not `[key]` for a pattern taking dots)."""
    by_secret = _finding([secret, *encoded_forms(secret)] if secret else [])
    secrets, patterns = spans_in(text, [by_secret, lambda t: (m.span() for m in pattern.finditer(t))])
    covered = _merged(secrets)
    starts = [start for start, _ in covered]

    def overlaps_secret(span: Span) -> bool:
        at = bisect.bisect_left(starts, span[1]) - 1  # the last secret starting before the span ends
        return at >= 0 and covered[at][1] > span[0]

    spans = covered + [span for span in patterns if not overlaps_secret(span)]
    return replace_spans(text, spans) if spans else text


class FileRedactor:
    """The run's key, and anything shaped like a secret key, out of everything bound for a
    file (reports, transcripts): prompts carry dataset text and prompt files, which may
    hold a key as well as an answer may. Most strings there are plain (ids, numbers,
    names): one scan for anything that could start a match passes them as they are (the
    key's forms searched as one pattern, in one pass)."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        forms = (secret, *encoded_forms(secret)) if secret else ()
        self.forms = re.compile("|".join(map(re.escape, forms))) if forms else None

    def text(self, text: str) -> str:
        if (text.isascii() and not MAY_ESCAPE.search(text) and "sk-" not in text
                and not (self.forms and self.forms.search(text))):
            return text
        return redact(text, self.secret, SECRET_KEY_LIKE)

    def value(self, value: V) -> V:
        """`value` with every string in it redacted (dicts and lists rebuilt, keys too)."""
        return cast(V, self._value(value))

    def _value(self, value: object) -> object:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self._value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._value(item) for item in value]
        return value


def run_redactor() -> FileRedactor:
    """The redactor for the run's key (OPENAI_API_KEY, where the client reads it)."""
    return FileRedactor(os.environ.get(KEY_ENV, "").strip())
