// Python bindings for deepinfer/scheduler.h. Step outputs are read-only numpy views over the
// scheduler's buffers (valid until the next finish_step/schedule); std::invalid_argument ->
// ValueError, std::runtime_error -> RuntimeError.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bind_numpy_view.h"
#include "deepinfer/scheduler.h"

namespace py = pybind11;
using deepinfer::FinishReason;
using deepinfer::ImageSpan;
using deepinfer::Phase;
using deepinfer::readonly_view;
using deepinfer::Request;
using deepinfer::SamplingParams;
using deepinfer::Scheduler;
using deepinfer::SchedulerConfig;
using deepinfer::SchedulerMode;
using deepinfer::StepPlan;

namespace {

const char* reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kPreempted:
      return "preempted";
    case FinishReason::kPromptDone:
      return "prompt_done";
  }
  return "?";
}

const char* state_name(Request::State s) {
  switch (s) {
    case Request::State::kWaiting:
      return "waiting";
    case Request::State::kPrefilling:
      return "prefilling";
    case Request::State::kRunning:
      return "running";
  }
  return "?";
}

// Elementwise MAX over ranks of `values`, through the injected callable.
std::vector<int64_t> call_allreduce(const py::object& fn, std::vector<int64_t> values) {
  py::object out = fn(py::cast(values));
  auto result = out.cast<std::vector<int64_t>>();
  if (result.size() != values.size()) {
    throw std::invalid_argument("schedule: allreduce_max returned " +
                                std::to_string(result.size()) + " values for " +
                                std::to_string(values.size()));
  }
  return result;
}

const StepPlan& schedule(Scheduler& s, const py::object& allreduce_max) {
  if (s.config().mode != SchedulerMode::kNormal) {  // PROMPT / COMPLETION: no vote
    return s.finish_step(s.apply_vote1(false, false) != 0);
  }
  const int64_t local = s.vote1_local();
  int64_t all = local;
  int64_t any = local;
  if (!allreduce_max.is_none()) {
    auto v = call_allreduce(allreduce_max, {local, 1 - local});
    any = v[0];
    all = 1 - v[1];
  }
  int64_t admitted = s.apply_vote1(all != 0, any != 0);
  try {
    if (!allreduce_max.is_none()) admitted = call_allreduce(allreduce_max, {admitted})[0];
    return s.finish_step(admitted != 0);
  } catch (...) {
    s.cancel_step();  // the vote failed: leave the scheduler usable, nothing was applied
    throw;
  }
}

template <typename T>
py::array plan_view(py::object self, const std::vector<T>& (*field)(const StepPlan&)) {
  const StepPlan& p = self.cast<const StepPlan&>();
  return readonly_view(field(p).data(), {p.num_rows}, self);
}

}  // namespace

