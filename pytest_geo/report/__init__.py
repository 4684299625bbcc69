"""Reporting: results and their aggregation, statistics, baseline comparison, terminal, JSON, JUnit and HTML output, run metadata."""
