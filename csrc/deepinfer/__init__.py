"""deepinfer: an offline batch inference engine for DeepSeek-V4.1-Flash, built like a compiler.

The subpackages live in the repository's top-level folders (``artifacts/``, ``planner/``,
``runtime/``, ``kernels/``) and ``deepinfer._C`` is built from ``csrc/``; this folder only
holds this file and, in editable installs, the compiled extension.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("deepinfer")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+unknown"
