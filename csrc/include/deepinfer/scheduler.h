// deepinfer/scheduler.h — the step scheduler: phase vote, FIFO chunked prefill, decode, preemption.
//
// The rules below are the contract; tests/csrc/scheduler_model.py implements the same rules in
// Python and is the oracle of the differential tests (seed §3.4-3.7, architecture.md §5).
//
// Step protocol (one step = one state-machine round the caller drives, so the two all-reduces of
// the DP vote can be injected; schedule() in the bindings chains them):
//   1. vote1_local()              -> 1 if this rank has prefill work (waiting or partly prefilled)
//   2. apply_vote1(all, any)      -> 1 if this rank tentatively admitted prefill work (vote 2 value)
//   3. finish_step(any_admitted)  -> StepPlan. NORMAL mode: PREFILL iff some rank admitted, else
//      DECODE, so a step where no rank admitted is never PREFILL. A rank in a PREFILL step that
//      admitted nothing runs an empty batch. Tentative admission only touches the BlockManager
//      in finish_step, so when the phase is DECODE it is dropped without side effects.
//   Between 2 and 3 no other mutating call is allowed (std::invalid_argument); cancel_step()
//   abandons the round. Not thread-safe: one caller at a time (prepare_sample, which runs
//   without the GIL, reads the scheduler and must not overlap a mutating call).
// Vote 1 rule: step k (0-based count of finished steps) is an ALL point iff vote_interval_steps
// > 0 and k % vote_interval_steps == vote_interval_steps - 1; there want = ALL (every rank has
// prefill work), elsewhere want = ANY. vote_interval_steps = 0 disables ALL points. PROMPT mode:
// want = true and every step is PREFILL (possibly empty); COMPLETION mode: every step is DECODE.
//
// Prefill admission (strict FIFO: the first request that fails a check stops admission; later
// ones wait behind it — head-of-line blocking is the documented behaviour):
//   * partly prefilled sequences continue first (admission order), then the waiting queue;
//     new sequences only while block usage <= prefill_watermark (continuations ignore it, so a
//     prompt that crosses the watermark half-way still completes);
//   * chunk = min(remaining, prefill_chunk_size, token budget left); if the chunk end falls
//     strictly inside an image span [b, e): the chunk ends at b when b > chunk start, and when
//     the span starts the chunk it is taken whole (even if longer than prefill_chunk_size) if it
//     fits the token budget, else nothing is taken (stop);
//   * a new sequence needs: live sequences < max_num_seqs, a free state slot, and free blocks
//     >= blocks for its WHOLE prefill target + reserve + blocks promised to the unfinished
//     prefills before it (so started prefills can always finish); a continuation needs its
//     chunk's new blocks + reserve. Only the chunk's blocks are allocated.
//   * the prefill target is prompt_len + outputs so far (recompute after preemption).
// Decode: running sequences sorted by (committed output tokens, seq_id), scheduled from the short
// end while rows < max_num_seqs and rows < max_num_batched_tokens. A row needs room for
// 1 + lookahead_tokens tokens past its position; a table that must grow grows to whole blocks. Under block pressure the longest-output
// unscheduled sequence is preempted while another remains; if no row was scheduled yet and
// still no room, partly prefilled sequences are preempted (latest first); a sequence that still
// does not fit is skipped. A sequence whose committed + in-flight outputs reach max_new_tokens
// gets no row (its last token is in flight). Preemption = recompute: blocks + slot freed,
// progress reset, new epoch, pushed to the FRONT of the waiting queue; structured-output
// requests finish with reason PREEMPTED instead. COMPLETION mode first admits waiting requests
// FIFO straight into decode (their KV is treated as already computed), then decodes.
// Fork (parallel sampling): a decoding sequence with nothing in flight is forked by prefix
// (BlockManager::fork with the valid KV length); the copies come with the next StepPlan.
// Epochs: every add_request, fork and reset draws a fresh epoch from one scheduler-wide counter,
// so a deferred (zero-overhead) commit for a reset, finished or re-added id never matches.
// Commit: per row of a finished step, num_accepted (prefill: exactly 1; decode: 1..1+lookahead)
// for rows that sample; rows whose sequence is gone or whose epoch differs are dropped and
// reported. A sequence finishes on the caller's flag (STOP), on reaching max_new_tokens
// (LENGTH), or in PROMPT mode after its first sampled token (PROMPT_DONE).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "deepinfer/block_manager.h"
#include "deepinfer/sampling_params.h"

