"""Eval suites (Kedi semantics): the suite model, YAML suite files, prompt procedures."""
