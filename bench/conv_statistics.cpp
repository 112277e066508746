// Batch-norm statistics in the convolution's epilogue: per ResNet-50 convolution shape,
// what the forward of convolution + training batch norm costs today (the backend's convolution,
// then its batch norm: a statistics pass over y and the normalisation pass) against cuDNN's fused
// graph (the convolution writing y and its per-channel sum and sum of squares) followed by the
// batch norm given those sums (its statistics finished from them, then the normalisation pass:
// what --fuse-statistics runs). Device time of each (CUDA events: the fastest of three runs after a
// warm-up), on fresh random inputs; one row per shape, weighted by how often ResNet-50 has it.
// Prints a table and writes JSON (--out). Needs a CUDA GPU; bf16 NHWC by default.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/conv_epilogue_plan.hpp"
#include "backend/cuda/conv_graph_plan.hpp"
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_context.hpp"
#include "backend/ops.hpp"
#include "cli/args.hpp"
#include "core/dtype.hpp"
#include "core/errors.hpp"
#include "core/rng.hpp"

using namespace cnnergy;

namespace {

struct Shape50 {
  const char* name;
  std::int64_t c, hw, k, r, stride, count;  // count: how many ResNet-50 has
};
// ResNet-50 at 224x224: every convolution followed by a batch norm, with its multiplicity.
constexpr Shape50 kShapes[] = {
    {"stem 7x7/2", 3, 224, 64, 7, 2, 1},
    {"l1 1x1 64>64", 64, 56, 64, 1, 1, 1},     {"l1 1x1 256>64", 256, 56, 64, 1, 1, 2},
    {"l1 3x3 64", 64, 56, 64, 3, 1, 3},        {"l1 1x1 64>256", 64, 56, 256, 1, 1, 4},
    {"l2 1x1 256>128", 256, 56, 128, 1, 1, 1}, {"l2 3x3/2 128", 128, 56, 128, 3, 2, 1},
    {"l2 1x1 512>128", 512, 28, 128, 1, 1, 3}, {"l2 3x3 128", 128, 28, 128, 3, 1, 3},
    {"l2 1x1 128>512", 128, 28, 512, 1, 1, 4}, {"l2 sc 1x1/2 256>512", 256, 56, 512, 1, 2, 1},
    {"l3 1x1 512>256", 512, 28, 256, 1, 1, 1}, {"l3 3x3/2 256", 256, 28, 256, 3, 2, 1},
    {"l3 1x1 1024>256", 1024, 14, 256, 1, 1, 5}, {"l3 3x3 256", 256, 14, 256, 3, 1, 5},
    {"l3 1x1 256>1024", 256, 14, 1024, 1, 1, 6}, {"l3 sc 1x1/2 512>1024", 512, 28, 1024, 1, 2, 1},
    {"l4 1x1 1024>512", 1024, 14, 512, 1, 1, 1}, {"l4 3x3/2 512", 512, 14, 512, 3, 2, 1},
    {"l4 1x1 2048>512", 2048, 7, 512, 1, 1, 2}, {"l4 3x3 512", 512, 7, 512, 3, 1, 2},
    {"l4 1x1 512>2048", 512, 7, 2048, 1, 1, 3}, {"l4 sc 1x1/2 1024>2048", 1024, 14, 2048, 1, 2, 1},
};

// A device tensor of `shape` in the backend's dtype and layout, uniform in [-a, a].
Tensor random_on(Backend& b, const Shape& shape, float a, Rng& rng) {
  Tensor host = Tensor::host(shape);
  rng.fill_uniform(host.f32(), -a, a);
  Tensor staged = b.alloc(shape, DType::kF32, Layout::kNCHW);
  b.upload(host, staged);
  Tensor t = b.alloc(shape, b.dtype(), b.layout());
  b.copy(staged, t);
  return t;
}

// Device time of `run` on `stream`: the fastest over `rounds` of launch_cost (itself the fastest of
// three runs after a warm-up). Rounds apart in time keep one slow stretch (a clock dip) out.
double min_ms(cudaStream_t stream, int rounds, const std::function<void()>& run) {
  double best = -1.0;
  for (int i = 0; i < rounds; ++i) {
    const double ms = cuda::launch_cost(stream, [&] {
                        run();
                        return CUDNN_STATUS_SUCCESS;
                      }).device_ms;
    if (best < 0 || ms < best) best = ms;
  }
  return best;
}

struct Row {
  std::string name;
  std::int64_t count = 0;
  double conv_ms = 0, bn_ms = 0, apply_ms = 0, fused_ms = -1;
  double bn_from_sums_ms = 0;  // the training batch norm given the fused graph's sums (finish + normalise)
  double in_apply_ms = 0, prologue_ms = -1;  // the previous batch norm's normalisation of x; fused
  std::string engine, why, prologue_engine;
};

}  // namespace

