"""The op registry: every model op is looked up here by name and backend.

Backends register implementations with :func:`register`; the planner records one backend per op
in the plan and the runtime resolves it with :func:`resolve`. The ``reference`` backend (plain
torch, ``kernels/reference/``) implements every op and runs anywhere; it is the oracle of every
kernel test.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

REFERENCE = "reference"


@dataclass(frozen=True, slots=True)
class Registration:
    op: str
    backend: str
    fn: Callable[..., Any]
    supports: Callable[[dict[str, Any]], bool] | None  # predicate on a shape/dtype/device spec
    priority: int  # higher wins when several backends support a spec


_REGISTRY: dict[str, dict[str, Registration]] = {}


class KernelNotFound(LookupError):
    """An op or backend that no module registered."""


def register(op: str, backend: str, fn: Callable[..., Any], *,
             supports: Callable[[dict[str, Any]], bool] | None = None, priority: int = 0) -> None:
    """Register ``fn`` as the ``backend`` implementation of ``op`` (re-registering replaces)."""
    _REGISTRY.setdefault(op, {})[backend] = Registration(op, backend, fn, supports, priority)


def ops() -> list[str]:
    """Every registered op name, sorted."""
    _ensure_reference()
    return sorted(_REGISTRY)


def available_backends(op: str) -> list[str]:
    """Backends registered for ``op``, highest priority first."""
    _ensure_reference()
    regs = _REGISTRY.get(op, {})
    return [r.backend for r in sorted(regs.values(), key=lambda r: (-r.priority, r.backend))]


def resolve(op: str, backend: str = REFERENCE) -> Callable[..., Any]:
    """The implementation of ``op`` in ``backend``; a clear error if there is none."""
    _ensure_reference()
    if op not in _REGISTRY:
        raise KernelNotFound(f"kernel op '{op}' is not registered (known: {', '.join(ops())})")
    reg = _REGISTRY[op].get(backend)
    if reg is None:
        raise KernelNotFound(f"kernel op '{op}' has no '{backend}' backend "
                             f"(available: {', '.join(available_backends(op))})")
    return reg.fn


def backend_supports(op: str, backend: str, spec: dict[str, Any]) -> bool:
    """Whether ``backend``'s ``supports(spec)`` holds for ``op`` (no predicate: always)."""
    _ensure_reference()
    reg = _REGISTRY.get(op, {}).get(backend)
    if reg is None:
        raise KernelNotFound(f"kernel op '{op}' has no '{backend}' backend")
    return reg.supports is None or bool(reg.supports(spec))


def choose_backend(op: str, spec: dict[str, Any]) -> str:
    """The highest-priority backend whose ``supports(spec)`` holds (reference always does)."""
    _ensure_reference()
    for backend in available_backends(op):
        reg = _REGISTRY[op][backend]
        if reg.supports is None or reg.supports(spec):
            return backend
    raise KernelNotFound(f"no backend of kernel op '{op}' supports {spec}")


class KernelSet:
    """Attribute access to one backend per op: ``k.rms_norm(x, w, eps)``.

    ``choice`` maps op names to backends (from the plan); ops not named use ``default``.
    Resolution happens once per op and is cached.
    """

    def __init__(self, choice: dict[str, str] | None = None, default: str = REFERENCE):
        self._choice = dict(choice or {})
        self._default = default
        self._cache: dict[str, Callable[..., Any]] = {}

    def backend_of(self, op: str) -> str:
        return self._choice.get(op, self._default)

    def __getattr__(self, op: str) -> Callable[..., Any]:
        if op.startswith("_"):
            raise AttributeError(op)
        fn = self._cache.get(op)
        if fn is None:
            fn = self._cache[op] = resolve(op, self.backend_of(op))
        return fn


_loaded_reference = False


def _ensure_reference() -> None:
    global _loaded_reference
    if not _loaded_reference:
        _loaded_reference = True
        from deepinfer.kernels.reference import register_all

        register_all()
