// bind_numpy_view.h — read-only numpy views over C++-owned buffers (for bind_*.cc only: the
// core headers in include/ stay free of pybind11).
// The view keeps `base` (the Python object owning the buffer) alive; no data is copied.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <vector>

namespace deepinfer {

template <typename T>
pybind11::array readonly_view(const T* data, std::vector<int64_t> shape, pybind11::handle base,
                              pybind11::dtype dtype = pybind11::dtype::of<T>()) {
  std::vector<int64_t> strides(shape.size(), static_cast<int64_t>(sizeof(T)));
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  static const T dummy{};  // numpy needs a non-null pointer even for empty arrays
  pybind11::array a(dtype, shape, strides, data != nullptr ? data : &dummy, base);
  pybind11::detail::array_proxy(a.ptr())->flags &=
      ~pybind11::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

}  // namespace deepinfer
