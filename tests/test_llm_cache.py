"""The response cache: keys, entries appended as whole lines, torn and corrupt lines and
files, other processes' entries, errors not cached."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import GeoProject, rewrite_cache_entries
from pytest_geo.llm.base import ChatRequest, ChatResponse, ModelError
from pytest_geo.llm.cache import CachedClient, ResponseCache, cache_key
from pytest_geo.llm.healing import HealingClient
from pytest_geo.llm.usage import UsageClient

MESSAGES = ({"role": "user", "content": "hello"},)


class Counting:
    def __init__(self, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail

    async def complete(self, request: ChatRequest) -> ChatResponse:
        self.calls += 1
        if self.fail:
            raise ModelError("ranker model call failed: HTTP 500")
        return ChatResponse(text=f"answer {self.calls}", prompt_tokens=3, completion_tokens=2)

    async def aclose(self) -> None:
        pass


def request(**changes: object) -> ChatRequest:
    fields: dict[str, object] = {"role": "ranker", "model": "m", "messages": MESSAGES, "temperature": 0.0}
    fields.update(changes)
    return ChatRequest(**fields)  # type: ignore[arg-type]


@pytest.mark.unit
def test_key_covers_server_model_messages_and_sampling_but_not_context() -> None:
    base = cache_key("http://a/v1", request())
    assert cache_key("http://a/v1", request(context={"query": "other"}, role="rewriter")) == base
    assert cache_key("http://b/v1", request()) != base
    assert cache_key("http://a/v1", request(model="n")) != base
    assert cache_key("http://a/v1", request(temperature=0.5)) != base
    assert cache_key("http://a/v1", request(messages=({"role": "user", "content": "hello!"},))) != base


@pytest.mark.unit
def test_keys_are_the_ones_earlier_versions_wrote() -> None:
    """The key is hashed around the body's bytes as posted (encoded once); it is still the
    SHA-256 of `{"base_url":...,"body":...,"format":2}`, so answers cached before still hit."""
    messages = ({"role": "system", "content": "Rank the candidates."},
                {"role": "user", "content": 'th\u00e9 kettle \u2014 "red" \u2713 \\ </script>'})
    assert cache_key("http://127.0.0.1:8000/v1", ChatRequest("ranker", "gpt-4o-mini", messages)) == \
        "cdd3ea1c931bcba0c0bbeeb59ea8130a85d4b89b13da416b95a4f6bf483a9992"
    schema = {"title": "ranking", "type": "object", "required": ["ordered_ids"], "additionalProperties": False,
              "properties": {"ordered_ids": {"type": "array", "items": {"type": "string"}}}}
    shaped = HealingClient(Counting()).shape(ChatRequest("rewriter", "gpt-5-mini", messages, max_output_tokens=800,
                                                         response_schema=schema, reasoning_effort="low"))
    assert cache_key("https://api.openai.com/v1", shaped) == \
        "b2711a5dde363866626260f673333dc0ca010b588ada0fe523a78dde909e52f2"


@pytest.mark.unit
def test_hit_returns_cached_answer_without_calling(tmp_path: Path) -> None:
    inner = Counting()
    client = CachedClient(inner, tmp_path, "http://a/v1")
    first = asyncio.run(client.complete(request()))
    second = asyncio.run(client.complete(request()))
    assert inner.calls == 1 and not first.cached and second.cached
    assert (second.text, second.prompt_tokens, second.completion_tokens) == ("answer 1", 3, 2)


@pytest.mark.unit
def test_errors_are_not_cached(tmp_path: Path) -> None:
    inner = Counting(fail=True)
    client = CachedClient(inner, tmp_path, "http://a/v1")
    for _ in range(2):
        with pytest.raises(ModelError):
            asyncio.run(client.complete(request()))
    assert inner.calls == 2 and ResponseCache(tmp_path).keys() == set()


@pytest.mark.unit
def test_torn_temp_file_and_corrupt_entry_are_misses(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    key = cache_key("http://a/v1", request())
    path = cache.path(key)
    path.parent.mkdir(parents=True)
    (path.parent / f".{key}.abc.tmp").write_text('{"key": "' + key + '", "text": "to', encoding="utf-8")  # killed mid-write
    assert cache.get(key) is None
    for corrupt in ('{"key": "' + key + '", "te', "[]", '{"key": "other", "text": "x"}', "\xff\xfe"):
        path.write_text(corrupt, encoding="utf-8", errors="replace")
        assert cache.get(key) is None
    inner = Counting()
    asyncio.run(CachedClient(inner, tmp_path, "http://a/v1").complete(request()))  # the miss is repaired
    assert inner.calls == 1 and cache.get(key) == ChatResponse("answer 1", 3, 2, cached=True)


@pytest.mark.unit
def test_a_killed_writers_temp_files_are_removed_once_stale(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    key = cache_key("http://a/v1", request())
    shard = cache.path(key).parent
    shard.mkdir(parents=True)
    old, fresh = shard / f".{key}.json.k1ll3d.tmp", shard / f".{key}.json.wr1t1ng.tmp"
    for temp in (old, fresh):
        temp.write_text('{"key": "' + key + '", "te', encoding="utf-8")
    hours_ago = time.time() - 2 * 3600
    os.utime(old, (hours_ago, hours_ago))
    CachedClient(Counting(), tmp_path, "http://a/v1")  # each run's cache sweeps once
    assert not old.exists() and fresh.exists()  # a live writer's temp file is left alone


@pytest.mark.unit
def test_concurrent_writers_never_expose_a_torn_entry(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    keys = [cache_key("u", request(model=f"m{i}")) for i in range(20)]
    bad: list[str] = []

    def writer(n: int) -> None:
        for _ in range(15):
            for key in keys:
                cache.put(key, ChatResponse(f"writer {n} " * 200, n, n), "m")
                hit = cache.get(key)
                if hit is None or hit.text != f"writer {hit.prompt_tokens} " * 200:
                    bad.append(key)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert bad == []
    assert ResponseCache(tmp_path).keys() == set(keys)
    segments = list((tmp_path / "answers").glob("*.jsonl"))
    assert len(segments) == 1  # one process: one file, whatever the threads
    assert len(segments[0].read_bytes().splitlines()) == 6 * 15 * 20  # every write one whole line


VALID_ENTRY = {"model": "m", "text": "answer", "prompt_tokens": 3, "completion_tokens": 2}


@pytest.mark.unit
@pytest.mark.parametrize("planted", [
    {"prompt_tokens": 10**400},
    {"prompt_tokens": 10**30},
    {"completion_tokens": 10**9},
    {"prompt_tokens": -1},
    {"prompt_tokens": True},
    {"prompt_tokens": 1.0},
    {"completion_tokens": "2"},
    {"completion_tokens": None},
    {"text": 42},
    {"text": ["answer"]},
    {"model": None},
    {"extra": "field"},
])
def test_a_planted_entry_is_rejected_then_replaced_and_counted(tmp_path: Path, planted: dict[str, object]) -> None:
    from pytest_geo.llm.usage import UsageClient

    cache = ResponseCache(tmp_path)
    key = cache_key("http://a/v1", request())
    cache.path(key).parent.mkdir(parents=True)
    cache.path(key).write_text(json.dumps({"key": key, **VALID_ENTRY, **planted}), encoding="utf-8")
    assert cache.read(key) == "rejected" and cache.get(key) is None
    inner = Counting()
    usage = UsageClient(CachedClient(inner, tmp_path, "http://a/v1"))
    answer = asyncio.run(usage.complete(request()))
    assert (inner.calls, answer.text, answer.cached) == (1, "answer 1", False)
    assert (usage.usage["ranker"]["cache_rejected"], usage.usage["ranker"]["cache_hits"]) == (1, 0)
    assert cache.get(key) == ChatResponse("answer 1", 3, 2, cached=True)  # overwritten by the live answer


@pytest.mark.unit
def test_an_entry_at_the_bounds_is_a_hit(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    key = cache_key("http://a/v1", request())
    cache.path(key).parent.mkdir(parents=True)
    entry = {"key": key, **VALID_ENTRY, "prompt_tokens": 0, "completion_tokens": 10**9 - 1}
    cache.path(key).write_text(json.dumps(entry), encoding="utf-8")
    assert cache.get(key) == ChatResponse("answer", 0, 10**9 - 1, cached=True)
    assert cache.read(cache_key("http://b/v1", request())) is None  # absent: a plain miss, not counted


@pytest.mark.unit
def test_answers_are_appended_to_one_file_not_one_file_each(tmp_path: Path) -> None:
    inner = Counting()
    client = CachedClient(inner, tmp_path, "http://a/v1")
    for n in range(50):
        asyncio.run(client.complete(request(model=f"m{n}")))
    asyncio.run(client.aclose())
    assert [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()] == ["answers/0.jsonl"]
    rerun = Counting()
    again = CachedClient(rerun, tmp_path, "http://a/v1")
    answers = [asyncio.run(again.complete(request(model=f"m{n}"))) for n in range(50)]
    assert rerun.calls == 0 and [a.text for a in answers] == [f"answer {n + 1}" for n in range(50)]


WRITER = """
import sys
from pathlib import Path
from pytest_geo.llm.base import ChatResponse
from pytest_geo.llm.cache import ResponseCache
cache = ResponseCache(Path(sys.argv[1]))
for n in range(200):
    cache.put(f"{sys.argv[2]}{n:063d}", ChatResponse(sys.argv[2] * 3000, n, 1), "m")
