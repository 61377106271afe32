"""What may import what (architecture.md §2): artifacts and kernels import nothing internal;
the planner never imports the runtime and the runtime never imports the planner."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ALLOWED = {
    "artifacts": {"artifacts"},
    "kernels": {"kernels"},
    "planner": {"planner", "artifacts", "kernels"},
    "runtime": {"runtime", "artifacts", "kernels", "_C"},
}


def internal_imports(path: Path) -> set[str]:
    """Top-level deepinfer subpackages a module imports (``deepinfer.X...`` -> ``X``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "deepinfer" and len(parts) > 1:
                found.add(parts[1])
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_dependency_direction(package):
    bad = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        extra = internal_imports(path) - ALLOWED[package]
        if extra:
            bad[str(path.relative_to(ROOT))] = sorted(extra)
    assert not bad, f"{package} may import only {sorted(ALLOWED[package])}: {bad}"
