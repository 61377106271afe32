// Python bindings for deepinfer/sample_prep.h: Scheduler.prepare_sample (scheduler-owned
// buffers, returned as a SampleMeta of read-only views) and Scheduler.prepare_sample_into
// (caller buffers, e.g. pinned tensors seen through numpy). The GIL is released while filling.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>

#include "bind_numpy_view.h"
#include "deepinfer/sample_prep.h"

namespace py = pybind11;
using deepinfer::readonly_view;
using deepinfer::SampleBatch;
using deepinfer::SampleBuffers;
using deepinfer::SampleMeta;
using deepinfer::Scheduler;

namespace {

template <typename T>
using In = py::array_t<T, py::array::c_style | py::array::forcecast>;

struct BatchArrays {
  In<int64_t> seq_ids, epochs;
  In<uint8_t> is_prefill;
  In<int32_t> query_lens, seq_lens;

  SampleBatch view() const {
    const auto n = seq_ids.size();
    if (epochs.size() != n || is_prefill.size() != n || query_lens.size() != n ||
        seq_lens.size() != n) {
      throw std::invalid_argument(
          "prepare_sample: seq_ids, epochs, is_prefill, query_lens and seq_lens must have the "
          "same length");
    }
    return {n, seq_ids.data(), epochs.data(), is_prefill.data(), query_lens.data(),
            seq_lens.data()};
  }
};

template <typename T>
T* out_buffer(const py::handle& obj, const char* name, int64_t rows) {
  py::array arr = py::array::ensure(obj);
  if (!arr || !py::isinstance<py::array_t<T>>(arr)) {
    throw std::invalid_argument(std::string("prepare_sample_into: ") + name + " must be a " +
                                std::string(py::str(py::dtype::of<T>())) + " array");
  }
  if (!(arr.flags() & py::array::c_style) || !arr.writeable() || arr.size() < rows) {
    throw std::invalid_argument(std::string("prepare_sample_into: ") + name +
                                " must be C-contiguous, writable and hold >= " +
                                std::to_string(rows) + " elements");
  }
  return static_cast<T*>(arr.mutable_data());
}

}  // namespace

void bind_sample_prep(py::module_& m) {
  py::class_<SampleBuffers>(m, "SampleMeta",
                            "Per-row sampling metadata of the last prepare_sample (read-only "
                            "views, valid until the next call).")
      .def_readonly("num_rows", &SampleBuffers::num_rows)
      .def_readonly("num_stale", &SampleBuffers::num_stale)
#define DEEPINFER_VIEW(name)                                                     \
  .def_property_readonly(#name, [](py::object self) {                            \
    const SampleBuffers& b = self.cast<const SampleBuffers&>();                  \
    return readonly_view(b.name.data(), {b.num_rows}, self);                     \
  })
      DEEPINFER_VIEW(temperature) DEEPINFER_VIEW(top_p) DEEPINFER_VIEW(top_k)
      DEEPINFER_VIEW(min_p) DEEPINFER_VIEW(seeds) DEEPINFER_VIEW(offsets)
      DEEPINFER_VIEW(logits_index);
#undef DEEPINFER_VIEW

  auto cls = py::reinterpret_borrow<py::class_<Scheduler>>(m.attr("Scheduler"));
  cls.def(
      "prepare_sample",
      [](Scheduler& s, In<int64_t> seq_ids, In<int64_t> epochs, In<uint8_t> is_prefill,
         In<int32_t> query_lens, In<int32_t> seq_lens) -> SampleBuffers& {
        BatchArrays a{seq_ids, epochs, is_prefill, query_lens, seq_lens};
        const SampleBatch batch = a.view();
        SampleBuffers& buf = s.sample_buffers();
        {
          py::gil_scoped_release release;
          const SampleMeta out = buf.ensure(batch.num_rows);
          buf.num_rows = 0;
          buf.num_stale = deepinfer::prepare_sample(s, batch, out);
          buf.num_rows = batch.num_rows;
        }
        return buf;
      },
      py::arg("seq_ids"), py::arg("epochs"), py::arg("is_prefill"), py::arg("query_lens"),
      py::arg("seq_lens"), py::return_value_policy::reference_internal,
      "Validates one batch (no prefill/decode mix; 1 <= query_len <= seq_len <= max_model_len; "
      "seq_len within the block table) and fills the scheduler-owned SampleMeta.");
  cls.def(
      "prepare_sample_into",
      [](Scheduler& s, py::tuple out, In<int64_t> seq_ids, In<int64_t> epochs,
         In<uint8_t> is_prefill, In<int32_t> query_lens, In<int32_t> seq_lens) {
        BatchArrays a{seq_ids, epochs, is_prefill, query_lens, seq_lens};
        const SampleBatch batch = a.view();
        if (out.size() != 7) {
          throw std::invalid_argument(
              "prepare_sample_into: out must be (temperature f32, top_p f32, top_k i32, min_p "
              "f32, seeds i64, offsets i64, logits_index i32)");
        }
        const int64_t n = batch.num_rows;
        const SampleMeta meta{out_buffer<float>(out[0], "temperature", n),
                              out_buffer<float>(out[1], "top_p", n),
                              out_buffer<int32_t>(out[2], "top_k", n),
                              out_buffer<float>(out[3], "min_p", n),
                              out_buffer<int64_t>(out[4], "seeds", n),
                              out_buffer<int64_t>(out[5], "offsets", n),
                              out_buffer<int32_t>(out[6], "logits_index", n)};
        py::gil_scoped_release release;
        return deepinfer::prepare_sample(s, batch, meta);
      },
      py::arg("out"), py::arg("seq_ids"), py::arg("epochs"), py::arg("is_prefill"),
      py::arg("query_lens"), py::arg("seq_lens"),
      "Same as prepare_sample into caller buffers; returns the number of stale rows.");
}