int main(int argc, char** argv) {
  cli::ArgParser p("bench_conv_statistics",
                   "batch-norm statistics in the convolution epilogue against the separate pass, per ResNet-50 shape");
  p.option("batch", "batch size", "256");
  p.option("precision", "the data type of the convolutions and batch norms", "bf16", {"bf16", "fp16", "fp32"});
  p.option("layout", "the activations' layout", "nhwc", {"nhwc", "nchw"});
  p.option("workspace-mib", "workspace cap of every plan, in MiB", "256");
  p.option("rounds", "timing rounds per measurement (each the fastest of three runs); the fastest round counts", "3");
  p.option("out", "JSON output file", "conv_statistics.json");
  try {
    if (!p.parse(std::vector<std::string>(argv + 1, argv + argc))) return 0;
    const std::int64_t n = p.get_int("batch", 1, 4096);
    const int rounds = static_cast<int>(p.get_int("rounds", 1, 100));
    BackendOptions o;
    o.device = Device{DeviceKind::kCuda, 0};
    o.dtype = parse_dtype(p.get("precision"));
    o.layout = parse_layout(p.get("layout"));
    o.conv_algo_policy = "auto";
    o.workspace_limit_bytes = static_cast<std::size_t>(p.get_int("workspace-mib", 1, 1 << 20)) << 20;
    o.conv_epilogue_fusion = false;  // the plain convolution against cuDNN's statistics graph,
    o.conv_space_to_depth = false;   // neither fused nor rearranged
    auto backend = create_backend(o);
    auto stream = static_cast<cudaStream_t>(backend->native_stream());
    cuda::CudaContext ctx(o);
    Rng rng(7);
    std::vector<Row> rows;
    for (const Shape50& s : kShapes) {
      Conv2dDesc d;
      d.n = n, d.c = s.c, d.h = d.w = s.hw, d.k = s.k, d.r = d.s = s.r;
      d.stride_h = d.stride_w = s.stride;
      d.pad_top = d.pad_bottom = d.pad_left = d.pad_right = s.r / 2;
      d.bias = false;
      Row row;
      row.name = s.name;
      row.count = s.count;
      Tensor x = random_on(*backend, d.input_shape(), 1.0f, rng);
      Tensor w = random_on(*backend, d.weight_shape(), 0.1f, rng);
      Tensor y = backend->alloc(d.output_shape(), o.dtype, o.layout);
      Tensor y2 = backend->alloc(d.output_shape(), o.dtype, o.layout);
      auto conv = backend->make_conv(d, {});
      row.conv_ms = min_ms(stream, rounds, [&] { conv->forward(x, w, Tensor(), y); });
      BatchNormDesc bd{d.n, d.k, d.out_h(), d.out_w()};
      auto bn = backend->make_batch_norm(bd);
      const Shape per{d.k};
      Tensor gamma = backend->alloc(per, DType::kF32), beta = backend->alloc(per, DType::kF32);
      Tensor rm = backend->alloc(per, DType::kF32), rv = backend->alloc(per, DType::kF32);
      Tensor sm = backend->alloc(per, DType::kF32), si = backend->alloc(per, DType::kF32);
      backend->fill(gamma, 1.0f), backend->fill(beta, 0.0f), backend->fill(rm, 0.0f), backend->fill(rv, 1.0f);
      row.bn_ms = min_ms(stream, rounds, [&] { bn->forward_training(y, gamma, beta, rm, rv, y2, sm, si); });
      if (backend->recomputes_batch_norm_output(bd))
        row.apply_ms = min_ms(stream, rounds, [&] { bn->recompute_output(y, gamma, beta, sm, si, y2); });
      backend->synchronize();
      cuda::EpilogueConvProblem e;
      cuda::GraphConvProblem& g = e.conv;
      g.data_type = cuda::cudnn_dtype(o.dtype);
      g.nhwc = o.layout == Layout::kNHWC;
      g.n = d.n, g.c = d.c, g.h = d.h, g.w = d.w, g.k = d.k, g.c_per_group = d.c, g.r = d.r, g.s = d.s;
      g.out_h = d.out_h(), g.out_w = d.out_w();
      g.pad_h = d.pad_top, g.pad_w = d.pad_left, g.stride_h = d.stride_h, g.stride_w = d.stride_w;
      e.bias = false;
      e.statistics = true;
      Tensor sums = backend->alloc(Shape{2 * d.k}, DType::kF32);
      Tensor in_coef = random_on(*backend, Shape{d.c}, 1.0f, rng);
      // The fastest of up to four of cuDNN's plans for `e`: its time and engine tag (-1: none ran).
      auto fastest = [&](const cuda::EpilogueConvProblem& fused, std::string* why) {
        std::pair<double, std::string> best{-1.0, ""};
        for (const auto& plan : cuda::epilogue_conv_candidates(ctx.cudnn(), fused, o.workspace_limit_bytes, 4, why)) {
          auto ws = ctx.scratch(std::max<std::size_t>(plan->workspace_bytes(), 1));
          cuda::EpilogueConvLaunch launch(plan);
          cuda::EpilogueConvOperands ops{x.raw(), w.raw(), nullptr, nullptr, y.raw(), ws->data()};
          ops.sum = static_cast<float*>(sums.raw());
          ops.sqsum = static_cast<float*>(sums.raw()) + d.k;
          if (fused.input_affine_relu) ops.in_scale = in_coef.raw(), ops.in_shift = in_coef.raw();
          const double ms = min_ms(ctx.stream(), rounds, [&] { CNNERGY_CUDA_CALL(launch.execute(ctx.cudnn(), ops)); });
          if (best.first < 0 || ms < best.first) best = {ms, plan->engine() + (plan->compiled_at_run_time() ? "" : " (pre-compiled)")};
        }
        return best;
      };
      std::tie(row.fused_ms, row.engine) = fastest(e, &row.why);
      if (row.fused_ms >= 0)  // the sums the last fused plan wrote, as the training executor hands them over
        row.bn_from_sums_ms =
            min_ms(stream, rounds, [&] { bn->forward_training(y, gamma, beta, rm, rv, y2, sm, si, &sums); });
      if (s.c % 8 == 0) {  // not the stem: its input is the image, no batch norm before it
        BatchNormDesc in_bd{d.n, d.c, d.h, d.w};
        auto in_bn = backend->make_batch_norm(in_bd);
        Tensor x2 = backend->alloc(d.input_shape(), o.dtype, o.layout);
        const Shape in_per{d.c};
        Tensor ig = backend->alloc(in_per, DType::kF32), ib = backend->alloc(in_per, DType::kF32);
        Tensor irm = backend->alloc(in_per, DType::kF32), irv = backend->alloc(in_per, DType::kF32);
        Tensor ism = backend->alloc(in_per, DType::kF32), isi = backend->alloc(in_per, DType::kF32);
        backend->fill(ig, 1.0f), backend->fill(ib, 0.0f), backend->fill(irm, 0.0f), backend->fill(irv, 1.0f);
        in_bn->forward_training(x, ig, ib, irm, irv, x2, ism, isi);
        if (backend->recomputes_batch_norm_output(in_bd))
          row.in_apply_ms = min_ms(stream, rounds, [&] { in_bn->recompute_output(x, ig, ib, ism, isi, x2); });
        cuda::EpilogueConvProblem pe = e;
        pe.input_affine_relu = true;
        std::string why;
        std::tie(row.prologue_ms, row.prologue_engine) = fastest(pe, &why);
      }
      std::printf("%-24s x%-2lld conv %7.3f  bn %7.3f  apply %7.3f  fused %7.3f + bn %7.3f %-14s in_apply %7.3f  "
                  "prologue %7.3f %s%s\n",
                  s.name, static_cast<long long>(s.count), row.conv_ms, row.bn_ms, row.apply_ms, row.fused_ms,
                  row.bn_from_sums_ms, row.engine.c_str(), row.in_apply_ms, row.prologue_ms, row.prologue_engine.c_str(),
                  row.fused_ms < 0 ? ("  (" + row.why + ")").c_str() : "");
      std::fflush(stdout);
      rows.push_back(row);
    }
    double today = 0, fused = 0;
    bool all = true;
    for (const Row& r : rows) {
      today += r.count * (r.conv_ms + r.bn_ms);
      if (r.fused_ms < 0) {
        all = false;
        fused += r.count * (r.conv_ms + r.bn_ms);
      } else {
        fused += r.count * std::min(r.conv_ms + r.bn_ms, r.fused_ms + r.bn_from_sums_ms);
      }
    }
    std::printf("ResNet-50 forward, convolutions + batch norms (ms per step, batch %lld): today %.3f, with "
                "statistics fused where faster %.3f (%s)\n",
                static_cast<long long>(n), today, fused, all ? "every shape had a plan" : "some shapes had none");
    // The MLPerf-style chain per convolution after a batch norm: today the previous batch norm's
    // normalisation pass over x, the convolution and the statistics pass over y; fused, one graph.
    double chain_today = 0, chain_fused = 0;
    for (const Row& r : rows)
      if (r.prologue_ms > 0 && r.apply_ms > 0) {
        chain_today += r.count * (r.in_apply_ms + r.conv_ms + r.bn_ms - r.apply_ms);
        chain_fused += r.count * r.prologue_ms;
      }
    std::printf("normalise x + convolution + statistics of y, the shapes after a batch norm (ms per step): today "
                "%.3f, one cuDNN graph each %.3f\n", chain_today, chain_fused);
    std::ofstream out(p.get("out"));
    out << "{\"batch\": " << n << ", \"precision\": \"" << p.get("precision") << "\", \"layout\": \""
        << p.get("layout") << "\", \"device\": \"" << backend->device_name() << "\", \"rows\": [";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      out << (i ? ", " : "") << "{\"shape\": \"" << r.name << "\", \"count\": " << r.count
          << ", \"conv_ms\": " << r.conv_ms << ", \"batch_norm_ms\": " << r.bn_ms << ", \"apply_ms\": " << r.apply_ms
          << ", \"fused_ms\": " << r.fused_ms << ", \"batch_norm_from_sums_ms\": " << r.bn_from_sums_ms
          << ", \"engine\": \"" << r.engine << "\", \"input_apply_ms\": "
          << r.in_apply_ms << ", \"prologue_fused_ms\": " << r.prologue_ms << ", \"prologue_engine\": \""
          << r.prologue_engine << "\"}";
    }
    out << "], \"today_ms\": " << today << ", \"fused_where_faster_ms\": " << fused
        << ", \"chain_today_ms\": " << chain_today << ", \"chain_fused_ms\": " << chain_fused << "}\n";
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_conv_statistics: %s\n", e.what());
    return e.exit_code();
  }
}
