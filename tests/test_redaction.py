"""The key never reaches a file or the terminal (issue 26): the patterns that replace
key-like tokens, on their own, and the run's key in every form an answer can carry it."""

from __future__ import annotations

import base64
import gzip
import html
import json
import urllib.parse
from typing import Any

import pytest

from conftest import GeoProject
from pytest_geo.llm.openai_client import KEY_LIKE, OpenAIChatClient
from pytest_geo.llm.redaction import SECRET_KEY_LIKE, FileRedactor


@pytest.mark.unit
@pytest.mark.parametrize(("text", "scrubbed"), [
    ("sk-ab12", "[key]"),
    ("token-xyz99", "[key]"),
    ("sk-proj-****abcd", "[key]"),
    ("KEY-abcd", "[key]"),
    ("refused sk-ab12, retry", "refused [key], retry"),
    ("sk-ab1", "sk-ab1"),  # 3 characters: too short to be a key
    ("token-xyz", "token-xyz"),
    ("risk-free monkey-business", "risk-free monkey-business"),  # not at a word start
    ("tokens-abcd", "tokens-abcd"),
])
def test_error_messages_replace_key_like_tokens_of_four_characters_or_more(text: str, scrubbed: str) -> None:
    assert KEY_LIKE.sub("[key]", text) == scrubbed


@pytest.mark.unit
@pytest.mark.parametrize(("text", "redacted"), [
    ("echo sk-abcdefghijklmnop.", "echo [key]."),  # sk- and 16 characters
    ("sk-proj-abcdefghijklmnop", "[key]"),
    ("sk-abcdefghijklmno", "sk-abcdefghijklmno"),  # 15: prose, not a key
    ("a key-ring and token-based auth", "a key-ring and token-based auth"),
])
def test_answers_replace_only_what_looks_like_a_secret_key(text: str, redacted: str) -> None:
    assert SECRET_KEY_LIKE.sub("[key]", text) == redacted


@pytest.mark.unit
def test_scrub_replaces_the_run_key_and_other_key_like_tokens_in_one_line() -> None:
    client = OpenAIChatClient(api_key="Zq9-not-shaped-like-a-key")
    line = client.scrub("HTTP 401: key Zq9-not-shaped-like-a-key refused;\nalso sk-ab12 and token-xyz99")
    assert line == "HTTP 401: key [key] refused; also [key] and [key]"


# --- the run's key, escaped ------------------------------------------------------------------

KEY = "sk-proj/Qx7_escape-test+KEY=0042"  # `/` for `\/`, `p` for `\u0070`; not shaped like SECRET_KEY_LIKE
BASIC = "Basic " + base64.b64encode(f"user:{KEY}".encode()).decode()


def forms_of(key: str) -> dict[str, str]:
    """What a file or the terminal could hold that reads as the key: the greps."""
    return {
        "raw": key,
        "JSON \\/": key.replace("/", "\\/"),
        "\\u, lower": "".join(f"\\u{ord(c):04x}" for c in key),
        "\\u, upper": "".join(f"\\u{ord(c):04X}" for c in key),
        "\\u0070": key.replace("p", "\\u0070"),
        "HTML decimal": "".join(f"&#{ord(c)};" for c in key),
        "HTML hex": "".join(f"&#x{ord(c):x};" for c in key),
        "percent": "".join(f"%{ord(c):02X}" for c in key),
        "base64": base64.b64encode(key.encode()).decode().rstrip("="),
        "Basic": BASIC,
    }


@pytest.mark.unit
@pytest.mark.parametrize("form", list(forms_of(KEY)))
def test_redact_replaces_the_key_in_each_form_and_decoding_never_gives_it_back(form: str) -> None:
    client = OpenAIChatClient(api_key=KEY)
    written = forms_of(KEY)[form]
    answer = '{"rewritten_description": "A kettle. ' + written + ' Steel."}'
    redacted = client.redact(answer)
    assert "[key]" in redacted
    decoded = json.loads(redacted)["rewritten_description"]
    assert decoded.startswith("A kettle. ") and decoded.endswith(" Steel.")
    assert KEY not in decoded and KEY not in html.unescape(decoded) and KEY not in urllib.parse.unquote(decoded)
    assert KEY.replace("p", "\\u0070") not in decoded


@pytest.mark.unit
@pytest.mark.parametrize("written", [KEY.replace("p", "\\\\u0070"), KEY.replace("p", "%2570"),
                                     KEY.replace("/", "&amp;#47;")], ids=["\\\\u0070", "%2570", "&amp;#47;"])
def test_a_key_escaped_twice_is_redacted(written: str) -> None:
    """Two layers: `\\\\u0070` in a JSON answer reads `\\u0070`, which reads `p`; `%2570`
    reads `%70`, which reads `p`."""
    answer = "A kettle. " + written + " Steel."
    assert OpenAIChatClient(api_key=KEY).redact(answer) == "A kettle. [key] Steel."


URL_SAFE_KEY = "sk-proj-??>>~~-url-safe-0042"  # its standard base64 holds `/` and `+`


