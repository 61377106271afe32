// Scheduler: see deepinfer/scheduler.h for the contract.
#include "deepinfer/scheduler.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "deepinfer/str_cat.h"

namespace deepinfer {

namespace {

void check_sorted_positive(const std::vector<int64_t>& v, const char* name) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] < 1 || (i > 0 && v[i] <= v[i - 1])) {
      throw std::invalid_argument(
          cat("Scheduler: ", name, " must be strictly increasing positive sizes"));
    }
  }
}

}  // namespace

Scheduler::Scheduler(SchedulerConfig config)
    : config_(std::move(config)),
      bm_(config_.num_blocks, config_.block_size, config_.num_state_slots) {
  const SchedulerConfig& c = config_;
  if (c.max_num_seqs < 1) {
    throw std::invalid_argument(cat("Scheduler: max_num_seqs must be >= 1, got ", c.max_num_seqs));
  }
  if (c.max_num_batched_tokens < 1) {
    throw std::invalid_argument(cat("Scheduler: max_num_batched_tokens must be >= 1, got ",
                                    c.max_num_batched_tokens));
  }
  if (c.prefill_chunk_size < 1) {
    throw std::invalid_argument(
        cat("Scheduler: prefill_chunk_size must be >= 1, got ", c.prefill_chunk_size));
  }
  if (c.mode != SchedulerMode::kNormal && c.mode != SchedulerMode::kPrompt &&
      c.mode != SchedulerMode::kCompletion) {
    throw std::invalid_argument("Scheduler: mode must be NORMAL, PROMPT or COMPLETION");
  }
  if (!(c.prefill_watermark >= 0.0 && c.prefill_watermark <= 1.0)) {
    throw std::invalid_argument(
        cat("Scheduler: prefill_watermark must be in [0, 1], got ", c.prefill_watermark));
  }
  if (c.vote_interval_steps < 0 || c.lookahead_tokens < 0) {
    throw std::invalid_argument("Scheduler: vote_interval_steps and lookahead_tokens must be >= 0");
  }
  if (c.max_model_len < 1 || c.max_model_len > INT32_MAX / 2) {
    throw std::invalid_argument(
        cat("Scheduler: max_model_len must be in [1, 2^30), got ", c.max_model_len));
  }
  check_sorted_positive(c.decode_buckets, "decode_buckets");
  check_sorted_positive(c.prefill_token_buckets, "prefill_token_buckets");
  width_ = std::min(blocks_for(c.max_model_len + c.lookahead_tokens), bm_.num_usable_blocks());
  capacity_ = c.max_num_seqs;
  if (!c.decode_buckets.empty()) capacity_ = std::max(capacity_, c.decode_buckets.back());
  const auto cap = static_cast<size_t>(capacity_);
  plan_.seq_ids.reserve(cap);
  plan_.epochs.reserve(cap);
  plan_.start_pos.reserve(cap);
  plan_.num_tokens.reserve(cap);
  plan_.seq_lens.reserve(cap);
  plan_.samples.reserve(cap);
  plan_.is_prefill.reserve(cap);
  plan_.block_tables.assign(cap * static_cast<size_t>(width_), 0);
  plan_.state_slots.assign(cap, 0);
  plan_.block_table_width = width_;
  row_seq_.assign(cap, -1);
  row_epoch_.assign(cap, -1);
  row_len_.assign(cap, 0);
}

int64_t Scheduler::blocks_for(int64_t num_tokens) const {
  return (num_tokens + config_.block_size - 1) / config_.block_size;
}

const Request* Scheduler::find(int64_t seq_id) const {
  auto it = requests_.find(seq_id);
  return it == requests_.end() ? nullptr : &it->second;
}

Request& Scheduler::get(int64_t seq_id, const char* op) {
  auto it = requests_.find(seq_id);
  if (it == requests_.end()) {
    throw std::invalid_argument(
        cat(op, ": unknown sequence id ", seq_id, " (never added, finished or aborted)"));
  }
  return it->second;
}

void Scheduler::require_no_pending(const char* op) const {
  if (pending_) {
    throw std::invalid_argument(
        cat(op, ": a step is between apply_vote1 and finish_step; finish it first"));
  }
}

