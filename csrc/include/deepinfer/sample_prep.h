// deepinfer/sample_prep.h — per-row sampling metadata for one scheduled batch (seed §3.8).
//
// Contract:
//  * A batch is all prefill rows or all decode rows; a mix is std::invalid_argument.
//  * Per row: query_len >= 1, query_len <= seq_len <= max_model_len, else std::invalid_argument.
//  * A row whose (seq_id, epoch) is live in the scheduler must also be consistent with it:
//    seq_len <= the tokens its block table covers, else std::invalid_argument. A row whose
//    sequence finished, was aborted or was reset since it was scheduled (zero-overhead commits
//    run between scheduling and sampling) is stale: it gets default parameters and is counted;
//    its result is dropped at commit. An id the scheduler never held is treated the same way.
//  * Outputs per row: temperature, top_p, top_k, min_p, seed (-1 = none), generator offset
//    (= seq_len: the position of the sampled token, so draws do not depend on batching) and
//    logits_index (index of the row's last token in the flattened batch, for logits gathering).
//  * Pure C++ over raw pointers: the bindings release the GIL around it.
#pragma once

#include <cstdint>

#include "deepinfer/scheduler.h"

namespace deepinfer {

struct SampleBatch {
  int64_t num_rows = 0;
  const int64_t* seq_ids = nullptr;
  const int64_t* epochs = nullptr;
  const uint8_t* is_prefill = nullptr;
  const int32_t* query_lens = nullptr;
  const int32_t* seq_lens = nullptr;
};


// Validates the batch (nothing is written when it is rejected) and fills out[0, num_rows).
// Returns the number of stale rows.
int64_t prepare_sample(const Scheduler& scheduler, const SampleBatch& batch, const SampleMeta& out);

}  // namespace deepinfer
