// Python bindings for deepinfer/block_manager.h (std::invalid_argument -> ValueError,
// std::runtime_error -> RuntimeError, by pybind11's default translators).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include "deepinfer/block_manager.h"

namespace py = pybind11;

void bind_block_manager(py::module_& m) {
  using deepinfer::BlockManager;
  py::class_<BlockManager>(m, "BlockManager",
                           "Paged KV blocks + per-sequence state slots, allocated as one unit. "
                           "Block 0 and state slot 0 are reserved sentinels; allocate/fork keep "
                           "one free block in reserve for decode appends; free lists are LIFO.")
      .def(py::init<int64_t, int64_t, int64_t>(), py::arg("num_blocks"), py::arg("block_size"),
           py::arg("num_state_slots"))
      .def_property_readonly_static("RESERVE_BLOCKS",
                                    [](py::object) { return BlockManager::kReserveBlocks; })
      .def("can_allocate", &BlockManager::can_allocate, py::arg("num_tokens"))
      .def("allocate", &BlockManager::allocate, py::arg("seq_id"), py::arg("num_tokens"))
      .def("can_append", &BlockManager::can_append, py::arg("seq_id"),
           py::arg("num_new_tokens") = 1)
      .def("append", &BlockManager::append, py::arg("seq_id"), py::arg("num_new_tokens") = 1,
           "Grows the sequence; returns the block ids added to its table.")
      .def(
          "can_fork",
          [](const BlockManager& self, int64_t parent_id, std::optional<int64_t> num_tokens) {
            return num_tokens ? self.can_fork(parent_id, *num_tokens) : self.can_fork(parent_id);
          },
          py::arg("parent_id"), py::arg("num_tokens") = py::none())
      .def(
          "fork",
          [](BlockManager& self, int64_t parent_id, int64_t child_id,
             std::optional<int64_t> num_tokens) {
            auto r = num_tokens ? self.fork(parent_id, child_id, *num_tokens)
                                : self.fork(parent_id, child_id);
            return py::make_tuple(r.block_copy ? py::cast(*r.block_copy) : py::none(),
                                  py::cast(r.slot_copy));
          },
          py::arg("parent_id"), py::arg("child_id"), py::arg("num_tokens") = py::none(),
          "Forks the first num_tokens tokens (default: all). Returns ((src_block, dst_block) or None, (src_slot, dst_slot)): copies to perform.")
      .def("free", &BlockManager::free, py::arg("seq_id"))
      .def_property_readonly("num_blocks", &BlockManager::num_blocks)
      .def_property_readonly("num_usable_blocks", &BlockManager::num_usable_blocks)
      .def_property_readonly("block_size", &BlockManager::block_size)
      .def_property_readonly("num_state_slots", &BlockManager::num_state_slots)
      .def("num_free_blocks", &BlockManager::num_free_blocks)
      .def("num_free_state_slots", &BlockManager::num_free_state_slots)
      .def("num_sequences", &BlockManager::num_sequences)
      .def("has_sequence", &BlockManager::has_sequence, py::arg("seq_id"))
      .def("__contains__", &BlockManager::has_sequence, py::arg("seq_id"))
      .def("block_table", &BlockManager::block_table, py::arg("seq_id"))
      .def("state_slot", &BlockManager::state_slot, py::arg("seq_id"))
      .def("num_tokens", &BlockManager::num_tokens, py::arg("seq_id"))
      .def("ref_count", &BlockManager::ref_count, py::arg("block_id"))
      .def("usage", &BlockManager::usage)
      .def("check_integrity", &BlockManager::check_integrity);
}
