"""Build hook for supergrep's two optional C parts; everything else is in pyproject.toml.

- ``supergrep.index._kernels``: the compressed store's fused search kernels (a CPython
  extension). Without it the store runs the same arithmetic in NumPy (``index/native.py``).
- ``supergrep/daemon/sgr``: the daemon's native search client (a plain executable,
  ``daemon/sgr.c``), which ``supergrep init`` puts on the shell's ``sgr``. Without it ``sgr`` is
  the Python launcher.

Both are optional: where no C compiler (or no Python headers) is available the build goes on
without them, with a warning.
"""

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

args = [] if sys.platform == "win32" else ["-O3", "-ffp-contract=off", "-std=c11"]


class BuildWithClient(build_ext):
    """build_ext, then the native client linked as an executable beside the package's modules."""

    def run(self):
        super().run()
        if sys.platform == "win32":  # unix sockets and exec: POSIX only
            return
        if self.inplace:
            out_dir = self.get_finalized_command("build_py").get_package_dir("supergrep.daemon")
        else:
            out_dir = os.path.join(self.build_lib, "supergrep", "daemon")
        try:
            objects = self.compiler.compile(["src/supergrep/daemon/sgr.c"], output_dir=self.build_temp,
                                            extra_postargs=["-O2", "-std=c11"])
            self.compiler.link_executable(objects, "sgr", output_dir=out_dir)
        except Exception as exc:  # noqa: BLE001 - any compiler failure: the Python client serves
            self.warn(f"the native search client was not built ({exc}); `sgr` stays the Python launcher")


setup(
    ext_modules=[
        Extension(
            "supergrep.index._kernels",
            ["src/supergrep/index/_kernels.c"],
            extra_compile_args=args,
            optional=True,
        )
    ],
    cmdclass={"build_ext": BuildWithClient},
)
