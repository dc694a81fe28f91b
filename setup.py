"""Build the one C++ extension, ``device_agnostic.neuron._C``; the rest is in pyproject.toml.

Build with ``pip install --no-build-isolation`` (scripts/bootstrap does) so that the extension is
compiled against the torch installed in the environment it will run in.
"""

import os
from pathlib import Path

# Importing torch imports every "torch.backends" entry point, ours included. A stale or broken
# _C from an earlier build must not stop us from rebuilding it, so switch autoload off first.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

CSRC = Path("device_agnostic", "neuron", "csrc")
SOURCES = sorted(str(path) for path in CSRC.rglob("*.cpp"))
if not SOURCES:
    raise SystemExit(f"setup.py: no C++ sources found under {CSRC}; nothing to build.")


class BuildNeuronExtension(BuildExtension):
    """torch's BuildExtension with a persistent object directory.

    An editable install (``pip install -e .``) otherwise compiles in a fresh temporary directory
    every time; keeping the objects in build/ lets ninja recompile only the sources (or headers)
    that changed. ninja also recompiles when the compile command changes (flags, compiler).
    """

    def finalize_options(self) -> None:
        super().finalize_options()
        self.build_temp = str(Path("build", "neuron-objects").resolve())


setup(
    ext_modules=[
        CppExtension(
            name="device_agnostic.neuron._C",
            sources=SOURCES,
            include_dirs=[str(CSRC.resolve())],
            # The headers, so that an sdist carries them (setuptools ships `depends` with the
            # sources) and a changed header rebuilds.
            depends=sorted(str(path) for path in CSRC.rglob("*.h")),
            # C++20 is what torch 2.13's cpp_extension compiles with by default. -O2 after
            # Python's own -O3, and -g0 after its -g: debug info of torch's headers makes
            # each object ~50x larger and its compile ~30% slower (swap in -g -O0 to debug).
            extra_compile_args=["-O2", "-g0", "-std=c++20"],
        )
    ],
    cmdclass={"build_ext": BuildNeuronExtension.with_options(use_ninja=True)},
)