namespace deepinfer {

enum class SchedulerMode : int32_t { kNormal = 0, kPrompt = 1, kCompletion = 2 };
enum class Phase : int32_t { kDecode = 0, kPrefill = 1 };
enum class FinishReason : int32_t { kStop = 0, kLength = 1, kPreempted = 2, kPromptDone = 3 };

struct SchedulerConfig {
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 8192;
  int64_t prefill_chunk_size = 8192;
  SchedulerMode mode = SchedulerMode::kNormal;
  double prefill_watermark = 0.90;  // fraction of usable blocks in use
  int64_t vote_interval_steps = 0;  // ALL-vote every N-th step; 0 = always ANY
  int64_t lookahead_tokens = 0;     // extra room reserved per decode row
  std::vector<int64_t> decode_buckets;         // sorted planned decode batch sizes (rows)
  std::vector<int64_t> prefill_token_buckets;  // sorted planned prefill token counts
  int64_t block_size = 16;
  int64_t num_blocks = 0;
  int64_t num_state_slots = 0;
  int64_t max_model_len = 0;
};

struct ImageSpan {
  int64_t begin = 0;  // first prompt position of the span
  int64_t end = 0;    // one past the last
};

struct Request {
  enum class State { kWaiting, kPrefilling, kRunning };
  int64_t seq_id = 0;
  int64_t prompt_len = 0;
  int64_t max_new_tokens = 0;
  std::vector<ImageSpan> image_spans;  // sorted, disjoint, inside [0, prompt_len)
  bool structured_output = false;
  SamplingParams sampling;
  State state = State::kWaiting;
  int64_t epoch = 0;
  int64_t num_computed_tokens = 0;  // KV positions scheduled so far (optimistic under ZOS)
  int64_t num_output_tokens = 0;    // committed sampled tokens
  int64_t num_pending_samples = 0;  // scheduled sampling rows not yet committed
  int64_t prefill_target() const { return prompt_len + num_output_tokens; }
};

// One step's batch. Arrays are owned by the Scheduler and rewritten by the next finish_step.
struct StepPlan {
  int64_t step_id = -1;
  Phase phase = Phase::kDecode;
  int64_t num_rows = 0;
  int64_t num_padded_rows = 0;   // rows of block_tables / state_slots (decode: the bucket)
  int64_t bucket = -1;           // decode: rows bucket; prefill: token bucket; -1 = none fits
  int64_t num_batched_tokens = 0;
  int64_t block_table_width = 0;
  std::vector<int64_t> seq_ids;       // [num_rows]
  std::vector<int64_t> epochs;        // [num_rows]
  std::vector<int32_t> start_pos;     // [num_rows] first position of the row's tokens
  std::vector<int32_t> num_tokens;    // [num_rows] tokens fed by the row
  std::vector<int32_t> seq_lens;      // [num_rows] start_pos + num_tokens
  std::vector<uint8_t> samples;       // [num_rows] 1 if the row samples a token
  std::vector<uint8_t> is_prefill;    // [num_rows] phase == kPrefill, per row (for sampling)
  std::vector<int32_t> block_tables;  // [capacity, width]; rows >= num_rows point at block 0
  std::vector<int32_t> state_slots;   // [capacity]; padding rows use slot 0
  std::vector<int64_t> preempted;     // sequences preempted (reset or finished) in this step
  std::vector<int32_t> block_copies;  // [k, 2] (src, dst) blocks to copy before the forward
  std::vector<int32_t> slot_copies;   // [k, 2] (src, dst) state slots to copy before it
};

struct FinishedEvent {
  int64_t seq_id;
  FinishReason reason;
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerConfig config);

  // Validates and queues a request. std::invalid_argument: existing id, bad lengths, a
  // sequence longer than max_model_len or one that can never fit in the cache, bad spans.
  void add_request(int64_t seq_id, int64_t prompt_len, int64_t max_new_tokens,
                   std::vector<ImageSpan> image_spans, bool structured_output,
                   SamplingParams sampling);
  // Forks a decoding sequence (parallel sampling). The child shares the parent's full KV
  // blocks (reference counts), gets a copy of the partially filled one and of the state slot
  // (emitted as block_copies / slot_copies of the next StepPlan, to perform before its forward;
  // dropped if the child is gone by then), the parent's progress, limits and sampling
  // parameters (seed replaced when given) and a fresh epoch. std::invalid_argument: unknown
  // parent, existing child, parent not decoding or with an uncommitted step (commit first);
  // std::runtime_error: no free block / state slot, or max_num_seqs live sequences.
  void fork(int64_t parent_id, int64_t child_id, std::optional<int64_t> seed);
  void abort(int64_t seq_id);   // drops a live request; frees its blocks + slot
  void finish(int64_t seq_id);  // caller-side finish (no event); frees its blocks + slot

