"""The engine, plain Python without pytest: the run session, its runner, the GEO
experiment, prompts (and --geo-variant prompt sets, with their shared rank_before), answer
parsing, the fact check."""
