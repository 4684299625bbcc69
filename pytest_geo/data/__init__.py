"""Data that crosses modules and processes: GEO JSONL rows, row records, JSON Schemas, atomic files."""
