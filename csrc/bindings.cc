// The pybind11 module deepinfer._C. Only registration lives here: each component
// binds itself in its own bind_<component>.cc .
#include <pybind11/pybind11.h>

#include "deepinfer/version.h"

namespace py = pybind11;

void bind_block_manager(py::module_& m);
void bind_load_plan(py::module_& m);
void bind_scheduler(py::module_& m);
void bind_sample_prep(py::module_& m);

PYBIND11_MODULE(_C, m) {
  m.doc() = "deepinfer C++ runtime components (scheduler, block manager, load plans)";
  m.attr("ABI_VERSION") = deepinfer::kAbiVersion;
  m.def(
      "abi_version", []() { return deepinfer::kAbiVersion; },
      "The ABI version compiled into this extension.");
  bind_block_manager(m);
  bind_load_plan(m);
  bind_scheduler(m);
  bind_sample_prep(m);  // adds methods to Scheduler: after bind_scheduler
}
