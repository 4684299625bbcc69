"""The pytest layer: options into settings, collectors and items, the run's state on the config, xdist look-ahead."""