void bind_scheduler(py::module_& m) {
  py::enum_<SchedulerMode>(m, "SchedulerMode")
      .value("NORMAL", SchedulerMode::kNormal)
      .value("PROMPT", SchedulerMode::kPrompt)
      .value("COMPLETION", SchedulerMode::kCompletion);
  py::enum_<Phase>(m, "Phase").value("DECODE", Phase::kDecode).value("PREFILL", Phase::kPrefill);

  py::class_<SchedulerConfig>(m, "SchedulerConfig", "Scheduler limits, as the plan records them.")
      .def(py::init([](int64_t block_size, int64_t num_blocks, int64_t num_state_slots,
                       int64_t max_model_len, int64_t max_num_seqs, int64_t max_num_batched_tokens,
                       int64_t prefill_chunk_size, SchedulerMode mode, double prefill_watermark,
                       int64_t vote_interval_steps, int64_t lookahead_tokens,
                       std::vector<int64_t> decode_buckets,
                       std::vector<int64_t> prefill_token_buckets) {
             SchedulerConfig c;
             c.block_size = block_size;
             c.num_blocks = num_blocks;
             c.num_state_slots = num_state_slots;
             c.max_model_len = max_model_len;
             c.max_num_seqs = max_num_seqs;
             c.max_num_batched_tokens = max_num_batched_tokens;
             c.prefill_chunk_size = prefill_chunk_size;
             c.mode = mode;
             c.prefill_watermark = prefill_watermark;
             c.vote_interval_steps = vote_interval_steps;
             c.lookahead_tokens = lookahead_tokens;
             c.decode_buckets = std::move(decode_buckets);
             c.prefill_token_buckets = std::move(prefill_token_buckets);
             return c;
           }),
           py::kw_only(), py::arg("block_size"), py::arg("num_blocks"),
           py::arg("num_state_slots"), py::arg("max_model_len"), py::arg("max_num_seqs") = 256,
           py::arg("max_num_batched_tokens") = 8192, py::arg("prefill_chunk_size") = 8192,
           py::arg("mode") = SchedulerMode::kNormal, py::arg("prefill_watermark") = 0.90,
           py::arg("vote_interval_steps") = 0, py::arg("lookahead_tokens") = 0,
           py::arg("decode_buckets") = std::vector<int64_t>{},
           py::arg("prefill_token_buckets") = std::vector<int64_t>{})
      .def_readonly("block_size", &SchedulerConfig::block_size)
      .def_readonly("num_blocks", &SchedulerConfig::num_blocks)
      .def_readonly("num_state_slots", &SchedulerConfig::num_state_slots)
      .def_readonly("max_model_len", &SchedulerConfig::max_model_len)
      .def_readonly("max_num_seqs", &SchedulerConfig::max_num_seqs)
      .def_readonly("max_num_batched_tokens", &SchedulerConfig::max_num_batched_tokens)
      .def_readonly("prefill_chunk_size", &SchedulerConfig::prefill_chunk_size)
      .def_readonly("mode", &SchedulerConfig::mode)
      .def_readonly("prefill_watermark", &SchedulerConfig::prefill_watermark)
      .def_readonly("vote_interval_steps", &SchedulerConfig::vote_interval_steps)
      .def_readonly("lookahead_tokens", &SchedulerConfig::lookahead_tokens)
      .def_readonly("decode_buckets", &SchedulerConfig::decode_buckets)
      .def_readonly("prefill_token_buckets", &SchedulerConfig::prefill_token_buckets);

  py::class_<StepPlan>(m, "StepPlan",
                       "One step's batch: read-only views over the scheduler's buffers, valid "
                       "until the next step is scheduled.")
      .def_readonly("step_id", &StepPlan::step_id)
      .def_readonly("phase", &StepPlan::phase)
      .def_readonly("num_rows", &StepPlan::num_rows)
      .def_readonly("num_padded_rows", &StepPlan::num_padded_rows)
      .def_readonly("bucket", &StepPlan::bucket)
      .def_readonly("num_batched_tokens", &StepPlan::num_batched_tokens)
      .def_readonly("preempted", &StepPlan::preempted)
      .def_property_readonly("seq_ids",
                             [](py::object s) {
                               return plan_view<int64_t>(
                                   s, [](const StepPlan& p) -> const auto& { return p.seq_ids; });
                             })
      .def_property_readonly("epochs",
                             [](py::object s) {
                               return plan_view<int64_t>(
                                   s, [](const StepPlan& p) -> const auto& { return p.epochs; });
                             })
      .def_property_readonly(
          "start_pos",
          [](py::object s) {
            return plan_view<int32_t>(s,
                                      [](const StepPlan& p) -> const auto& { return p.start_pos; });
          })
      .def_property_readonly(
          "num_tokens",
          [](py::object s) {
            return plan_view<int32_t>(
                s, [](const StepPlan& p) -> const auto& { return p.num_tokens; });
          })
      .def_property_readonly("seq_lens",
                             [](py::object s) {
                               return plan_view<int32_t>(
                                   s, [](const StepPlan& p) -> const auto& { return p.seq_lens; });
                             })
      .def_property_readonly("samples",
                             [](py::object self) {
                               const StepPlan& p = self.cast<const StepPlan&>();
                               return readonly_view(p.samples.data(), {p.num_rows}, self,
                                                    py::dtype("bool"));
                             })
      .def_property_readonly("is_prefill",
                             [](py::object self) {
                               const StepPlan& p = self.cast<const StepPlan&>();
                               return readonly_view(p.is_prefill.data(), {p.num_rows}, self,
                                                    py::dtype("bool"));
                             })
      .def_property_readonly("block_tables",
                             [](py::object self) {
                               const StepPlan& p = self.cast<const StepPlan&>();
                               return readonly_view(p.block_tables.data(),
                                                    {p.num_padded_rows, p.block_table_width}, self);
                             })
      .def_property_readonly("state_slots",
                             [](py::object self) {
                               const StepPlan& p = self.cast<const StepPlan&>();
                               return readonly_view(p.state_slots.data(), {p.num_padded_rows},
                                                    self);
                             })
      .def_property_readonly("block_copies",
                             [](py::object self) {
                               const StepPlan& p = self.cast<const StepPlan&>();
                               const auto k = static_cast<int64_t>(p.block_copies.size() / 2);
                               return readonly_view(p.block_copies.data(), {k, 2}, self);
                             })
      .def_property_readonly("slot_copies", [](py::object self) {
        const StepPlan& p = self.cast<const StepPlan&>();
        const auto k = static_cast<int64_t>(p.slot_copies.size() / 2);
        return readonly_view(p.slot_copies.data(), {k, 2}, self);
      });

  py::class_<Scheduler>(m, "Scheduler",
                        "Step scheduler: two-stage DP phase vote, strict-FIFO chunked prefill "
                        "with image-span protection, decode by output length, preemption by "
                        "recompute; owns a BlockManager. See csrc/include/deepinfer/scheduler.h.")
      .def(py::init<SchedulerConfig>(), py::arg("config"))
      .def(
          "add_request",
          [](Scheduler& s, int64_t seq_id, int64_t prompt_len, int64_t max_new_tokens,
             std::vector<std::pair<int64_t, int64_t>> spans, bool structured_output,
             float temperature, float top_p, int32_t top_k, float min_p, int64_t seed) {
            std::vector<ImageSpan> image_spans;
            for (auto [b, e] : spans) image_spans.push_back({b, e});
            SamplingParams p;
            p.temperature = temperature;
            p.top_p = top_p;
            p.top_k = top_k;
            p.min_p = min_p;
            p.seed = seed;
            s.add_request(seq_id, prompt_len, max_new_tokens, std::move(image_spans),
                          structured_output, p);
          },
          py::arg("seq_id"), py::arg("prompt_len"), py::arg("max_new_tokens"),
          py::arg("image_spans") = std::vector<std::pair<int64_t, int64_t>>{},
          py::arg("structured_output") = false, py::kw_only(), py::arg("temperature") = 1.0f,
          py::arg("top_p") = 1.0f, py::arg("top_k") = 0, py::arg("min_p") = 0.0f,
          py::arg("seed") = -1)
      .def("fork", &Scheduler::fork, py::arg("parent_id"), py::arg("child_id"),
           py::arg("seed") = py::none(),
           "Forks a decoding sequence with no uncommitted step; the copies to perform come "
           "with the next StepPlan (block_copies, slot_copies).")
      .def("abort", &Scheduler::abort, py::arg("seq_id"))
      .def("finish", &Scheduler::finish, py::arg("seq_id"))
      .def("vote1_local", &Scheduler::vote1_local)
      .def("apply_vote1", &Scheduler::apply_vote1, py::arg("all_flag"), py::arg("any_flag"))
      .def("finish_step", &Scheduler::finish_step, py::arg("any_admitted"),
           py::return_value_policy::reference_internal)
      .def("cancel_step", &Scheduler::cancel_step,
           "Abandons a step between apply_vote1 and finish_step; nothing was applied.")
      .def("schedule", &schedule, py::arg("allreduce_max") = py::none(),
           py::return_value_policy::reference_internal,
           "vote1_local -> allreduce_max([v, 1-v]) -> apply_vote1 -> allreduce_max([admitted]) "
           "-> finish_step. allreduce_max(list[int]) -> list[int] is the elementwise MAX over DP "
           "ranks (None = one rank); not called in PROMPT / COMPLETION mode.")
      .def(
          "commit",
          [](Scheduler& s, int64_t step_id,
             py::array_t<int32_t, py::array::c_style | py::array::forcecast> num_accepted,
             py::object finished) {
            const uint8_t* fin = nullptr;
            py::array_t<uint8_t, py::array::c_style | py::array::forcecast> fin_arr;
            if (!finished.is_none()) {
              fin_arr = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>::ensure(
                  finished);
              if (!fin_arr || fin_arr.size() != num_accepted.size()) {
                throw std::invalid_argument(
                    "commit: finished must be a bool array as long as num_accepted");
              }
              fin = fin_arr.data();
            }
            return s.commit(step_id, num_accepted.data(), fin, num_accepted.size());
          },
          py::arg("step_id"), py::arg("num_accepted"), py::arg("finished") = py::none(),
          "Applies a step's sampled results; returns the row indices dropped as stale.")
      .def("take_finished",
           [](Scheduler& s) {
             py::list out;
             for (const auto& e : s.take_finished()) {
               out.append(py::make_tuple(e.seq_id, reason_name(e.reason)));
             }
             return out;
           })
      .def(
          "request",
          [](const Scheduler& s, int64_t seq_id) -> py::object {
            const Request* r = s.find(seq_id);
            if (r == nullptr) return py::none();
            py::dict d;
            d["state"] = state_name(r->state);
            d["epoch"] = r->epoch;
            d["num_computed_tokens"] = r->num_computed_tokens;
            d["num_output_tokens"] = r->num_output_tokens;
            d["num_pending_samples"] = r->num_pending_samples;
            return d;
          },
          py::arg("seq_id"), "The request's progress as a dict, or None if not live.")
      .def_property_readonly("config", &Scheduler::config)
      .def_property_readonly("block_table_width", &Scheduler::block_table_width)
      .def_property_readonly("row_capacity", &Scheduler::row_capacity)
      .def_property_readonly("step_pending", &Scheduler::step_pending)
      .def_property_readonly("num_steps", &Scheduler::num_steps)
      .def("num_uncommitted_steps", &Scheduler::num_uncommitted_steps)
      .def("waiting_ids", &Scheduler::waiting_ids)
      .def("prefilling_ids", &Scheduler::prefilling_ids)
      .def("running_ids", &Scheduler::running_ids)
      .def("num_free_blocks", [](const Scheduler& s) { return s.block_manager().num_free_blocks(); })
      .def("num_free_state_slots",
           [](const Scheduler& s) { return s.block_manager().num_free_state_slots(); })
      .def("usage", [](const Scheduler& s) { return s.block_manager().usage(); })
      .def(
          "block_table",
          [](const Scheduler& s, int64_t id) { return s.block_manager().block_table(id); },
          py::arg("seq_id"))
      .def(
          "state_slot",
          [](const Scheduler& s, int64_t id) { return s.block_manager().state_slot(id); },
          py::arg("seq_id"))
      .def(
          "num_reserved_tokens",
          [](const Scheduler& s, int64_t id) { return s.block_manager().num_tokens(id); },
          py::arg("seq_id"), "Tokens the sequence's block table covers (its room).")
      .def(
          "ref_count",
          [](const Scheduler& s, int64_t b) { return s.block_manager().ref_count(b); },
          py::arg("block_id"))
      .def("check_integrity",
           [](const Scheduler& s) { s.block_manager().check_integrity(); });
}