void Scheduler::add_request(int64_t seq_id, int64_t prompt_len, int64_t max_new_tokens,
                            std::vector<ImageSpan> image_spans, bool structured_output,
                            SamplingParams sampling) {
  require_no_pending("add_request");
  if (requests_.count(seq_id)) {
    throw std::invalid_argument(cat("add_request: sequence id ", seq_id, " already exists"));
  }
  if (prompt_len < 1 || max_new_tokens < 1) {
    throw std::invalid_argument(cat("add_request: sequence ", seq_id,
                                    ": prompt_len and max_new_tokens must be >= 1, got ",
                                    prompt_len, " and ", max_new_tokens));
  }
  if (prompt_len + max_new_tokens > config_.max_model_len) {
    throw std::invalid_argument(cat("add_request: sequence ", seq_id, " of ", prompt_len,
                                    " prompt + ", max_new_tokens,
                                    " new tokens is longer than max_model_len ",
                                    config_.max_model_len));
  }
  const int64_t room = prompt_len + max_new_tokens + config_.lookahead_tokens;
  if (blocks_for(room) + BlockManager::kReserveBlocks > bm_.num_usable_blocks()) {
    throw std::invalid_argument(cat("add_request: sequence ", seq_id, " needs ", blocks_for(room),
                                    " blocks (", room, " tokens incl. look-ahead) and can never ",
                                    "fit in the cache (", bm_.num_usable_blocks(),
                                    " usable blocks, ", BlockManager::kReserveBlocks,
                                    " kept in reserve)"));
  }
  int64_t prev_end = 0;
  for (const ImageSpan& s : image_spans) {
    if (s.begin < prev_end || s.end <= s.begin || s.end > prompt_len) {
      throw std::invalid_argument(cat("add_request: sequence ", seq_id, ": image span [", s.begin,
                                      ", ", s.end, ") must be non-empty, sorted, disjoint and ",
                                      "inside the prompt [0, ", prompt_len, ")"));
    }
    if (s.end - s.begin > config_.max_num_batched_tokens) {
      throw std::invalid_argument(cat("add_request: sequence ", seq_id, ": image span of ",
                                      s.end - s.begin, " tokens exceeds max_num_batched_tokens ",
                                      config_.max_num_batched_tokens, " and can never be ",
                                      "scheduled"));
    }
    prev_end = s.end;
  }
  validate_sampling_params(sampling, seq_id);
  Request r;
  r.seq_id = seq_id;
  r.prompt_len = prompt_len;
  r.max_new_tokens = max_new_tokens;
  r.image_spans = std::move(image_spans);
  r.structured_output = structured_output;
  r.sampling = sampling;
  r.epoch = next_epoch_++;
  requests_.emplace(seq_id, std::move(r));
  waiting_.push_back(seq_id);
}

void Scheduler::remove_from(std::vector<int64_t>& ids, int64_t seq_id) {
  auto it = std::find(ids.begin(), ids.end(), seq_id);
  if (it != ids.end()) ids.erase(it);
}

void Scheduler::release(int64_t seq_id) {
  Request& r = requests_.at(seq_id);
  switch (r.state) {
    case Request::State::kWaiting:
      waiting_.erase(std::find(waiting_.begin(), waiting_.end(), seq_id));
      break;
    case Request::State::kPrefilling:
      remove_from(prefilling_, seq_id);
      break;
    case Request::State::kRunning:
      remove_from(running_, seq_id);
      break;
  }
  if (bm_.has_sequence(seq_id)) bm_.free(seq_id);
  requests_.erase(seq_id);
}

void Scheduler::fork(int64_t parent_id, int64_t child_id, std::optional<int64_t> seed) {
  require_no_pending("fork");
  const Request& parent = get(parent_id, "fork");
  if (requests_.count(child_id)) {
    throw std::invalid_argument(cat("fork: child sequence id ", child_id, " already exists"));
  }
  if (parent.state != Request::State::kRunning || parent.num_pending_samples != 0) {
    throw std::invalid_argument(cat("fork: sequence ", parent_id, " must be decoding with no ",
                                    "uncommitted step (commit its steps first)"));
  }
  if (static_cast<int64_t>(running_.size() + prefilling_.size()) >= config_.max_num_seqs) {
    throw std::runtime_error(
        cat("fork: ", config_.max_num_seqs, " live sequences already (max_num_seqs)"));
  }
  Request child = parent;
  child.seq_id = child_id;
  if (seed) child.sampling.seed = *seed;
  validate_sampling_params(child.sampling, child_id);
  // Only the valid KV is shared: the parent's table may reach past it (look-ahead room). The
  // table covers it already; the block manager's count may lag (decode grows whole blocks).
  // Catching the count up allocates nothing, so a refused fork below changes nothing real.
  const int64_t kv = parent.num_computed_tokens;
  if (kv > bm_.num_tokens(parent_id)) bm_.append(parent_id, kv - bm_.num_tokens(parent_id));
  const ForkResult copies = bm_.fork(parent_id, child_id, kv);
  child.epoch = next_epoch_++;
  pending_copies_.push_back({child_id, child.epoch, copies.block_copy, copies.slot_copy});
  requests_.emplace(child_id, std::move(child));
  running_.push_back(child_id);
}