@pytest.mark.unit
@pytest.mark.parametrize("encode", [base64.b64encode, base64.urlsafe_b64encode], ids=["standard", "URL-safe"])
def test_a_key_in_either_base64_alphabet_is_redacted(encode: Any) -> None:
    written = encode(URL_SAFE_KEY.encode()).decode()
    assert written.rstrip("=") in ("c2stcHJvai0/Pz4+fn4tdXJsLXNhZmUtMDA0Mg", "c2stcHJvai0_Pz4-fn4tdXJsLXNhZmUtMDA0Mg")
    redacted = OpenAIChatClient(api_key=URL_SAFE_KEY).redact(f"Authorization: Bearer {written}")
    assert redacted.startswith("Authorization: Bearer ") and "[key]" in redacted
    assert "Pz4" not in redacted and "fn4tdXJsLXNhZmUtMDA0" not in redacted


@pytest.mark.unit
@pytest.mark.parametrize(("written", "redacted"), [
    # base64 with no `=` (nothing an escape starts with): its whole groups; "Mg" is "2" alone
    ("c2stcHJvai0/Pz4+fn4tdXJsLXNhZmUtMDA0Mg", "[key]Mg"),
    ("736b2d70726f6a2d3f3f3e3e7e7e2d75726c2d736166652d30303432", "[key]"),  # hex
    ("proj-??>>~~-url-safe-0042", "proj-??>>~~-url-safe-0042"),  # the key less its `sk-`: not the key
])
def test_a_file_line_with_only_an_encoded_key_is_not_passed_as_plain(written: str, redacted: str) -> None:
    assert FileRedactor(URL_SAFE_KEY).text(f"id q1 {written} end") == f"id q1 {redacted} end"


@pytest.mark.unit
def test_redact_leaves_escaped_text_without_the_key_as_it_is() -> None:
    client = OpenAIChatClient(api_key=KEY)
    text = '{"rewritten_description": "caf\\u00e9 \\/ 100% &amp; &#8364;5 \\"quoted\\" sk-short"}'
    assert client.redact(text) == text


@pytest.mark.unit
def test_redact_finds_a_key_like_token_hidden_by_escapes() -> None:
    client = OpenAIChatClient(api_key="unrelated-key-0000")
    text = '{"rewritten_description": "use sk-\\u0070roj-abcdefghijklmnopq now"}'
    assert json.loads(client.redact(text))["rewritten_description"] == "use [key] now"


@pytest.mark.plugin
def test_no_file_the_run_writes_nor_the_terminal_holds_the_key_in_any_form(
        served_project: GeoProject, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    served_project.server.fault_for = lambda body: (
        "echo_key" if ("red kettle number 0" in str(body) and "ordered_ids" not in str(body["messages"][0]))
        or ("red kettle number 1" in str(body) and "ordered_ids" in str(body["messages"][0])) else None)
    dataset = str(served_project.dataset(3))
    # The cap raised: a rewrite carrying the key in every form is longer than one sized to the row.
    result = served_project.run(dataset, "-rA", "-v", "--geo-report", "r.json", "--geo-html", "r.html",
                                "--junitxml", "j.xml", "--geo-max-output-tokens", "4096")
    result.assert_outcomes(passed=2, failed=1)  # row 1: the ranking has the key as an extra id
    result.stdout.fnmatch_lines(["*extra ids: [[]key[]]*"])
    record = json.loads((served_project.pytester.path / "r.json").read_text())["rows"][0]
    assert "[key]" in record["rewritten_description"]  # row 0's rewrite carried the key
    inputs = {served_project.pytester.path / "rows.jsonl"}
    files = [p for p in served_project.pytester.path.rglob("*") if p.is_file() and p not in inputs
             and "prompts" not in p.parts]
    assert {p.name for p in files} >= {"r.json", "r.html", "j.xml", "r.transcripts.jsonl.gz"} and any(
        p.suffix == ".jsonl" and "geo" in p.parts for p in files)  # cache entries
    texts = {str(p): (gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()).decode(
        "utf-8", errors="replace") for p in files}
    # The transcripts hold the answers that carried the key, with the key replaced.
    assert texts[str(served_project.pytester.path / "r.transcripts.jsonl.gz")].count("[key]") >= 2
    texts.update(stdout=result.stdout.str(), stderr=result.stderr.str())
    found = [(name, form) for name, text in texts.items() for form, written in forms_of(KEY).items()
             if written in text]
    assert found == []


@pytest.mark.unit
def test_answers_from_a_batch_are_redacted_like_live_ones() -> None:
    from pytest_geo.llm.batch import BatchClient

    backend = OpenAIChatClient(api_key=KEY)
    content = '{"rewritten_description": "Steel. ' + KEY.replace("p", "\\u0070") + '"}'
    line = {"custom_id": "k1", "response": {"status_code": 200, "body": {
        "choices": [{"message": {"content": content}}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}}}
    found = BatchClient(backend, None)._parse(json.dumps(line), "batch_1")["k1"]
    assert not isinstance(found, str)
    assert json.loads(found.text)["rewritten_description"] == "Steel. [key]"
