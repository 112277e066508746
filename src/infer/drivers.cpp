// Closed- and open-loop drivers of an inference session (see drivers.hpp).
#include "infer/drivers.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <random>
#include <thread>

#include "core/errors.hpp"
#include "measure/window.hpp"

namespace cnnergy {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

}  // namespace

LatencySummary summarize_latencies(std::vector<double> ms) {
  LatencySummary s;
  s.count = ms.size();
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  auto rank = [&](double p) {  // nearest rank: the smallest value with at least p of the samples at or below it
    const auto k = static_cast<std::size_t>(std::ceil(p * static_cast<double>(ms.size())));
    return ms[std::clamp<std::size_t>(k, 1, ms.size()) - 1];
  };
  double sum = 0;
  for (double v : ms) sum += v;
  s.mean_ms = sum / static_cast<double>(ms.size());
  s.p50_ms = rank(0.50);
  s.p90_ms = rank(0.90);
  s.p99_ms = rank(0.99);
  s.max_ms = ms.back();
  return s;
}

ClosedLoopResult run_closed_loop(InferenceSession& session, Backend& backend, EnergyProbe* probe,
                                 const Tensor& host_images, const ClosedLoopSpec& spec) {
  if (spec.requests < 1 || spec.warmup < 0 || spec.windows < 1 || spec.window_s <= 0 || spec.idle_s < 0)
    throw InvalidArgument("closed loop: requests >= 1, warm-up >= 0, windows >= 1, window and idle seconds > 0");
  ClosedLoopResult r;
  r.batch = session.batch();
  Tensor host_logits;
  // Idle power first, while nothing of ours runs on the device.
  if (probe != nullptr && spec.idle_s > 0) {
    backend.synchronize();
    probe->begin();
    std::this_thread::sleep_for(std::chrono::duration<double>(spec.idle_s));
    if (auto idle = probe->end()) r.idle_power_w = idle->average_watts;
  }
  for (std::int64_t i = 0; i < spec.warmup + 2; ++i) session.run_host(host_images, host_logits);  // + recording
  backend.synchronize();
  if (spec.profile_range) {  // Nsight Compute with --profile-from-start off sees this request alone
    backend.profiler_range(true);
    session.run();
    backend.synchronize();
    backend.profiler_range(false);
  }
  r.setup_peak_bytes = backend.memory_stats().peak_bytes;
  backend.reset_peak_memory();  // what serving itself holds, apart from setup and the algorithm search
  std::vector<double> e2e, dev;
  e2e.reserve(static_cast<std::size_t>(spec.requests));
  dev.reserve(static_cast<std::size_t>(spec.requests));
  if (spec.mark_requests) std::printf("cnnergy_request,begin\n");
  for (std::int64_t i = 0; i < spec.requests; ++i) {
    const auto t0 = Clock::now();
    session.run_host(host_images, host_logits);
    e2e.push_back(ms_since(t0, Clock::now()));
    if (spec.mark_requests) std::printf("cnnergy_request,%lld,%.6f\n", static_cast<long long>(i), e2e.back());
  }
  if (spec.mark_requests) {
    std::printf("cnnergy_request,end\n");
    std::fflush(stdout);
  }
  {
    const std::vector<Tensor> images(static_cast<std::size_t>(std::min<std::int64_t>(spec.requests, 50)), host_images);
    std::vector<Tensor> logits(images.size(), host_logits);  // one host buffer, written in turn
    const double seconds = session.run_host_pipelined(images, logits);
    if (seconds > 0)
      r.end_to_end_pipelined_images_per_s =
          static_cast<double>(images.size()) * static_cast<double>(session.batch()) / seconds;
  }
  for (std::int64_t i = 0; i < spec.requests; ++i) {
    const auto t0 = Clock::now();
    session.run();
    backend.synchronize();
    dev.push_back(ms_since(t0, Clock::now()));
  }
  r.end_to_end = summarize_latencies(std::move(e2e));
  r.device = summarize_latencies(std::move(dev));
  WindowSpec ws;
  ws.min_seconds = spec.window_s;
  ws.repetitions = spec.windows;
  ws.warmup_iterations = 2;
  const WindowResult w = measure_windows(backend, probe, [&] { session.run(); }, ws);
  const auto batch = static_cast<double>(session.batch());
  r.ms_per_batch = w.ms_per_iteration;
  r.images_per_s = w.ms_per_iteration.median > 0 ? batch * 1000.0 / w.ms_per_iteration.median : 0;
  if (w.joules_per_iteration) {
    Summary per_image = *w.joules_per_iteration;
    for (double* v : {&per_image.median, &per_image.mean, &per_image.stddev, &per_image.min, &per_image.max})
      *v /= batch;
    r.joules_per_image = per_image;
    r.energy_uncertainty_j_per_image = w.uncertainty_joules_per_iteration / batch;
  }
  r.average_power_w = w.watts;
  for (const auto& s : w.windows)
    if (s.energy) r.peak_power_w = std::max(r.peak_power_w.value_or(0.0), s.energy->peak_watts);
  r.short_window = w.any_short_window;
  r.serving_peak_bytes = backend.memory_stats().peak_bytes;
  return r;
}

