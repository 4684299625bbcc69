"""Prompt files are read only from regular files of bounded size (a link to
/proc/self/environ sent the whole environment, the key included, to the model and into
the reports), and the key is redacted from prompts and messages in every file the run
writes, not only from answers (a dataset description holding it reached the JSON
report, the HTML page and the transcripts)."""

from __future__ import annotations

import gzip
import json
import os

import pytest
from test_redaction import KEY, forms_of

from conftest import GeoProject, geo_rows
from pytest_geo.engine.prompts import load_prompts
from pytest_geo.templates import PromptError


@pytest.mark.skipif(not os.path.exists("/proc/self/environ"), reason="needs Linux's /proc")
@pytest.mark.plugin
def test_a_prompt_linked_to_proc_environ_is_refused_before_any_call(served_project: GeoProject,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    prompt = served_project.pytester.path / "prompts" / "rewriter_system.txt"
    prompt.unlink()
    prompt.symlink_to("/proc/self/environ")
    result = served_project.run(str(served_project.dataset(2)), "--geo-report", "r.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: */prompts/rewriter_system.txt: cannot read prompt file: not a plain file "
                                 "(it gives more bytes than its size of 0 says: a /proc or /sys file?)"])
    assert served_project.server.requests == []
    assert KEY not in result.stdout.str() + result.stderr.str()


@pytest.mark.unit
@pytest.mark.parametrize(("make", "problem"), [
    (lambda path: os.mkfifo(path), "not a regular file (a FIFO)"),
    (lambda path: path.write_bytes(b"{{title}} {{description}}" + b" " * (1 << 20)), "larger than 1 MiB*"),
])
def test_a_prompt_that_is_a_fifo_or_too_large_is_refused(tmp_path, make, problem) -> None:  # type: ignore[no-untyped-def]
    from conftest import copy_prompts

    prompts = copy_prompts(tmp_path / "prompts")
    (prompts / "rewriter_user.txt").unlink()
    make(prompts / "rewriter_user.txt")
    with pytest.raises(PromptError) as raised:
        load_prompts(prompts)
    import fnmatch
    assert fnmatch.fnmatch(str(raised.value), f"{prompts}/rewriter_user.txt: cannot read prompt file: {problem}")


@pytest.mark.plugin
def test_a_key_in_the_dataset_reaches_no_file_the_run_writes(served_project: GeoProject,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    rows = geo_rows(2)
    rows[0]["candidates"][0]["description"] += f" (internal note: key {KEY})"
    rows[1]["query"] += " " + forms_of(KEY)["\\u, lower"].encode().decode("unicode_escape")  # the key itself, once parsed
    rows[1]["candidates"][1]["title"] = forms_of(KEY)["percent"]
    (served_project.pytester.path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = served_project.run("rows.jsonl", "-rA", "--geo-report", "r.json", "--geo-html", "r.html",
                                "--junitxml", "j.xml")
    result.assert_outcomes(passed=2)
    texts = {name: (gzip.decompress(path.read_bytes()) if name.endswith(".gz") else path.read_bytes()).decode()
             for name in ("r.json", "r.html", "j.xml", "r.transcripts.jsonl.gz")
             for path in [served_project.pytester.path / name]}
    assert "[key]" in texts["r.transcripts.jsonl.gz"]
    json.loads(texts["r.json"])  # still JSON
    assert [json.loads(line) for line in texts["r.transcripts.jsonl.gz"].splitlines()]
    found = [(name, form) for name, text in texts.items() for form, written in forms_of(KEY).items()
             if written in text]
    assert found == []
