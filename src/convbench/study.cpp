// run_study(): one backend per precision x layout, then every problem x implementation x direction
// as a cell: make the kernel with the name in that direction's field (fallback off, so a name that
// cannot run the shape says so instead of timing another algorithm), time it with device events,
// meter it in isolation windows, and turn every error into the cell's status.
#include "convbench/study.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "convbench/counter_profiler.hpp"
#include "convbench/transfers.hpp"
#include "core/errors.hpp"
#include "core/rng.hpp"
#include "measure/energy_probe.hpp"
#include "measure/nvml_probe.hpp"
#include "measure/window.hpp"
#include "telemetry/rapl.hpp"
#include "train/precision.hpp"
#include "train/run_config.hpp"

namespace cnnergy::convbench {
namespace {

// The project's own CUDA convolutions, asked of make_conv by name; a backend
// that does not know them yet answers with an error, which becomes the cell's status.
const std::vector<std::string> kOwnNames = {"own:direct", "own:im2col_gemm", "own:implicit_gemm",
                                            "own:fft",    "own:winograd",    "own:winograd_2x2"};
const std::vector<std::string> kGraphPolicies = {"graph_find", "graph_heuristic"};

std::string format_bytes(std::size_t b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%zu bytes (%.1f MiB)", b, static_cast<double>(b) / (1 << 20));
  return buf;
}

struct Slot {
  std::unique_ptr<Backend> backend;
  std::string error;  // why the backend could not be made (the precision or layout is unsupported)
  std::unique_ptr<EnergyProbe> probe;
  std::string energy_note;  // why no energy, when probe is null
};

Slot make_slot(const StudyOptions& o, const std::string& precision, Layout layout,
               std::shared_ptr<telemetry::RaplMeter>& rapl) {
  Slot s;
  try {
    RunConfig run = RunConfig::from_knobs({{"precision", precision}}, RunConfig{});
    run.device = o.device;
    run.layout = layout;
    run.workspace_limit_bytes = o.workspace_limit_bytes;
    run.conv_algo_policy = "heuristic";  // the directions a cell does not name stay cheap to resolve
    run.conv_algo_fallback = false;      // a named algorithm that cannot run the shape is an error
    run.fuse_epilogue = false;           // a cell times the named implementation itself, as it is,
    run.space_to_depth = false;          // not a fused or rearranged form chosen in its place
    s.backend = create_backend(run.backend_options());
  } catch (const Error& e) {
    s.error = e.what();
    return s;
  }
  if (o.window_s <= 0) {
    s.energy_note = "not measured: --window-s 0";
  } else if (s.backend->device().is_cuda()) {
    s.probe = open_energy_probe(*s.backend);
    if (!s.probe) s.energy_note = "not measured: no NVML energy reading for this GPU";
  } else {
    if (!rapl) rapl = std::make_shared<telemetry::RaplMeter>();
    if (rapl->available()) s.probe = make_cpu_energy_probe(rapl);
    else s.energy_note = "not measured: RAPL (/sys/class/powercap) not readable here";
  }
  return s;
}

// Random values (uniform in [-1, 1]) into any dtype and layout: a random fp32 chunk uploaded once and
// converted into flat views of the target. Constant data would understate the energy of a call
// (fewer bits toggle), so the operands are random as in training.
void fill_random(Backend& backend, const Tensor& t, Rng& rng) {
  const std::int64_t total = t.numel();
  const std::int64_t chunk = std::min<std::int64_t>(total, std::int64_t{1} << 20);
  Tensor host = Tensor::host(Shape{chunk}, DType::kF32);
  rng.fill_uniform(host.f32(), -1.0f, 1.0f);
  Tensor scratch = backend.alloc(Shape{chunk}, DType::kF32);
  backend.upload(host, scratch);
  const std::size_t elem = dtype_size_bytes(t.dtype());
  for (std::int64_t off = 0; off < total; off += chunk) {
    const std::int64_t n = std::min(chunk, total - off);
    const Tensor dst(Shape{n}, t.dtype(), Layout::kNCHW, t.buffer(), t.offset_bytes() + static_cast<std::size_t>(off) * elem);
    const Tensor src = n == chunk ? scratch : Tensor(Shape{n}, DType::kF32, Layout::kNCHW, scratch.buffer(), 0);
    backend.copy(src, dst);
  }
  backend.synchronize();
}

std::vector<std::string> implementations_for(const StudyOptions& o, Backend& backend, const std::string& direction,
                                             const Conv2dDesc& desc, std::vector<std::string>& notes) {
  std::vector<std::string> names = o.implementations;
  if (names.empty()) {
    names = backend.conv_algorithm_names(direction);
    if (backend.device().is_cuda()) {
      for (const auto& n : kGraphPolicies) names.push_back(n);
      for (const auto& n : kOwnNames)
        if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    }
  }
  if (o.graph_engines && backend.device().is_cuda()) {
    try {
      for (auto& n : backend.conv_engine_names(desc, direction))
        if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(std::move(n));
    } catch (const Error& e) {  // the problem's rows still run; the note says why no engine rows
      notes.push_back(direction + " " + desc.input_shape().str() + ": graph engines not listed: " + e.what());
    }
  }
  return names;
}

// The kernel tracer (--metrics kernels|full) and the counter profiler (--metrics full), each with
// the reason it is absent.
struct MetricsTools {
  std::unique_ptr<KernelTracer> tracer;
  std::string tracer_reason;
  std::unique_ptr<CounterProfiler> counters;
  std::string counters_reason;
};

class CellRunner {
 public:
  CellRunner(const StudyOptions& o, Slot& slot, MetricsTools& tools) : o_(o), slot_(slot), tools_(tools) {}