  int32_t vote1_local() const;
  int32_t apply_vote1(bool all_have_work, bool any_has_work);
  const StepPlan& finish_step(bool any_admitted);
  // Abandons a step between apply_vote1 and finish_step (e.g. the vote-2 all-reduce failed):
  // the tentative admission is dropped, nothing else changed. No-op when no step is pending.
  void cancel_step();

  // Applies a finished step's sampled results (num_rows must equal that step's rows).
  // Returns the row indices dropped as stale.
  std::vector<int64_t> commit(int64_t step_id, const int32_t* num_accepted,
                              const uint8_t* finished, int64_t num_rows);
  std::vector<FinishedEvent> take_finished();

  const SchedulerConfig& config() const { return config_; }
  const BlockManager& block_manager() const { return bm_; }
  const StepPlan& last_plan() const { return plan_; }
  const Request* find(int64_t seq_id) const;
  bool step_pending() const { return pending_; }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_prefilling() const { return static_cast<int64_t>(prefilling_.size()); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_steps() const { return next_step_id_; }
  int64_t num_uncommitted_steps() const { return static_cast<int64_t>(in_flight_.size()); }
  int64_t block_table_width() const { return width_; }
  int64_t row_capacity() const { return capacity_; }
  SampleBuffers& sample_buffers() { return sample_buffers_; }
  std::vector<int64_t> waiting_ids() const { return {waiting_.begin(), waiting_.end()}; }
  std::vector<int64_t> prefilling_ids() const { return prefilling_; }
  std::vector<int64_t> running_ids() const { return running_; }

 private:
  struct Admission {
    int64_t seq_id;
    int64_t end;  // prefill progress after the chunk
    bool is_new;
  };
  struct PendingCopy {
    int64_t child_id, child_epoch;
    std::optional<std::pair<int32_t, int32_t>> block;
    std::pair<int32_t, int32_t> slot;
  };
  struct InFlight {
    std::vector<int64_t> seq_ids, epochs;
    std::vector<uint8_t> samples;
    Phase phase;
  };

  int64_t blocks_for(int64_t num_tokens) const;
  Request& get(int64_t seq_id, const char* op);
  void require_no_pending(const char* op) const;
  int64_t chunk_end(const Request& r, int64_t budget) const;
  void admit_tentatively();
  void build_prefill();
  void build_decode();
  void preempt(Request& r);
  void release(int64_t seq_id);  // frees blocks + slot, removes from every queue and the map
  void remove_from(std::vector<int64_t>& ids, int64_t seq_id);
  void begin_rows(Phase phase);
  void push_row(const Request& r, int64_t start, int64_t n, bool samples);
  void end_rows();
  int64_t pick_bucket(const std::vector<int64_t>& buckets, int64_t value) const;

  SchedulerConfig config_;
  BlockManager bm_;
  int64_t width_ = 0;
  int64_t capacity_ = 0;
  int64_t next_epoch_ = 0;
  int64_t next_step_id_ = 0;
  bool pending_ = false;
  bool want_ = false;
  std::unordered_map<int64_t, Request> requests_;
  std::deque<int64_t> waiting_;
  std::vector<int64_t> prefilling_;  // admission order
  std::vector<int64_t> running_;     // decode set (any order; sorted per step)
  std::vector<Admission> admissions_;
  std::vector<Request*> order_;      // scratch for decode ordering
  using InFlightMap = std::unordered_map<int64_t, InFlight>;
  InFlightMap in_flight_;
  std::vector<InFlightMap::node_type> spare_in_flight_;  // committed nodes, reused (no malloc)
  std::vector<FinishedEvent> finished_;
  std::vector<PendingCopy> pending_copies_;
  StepPlan plan_;
  SampleBuffers sample_buffers_;
  // Incremental block tables: what each buffer row holds now.
  std::vector<int64_t> row_seq_;    // seq id (or -1 = sentinel row)
  std::vector<int64_t> row_epoch_;
  std::vector<int32_t> row_len_;    // table entries written
};

}  // namespace deepinfer
