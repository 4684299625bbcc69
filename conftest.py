# The repository's own tests use pytester to run pytest-geo in isolated sessions.