void Scheduler::abort(int64_t seq_id) {
  require_no_pending("abort");
  get(seq_id, "abort");
  release(seq_id);
}

void Scheduler::finish(int64_t seq_id) {
  require_no_pending("finish");
  get(seq_id, "finish");
  release(seq_id);
}

int32_t Scheduler::vote1_local() const {
  return (!waiting_.empty() || !prefilling_.empty()) ? 1 : 0;
}

int64_t Scheduler::chunk_end(const Request& r, int64_t budget) const {
  const int64_t start = r.num_computed_tokens;
  const int64_t n = std::min({r.prefill_target() - start, config_.prefill_chunk_size, budget});
  if (n <= 0) return start;
  int64_t end = start + n;
  for (const ImageSpan& s : r.image_spans) {
    if (s.begin >= end) break;
    if (s.begin < end && end < s.end) {
      if (s.begin > start) return s.begin;                  // end the chunk before the span
      return s.end - start <= budget ? s.end : start;       // span starts the chunk: whole or none
    }
  }
  return end;
}

void Scheduler::admit_tentatively() {
  const int64_t reserve = BlockManager::kReserveBlocks;
  int64_t budget = config_.max_num_batched_tokens;
  int64_t free_blocks = bm_.num_free_blocks();
  int64_t free_slots = bm_.num_free_state_slots();
  int64_t promised = 0;
  for (int64_t id : prefilling_) {
    const Request& r = requests_.at(id);
    promised += std::max<int64_t>(
        0, blocks_for(r.prefill_target()) - blocks_for(r.num_computed_tokens));
  }
  int64_t live = static_cast<int64_t>(running_.size() + prefilling_.size());
  const bool allow_new = bm_.usage() <= config_.prefill_watermark;
  for (int64_t id : prefilling_) {
    const Request& r = requests_.at(id);
    const int64_t end = chunk_end(r, budget);
    if (end <= r.num_computed_tokens) return;
    const int64_t need = blocks_for(end) - blocks_for(r.num_computed_tokens);
    if (need + reserve > free_blocks) return;
    admissions_.push_back({id, end, false});
    budget -= end - r.num_computed_tokens;
    free_blocks -= need;
    promised -= need;
  }
  if (!allow_new) return;
  for (int64_t id : waiting_) {
    const Request& r = requests_.at(id);
    if (live >= config_.max_num_seqs || free_slots < 1) return;
    const int64_t end = chunk_end(r, budget);
    if (end <= r.num_computed_tokens) return;
    const int64_t whole = blocks_for(r.prefill_target());
    if (whole + reserve + promised > free_blocks) return;
    const int64_t need = blocks_for(end);
    admissions_.push_back({id, end, true});
    budget -= end;
    free_blocks -= need;
    promised += whole - need;
    free_slots -= 1;
    live += 1;
  }
}

int32_t Scheduler::apply_vote1(bool all_have_work, bool any_has_work) {
  require_no_pending("apply_vote1");
  admissions_.clear();
  switch (config_.mode) {
    case SchedulerMode::kPrompt:
      want_ = true;
      break;
    case SchedulerMode::kCompletion:
      want_ = false;
      break;
    case SchedulerMode::kNormal: {
      const int64_t n = config_.vote_interval_steps;
      const bool all_point = n > 0 && next_step_id_ % n == n - 1;
      want_ = all_point ? all_have_work : any_has_work;
      break;
    }
  }
  if (want_) admit_tentatively();
  pending_ = true;
  return admissions_.empty() ? 0 : 1;
}

