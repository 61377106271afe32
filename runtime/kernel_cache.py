"""Where compiled Triton kernels are kept: in the plan directory, so a plan starts warm wherever
it is copied.

Triton compiles every kernel specialization on its first launch and caches the binary under
``TRITON_CACHE_DIR`` (default ``~/.triton/cache``: one machine's). A cold start of the slice plan
spends about three minutes compiling (docs/performance.md); a warm one starts in ~15 s. Unless
the user set ``TRITON_CACHE_DIR``, deepinfer points it at ``<plan>/kernel-cache/`` before the
first kernel compiles, so the binaries travel with the plan directory (copied to a fresh machine
of the same GPU kind, the plan starts warm). Entries are keyed by kernel source, compile options,
GPU architecture and Triton version: an entry from another GPU kind or Triton version is never
used, only not found. Triton writes each entry atomically (several ranks may share the folder).
The plan's manifest does not list the folder (``read_plan`` ignores unlisted files), and a plan
rewrite keeps it (``artifacts/plan_dir.py``).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

from deepinfer.artifacts.plan_schema import KERNEL_CACHE_DIR

ENV = "TRITON_CACHE_DIR"


def use_plan_kernel_cache(plan_dir: str | Path,
                          environ: MutableMapping[str, str] = os.environ) -> tuple[str, str]:
    """Point Triton's cache at ``<plan_dir>/kernel-cache`` unless ``TRITON_CACHE_DIR`` is set or
    the plan directory cannot take the folder. Returns (cache directory or "", why), for the
    start-up log."""
    if environ.get(ENV):
        return environ[ENV], f"{ENV} set by the user"
    path = Path(plan_dir) / KERNEL_CACHE_DIR
    try:
        path.mkdir(exist_ok=True)
    except OSError as exc:
        return "", f"Triton's default cache ({path} not writable: {exc.strerror})"
    if not os.access(path, os.W_OK | os.X_OK):
        return "", f"Triton's default cache ({path} not writable)"
    environ[ENV] = str(path.resolve())
    return environ[ENV], "the plan's kernel cache"
