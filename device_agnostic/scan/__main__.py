"""``python -m device_agnostic.scan``: the same as ``da-scan``."""

from .cli import main

# The guard keeps a spawned worker (the default start method off Linux) from rerunning the scan.
if __name__ == "__main__":
    raise SystemExit(main())
