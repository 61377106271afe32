// Sample preparation: see deepinfer/sample_prep.h for the contract.
#include "deepinfer/sample_prep.h"

#include <stdexcept>
#include <vector>

#include "deepinfer/sampling_params.h"
#include "deepinfer/str_cat.h"

namespace deepinfer {

void validate_sampling_params(const SamplingParams& p, int64_t seq_id) {
  if (!(p.temperature >= 0.0f)) {
    throw std::invalid_argument(
        cat("sampling params of sequence ", seq_id, ": temperature must be >= 0, got ",
            p.temperature));
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    throw std::invalid_argument(
        cat("sampling params of sequence ", seq_id, ": top_p must be in (0, 1], got ", p.top_p));
  }
  if (p.top_k < 0) {
    throw std::invalid_argument(cat("sampling params of sequence ", seq_id,
                                    ": top_k must be >= 0 (0 = disabled), got ", p.top_k));
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    throw std::invalid_argument(
        cat("sampling params of sequence ", seq_id, ": min_p must be in [0, 1], got ", p.min_p));
  }
  if (p.seed < -1) {
    throw std::invalid_argument(cat("sampling params of sequence ", seq_id,
                                    ": seed must be >= 0 or -1 (none), got ", p.seed));
  }
}

int64_t prepare_sample(const Scheduler& scheduler, const SampleBatch& b, const SampleMeta& out) {
  const int64_t max_len = scheduler.config().max_model_len;
  const int64_t block_size = scheduler.config().block_size;
  const BlockManager& bm = scheduler.block_manager();
  thread_local std::vector<const Request*> live;  // per row: the request, or nullptr if stale
  live.assign(static_cast<size_t>(b.num_rows), nullptr);
  for (int64_t i = 0; i < b.num_rows; ++i) {
    if (b.is_prefill[i] != b.is_prefill[0]) {
      throw std::invalid_argument(cat("prepare_sample: batch mixes prefill and decode rows (row 0 ",
                                      "is ", b.is_prefill[0] ? "prefill" : "decode", ", row ", i,
                                      " is ", b.is_prefill[i] ? "prefill" : "decode", ")"));
    }
    const int64_t q = b.query_lens[i];
    const int64_t len = b.seq_lens[i];
    if (q < 1 || len < q || len > max_len) {
      throw std::invalid_argument(cat("prepare_sample: row ", i, " (sequence ", b.seq_ids[i],
                                      "): need 1 <= query_len (", q, ") <= seq_len (", len,
                                      ") <= max_model_len (", max_len, ")"));
    }
    const Request* r = scheduler.find(b.seq_ids[i]);
    if (r == nullptr || r->epoch != b.epochs[i]) continue;
    const int64_t covered =
        r->state == Request::State::kWaiting
            ? 0
            : static_cast<int64_t>(bm.block_table(r->seq_id).size()) * block_size;
    if (len > covered) {
      throw std::invalid_argument(cat("prepare_sample: row ", i, " (sequence ", b.seq_ids[i],
                                      "): seq_len ", len, " exceeds the ", covered,
                                      " tokens its block table covers"));
    }
    live[static_cast<size_t>(i)] = r;
  }
  int64_t stale = 0;
  int64_t flat = 0;
  const SamplingParams defaults;
  for (int64_t i = 0; i < b.num_rows; ++i) {
    const Request* r = live[static_cast<size_t>(i)];
    stale += r == nullptr ? 1 : 0;
    const SamplingParams& p = r != nullptr ? r->sampling : defaults;
    out.temperature[i] = p.temperature;
    out.top_p[i] = p.top_p;
    out.top_k[i] = p.top_k;
    out.min_p[i] = p.min_p;
    out.seeds[i] = p.seed;
    out.offsets[i] = b.seq_lens[i];
    flat += b.query_lens[i];
    out.logits_index[i] = static_cast<int32_t>(flat - 1);
  }
  return stale;
}

}  // namespace deepinfer
