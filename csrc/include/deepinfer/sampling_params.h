// deepinfer/sampling_params.h — per-request sampling parameters, registered with the request.
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer {

struct SamplingParams {
  float temperature = 1.0f;  // >= 0; 0 = greedy
  float top_p = 1.0f;        // in (0, 1]
  int32_t top_k = 0;         // >= 0; 0 = disabled
  float min_p = 0.0f;        // in [0, 1]
  int64_t seed = -1;         // -1 = no per-request seed (the sampler's global generator)
};

// Per-row sampling metadata: raw pointers into caller buffers (each >= num_rows long).
struct SampleMeta {
  float* temperature = nullptr;
  float* top_p = nullptr;
  int32_t* top_k = nullptr;
  float* min_p = nullptr;
  int64_t* seeds = nullptr;
  int64_t* offsets = nullptr;
  int32_t* logits_index = nullptr;
};

// Scheduler-owned metadata buffers (grown on demand) and the last fill's row counts.
struct SampleBuffers {
  std::vector<float> temperature, top_p, min_p;
  std::vector<int32_t> top_k, logits_index;
  std::vector<int64_t> seeds, offsets;
  int64_t num_rows = 0;
  int64_t num_stale = 0;
  SampleMeta ensure(int64_t rows) {
    const auto n = static_cast<size_t>(rows);
    if (temperature.size() < n) {
      temperature.resize(n);
      top_p.resize(n);
      min_p.resize(n);
      top_k.resize(n);
      logits_index.resize(n);
      seeds.resize(n);
      offsets.resize(n);
    }
    return {temperature.data(), top_p.data(), top_k.data(), min_p.data(),
            seeds.data(),       offsets.data(), logits_index.data()};
  }
};

// Throws std::invalid_argument naming the first field out of range.
void validate_sampling_params(const SamplingParams& params, int64_t seq_id);

}  // namespace deepinfer
