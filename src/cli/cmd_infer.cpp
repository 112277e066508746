// `cnnergy infer` implementation: flags -> one InferenceSession per batch size -> closed or open
// loop -> table / JSON; or a NumPy array of inputs through the model into a NumPy array of logits.
#include "cli/cmd_infer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>

#include "backend/ops.hpp"
#include "cli/args.hpp"
#include "cli/backend_flags.hpp"
#include "cli/vocabulary.hpp"
#include "core/errors.hpp"
#include "core/json.hpp"
#include "core/log.hpp"
#include "core/rng.hpp"
#include "data/npy.hpp"
#include "infer/drivers.hpp"
#include "infer/session.hpp"
#include "measure/nvml_probe.hpp"
#include "net/graph.hpp"
#include "net/onnx/onnx_import.hpp"
#include "net/zoo/zoo.hpp"

namespace cnnergy::cli {
namespace {

std::string fmt(double v, int prec = 3) {
  if (!std::isfinite(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", prec, v);
  return b;
}
std::string fmt_opt(const std::optional<double>& v, int prec = 3) { return v ? fmt(*v, prec) : "not measured"; }
Json opt_json(const std::optional<double>& v) { return v ? Json(*v) : Json(); }

Json latency_json(const LatencySummary& s) {
  Json j = Json::object();
  j["count"] = s.count;
  j["mean_ms"] = s.mean_ms;
  j["p50_ms"] = s.p50_ms;
  j["p90_ms"] = s.p90_ms;
  j["p99_ms"] = s.p99_ms;
  j["max_ms"] = s.max_ms;
  return j;
}

// Random images drawn from N(0, 1) with a fixed seed: the payload of timed requests.
Tensor random_images(const Shape& shape, std::uint64_t seed) {
  Tensor t = Tensor::host(shape);
  Rng rng(seed);
  rng.fill_normal(t.f32(), 0.0f, 1.0f);
  return t;
}

// What eval semantics change for this model, said once (dropout off, batch norm on running statistics).
void note_eval_semantics(const Graph& graph, const InferenceSession& session) {
  std::size_t dropout = 0, bn = 0;
  for (std::size_t i = 0; i < graph.num_layers(); ++i) {
    if (graph.layer(i).type() == "dropout") ++dropout;
    if (graph.layer(i).type() == "batch_norm") ++bn;
  }
  if (dropout + bn == 0) return;
  std::fprintf(stderr,
               "cnnergy infer: eval semantics: %zu dropout layer(s) pass their input through, %zu batch norm(s) use "
               "their running statistics (%zu folded into the convolution before them)\n",
               dropout, bn, session.executor().memory().folded_batch_norms);
}

// On the CPU: which forward runs the requests (the whole-network oneDNN plan or the per-layer
// executor) and, for the latter, the first reason the plan was not made.
// Convolutions whose forward runs with its bias (and ReLU) as one fused kernel.
std::size_t count_fused_epilogues(const Executor& executor) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < executor.num_layers(); ++i) n += executor.layer(i).epilogue_fused();
  return n;
}

void note_cpu_path(const Backend& backend, const InferenceSession& session) {
  if (backend.name() != "cpu") return;
  if (session.forward_path() == "onednn-plan")
    std::fprintf(stderr, "cnnergy infer: cpu path: onednn-plan in chunks of %lld (%s; %s)\n",
                 static_cast<long long>(session.plan_chunk()), session.plan_chunk_choice().c_str(),
                 session.plan_description().c_str());
  if (const char* wait = std::getenv("CNNERGY_OMP_WAIT"))
    std::fprintf(stderr, "cnnergy infer: OpenMP threads wait: %s\n", wait);
  else
    std::fprintf(stderr, "cnnergy infer: cpu path: per-layer (%s)\n", session.plan_fallback_reason().c_str());
}

// --inputs: the whole array through the model in chunks of `batch` (the last one padded with zeros).
int run_on_inputs(const Graph& graph, Backend& backend, const InferenceOptions& io, const std::string& checkpoint,
                  const std::string& inputs_path, const std::optional<std::string>& outputs_path) {
  const Tensor inputs = data::read_npy(inputs_path);
  const Shape per = graph.input_per_sample();
  const Shape& s = inputs.shape();
  if (s.rank() != 4 || s[1] != per[0] || s[2] != per[1] || s[3] != per[2])
    throw DataError("NumPy file " + inputs_path + ": model " + graph.model_name() + " takes N x " +
                    std::to_string(per[0]) + " x " + std::to_string(per[1]) + " x " + std::to_string(per[2]) +
                    " float32 inputs, the file holds " + s.str());
  InferenceSession session(graph, backend, io);
  if (!checkpoint.empty()) session.load_checkpoint(checkpoint);
  note_eval_semantics(graph, session);
  note_cpu_path(backend, session);
  const std::int64_t n = s[0], b = io.batch, classes = graph.num_classes();
  const auto per_sample = static_cast<std::size_t>(per.numel());
  Tensor chunk = Tensor::host(graph.tensor(graph.input_tensor()).shape.with_batch(b));
  Tensor logits;
  Tensor out = Tensor::host(Shape{n, classes});
  for (std::int64_t first = 0; first < n; first += b) {
    const std::int64_t take = std::min(b, n - first);
    std::fill(chunk.f32().begin(), chunk.f32().end(), 0.0f);
    std::memcpy(chunk.raw(), inputs.f32().data() + static_cast<std::size_t>(first) * per_sample,
                static_cast<std::size_t>(take) * per_sample * sizeof(float));
    session.run_host(chunk, logits);
    std::memcpy(out.f32().data() + static_cast<std::size_t>(first * classes), logits.raw(),
                static_cast<std::size_t>(take * classes) * sizeof(float));
  }
  if (outputs_path) data::write_npy(*outputs_path, out);
  std::printf("%s: %lld inputs through %s (batch %lld, %s) -> %s\n", inputs_path.c_str(), static_cast<long long>(n),
              graph.model_name().c_str(), static_cast<long long>(b), backend.device_name().c_str(),
              outputs_path ? outputs_path->c_str() : "(no --outputs: logits not kept)");
  return 0;
}

}  // namespace

int run_infer(const std::vector<std::string>& args) {
  ArgParser p("infer", "Inference latency, throughput and energy of MODEL from batch 1 to large batches.");
  p.positional("MODEL", "zoo model (cnnergy model-info --list) or an ONNX file (PATH.onnx, onnx:PATH)");
  p.option("batch", "batch sizes, comma-separated (e.g. 1,2,4,8,64,256)", "1");
  declare_device_flag(p);
  p.option("precision", "fp32, tf32, fp16, bf16", "fp32", precision_names());
  p.option("layout", "activation layout", "nchw", {"nchw", "nhwc"});
  p.option("conv-candidates", "graph_find / auto: engines of cuDNN's ranking timed per convolution (1-100)", "10");
  p.option("conv-algo", "GPU convolution algorithm policy (auto, find, heuristic, graph_find, graph_heuristic or a name, or own:NAME (the project's own kernels per layer: own:direct, own:im2col_gemm, own:implicit_gemm, own:fft, own:winograd, own:winograd_2x2; a layer one cannot run falls back to cuDNN auto with a note))",
           "auto");
  p.option("input", "model input override CxHxW");
  p.option("init", "initial weights of an ONNX model: file (its initialisers) or random (seeded, the zoo's rules)",
           "file");
  p.option("classes", "model class-count override");
  p.option("algo-cache", kAlgoCacheHelp);
  p.option("checkpoint", "trained weights (a checkpoint of this model, e.g. from train --save); default: seeded random");
  p.option("seed", "seed of the random weights and request images", "1");
  p.option("requests", "closed loop: timed requests per batch size for the latency percentiles", "200");
  p.option("warmup", "closed loop: untimed requests before the timed ones (after the first, which records)", "10");
  p.option("windows", "energy windows per batch size (median and spread)", "3");
  p.option("window-s", "minimum seconds of each energy window (>= 1 s for an honest counter reading)", "1.0");
  p.option("idle-s", "seconds of idle-power measurement before each batch size (0: none)", "1.0");
  p.flag("profile-range", "closed loop: run one device request after the warm-up inside cudaProfilerStart/Stop "
                          "(for Nsight Compute's --profile-from-start off: that request's kernels alone)");
  p.flag("mark-requests", "closed loop: print 'cnnergy_request,I,MS' to stdout after each timed end-to-end request "
                          "(between 'cnnergy_request,begin' and ',end'), in the stream oneDNN's verbose lines go to "
                          "(bench/cpu_infer_profile.py attributes them to the timed requests)");
  p.option("cuda-graph", "replay each request as one recorded CUDA graph", "on", {"on", "off"});
  p.option("fold-bn", "fold each batch norm into the convolution before it", "on", {"on", "off"});
  p.option("fuse-relu", "let the layer before a ReLU compute it in its own pass (a batch norm's kernel, a folded "
                        "convolution's bias pass or oneDNN post-op); off runs every ReLU as its own layer",
           "on", {"on", "off"});
  declare_fuse_epilogue_flag(p);
  declare_space_to_depth_flag(p);
  p.option("cpu-plan", "CPU with oneDNN: run the whole network as one oneDNN plan (blocked layouts end to end) "
           "when every layer maps onto it; off: the per-layer executor", "on", {"on", "off"});
  p.option("cpu-plan-chunk", "CPU plan: samples per run of the plan (a request runs in chunks; 0: as many as "
           "keep the largest activation within 4 MiB)", "0");
  p.option("qps", "open loop: offered rate in requests/s (Poisson arrivals); the batch sizes become --max-batch");
  p.option("max-batch", "open loop: the batching window's largest batch (default: the largest --batch)");
  p.option("max-wait-ms", "open loop: a batch starts when full or when its oldest request waited this long", "2");
  p.option("duration-s", "open loop: seconds of arrivals", "5");
  p.option("inputs", "run the model on this NumPy array (float32, N x C x H x W) instead of measuring");
  p.option("outputs", "with --inputs: write the logits (float32, N x classes) to this .npy file");
  declare_output_flags(p, "the results table");
  p.epilog("Closed loop (default): per batch size, latency p50/p90/p99/max end to end (host images to host\n"
           "logits, copies included) and on the device alone, throughput and energy per image from\n"
           "back-to-back windows of >= --window-s (docs/methodology.md), idle power measured before.\n"
           "Open loop (--qps): Poisson arrivals, a batching window; a rate the device cannot sustain is\n"
           "reported as saturated. Energy needs an NVIDIA driver (NVML) or RAPL; otherwise \"not measured\".");
  if (!p.parse(args)) return 0;
  OutputSink sink(p);
  BackendOptions bo = run_config_from_flags(p).backend_options();
  std::vector<std::int64_t> batches;
  for (const auto& b : split_list(p.get("batch"), "--batch")) {
    char* end = nullptr;
    const long long v = std::strtoll(b.c_str(), &end, 10);
    if (end == b.c_str() || *end != '\0' || v < 1 || v > (1 << 20))
      throw InvalidArgument("--batch: '" + b + "' is not a batch size from 1 to 1048576");
    batches.push_back(v);
  }
  std::optional<Shape> input;
  if (auto s = p.get_optional("input")) input = parse_shape(*s);
  std::optional<std::int64_t> classes;
  if (p.get_optional("classes")) classes = p.get_int("classes", 2, 1 << 24);
  const auto seed = static_cast<std::uint64_t>(p.get_int("seed", 0, std::int64_t{1} << 62));
  ClosedLoopSpec cl;
  cl.requests = p.get_int("requests", 1, 10000000);
  cl.warmup = p.get_int("warmup", 0, 10000000);
  cl.windows = static_cast<int>(p.get_int("windows", 1, 1000));
  cl.window_s = p.get_double("window-s", 0.001, 3600.0);
  cl.idle_s = p.get_double("idle-s", 0.0, 3600.0);
  cl.profile_range = p.get_flag("profile-range");
  cl.mark_requests = p.get_flag("mark-requests");
  const auto qps = p.get_optional("qps");
  OpenLoopSpec ol;
  if (qps) {
    ol.qps = p.get_double("qps", -1e12, 1e12);
    if (!(ol.qps > 0)) throw InvalidArgument("--qps must be above 0 requests per second, got " + *qps);
    ol.max_wait_ms = p.get_double("max-wait-ms", 0.0, 60000.0);
    ol.duration_s = p.get_double("duration-s", 0.01, 3600.0);
    ol.seed = seed;
  }
  const std::string checkpoint = p.get_optional("checkpoint").value_or("");
  auto graph = build_model_init(p.get("MODEL"), input, classes, p.get("init"));
  auto backend = create_backend(bo);
  InferenceOptions io;
  io.cuda_graph = p.get("cuda-graph") == "on";
  io.fold_batch_norm = p.get("fold-bn") == "on";
  io.fuse_relu = p.get("fuse-relu") == "on";
  io.cpu_plan = p.get("cpu-plan") == "on";
  io.cpu_plan_chunk = p.get_int("cpu-plan-chunk", 0, 1 << 20);
  io.seed = seed;
  if (auto in = p.get_optional("inputs")) {
    io.batch = batches.front();
    return run_on_inputs(*graph, *backend, io, checkpoint, *in, p.get_optional("outputs"));
  }
  if (p.get_optional("outputs")) throw InvalidArgument("--outputs needs --inputs (the array to run the model on)");
  if (qps) {  // the open loop runs one session at the batching window's largest batch
    const std::int64_t mb = p.get_optional("max-batch") ? p.get_int("max-batch", 1, 1 << 20)
                                                         : *std::max_element(batches.begin(), batches.end());
    batches = {mb};
  }
  auto probe = open_energy_probe(*backend);
  Json out = Json::object();
  out["model"] = graph->model_name();
  out["device"] = backend->device_name();
  out["precision"] = p.get("precision");
  out["layout"] = p.get("layout");
  out["energy_source"] = probe ? Json(probe->source()) : Json();
  Json rows = Json::array();
  std::size_t ran = 0;
  std::string last_failure;
  bool noted = false;
  std::size_t process_peak_bytes = 0;  // the device allocator's peak over this whole run
  for (const std::int64_t b : batches) {
    Json row = Json::object();
    row["batch"] = b;
    try {
      io.batch = b;
      InferenceSession session(*graph, *backend, io);
      if (!checkpoint.empty()) session.load_checkpoint(checkpoint);
      if (!noted) note_eval_semantics(*graph, session);
      if (!noted) note_cpu_path(*backend, session);
      noted = true;
      const Tensor images = random_images(graph->tensor(graph->input_tensor()).shape.with_batch(b), seed);
      log_info("infer: " + graph->model_name() + " batch " + std::to_string(b) + " ...");
      if (qps) {
        const OpenLoopResult r = run_open_loop(session, images, ol);
        row["mode"] = "open_loop";
        row["offered_qps"] = r.offered_qps;
        row["achieved_qps"] = r.achieved_qps;
        row["arrived"] = r.arrived;
        row["served"] = r.served;
        row["batches"] = r.batches;
        row["mean_batch"] = r.mean_batch;
        row["max_wait_ms"] = ol.max_wait_ms;
        row["latency"] = latency_json(r.latency);
        row["queueing"] = latency_json(r.queueing);
        row["saturated"] = r.saturated;
        if (!r.note.empty()) row["note"] = r.note;
      } else {
        const ClosedLoopResult r = run_closed_loop(session, *backend, probe.get(), images, cl);
        row["mode"] = "closed_loop";
        row["end_to_end"] = latency_json(r.end_to_end);
        row["end_to_end_pipelined_images_per_s"] = r.end_to_end_pipelined_images_per_s;
        row["device"] = latency_json(r.device);
        row["ms_per_batch"] = r.ms_per_batch.median;
        row["ms_per_batch_cv"] = r.ms_per_batch.cv();
        row["images_per_s"] = r.images_per_s;
        row["joules_per_image"] = r.joules_per_image ? Json(r.joules_per_image->median) : Json();
        row["joules_per_image_spread"] =
            r.joules_per_image ? Json(r.joules_per_image->max - r.joules_per_image->min) : Json();
        row["average_power_w"] = r.average_power_w ? Json(r.average_power_w->median) : Json();
        row["peak_power_w"] = opt_json(r.peak_power_w);
        row["idle_power_w"] = opt_json(r.idle_power_w);
        row["short_window"] = r.short_window;
        // The allocator's peak is reset once the timed requests start (Backend::reset_peak_memory):
        // the process peak so far keeps the setup's and the algorithm search's part.
        process_peak_bytes = std::max(process_peak_bytes, r.setup_peak_bytes);
        if (backend->device().is_cuda())
          row["serving_peak_memory_mib"] = static_cast<double>(r.serving_peak_bytes) / 1048576.0;
      }
      row["cuda_graph"] = session.graphed();
      if (backend->name() == "cpu") {
        row["cpu_path"] = session.forward_path();
        if (!session.plan_chunk_choice().empty()) row["cpu_plan_chunk_choice"] = session.plan_chunk_choice();
        if (session.plan()) row["cpu_plan_chunk"] = static_cast<double>(session.plan_chunk());
        if (const char* wait = std::getenv("CNNERGY_OMP_WAIT")) row["openmp_wait"] = std::string(wait);
        if (!session.plan_fallback_reason().empty()) row["cpu_path_fallback"] = session.plan_fallback_reason();
      }
      row["folded_batch_norms"] = session.executor().memory().folded_batch_norms;
      row["fused_relus"] = session.executor().memory().fused_relus;
      row["fused_residuals"] = session.executor().memory().fused_residuals;
      row["fused_epilogues"] = static_cast<double>(count_fused_epilogues(session.executor()));
      // Where the memory in use goes: parameters (the working copies, and fp32 masters where they are
      // not parked in host memory), the activation arena, layer state, the request buffers, the
      // convolutions' shared workspace.
      const MemoryReport& held = session.executor().memory();
      row["parameter_memory_mib"] = static_cast<double>(held.parameter_bytes) / 1048576.0;
      row["masters_in_host_memory_mib"] = static_cast<double>(held.parked_master_bytes) / 1048576.0;
      row["request_dtype"] = std::string(dtype_name(session.request_dtype()));
      row["activation_memory_mib"] = static_cast<double>(held.activation_bytes) / 1048576.0;
      row["layer_state_memory_mib"] = static_cast<double>(held.layer_state_bytes) / 1048576.0;
      row["request_buffer_memory_mib"] = static_cast<double>(session.request_buffer_bytes()) / 1048576.0;
      const MemoryStats mem = backend->memory_stats();
      row["device_memory_in_use_mib"] = static_cast<double>(mem.in_use_bytes) / 1048576.0;
      if (backend->device().is_cuda())
        row["conv_workspace_memory_mib"] = static_cast<double>(mem.conv_workspace_bytes) / 1048576.0;
      // The process's peak so far: with batches in ascending order, the peak of this batch (and smaller).
      process_peak_bytes = std::max(process_peak_bytes, mem.peak_bytes);
      row["peak_memory_mib"] = static_cast<double>(process_peak_bytes) / 1048576.0;
      ++ran;
    } catch (const OutOfMemory& e) {
      row["status"] = std::string("does not fit: ") + e.what();
      last_failure = e.what();
      log_warn("infer: batch " + std::to_string(b) + " does not fit: " + e.what());
    }
    rows.push_back(row);
  }
  out["results"] = rows;
  {  // the table goes to stdout, or to stderr when stdout takes the JSON or CSV document (OutputSink)
    std::printf("inference of %s, %s %s on %s; energy: %s\n\n", graph->model_name().c_str(), p.get("precision").c_str(),
                p.get("layout").c_str(), backend->device_name().c_str(),
                probe ? probe->source().c_str() : "not measured (no NVML or RAPL)");
    for (const Json& row : rows.items()) {
      const auto b = static_cast<long long>(json_integer(row.at("batch"), "batch", 0, std::int64_t{1} << 53));
      if (const Json* st = row.find("status")) {
        std::printf("batch %lld: %s\n", b, st->as_string().c_str());
        continue;
      }
      if (row.at("mode").as_string() == "open_loop") {
        const Json& l = row.at("latency");
        const Json& q = row.at("queueing");
        std::printf("open loop, max batch %lld, max wait %s ms: offered %s req/s, achieved %s req/s, mean batch %s%s\n"
                    "  latency ms p50 %s p90 %s p99 %s max %s; queueing ms p50 %s p99 %s\n",
                    b, fmt(row.at("max_wait_ms").as_number(), 1).c_str(), fmt(row.at("offered_qps").as_number(), 1).c_str(),
                    fmt(row.at("achieved_qps").as_number(), 1).c_str(), fmt(row.at("mean_batch").as_number(), 2).c_str(),
                    row.at("saturated").as_bool() ? "  SATURATED" : "", fmt(l.at("p50_ms").as_number()).c_str(),
                    fmt(l.at("p90_ms").as_number()).c_str(), fmt(l.at("p99_ms").as_number()).c_str(),
                    fmt(l.at("max_ms").as_number()).c_str(), fmt(q.at("p50_ms").as_number()).c_str(),
                    fmt(q.at("p99_ms").as_number()).c_str());
        if (const Json* n = row.find("note")) std::printf("  %s\n", n->as_string().c_str());
        continue;
      }
      const Json& e = row.at("end_to_end");
      const Json& d = row.at("device");
      auto num = [&](const char* k) { return row.at(k).is_null() ? std::optional<double>() : row.at(k).as_number(); };
      const auto jpi = num("joules_per_image");
      std::printf("batch %5lld  end to end ms p50 %8s p99 %8s, two in flight %10s img/s | device ms p50 %8s p99 %8s "
                  "max %8s | %10s img/s | %s mJ/img | avg %s W, peak %s W, idle %s W%s\n",
                  b, fmt(e.at("p50_ms").as_number()).c_str(), fmt(e.at("p99_ms").as_number()).c_str(),
                  fmt(row.at("end_to_end_pipelined_images_per_s").as_number(), 1).c_str(),
                  fmt(d.at("p50_ms").as_number()).c_str(), fmt(d.at("p99_ms").as_number()).c_str(),
                  fmt(d.at("max_ms").as_number()).c_str(), fmt(row.at("images_per_s").as_number(), 1).c_str(),
                  jpi ? fmt(*jpi * 1e3, 3).c_str() : "not measured", fmt_opt(num("average_power_w"), 1).c_str(),
                  fmt_opt(num("peak_power_w"), 1).c_str(), fmt_opt(num("idle_power_w"), 1).c_str(),
                  row.at("short_window").as_bool() ? "  (a window was shorter than the sensor period)" : "");
    }
  }
  if (ran == 0) throw OutOfMemory("no batch size fits: " + last_failure);
  sink.finish(out, "results");
  return 0;
}

}  // namespace cnnergy::cli
