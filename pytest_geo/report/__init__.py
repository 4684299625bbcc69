"""Reporting: results and their aggregation, statistics, the baseline comparison, and
the terminal, JSON, JUnit and HTML output with run metadata; the variants' paired
comparison and the judge's noise floor."""
