"""Where a run makes the host wait for the GPU: torch's CUDA sync debug mode ("warn") around a
call, each synchronizing op's Python call site inside a source tree, counted.

    sites = host_syncs.collect(lambda: llm.generate(...), root=package_root)

A host sync in the middle of a forward starves the GPU until Python has enqueued the kernels
after it (the eager prefill's host gaps, bench/prefill.py ``--sync-sites``). torch reports
each synchronizing op (``.item()``, ``.tolist()``, ``.cpu()``, a blocking copy, ``nonzero``)
as a Python warning raised at the op's call, in whichever thread runs it: the hook reads that
thread's stack. Off CUDA nothing synchronizes; the call still runs (sites stay empty).
"""

from __future__ import annotations

import traceback
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

MARK = "synchroniz"  # torch: "called a synchronizing CUDA operation"


def site_of(stack: list[traceback.FrameSummary], root: Path, depth: int = 2) -> str:
    """The innermost ``depth`` frames under ``root``, innermost first, as ``path:line name``
    joined by `` <- `` (paths relative to root); when none is under it, "(outside ROOT) " and
    the innermost ``depth`` frames of the stack with their full paths."""
    prefix = str(root.resolve())
    ours = [f for f in stack if str(Path(f.filename).resolve()).startswith(prefix)]
    if not ours:
        return f"(outside {root.name}) " + " <- ".join(
            f"{f.filename}:{f.lineno} {f.name}" for f in reversed(stack[-depth:]))
    return " <- ".join(f"{Path(f.filename).resolve().relative_to(prefix)}:{f.lineno} {f.name}"
                       for f in reversed(ours[-depth:]))


def collect(fn: Callable[[], Any], root: Path, depth: int = 2) -> tuple[Any, list[dict]]:
    """Run ``fn`` under the sync debug mode (CUDA) -> (its result, [{"site", "count"}] most
    frequent first). Other warnings pass through to the previous handler."""
    import torch

    sites: Counter[str] = Counter()
    cuda = torch.cuda.is_available()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        previous = warnings.showwarning

        def hook(message, category, filename, lineno, file=None, line=None):
            if MARK not in str(message):
                return previous(message, category, filename, lineno, file, line)
            sites[site_of(traceback.extract_stack()[:-1], root, depth)] += 1

        warnings.showwarning = hook
        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            result = fn()
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode("default")
    return result, [{"site": s, "count": n} for s, n in sites.most_common()]