int64_t Scheduler::pick_bucket(const std::vector<int64_t>& buckets, int64_t value) const {
  auto it = std::lower_bound(buckets.begin(), buckets.end(), value);
  return it == buckets.end() ? -1 : *it;
}

void Scheduler::begin_rows(Phase phase) {
  plan_.phase = phase;
  plan_.num_rows = 0;
  plan_.num_batched_tokens = 0;
  plan_.seq_ids.clear();
  plan_.epochs.clear();
  plan_.start_pos.clear();
  plan_.num_tokens.clear();
  plan_.seq_lens.clear();
  plan_.samples.clear();
  plan_.is_prefill.clear();
  plan_.preempted.clear();
}

void Scheduler::push_row(const Request& r, int64_t start, int64_t n, bool samples) {
  const int64_t row = plan_.num_rows++;
  plan_.seq_ids.push_back(r.seq_id);
  plan_.epochs.push_back(r.epoch);
  plan_.start_pos.push_back(static_cast<int32_t>(start));
  plan_.num_tokens.push_back(static_cast<int32_t>(n));
  plan_.seq_lens.push_back(static_cast<int32_t>(start + n));
  plan_.samples.push_back(samples ? 1 : 0);
  plan_.is_prefill.push_back(plan_.phase == Phase::kPrefill ? 1 : 0);
  plan_.num_batched_tokens += n;
  // Incremental block table: rewrite only what changed since this buffer row was last written.
  const SequenceView seq = bm_.view(r.seq_id);
  const std::vector<int32_t>& table = seq.blocks;
  const auto len = static_cast<int32_t>(table.size());
  int32_t* dst = plan_.block_tables.data() + row * width_;
  int32_t from = 0;
  if (row_seq_[row] == r.seq_id && row_epoch_[row] == r.epoch && row_len_[row] <= len) {
    from = row_len_[row];
  } else if (row_len_[row] > len) {
    std::memset(dst + len, 0, sizeof(int32_t) * static_cast<size_t>(row_len_[row] - len));
  }
  if (len > from) {
    std::memcpy(dst + from, table.data() + from, sizeof(int32_t) * static_cast<size_t>(len - from));
  }
  row_seq_[row] = r.seq_id;
  row_epoch_[row] = r.epoch;
  row_len_[row] = len;
  plan_.state_slots[row] = seq.slot;
}

void Scheduler::end_rows() {
  const int64_t rows = plan_.num_rows;
  plan_.block_copies.clear();
  plan_.slot_copies.clear();
  for (const PendingCopy& c : pending_copies_) {
    const Request* child = find(c.child_id);
    if (child == nullptr || child->epoch != c.child_epoch) continue;  // gone since the fork
    if (c.block) {
      plan_.block_copies.push_back(c.block->first);
      plan_.block_copies.push_back(c.block->second);
    }
    plan_.slot_copies.push_back(c.slot.first);
    plan_.slot_copies.push_back(c.slot.second);
  }
  pending_copies_.clear();
  if (plan_.phase == Phase::kDecode) {
    plan_.bucket = pick_bucket(config_.decode_buckets, rows);
    plan_.num_padded_rows = plan_.bucket >= 0 ? plan_.bucket : rows;
  } else {
    plan_.bucket = pick_bucket(config_.prefill_token_buckets, plan_.num_batched_tokens);
    plan_.num_padded_rows = rows;
  }
  // Padding rows (and rows beyond them that held a table before) point at sentinel block 0.
  for (int64_t row = rows; row < capacity_; ++row) {
    if (row_len_[row] > 0) {
      std::memset(plan_.block_tables.data() + row * width_, 0,
                  sizeof(int32_t) * static_cast<size_t>(row_len_[row]));
    }
    row_seq_[row] = -1;
    row_epoch_[row] = -1;
    row_len_[row] = 0;
    plan_.state_slots[row] = 0;
  }
}

void Scheduler::build_prefill() {
  begin_rows(Phase::kPrefill);
  for (const Admission& a : admissions_) {
    Request& r = requests_.at(a.seq_id);
    const int64_t start = r.num_computed_tokens;
    if (a.is_new) {
      waiting_.pop_front();  // admissions of new sequences are a prefix of the waiting queue
      bm_.allocate(r.seq_id, a.end);
      r.state = Request::State::kPrefilling;
      prefilling_.push_back(r.seq_id);
    } else {
      bm_.append(r.seq_id, a.end - start);
    }
    r.num_computed_tokens = a.end;
    const bool last = a.end == r.prefill_target();
    if (last) {
      r.num_pending_samples += 1;
      r.state = Request::State::kRunning;
      remove_from(prefilling_, r.seq_id);
      running_.push_back(r.seq_id);
    }
    push_row(r, start, a.end - start, last);
  }
  admissions_.clear();
  end_rows();
}

