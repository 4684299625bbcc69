"""The engine, plain Python without pytest: the run session, its runner, the GEO
experiment, prompts, answer parsing, the fact check."""
