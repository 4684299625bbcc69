"""A YAML suite file names code (`procedure`, `metric.function`): only functions of the
user's project (modules under the rootdir or a pythonpath entry) are taken. Naming
`os:system` ran a shell command as the user, `builtins:exec` runs Python: both are a
collection error naming the file and the field, and nothing runs."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.plugin

ROWS = '{"input": "touch pwned", "expected": 0}\n'


@pytest.mark.parametrize(("field", "spec", "where"), [
    ("procedure", "os:system", "built into Python"),  # a frozen module
    ("procedure", "builtins:exec", "built into Python"),
    ("metric.function", "subprocess:call", "at */subprocess.py"),
    ("procedure", "pytest:main", "at */site-packages/pytest"),
])
def test_a_function_outside_the_project_is_refused_and_never_called(pytester: pytest.Pytester, field: str,
                                                                    spec: str, where: str) -> None:
    pytester.makefile(".jsonl", rows=ROWS)
    procedure, metric = (spec, "{builtin: exact_match, dataset: rows}") if field == "procedure" else \
        ("procs:same", f'{{function: "{spec}", dataset: rows}}')
    pytester.makepyfile(procs="def same(x):\n    return x\n")
    pytester.makeini("[pytest]\npythonpath = .\n")
    pytester.makefile(".geo.yaml", attack=f"suite: attack\nprocedure: {procedure}\ndata:\n  rows: rows.jsonl\n"
                                          f"metric: {metric}\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "attack.geo.yaml")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*attack.geo.yaml: {field}: '{spec}' is not a function of this project: module "
                                 f"'{spec.split(':')[0]}' is {where}*; a suite file may name only functions of "
                                 "modules under the rootdir or a pythonpath entry"])
    assert not (pytester.path / "pwned").exists()


def test_the_projects_own_modules_work_from_the_rootdir_and_a_pythonpath_entry(pytester: pytest.Pytester) -> None:
    pytester.makefile(".jsonl", rows='{"input": 3, "expected": 9}\n')
    (pytester.path / "src" / "mathlib").mkdir(parents=True)
    (pytester.path / "src" / "mathlib" / "__init__.py").write_text("def square(x):\n    return x * x\n")
    pytester.makepyfile(procs="def close(output, expected):\n    return output == expected\n")
    pytester.makeini("[pytest]\npythonpath = src .\n")
    pytester.makefile(".geo.yaml", sq="suite: sq\nprocedure: mathlib:square\ndata:\n  rows: rows.jsonl\n"
                                      'metric: {function: "procs:close", dataset: rows}\n')
    result = pytester.runpytest("-p", "no:cacheprovider", "sq.geo.yaml")
    result.assert_outcomes(passed=1)
