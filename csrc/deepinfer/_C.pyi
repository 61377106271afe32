"""Type stubs for deepinfer._C (kept in step with csrc/bindings.cc)."""

ABI_VERSION: int

def abi_version() -> int: ...