OpenLoopResult run_open_loop(InferenceSession& session, const Tensor& host_images, const OpenLoopSpec& spec) {
  if (!(spec.qps > 0) || !std::isfinite(spec.qps))
    throw InvalidArgument("--qps must be a rate above 0 requests per second, got " + std::to_string(spec.qps));
  if (spec.max_wait_ms < 0 || !(spec.duration_s > 0))
    throw InvalidArgument("open loop: --max-wait-ms >= 0 and --duration-s > 0");
  OpenLoopResult r;
  r.offered_qps = spec.qps;
  // Arrival times (seconds from the start), Poisson: exponential gaps at the offered rate.
  std::mt19937_64 rng(spec.seed);
  std::exponential_distribution<double> gap(spec.qps);
  std::vector<double> arrivals;
  for (double t = gap(rng); t < spec.duration_s; t += gap(rng)) arrivals.push_back(t);
  if (arrivals.empty()) arrivals.push_back(0.0);
  r.arrived = static_cast<std::int64_t>(arrivals.size());
  const auto max_batch = static_cast<std::size_t>(session.batch());
  // A sustained rate ends with the last batch shortly after the last arrival; a rate beyond the
  // device's keeps a growing backlog. Requests still unserved this long after the last arrival mean
  // saturation (the verdict the run's end would give), so the loop stops there: it never hangs on a
  // rate the device cannot serve, and a saturated run lasts the spec's duration plus this slack.
  const double late_s = arrivals.back() + std::max(1.0, 0.2 * spec.duration_s);
  Tensor host_logits;
  session.run_host(host_images, host_logits);  // warm-up: algorithms and the recording, before the clock starts
  session.run_host(host_images, host_logits);
  std::vector<double> latency_ms, queue_ms;
  std::size_t next = 0;     // first request not yet served
  std::size_t arrived = 0;  // requests arrived so far (arrivals are sorted, so this only grows)
  const auto start = Clock::now();
  auto now_s = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  double busy_until = 0;
  while (next < arrivals.size()) {
    double t = now_s();
    if (t > late_s) {
      r.saturated = true;
      break;
    }
    while (arrived < arrivals.size() && arrivals[arrived] <= t) ++arrived;
    const std::size_t queued = arrived - next;
    if (queued == 0) {  // idle until the next arrival
      std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.0, arrivals[next] - t)));
      continue;
    }
    const double oldest_wait_ms = (t - arrivals[next]) * 1000.0;
    if (queued < max_batch && oldest_wait_ms < spec.max_wait_ms) {
      double wake = arrivals[next] + spec.max_wait_ms / 1000.0;
      if (arrived < arrivals.size()) wake = std::min(wake, arrivals[arrived]);
      std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.0, wake - t)));
      continue;
    }
    const std::size_t take = std::min(queued, max_batch);
    const double begin = now_s();
    session.run_host(host_images, host_logits);
    const double done = now_s();
    busy_until = done;
    for (std::size_t i = next; i < next + take; ++i) {
      latency_ms.push_back((done - arrivals[i]) * 1000.0);
      queue_ms.push_back((begin - arrivals[i]) * 1000.0);
    }
    next += take;
    ++r.batches;
  }
  r.served = static_cast<std::int64_t>(next);
  const double span_s = std::max(busy_until, arrivals.back());
  r.achieved_qps = span_s > 0 ? static_cast<double>(r.served) / span_s : 0;
  r.mean_batch = r.batches > 0 ? static_cast<double>(r.served) / static_cast<double>(r.batches) : 0;
  r.latency = summarize_latencies(std::move(latency_ms));
  r.queueing = summarize_latencies(std::move(queue_ms));
  if (!r.saturated && busy_until > late_s) r.saturated = true;  // the last batch itself ended that late
  if (r.saturated)
    r.note = "saturated: " + std::to_string(r.served) + " of " + std::to_string(r.arrived) +
             " requests served; the device cannot sustain " + std::to_string(spec.qps) + " requests/s at batch " +
             std::to_string(session.batch());
  return r;
}

}  // namespace cnnergy
