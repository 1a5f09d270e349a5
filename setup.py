"""Build hook for the one C extension, ``supergrep.index._kernels`` (the compressed store's fused
re-rank kernels). Everything else is in pyproject.toml.

The extension is optional: where no C compiler is available the build goes on without it and
the store runs the same arithmetic in NumPy (``supergrep.index.native``), slower."""

import sys

from setuptools import Extension, setup

args = [] if sys.platform == "win32" else ["-O3", "-ffp-contract=off", "-std=c11"]

setup(
    ext_modules=[
        Extension(
            "supergrep.index._kernels",
            ["src/supergrep/index/_kernels.c"],
            extra_compile_args=args,
            optional=True,
        )
    ]
)
