"""The run's key in the encodings the first redaction missed (issue 38): hex, base32,
base85, quoted-printable, three layers of percent-encoding, numeric HTML references
without their `;`, fullwidth characters and invisible characters between the key's
characters. Each is replaced, and decoding the result as its reader would (a browser, a
log viewer, a decoder of the encoding) never gives the key back."""

from __future__ import annotations

import base64
import html
import quopri
import re
import urllib.parse
from collections.abc import Callable

import pytest

from pytest_geo.llm.redaction import redact

pytestmark = pytest.mark.unit

KEY = "sk-proj-Qx7escapeTestKEY0042abcd"
NOTHING = re.compile(r"(?!)")
BEFORE, AFTER = "A kettle. ", " Steel."


def _unquote(text: str, times: int) -> str:
    for _ in range(times):
        text = urllib.parse.unquote(text)
    return text


def _fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) for c in text)


def _folded(text: str) -> str:
    """What NFKC folding, or a font, makes of fullwidth and invisible characters."""
    import unicodedata

    return re.sub("[\u00ad\u200b-\u200f\u2060\ufeff]", "", unicodedata.normalize("NFKC", text))


def _b85_inside(encode: Callable[[bytes], bytes], prefix: bytes) -> str:
    return encode(prefix + KEY.encode() + b"!").decode()


FORMS: dict[str, tuple[str, Callable[[str], str]]] = {
    "hex": (KEY.encode().hex(), lambda t: t),
    "HEX": (KEY.encode().hex().upper(), lambda t: t),
    "\\x escapes": ("".join(f"\\x{b:02x}" for b in KEY.encode()), lambda t: t.encode().decode("unicode_escape")),
    "base32": (base64.b32encode(KEY.encode()).decode(), lambda t: t),
    "base32 inside, offset 3": (base64.b32encode(b"abc" + KEY.encode()).decode(), lambda t: t),
    "base32 lower": (base64.b32encode(b"x:" + KEY.encode()).decode().lower(), lambda t: t),
    "base85": (_b85_inside(base64.b85encode, b"u"), lambda t: t),
    "ascii85": (_b85_inside(base64.a85encode, b"us"), lambda t: t),
    "ascii85 offset 3": ("<~" + _b85_inside(base64.a85encode, b"usr") + "~>", lambda t: t),
    "quoted-printable": ("".join(f"={b:02X}" for b in KEY.encode()),
                         lambda t: quopri.decodestring(t.encode()).decode()),
    "quoted-printable soft break": (KEY[:12] + "=\n" + KEY[12:], lambda t: quopri.decodestring(t.encode()).decode()),
    "percent, three layers": ("".join(f"%2525{b:02X}" for b in KEY.encode()), lambda t: _unquote(t, 3)),
    "HTML decimal without ;": ("".join(f"&#{ord(c)}" for c in KEY), html.unescape),
    "HTML hex without ;": ("".join(f"&#x{ord(c):x}" for c in KEY), html.unescape),
    "fullwidth": (_fullwidth(KEY), _folded),
    "fullwidth, partly": (KEY[:5] + _fullwidth(KEY[5:20]) + KEY[20:], _folded),
    "zero-width spaces": ("\u200b".join(KEY), _folded),
    "zero-width joiners and BOMs": ("".join(c + ("\u200d" if i % 2 else "\ufeff") for i, c in enumerate(KEY)), _folded),
    "soft hyphens": ("\u00ad".join(KEY), _folded),
    "zero-width, then percent": ("".join(f"%{b:02X}\u200c" for b in KEY.encode()), lambda t: _folded(_unquote(t, 1))),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_the_key_is_replaced_in_each_encoding_and_decoding_never_gives_it_back(form: str) -> None:
    written, decode = FORMS[form]
    redacted = redact(BEFORE + written + AFTER, KEY, NOTHING)
    assert redacted.startswith(BEFORE) and redacted.endswith(AFTER) and "[key]" in redacted
    assert written not in redacted
    assert KEY not in decode(redacted)


@pytest.mark.parametrize("text", [
    "a=0042 b=3D c=\nd, 100% sure, &#8364;5 and &#169 2026",
    "ｆｕｌｌｗｉｄｔｈ ｔｅｘｔ and a zero\u200bwidth space",
    "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08, base32 MFRGGZDFMZTWQ2LK",
])
def test_text_without_the_key_is_left_as_it_is(text: str) -> None:
    assert redact(text, KEY, NOTHING) == text
