// Python bindings for deepinfer/load_plan.h. Buffers are int32 numpy arrays (or anything
// numpy.asarray turns into one without copying, e.g. a CPU torch tensor), 4 ints per segment.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "deepinfer/load_plan.h"

namespace py = pybind11;

namespace {

// Views obj as a C-contiguous int32 array with a multiple of 4 elements; never copies, so
// writes land in the caller's buffer.
py::array segment_buffer(py::handle obj, const char* name, bool writable) {
  py::array arr = py::array::ensure(obj);
  if (!arr) throw std::invalid_argument(std::string(name) + ": expected an int32 array");
  if (!py::isinstance<py::array_t<int32_t>>(arr)) {
    throw std::invalid_argument(std::string(name) + ": dtype must be int32, got " +
                                std::string(py::str(arr.dtype())));
  }
  if (!(arr.flags() & py::array::c_style)) {
    throw std::invalid_argument(std::string(name) + ": must be C-contiguous");
  }
  if (writable && !arr.writeable()) {
    throw std::invalid_argument(std::string(name) + ": must be writable");
  }
  if (arr.size() % deepinfer::kSegmentInts != 0) {
    throw std::invalid_argument(std::string(name) + ": size " + std::to_string(arr.size()) +
                                " is not a multiple of 4 int32 per segment");
  }
  return arr;
}

}  // namespace

void bind_load_plan(py::module_& m) {
  m.attr("ZERO_FILL_BLOCK") = deepinfer::kZeroFillBlock;
  m.attr("MAX_RING_SEGMENTS") = deepinfer::kMaxRingSegments;
  m.def("max_paged_segments", &deepinfer::max_paged_segments, py::arg("view_len"),
        py::arg("block_size"), "Upper bound on the segments of a paged plan.");
  m.def(
      "build_paged_load_plan",
      [](py::object out, std::vector<int32_t> block_table, int64_t block_size, int64_t num_tokens,
         int64_t view_len) {
        py::array buf = segment_buffer(out, "out", true);
        auto* data = static_cast<int32_t*>(buf.mutable_data());
        const int64_t capacity = buf.size() / deepinfer::kSegmentInts;
        py::gil_scoped_release release;
        return deepinfer::build_paged_plan(block_table.data(),
                                           static_cast<int64_t>(block_table.size()), block_size,
                                           num_tokens, view_len, data, capacity);
      },
      py::arg("out"), py::arg("block_table"), py::arg("block_size"), py::arg("num_tokens"),
      py::arg("view_len"),
      "Writes the paged-layout plan for rows [0, view_len) into out; returns the segment count.");
  m.def(
      "build_ring_load_plan",
      [](py::object out, int32_t ring_block_id, int64_t window, int64_t num_tokens) {
        py::array buf = segment_buffer(out, "out", true);
        auto* data = static_cast<int32_t*>(buf.mutable_data());
        const int64_t capacity = buf.size() / deepinfer::kSegmentInts;
        py::gil_scoped_release release;
        return deepinfer::build_ring_plan(ring_block_id, window, num_tokens, data, capacity);
      },
      py::arg("out"), py::arg("ring_block_id"), py::arg("window"), py::arg("num_tokens"),
      "Writes the ring-layout plan (view of `window` rows, oldest first) into out; returns the "
      "segment count.");
  m.def(
      "validate_segments",
      [](py::object segments, int64_t view_len, int64_t block_size,
         std::optional<int64_t> num_segments) {
        py::array buf = segment_buffer(segments, "segments", false);
        const int64_t rows = buf.size() / deepinfer::kSegmentInts;
        const int64_t n = num_segments.value_or(rows);
        if (n < 0 || n > rows) {
          throw std::invalid_argument("validate_segments: num_segments " + std::to_string(n) +
                                      " outside [0, " + std::to_string(rows) + "]");
        }
        const auto* data = static_cast<const int32_t*>(buf.data());
        py::gil_scoped_release release;
        deepinfer::validate_segments(data, n, view_len, block_size);
      },
      py::arg("segments"), py::arg("view_len"), py::arg("block_size"),
      py::arg("num_segments") = py::none(),
      "Raises ValueError unless the first num_segments segments cover [0, view_len) exactly "
      "once with source ranges inside a block.");
}
