"""da-patches is built as a wheel only (the metadata is in pyproject.toml).

Its sources live outside this folder (../../tools/patchqueue). An sdist cannot hold them: setuptools
would make an archive without them and write copies outside its own tree. So the sdist command
stops before it writes anything, and says what to do instead.
"""

from setuptools import setup
from setuptools.command.sdist import sdist


class NoSdist(sdist):
    def run(self) -> None:
        raise SystemExit(
            "da-patches: no sdist: its sources are ../../tools/patchqueue, outside this folder, "
            "which an sdist cannot hold. Build the wheel instead: "
            "`pip wheel packaging/patch-queue` or `python -m build --wheel packaging/patch-queue`."
        )


setup(cmdclass={"sdist": NoSdist})