void Scheduler::preempt(Request& r) {
  plan_.preempted.push_back(r.seq_id);
  if (r.structured_output) {
    finished_.push_back({r.seq_id, FinishReason::kPreempted});
    release(r.seq_id);
    return;
  }
  if (r.state == Request::State::kRunning) {
    remove_from(running_, r.seq_id);
  } else {
    remove_from(prefilling_, r.seq_id);
  }
  bm_.free(r.seq_id);
  r.state = Request::State::kWaiting;
  r.num_computed_tokens = 0;
  r.num_pending_samples = 0;
  r.epoch = next_epoch_++;
  waiting_.push_front(r.seq_id);
}

void Scheduler::build_decode() {
  begin_rows(Phase::kDecode);
  if (config_.mode == SchedulerMode::kCompletion) {
    while (!waiting_.empty() &&
           static_cast<int64_t>(running_.size() + prefilling_.size()) < config_.max_num_seqs) {
      Request& r = requests_.at(waiting_.front());
      if (!bm_.can_allocate(r.prefill_target())) break;
      bm_.allocate(r.seq_id, r.prefill_target());
      r.num_computed_tokens = r.prefill_target();
      r.state = Request::State::kRunning;
      waiting_.pop_front();
      running_.push_back(r.seq_id);
    }
  }
  // running_ is kept in decode order from the previous step, so this insertion sort is
  // linear when few keys changed; keys are unique (seq_id breaks ties).
  order_.clear();
  for (int64_t id : running_) order_.push_back(&requests_.at(id));
  auto before = [](const Request* a, const Request* b) {
    if (a->num_output_tokens != b->num_output_tokens) {
      return a->num_output_tokens < b->num_output_tokens;
    }
    return a->seq_id < b->seq_id;
  };
  for (size_t i = 1; i < order_.size(); ++i) {
    Request* x = order_[i];
    size_t j = i;
    for (; j > 0 && before(x, order_[j - 1]); --j) order_[j] = order_[j - 1];
    order_[j] = x;
  }
  for (size_t i = 0; i < order_.size(); ++i) running_[i] = order_[i]->seq_id;
  const int64_t per_row_room = 1 + config_.lookahead_tokens;
  size_t lo = 0;
  size_t hi = order_.size();
  while (lo < hi) {
    if (plan_.num_rows >= config_.max_num_seqs ||
        plan_.num_rows + 1 > config_.max_num_batched_tokens) {
      break;
    }
    Request& r = *order_[lo];
    if (r.num_output_tokens + r.num_pending_samples >= r.max_new_tokens) {
      ++lo;  // its last token is in flight
      continue;
    }
    const int64_t room = r.num_computed_tokens + per_row_room;
    const int64_t have = bm_.num_tokens(r.seq_id);
    const int64_t need = blocks_for(room) - blocks_for(have);
    while (need > bm_.num_free_blocks() && hi - 1 > lo) {
      preempt(*order_[--hi]);
    }
    while (need > bm_.num_free_blocks() && plan_.num_rows == 0 && !prefilling_.empty()) {
      preempt(requests_.at(prefilling_.back()));
    }
    if (need > bm_.num_free_blocks()) {
      ++lo;  // skipped this step
      continue;
    }
    // Grow the table to whole blocks: the next steps need no append until a block fills.
    if (need > 0) bm_.append(r.seq_id, blocks_for(room) * config_.block_size - have);
    const int64_t start = r.num_computed_tokens;
    r.num_computed_tokens += 1;
    r.num_pending_samples += 1;
    push_row(r, start, 1, true);
    ++lo;
  }
  end_rows();
}