print("done", flush=True)
sys.stdin.read()  # hold the segment until told to go
"""


@pytest.mark.e2e
def test_processes_writing_at_once_each_append_to_their_own_file(tmp_path: Path) -> None:
    reader = ResponseCache(tmp_path)
    assert reader.get("a" + "0" * 63) is None  # indexed before the others wrote
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), name], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True) for name in ("a", "b", "c")]
    try:
        assert [w.stdout.readline().strip() for w in writers if w.stdout] == ["done"] * 3
        assert sorted(p.name for p in (tmp_path / "answers").iterdir()) == ["0.jsonl", "1.jsonl", "2.jsonl"]
        for name in "abc":  # written by another process after this one looked: found on the miss
            for n in (0, 199):
                assert reader.get(f"{name}{n:063d}") == ChatResponse(name * 3000, n, 1, cached=True)
    finally:
        for writer in writers:
            writer.communicate("")
    assert len(reader.keys()) == 600


@pytest.mark.unit
def test_a_killed_writers_torn_line_is_ended_rejected_and_replaced(tmp_path: Path) -> None:
    good, torn = cache_key("http://a/v1", request(model="good")), cache_key("http://a/v1", request())
    (tmp_path / "answers").mkdir()
    whole = json.dumps({"key": good, **VALID_ENTRY}, separators=(",", ":"))
    (tmp_path / "answers" / "0.jsonl").write_text(whole + "\n" + whole.replace(good, torn)[:60])  # killed mid-line
    cache = ResponseCache(tmp_path)
    assert cache.get(good) == ChatResponse("answer", 3, 2, cached=True)
    assert cache.read(torn) is None  # an unfinished line is not an entry yet
    inner = Counting()
    usage = UsageClient(CachedClient(inner, tmp_path, "http://a/v1"))
    asyncio.run(usage.complete(request()))
    lines = (tmp_path / "answers" / "0.jsonl").read_text().splitlines()
    assert lines[1] == whole.replace(good, torn)[:60]  # ended with a newline before the next line
    assert json.loads(lines[2])["key"] == torn
    assert ResponseCache(tmp_path).get(torn) == ChatResponse("answer 1", 3, 2, cached=True)


@pytest.mark.unit
def test_a_planted_line_in_another_file_does_not_shadow_the_answer_that_replaced_it(tmp_path: Path) -> None:
    key = cache_key("http://a/v1", request())
    inner = Counting()
    client = UsageClient(CachedClient(inner, tmp_path, "http://a/v1"))
    (tmp_path / "answers").mkdir()
    planted = json.dumps({"key": key, **VALID_ENTRY, "prompt_tokens": -1}, separators=(",", ":"))
    (tmp_path / "answers" / "9.jsonl").write_text(planted + "\n")  # read after 0.jsonl, so last for the key
    asyncio.run(client.complete(request()))
    assert client.usage["ranker"]["cache_rejected"] == 1
    assert ResponseCache(tmp_path).get(key) == ChatResponse("answer 1", 3, 2, cached=True)  # a later run hits


@pytest.mark.unit
def test_a_segment_planted_as_a_link_is_never_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    (tmp_path / "cache" / "answers").mkdir(parents=True)
    (tmp_path / "cache" / "answers" / "0.jsonl").symlink_to(victim)
    asyncio.run(CachedClient(Counting(), tmp_path / "cache", "http://a/v1").complete(request()))
    assert victim.read_text() == "mine\n"
    assert ResponseCache(tmp_path / "cache").keys() == {cache_key("http://a/v1", request())}


@pytest.mark.e2e
def test_a_forked_child_writes_its_own_file(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    cache.put("a" * 64, ChatResponse("parent", 1, 1), "m")
    pid = os.fork()
    if pid == 0:  # the child: its lock on the inherited file would be the parent's
        cache.put("b" * 64, ChatResponse("child", 1, 1), "m")
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    cache.put("c" * 64, ChatResponse("parent again", 1, 1), "m")
    assert sorted(p.name for p in (tmp_path / "answers").iterdir()) == ["0.jsonl", "1.jsonl"]
    assert [json.loads(line)["key"][0] for line in (tmp_path / "answers" / "0.jsonl").read_text().splitlines()] == ["a", "c"]
    fresh = ResponseCache(tmp_path)
    assert [fresh.get(k * 64).text for k in "abc"] == ["parent", "child", "parent again"]  # type: ignore[union-attr]


# --- planted entries in a run --------------------------------------------------------------


@pytest.mark.plugin
def test_planted_cache_entries_are_misses_counted_in_the_usage(served_project: GeoProject) -> None:
    dataset = str(served_project.dataset(2))
    served_project.run(dataset).assert_outcomes(passed=2)
    # 10**400 tokens: json reads it, float() of it fails
    planted = rewrite_cache_entries(served_project.pytester.path / ".pytest_cache" / "d" / "geo",
                                    lambda entry: {**entry, "prompt_tokens": 10**400})
    assert planted == 6
    served_project.server.reset()
    result = served_project.run(dataset, "--geo-report", "r.json")
    result.assert_outcomes(passed=2)
    assert len(served_project.server.requests) == 6  # every entry was a miss
    result.stdout.fnmatch_lines(["  ranker: calls=4 cache_hits=0 retries=0 errors=0 * cache_rejected=4*",
                                 "  rewriter: calls=2 cache_hits=0 retries=0 errors=0 * cache_rejected=2*"])
    usage = json.loads((served_project.pytester.path / "r.json").read_text())["usage"]
    assert (usage["ranker"]["cache_rejected"], usage["rewriter"]["cache_rejected"]) == (4, 2)
    served_project.server.reset()
    served_project.run(dataset).assert_outcomes(passed=2)  # the live answers replaced them
    assert served_project.server.requests == []


# --- answers cut at the output-token cap ---------------------------------------------------------


class CutAtTheCap(Counting):
    async def complete(self, request: ChatRequest) -> ChatResponse:
        self.calls += 1
        return ChatResponse(text='{"ordered_ids": ["a", "b"', prompt_tokens=3, completion_tokens=19,
                            finish_reason="length")


@pytest.mark.unit
def test_an_answer_cut_at_the_output_cap_is_never_cached(tmp_path: Path) -> None:
    inner = CutAtTheCap()
    client = CachedClient(inner, tmp_path, "http://a/v1")
    answers = [asyncio.run(client.complete(request())) for _ in range(2)]
    assert inner.calls == 2 and ResponseCache(tmp_path).keys() == set()
    assert [(a.finish_reason, a.cached) for a in answers] == [("length", False), ("length", False)]


@pytest.mark.plugin
def test_a_rerun_asks_again_for_an_answer_cut_at_the_cap_and_reports_the_cut_again(
        served_project: GeoProject) -> None:
    """The rewrite (20 tokens as the fake server counts them) is cut at a cap of 19, so
    each run asks for it again."""
    dataset = str(served_project.dataset(2))
    for run in ("first", "second"):
        served_project.server.reset()
        result = served_project.run(dataset, "--geo-max-output-tokens", "19")
        result.assert_outcomes(failed=2)
        result.stdout.fnmatch_lines(["*error: rewriter answer cut at the output-token cap "
                                     "(--geo-max-output-tokens 19): raise it*",
                                     "  rewriter: calls=2 cache_hits=0 *"])  # never answered from the cache
        rewrites = [r for r in served_project.server.requests if "rewritten_description" in json.dumps(r["body"])]
        assert len(rewrites) == 2, run  # one a row, on the second run too
