// deepinfer/version.h — the ABI version of the deepinfer._C extension.
#pragma once

namespace deepinfer {

// Bumped whenever a binding changes its signature; Python checks it on import.
constexpr int kAbiVersion = 3;

}  // namespace deepinfer
