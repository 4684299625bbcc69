"""`python -m pytest_geo evaluate ...` runs `egeo evaluate ...` (the E-GEO harness ran as a script)."""

import sys

from pytest_geo.cli import main

sys.exit(main())
