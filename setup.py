"""Builds the C++ extension ``deepinfer._C`` from ``csrc/``; the rest is in pyproject.toml."""

from pathlib import Path

from pybind11.setup_helpers import Pybind11Extension
from setuptools import setup

csrc = Path("csrc")
ext = Pybind11Extension(
    "deepinfer._C",
    sorted(str(p) for p in csrc.glob("*.cc")),
    include_dirs=[str(csrc / "include")],
    cxx_std=17,
)

setup(ext_modules=[ext])