  void run(const ConvProblem& p, Cell& c, const std::optional<DevicePeaks>& peaks) {
    Backend& b = *slot_.backend;
    const std::size_t elem = dtype_size_bytes(b.dtype());
    c.tensor_bytes = problem_tensor_bytes(p.desc, elem);
    const double flops = problem_flops(p.desc);
    c.arithmetic_intensity = c.tensor_bytes > 0 ? flops / static_cast<double>(c.tensor_bytes) : 0;
    const MemoryStats before = b.memory_stats();
    if (before.total_bytes > 0 && c.tensor_bytes + before.in_use_bytes > before.total_bytes) {
      c.status = kStatusDoesNotFit;
      c.detail = "needs " + format_bytes(c.tensor_bytes) + " for x, w, y alone; the device has " +
                 format_bytes(before.total_bytes);
      return;
    }
    // ConvKernel::info() reports the largest workspace of the three directions, so the directions
    // the cell does not time get the backend's first listed algorithm (CPU "reference", cuDNN
    // "implicit_gemm" / "algo_0": no workspace) and the figure is the timed direction's. Where such a
    // filler cannot run the shape, those directions stay on the run's policy (noted in the detail).
    ConvAlgoChoice plain, filled;
    for (const auto& dir : direction_names()) {
      std::string& field = dir == "forward" ? filled.forward : dir == "backward_data" ? filled.backward_data : filled.backward_filter;
      if (dir == c.direction) {
        field = c.implementation;
      } else {
        const auto names = b.conv_algorithm_names(dir);
        if (!names.empty()) field = names.front();
      }
    }
    if (c.direction == "forward") plain.forward = c.implementation;
    else if (c.direction == "backward_data") plain.backward_data = c.implementation;
    else plain.backward_filter = c.implementation;

    const Conv2dDesc& d = p.desc;
    std::unique_ptr<ConvKernel> kernel;
    try {
      kernel = b.make_conv(d, filled);
    } catch (const Error&) {
      kernel = b.make_conv(d, plain);  // this one's error, if any, is the cell's status
    }
    const Tensor x = b.alloc(d.input_shape(), b.dtype(), b.layout());
    const Tensor w = b.alloc(d.weight_shape(), b.dtype(), b.layout());
    const Tensor y = b.alloc(d.output_shape(), b.dtype(), b.layout());
    Rng rng(o_.seed);
    if (c.direction == "forward") {
      fill_random(b, x, rng);
      fill_random(b, w, rng);
    } else if (c.direction == "backward_data") {
      fill_random(b, y, rng);  // dy
      fill_random(b, w, rng);
    } else {
      fill_random(b, x, rng);
      fill_random(b, y, rng);  // dy
    }
    // backward_data writes dx into x's tensor, backward_filter dw into w's (same shapes).
    const std::function<void()> call = [&] {
      if (c.direction == "forward") kernel->forward(x, w, Tensor{}, y);
      else if (c.direction == "backward_data") kernel->backward_data(y, w, x, false);
      else kernel->backward_filter(x, y, w, Tensor{});
    };
    for (int i = 0; i < std::max(1, o_.warmup); ++i) call();  // the first call resolves the algorithm
    b.synchronize();

    auto start = b.make_event();
    auto stop = b.make_event();
    std::vector<double> ms;
    for (int i = 0; i < o_.repetitions; ++i) {
      start->record();
      call();
      stop->record();
      stop->synchronize();
      ms.push_back(stop->elapsed_ms(*start));
    }
    c.time_ms = summarize(ms);
    c.tflops = c.time_ms.median > 0 ? flops / (c.time_ms.median * 1e9) : 0;
    if (peaks && peaks->tflops(c.precision) > 0) c.percent_of_peak = 100.0 * c.tflops / peaks->tflops(c.precision);
    ConvAlgoInfo info;
    try {
      info = kernel->info();
    } catch (const Error&) {  // a filler that cannot run the shape: ask a kernel on the run's policy
      info = b.make_conv(d, plain)->info();
      c.detail = "workspace: the largest of the three directions (fillers could not run the shape)";
    }
    c.ran = c.direction == "forward" ? info.forward : c.direction == "backward_data" ? info.backward_data : info.backward_filter;
    c.math_type = info.math_type;
    c.workspace_bytes = info.workspace_bytes;

    if (before.total_bytes > 0) {
      const double per_sample = static_cast<double>(c.tensor_bytes - weight_bytes(d, elem) + c.workspace_bytes) /
                                static_cast<double>(d.n);
      const double room = static_cast<double>(before.total_bytes) - static_cast<double>(before.in_use_bytes) -
                          static_cast<double>(weight_bytes(d, elem));
      c.max_batch = per_sample > 0 ? static_cast<std::int64_t>(std::floor(room / per_sample)) : 0;
      c.max_batch_note = "computed: (device memory - memory held - weights) / (x + y + workspace per sample); "
                         "workspace taken as proportional to the batch; CUDA context not subtracted (upper bound)";
    } else {
      c.max_batch_note = "not computed: the backend does not report its device memory";
    }

    if (slot_.probe) {
      WindowSpec spec;
      spec.min_seconds = o_.window_s;
      spec.repetitions = std::max(1, o_.windows);
      spec.warmup_iterations = 1;
      const WindowResult wr = measure_windows(b, slot_.probe.get(), call, spec);
      c.joules_per_call = wr.joules_per_iteration;
      c.average_watts = wr.watts ? std::optional<double>(wr.watts->median) : std::nullopt;
      c.energy_note = slot_.probe->source() + ", " + std::to_string(wr.iterations_per_window) + " calls per window" +
                      (wr.any_short_window ? "; a window was shorter than the sensor period" : "") +
                      (wr.noisy ? "; noisy" : "");
      if (!wr.joules_per_iteration) c.energy_note = "not measured: " + slot_.probe->source() + " gave no reading";
    } else {
      c.energy_note = slot_.energy_note;
    }

    if (o_.metrics != MetricsLevel::kOff) {
      KernelReport r;
      if (tools_.tracer) {
        b.synchronize();
        tools_.tracer->start();
        for (int i = 0; i < o_.repetitions; ++i) call();
        b.synchronize();
        r = tools_.tracer->stop(o_.repetitions);
      } else {
        r.counters = "unavailable: " + tools_.tracer_reason;
      }
      if (r.counters.empty()) read_counters(b, call, r);
      c.kernels = std::move(r);
    }
    c.status = kStatusOk;
  }

