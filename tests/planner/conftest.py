"""Model specs shared by the pass tests."""

import pytest

from deepinfer.artifacts.model_spec import load_model_spec


@pytest.fixture(scope="session")
def tiny():
    return load_model_spec("builtin:tiny")


@pytest.fixture(scope="session")
def released():
    return load_model_spec("builtin:v41-flash")
