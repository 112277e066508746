// Transfer timing for the convolution study: flat tensors of each problem's sizes copied between
// pageable or pinned host memory and the device, timed on the host around the synchronous copy.
#include "convbench/transfers.hpp"

#include <chrono>
#include <cstring>

#include "core/errors.hpp"

namespace cnnergy::convbench {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Host tensors of the given element counts, pageable (plain heap) or pinned (page-locked).
std::vector<Tensor> host_tensors(Backend& backend, const std::vector<std::int64_t>& counts, DType dtype, bool pinned) {
  std::vector<Tensor> out;
  for (const auto n : counts) {
    const Shape shape{n};
    if (pinned) {
      out.emplace_back(shape, dtype, Layout::kNCHW,
                       backend.alloc_pinned_host(static_cast<std::size_t>(n) * dtype_size_bytes(dtype)));
    } else {
      out.push_back(Tensor::host(shape, dtype, Layout::kNCHW));
    }
    // Touch every page so the first timed copy does not pay for page faults of fresh memory.
    std::memset(out.back().raw(), 0, out.back().size_bytes());
  }
  return out;
}

}  // namespace

std::vector<TransferRow> measure_transfers(Backend& backend, const ConvProblem& problem, std::size_t index,
                                           const std::string& precision, int repetitions) {
  const Conv2dDesc& d = problem.desc;
  const DType dtype = backend.dtype();
  const std::int64_t x = d.n * d.c * d.h * d.w;
  const std::int64_t w = d.k * (d.c / d.groups) * d.r * d.s;
  const std::int64_t y = d.n * d.k * d.out_h() * d.out_w();
  struct Set {
    const char* what;
    std::vector<std::int64_t> counts;
  };
  const Set sets[] = {{"input batch", {x}}, {"layer tensors (x, w, y)", {x, w, y}}};
  std::vector<TransferRow> rows;
  for (const Set& set : sets) {
    std::vector<Tensor> device;
    std::size_t bytes = 0;
    for (const auto n : set.counts) {
      device.push_back(backend.alloc(Shape{n}, dtype));
      bytes += device.back().size_bytes();
    }
    for (const bool pinned : {false, true}) {
      const auto host = host_tensors(backend, set.counts, dtype, pinned);
      for (const bool h2d : {true, false}) {
        std::vector<double> ms;
        for (int rep = 0; rep <= repetitions; ++rep) {  // rep 0 is the untimed first copy
          backend.synchronize();
          const auto t0 = Clock::now();
          for (std::size_t i = 0; i < host.size(); ++i) {
            if (h2d) backend.upload(host[i], device[i], /*async=*/false);
            else backend.download(device[i], host[i]);
          }
          backend.synchronize();
          if (rep > 0) ms.push_back(ms_since(t0));
        }
        TransferRow r;
        r.problem = index;
        r.what = set.what;
        r.precision = precision;
        r.bytes = bytes;
        r.memory = pinned ? "pinned" : "pageable";
        r.direction = h2d ? "h2d" : "d2h";
        r.time_ms = summarize(ms);
        r.gb_per_s = r.time_ms.median > 0 ? static_cast<double>(bytes) / (r.time_ms.median * 1e6) : 0;
        rows.push_back(std::move(r));
      }
    }
  }
  return rows;
}

}  // namespace cnnergy::convbench