 private:
  void read_counters(Backend& b, const std::function<void()>& call, KernelReport& r) {
    if (o_.metrics != MetricsLevel::kFull) {
      r.counters = "not read (--metrics kernels; --metrics full reads them)";
      return;
    }
    if (!tools_.counters) {
      r.counters = "unavailable: " + tools_.counters_reason;
      return;
    }
    try {
      const CounterSet set = tools_.counters->measure(call, [&] { b.synchronize(); });
      r.counter_values = set.raw;
      r.counters_unsupported = set.unsupported;
      r.counter_passes = set.passes;
      r.counters = "read: " + std::to_string(set.raw.size()) + " metrics over one call in " +
                   std::to_string(set.passes) + " replay passes (CUPTI range profiler)";
    } catch (const Error& e) {
      r.counters = std::string("unavailable: ") + e.what();
    }
  }

  const StudyOptions& o_;
  Slot& slot_;
  MetricsTools& tools_;
};

}  // namespace

const std::vector<std::string>& direction_names() {
  static const std::vector<std::string> names = {"forward", "backward_data", "backward_filter"};
  return names;
}

StudyResult run_study(const std::vector<ConvProblem>& problems, const StudyOptions& o,
                      const std::function<void(const std::string&)>& progress) {
  if (o.repetitions < 1) throw InvalidArgument("--calls must be >= 1");
  if (o.precisions.empty() || o.layouts.empty() || o.directions.empty())
    throw InvalidArgument("convbench: no precision, layout or direction to run");
  for (const auto& d : o.directions)
    if (std::find(direction_names().begin(), direction_names().end(), d) == direction_names().end())
      throw InvalidArgument("unknown direction '" + d + "' (choose one of: forward, backward_data, backward_filter)");
  StudyResult result;
  result.problems = problems;
  std::shared_ptr<telemetry::RaplMeter> rapl;
  std::map<std::pair<std::string, Layout>, Slot> slots;
  for (const auto& prec : o.precisions)
    for (const auto layout : o.layouts) slots.emplace(std::make_pair(prec, layout), make_slot(o, prec, layout, rapl));
  for (auto& [key, slot] : slots) {
    if (!slot.backend) {
      result.notes.push_back(key.first + " " + std::string(layout_name(key.second)) + ": " + slot.error);
      continue;
    }
    if (result.backend.empty()) {
      result.backend = slot.backend->name();
      result.device_name = slot.backend->device_name();
      result.cuda_runtime = slot.backend->cuda_runtime_version();
      result.cudnn = slot.backend->cudnn_version();
      result.device_memory_bytes = slot.backend->memory_stats().total_bytes;
      result.peaks = find_device_peaks(result.device_name);
    }
    if (slot.probe && result.energy_source.empty()) result.energy_source = slot.probe->source();
    if (!slot.probe && std::find(result.notes.begin(), result.notes.end(), "energy " + slot.energy_note) == result.notes.end())
      result.notes.push_back("energy " + slot.energy_note);
  }
  if (result.backend.empty())
    throw NotSupported("convbench: no backend for any precision/layout asked: " + result.notes.front());
  result.timing_note = "median and spread of " + std::to_string(o.repetitions) + " calls after " +
                       std::to_string(std::max(1, o.warmup)) +
                       " warm-up calls, device events on the backend's stream (host clock on the CPU)";
  if (!result.peaks) result.notes.push_back("no peak table entry for '" + result.device_name + "': % of peak not given");

  MetricsTools tools;
  if (o.metrics != MetricsLevel::kOff) {
    if (result.backend == "cuda") {
      tools.tracer = open_kernel_tracer(tools.tracer_reason);
      if (o.metrics == MetricsLevel::kFull) tools.counters = open_counter_profiler(tools.counters_reason);
    } else {
      tools.tracer_reason = "no GPU kernels on the " + result.backend + " backend";
    }
  }

  for (std::size_t pi = 0; pi < problems.size(); ++pi) {
    const ConvProblem& p = problems[pi];
    const auto rule = problem_rule(p.desc);
    for (const auto& prec : o.precisions)
      for (const auto layout : o.layouts) {
        Slot& slot = slots.at({prec, layout});
        for (const auto& dir : o.directions) {
          // A precision/layout without a backend lists the names of one that has one (each cell then
          // says why it cannot run), so every precision shows the same rows.
          Backend* lister = slot.backend.get();
          for (auto& [key, other] : slots)
            if (!lister && other.backend) lister = other.backend.get();
          const std::vector<std::string> impls = implementations_for(o, *lister, dir, p.desc, result.notes);
          for (const auto& impl : impls) {
            Cell c;
            c.problem = pi;
            c.implementation = impl;
            c.direction = dir;
            c.precision = prec;
            c.layout = std::string(layout_name(layout));
            if (progress) progress(p.id + " " + impl + " " + dir + " " + prec + " " + c.layout);
            if (rule) {
              c.status = kStatusUnsupported;
              c.detail = *rule;
            } else if (!slot.backend) {
              c.status = kStatusUnsupported;
              c.detail = slot.error;
            } else {
              try {
                CellRunner(o, slot, tools).run(p, c, result.peaks);
              } catch (const OutOfMemory& e) {
                c.status = kStatusDoesNotFit;
                c.detail = e.what();
              } catch (const NotSupported& e) {
                c.status = kStatusUnsupported;
                c.detail = e.what();
              } catch (const InvalidArgument& e) {  // a name this backend does not know, a shape rule
                c.status = kStatusUnsupported;
                c.detail = e.what();
              } catch (const ShapeError& e) {
                c.status = kStatusUnsupported;
                c.detail = e.what();
              } catch (const DeviceError& e) {
                // cuDNN refusing a shape at run time is a rule, not a failure of the study.
                const std::string what = e.what();
                c.status = what.find("NOT_SUPPORTED") != std::string::npos ? kStatusUnsupported : kStatusFailed;
                c.detail = what;
              } catch (const std::exception& e) {
                c.status = kStatusFailed;
                c.detail = e.what();
              }
              try {
                slot.backend->synchronize();
              } catch (const std::exception& e) {
                result.notes.push_back("after " + impl + " " + dir + " on " + p.id + ": " + e.what());
              }
            }
            result.cells.push_back(std::move(c));
          }
        }
      }
    if (o.transfers && !rule) {
      for (const auto& prec : o.precisions) {
        Slot& slot = slots.at({prec, o.layouts.front()});
        if (!slot.backend) continue;
        try {
          auto rows = measure_transfers(*slot.backend, p, pi, prec, std::max(3, std::min(o.repetitions, 10)));
          std::optional<double> conv_ms;
          for (const Cell& c : result.cells)
            if (c.problem == pi && c.status == kStatusOk && c.direction == "forward" && c.precision == prec &&
                c.layout == layout_name(o.layouts.front()))
              conv_ms = conv_ms ? std::min(*conv_ms, c.time_ms.median) : c.time_ms.median;
          for (auto& r : rows) {
            r.conv_forward_ms = conv_ms;
            if (conv_ms) r.share_of_total = r.time_ms.median / (r.time_ms.median + *conv_ms);
            result.transfers.push_back(std::move(r));
          }
        } catch (const std::exception& e) {
          result.notes.push_back("transfers of " + p.id + " at " + prec + ": " + e.what());
        }
      }
    }
  }
  if (std::any_of(problems.begin(), problems.end(), [](const ConvProblem& p) { return !p.layers.empty(); }))
    result.hotspots = compute_hotspots(result, o.precisions.front(), std::string(layout_name(o.layouts.front())));
  return result;
}

std::vector<Hotspot> compute_hotspots(const StudyResult& result, const std::string& precision, const std::string& layout) {
  std::vector<Hotspot> out;
  double sum = 0;
  for (std::size_t pi = 0; pi < result.problems.size(); ++pi) {
    const ConvProblem& p = result.problems[pi];
    Hotspot h;
    h.problem = pi;
    h.layer_count = std::max<std::size_t>(1, p.layers.size());
    double per_layer = 0;
    for (const auto& dir : direction_names()) {
      if (dir == "backward_data" && !p.backward_data_used) continue;
      const Cell* best = nullptr;
      for (const Cell& c : result.cells)
        if (c.problem == pi && c.direction == dir && c.precision == precision && c.layout == layout &&
            c.status == kStatusOk && (!best || c.time_ms.median < best->time_ms.median))
          best = &c;
      if (!best) continue;
      per_layer += best->time_ms.median;
      h.winners.emplace_back(dir, best->implementation);
    }
    h.total_ms = per_layer * static_cast<double>(h.layer_count);
    sum += h.total_ms;
    out.push_back(std::move(h));
  }
  for (auto& h : out) h.share = sum > 0 ? h.total_ms / sum : 0;
  std::stable_sort(out.begin(), out.end(), [](const Hotspot& a, const Hotspot& b) { return a.total_ms > b.total_ms; });
  return out;
}

}  // namespace cnnergy::convbench
