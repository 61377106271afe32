"""The command line every launch-config sweep shares (attention_prefill.py, attention_decode.py,
index_prefill.py, mhc_prefill.py): ``--variants`` (comma-separated) and ``--smoke`` (the CPU
interpreter on small shapes, set before any kernel module imports triton), plus the sweep's own
shape arguments; ``args.device`` is "cpu" for a smoke run, else "cuda". ``try_variant`` runs one
variant, printing a failed row instead of stopping the sweep."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any


def parse(doc: str, default_variants: str, smoke_help: str,
          add_shapes: Callable[[argparse.ArgumentParser], None]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    add_shapes(ap)
    ap.add_argument("--variants", default=default_variants)
    ap.add_argument("--smoke", action="store_true", help=f"CPU interpreter, {smoke_help}")
    args = ap.parse_args()
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
    args.device = "cpu" if args.smoke else "cuda"
    return args


def try_variant(variant: str, run: Callable[[], Any]) -> Any:
    """``run()``'s result, or None after printing the variant's failed table row (a launch config
    that does not compile, e.g. out of shared memory)."""
    try:
        return run()
    except Exception as e:  # noqa: BLE001 - any compile/launch failure is a row, not a crash
        print(f"| {variant} | failed: {type(e).__name__}: {str(e).splitlines()[0][:120]} |",
              flush=True)
        return None


def set_int_constants(module: Any, defaults: dict[str, Any], names: tuple[str, ...],
                      variant: str, what: str) -> None:
    """Restore ``module``'s launch constants to ``defaults``, then, unless ``variant`` is
    "default", set ``names`` to its colon-separated ints (``what`` names the sweep in the
    error of a malformed variant)."""
    for name, value in defaults.items():
        setattr(module, name, value)
    if variant == "default":
        return
    values = [int(f) for f in variant.split(":")]
    assert len(values) == len(names), f"{what} variant {variant!r}: {':'.join(names)}"
    for name, value in zip(names, values, strict=True):
        setattr(module, name, value)
