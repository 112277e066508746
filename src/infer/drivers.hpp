// The two ways `cnnergy infer` drives an inference session, after MLPerf's single-stream and server
// scenarios: closed loop (requests back to back: latency percentiles per batch, end to end with the
// copies and on the device alone, throughput and energy per image from measurement windows) and open
// loop (Poisson arrivals at a rate, a batching window: achieved rate, latency and queueing time).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "infer/session.hpp"
#include "measure/energy_probe.hpp"
#include "measure/statistics.hpp"

namespace cnnergy {

// Nearest-rank percentiles of a set of latencies (milliseconds).
struct LatencySummary {
  std::size_t count = 0;
  double mean_ms = 0, p50_ms = 0, p90_ms = 0, p99_ms = 0, max_ms = 0;
};
LatencySummary summarize_latencies(std::vector<double> ms);

struct ClosedLoopSpec {
  std::int64_t requests = 200;  // timed requests (after warm-up)
  std::int64_t warmup = 10;
  double window_s = 1.0;        // energy windows: at least this long (docs/methodology.md: >= 1 s)
  int windows = 3;
  double idle_s = 1.0;          // idle-power window before the measurement (0: none)
  bool profile_range = false;   // one device request after the warm-up inside the profiler range (ncu)
  // Print "cnnergy_request,begin" / "cnnergy_request,I,MS" after each timed end-to-end request /
  // "cnnergy_request,end" to stdout (C stdio, the stream oneDNN's verbose lines go to), so that a
  // profile's lines can be attributed to the timed requests (bench/cpu_infer_profile.py).
  bool mark_requests = false;
};

struct ClosedLoopResult {
  std::int64_t batch = 0;
  LatencySummary end_to_end;  // host images -> host logits, copies included
  LatencySummary device;      // the request on device-resident data (run + synchronize)
  // End to end with two requests in flight (InferenceSession::run_host_pipelined: the next
  // request's upload on the copy stream overlaps this one's compute), host images to host logits.
  double end_to_end_pipelined_images_per_s = 0;
  Summary ms_per_batch;       // back-to-back requests in the energy windows
  double images_per_s = 0;    // batch / median ms_per_batch
  std::optional<Summary> joules_per_image;
  std::optional<Summary> average_power_w;
  std::optional<double> peak_power_w;
  std::optional<double> idle_power_w;
  double energy_uncertainty_j_per_image = 0;
  bool short_window = false;
  std::size_t setup_peak_bytes = 0;    // the device allocator's peak before the timed requests (setup, search)
  std::size_t serving_peak_bytes = 0;  // its peak from the timed requests on (where the backend tracks one)
};

// `host_images` (fp32 NCHW, the session's batch) are the request payload. `probe` may be null.
ClosedLoopResult run_closed_loop(InferenceSession& session, Backend& backend, EnergyProbe* probe,
                                 const Tensor& host_images, const ClosedLoopSpec& spec);

struct OpenLoopSpec {
  double qps = 100;          // offered rate, requests (images) per second, Poisson arrivals
  double max_wait_ms = 2;    // a batch starts when it is full or its oldest request waited this long
  double duration_s = 5;     // arrivals are generated for this long
  std::uint64_t seed = 1;
};

struct OpenLoopResult {
  double offered_qps = 0, achieved_qps = 0;
  std::int64_t arrived = 0, served = 0, batches = 0;
  double mean_batch = 0;
  LatencySummary latency;  // arrival -> result on the host
  LatencySummary queueing;  // arrival -> start of its batch
  bool saturated = false;  // the device could not keep up: requests unserved max(1 s, 0.2 x duration) after the last arrival
  std::string note;
};

// Batches run on `session` (its batch is the batching window's largest batch; partial batches are
// padded, as fixed-shape serving engines do). Never runs longer than about 2 x duration + 5 s.
OpenLoopResult run_open_loop(InferenceSession& session, const Tensor& host_images, const OpenLoopSpec& spec);

}  // namespace cnnergy
