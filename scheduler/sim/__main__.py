"""python -m scheduler.sim (see scheduler/sim/cli.py)."""

from .cli import main

raise SystemExit(main())
