"""``python -m tools.patchqueue``: the patch-queue command line (see tools/patchqueue/cli.py)."""

import sys

from tools.patchqueue.cli import main

sys.exit(main())
