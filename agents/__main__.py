"""Allow ``python -m agents`` as an alias of ``berth-agent``."""

import sys

from agents.cli import main

sys.exit(main())