const StepPlan& Scheduler::finish_step(bool any_admitted) {
  if (!pending_) {
    throw std::invalid_argument("finish_step: no step in progress (call apply_vote1 first)");
  }
  if (!admissions_.empty() && !any_admitted && config_.mode == SchedulerMode::kNormal) {
    throw std::invalid_argument(
        "finish_step: any_admitted is false but this rank admitted prefill work (vote 2 must be "
        "the OR over ranks of apply_vote1's result)");
  }
  Phase phase = Phase::kDecode;
  switch (config_.mode) {
    case SchedulerMode::kPrompt:
      phase = Phase::kPrefill;
      break;
    case SchedulerMode::kCompletion:
      phase = Phase::kDecode;
      break;
    case SchedulerMode::kNormal:
      phase = any_admitted ? Phase::kPrefill : Phase::kDecode;
      break;
  }
  pending_ = false;
  if (phase == Phase::kPrefill) {
    build_prefill();
  } else {
    admissions_.clear();  // roll back: nothing was applied yet
    build_decode();
  }
  plan_.step_id = next_step_id_++;
  InFlightMap::node_type node;
  if (spare_in_flight_.empty()) {
    node = InFlightMap{{plan_.step_id, InFlight{}}}.extract(plan_.step_id);
  } else {
    node = std::move(spare_in_flight_.back());
    spare_in_flight_.pop_back();
    node.key() = plan_.step_id;
  }
  InFlight& f = node.mapped();
  f.seq_ids.assign(plan_.seq_ids.begin(), plan_.seq_ids.end());
  f.epochs.assign(plan_.epochs.begin(), plan_.epochs.end());
  f.samples.assign(plan_.samples.begin(), plan_.samples.end());
  f.phase = plan_.phase;
  in_flight_.insert(std::move(node));
  return plan_;
}

void Scheduler::cancel_step() {
  admissions_.clear();
  pending_ = false;
}

std::vector<int64_t> Scheduler::commit(int64_t step_id, const int32_t* num_accepted,
                                       const uint8_t* finished, int64_t num_rows) {
  require_no_pending("commit");
  auto it = in_flight_.find(step_id);
  if (it == in_flight_.end()) {
    throw std::invalid_argument(
        cat("commit: unknown step id ", step_id, " (never scheduled or already committed)"));
  }
  const InFlight& f = it->second;
  if (num_rows != static_cast<int64_t>(f.seq_ids.size())) {
    throw std::invalid_argument(cat("commit: step ", step_id, " has ", f.seq_ids.size(),
                                    " rows, got ", num_rows, " results"));
  }
  const int64_t max_accept = f.phase == Phase::kPrefill ? 1 : 1 + config_.lookahead_tokens;
  std::vector<int64_t> dropped;
  // Validate everything before mutating anything.
  for (int64_t i = 0; i < num_rows; ++i) {
    const Request* r = find(f.seq_ids[i]);
    if (r == nullptr || r->epoch != f.epochs[i]) continue;
    if (f.samples[i] && (num_accepted[i] < 1 || num_accepted[i] > max_accept)) {
      throw std::invalid_argument(cat("commit: step ", step_id, " row ", i, " (sequence ",
                                      f.seq_ids[i], ") accepted ", num_accepted[i],
                                      " tokens, must be in [1, ", max_accept, "]"));
    }
  }
  for (int64_t i = 0; i < num_rows; ++i) {
    auto rit = requests_.find(f.seq_ids[i]);
    if (rit == requests_.end() || rit->second.epoch != f.epochs[i]) {
      dropped.push_back(i);
      continue;
    }
    if (!f.samples[i]) continue;
    Request& r = rit->second;
    const int64_t a = num_accepted[i];
    r.num_output_tokens += a;
    r.num_computed_tokens += a - 1;
    r.num_pending_samples -= 1;
    FinishReason reason;
    bool done = true;
    if (finished != nullptr && finished[i]) {
      reason = FinishReason::kStop;
    } else if (r.num_output_tokens >= r.max_new_tokens) {
      reason = FinishReason::kLength;
    } else if (config_.mode == SchedulerMode::kPrompt) {
      reason = FinishReason::kPromptDone;
    } else {
      done = false;
    }
    if (done) {
      finished_.push_back({r.seq_id, reason});
      release(r.seq_id);
    }
  }
  spare_in_flight_.push_back(in_flight_.extract(it));
  return dropped;
}

std::vector<FinishedEvent> Scheduler::take_finished() {
  std::vector<FinishedEvent> out;
  out.swap(finished_);
  return out;
}

}  // namespace deepinfer
