// GradientBuckets: bucket assignment (reverse layer order, one dtype per bucket, whole layers),
// gradient re-pointing into bucket buffers, hook-driven launches and event timing in a small ring.
#include "train/parallel/grad_buckets.hpp"

#include <algorithm>
#include <map>

#include "core/errors.hpp"
#include "net/executor.hpp"

namespace cnnergy::dist {

namespace {
constexpr std::size_t kAlignBytes = 256;  // every gradient starts aligned for vectorised kernels
constexpr std::size_t kRingDepth = 4;     // steps whose events may be in flight (end_step keeps 2)
std::size_t align_up(std::size_t n) { return (n + kAlignBytes - 1) / kAlignBytes * kAlignBytes; }
}  // namespace

struct GradientBuckets::Bucket {
  Tensor flat;  // the whole buffer as one 1-D tensor of the bucket's dtype
  std::vector<Parameter*> params;
};

struct GradientBuckets::Slot {
  std::uint64_t step = 0;
  bool pending = false;
  std::vector<std::unique_ptr<DeviceEvent>> start, done;  // per bucket
  std::unique_ptr<DeviceEvent> barrier_start, barrier_done;
};

GradientBuckets::GradientBuckets(Executor& executor, Communicator& comm,
                                 const BucketOptions& options)
    : executor_(executor), comm_(comm), options_(options) {
  if (options_.cap_bytes == 0) throw InvalidArgument("the bucket size must be > 0 bytes");
  if (options_.wait_barrier && !options_.timed)
    throw InvalidArgument(
        "the wait barrier exists to time the all-reduces, and these buckets are untimed (a step "
        "recorded as a CUDA graph)");
  if (options_.wait_barrier) options_.overlap = false;
  Backend& backend = executor_.backend();
  const std::size_t num_layers = executor_.num_layers();

  // Pass 1: assign whole layers, deepest first, to the open bucket of their gradients' dtype.
  struct Draft {
    DType dtype = DType::kF32;
    std::size_t bytes = 0;
    std::size_t ready_layer = 0;
    std::vector<Parameter*> params;
  };
  std::vector<Draft> closed;
  std::map<DType, Draft> open;
  for (std::size_t l = num_layers; l-- > 0;) {
    std::map<DType, bool> touched;
    for (Parameter& p : executor_.layer(l).parameters()) {
      if (!p.grad.defined()) continue;
      Draft fresh;
      fresh.dtype = p.grad.dtype();
      Draft& d = open.try_emplace(p.grad.dtype(), std::move(fresh)).first->second;
      d.bytes = align_up(d.bytes) + p.grad.size_bytes();
      d.ready_layer = l;
      d.params.push_back(&p);
      touched[p.grad.dtype()] = true;
    }
    for (const auto& [dtype, yes] : touched) {
      auto it = open.find(dtype);
      if (yes && it->second.bytes >= options_.cap_bytes) {
        closed.push_back(std::move(it->second));
        open.erase(it);
      }
    }
  }
  for (auto& [dtype, d] : open) closed.push_back(std::move(d));
  // Launch order = readiness order (deepest ready layer first); identical on every rank.
  std::stable_sort(closed.begin(), closed.end(),
                   [](const Draft& a, const Draft& b) { return a.ready_layer > b.ready_layer; });

  // Pass 2: one buffer per bucket; every gradient becomes a view into it.
  by_ready_layer_.resize(num_layers);
  for (Draft& d : closed) {
    auto bucket = std::make_unique<Bucket>();
    const std::size_t elem = dtype_size_bytes(d.dtype);
    const std::size_t bytes = align_up(d.bytes);
    auto buffer = backend.alloc_buffer(bytes);
    bucket->flat =
        Tensor(Shape{static_cast<std::int64_t>(bytes / elem)}, d.dtype, Layout::kNCHW, buffer);
    backend.fill(bucket->flat, 0.0f);  // padding between gradients stays zero: harmless in a sum
    std::size_t offset = 0;
    for (Parameter* p : d.params) {
      offset = align_up(offset);
      p->grad = Tensor(p->grad.shape(), p->grad.dtype(), p->grad.layout(), buffer, offset);
      offset += p->grad.size_bytes();
    }
    bucket->params = std::move(d.params);
    BucketInfo info;
    info.dtype = d.dtype;
    info.bytes = bytes;
    info.num_parameters = bucket->params.size();
    info.ready_layer = d.ready_layer;
    info.first_parameter = bucket->params.front()->name;
    by_ready_layer_[d.ready_layer].push_back(buckets_.size());
    info_.push_back(info);
    buckets_.push_back(std::move(bucket));
  }
  launched_.assign(buckets_.size(), false);
  if (options_.wait_barrier) {
    barrier_tensor_ = backend.alloc(Shape{1}, DType::kF32);
    backend.fill(barrier_tensor_, 0.0f);
  }
  for (std::size_t i = 0; i < kRingDepth; ++i) ring_.push_back(std::make_unique<Slot>());
  if (options_.overlap) {
    executor_.set_hook([this](std::size_t layer, Pass pass, bool after) {
      if (pass == Pass::kBackward && after && in_step_) on_layer_backward_done(layer);
    });
  }
}

GradientBuckets::~GradientBuckets() {
  if (options_.overlap) executor_.set_hook(nullptr);
}

void GradientBuckets::begin_step() {
  if (in_step_)
    throw InternalError("GradientBuckets::begin_step called twice without end_backward");
  if (options_.timed) {
    harvest(false);
    Slot& slot = *ring_[step_ % kRingDepth];
    if (slot.pending) harvest_slot(slot);  // cannot happen with end_step's lag; kept for safety
    slot.step = step_;
    slot.pending = true;
    slot.start.resize(buckets_.size());
    slot.done.resize(buckets_.size());
  }
  std::fill(launched_.begin(), launched_.end(), false);
  in_step_ = true;
}

void GradientBuckets::on_layer_backward_done(std::size_t layer) {
  if (layer >= by_ready_layer_.size()) return;
  for (std::size_t b : by_ready_layer_[layer]) launch(b);
}

namespace {
void stamp(Communicator& comm, std::unique_ptr<DeviceEvent>& e) {
  if (e) {
    e->record();
  } else {
    e = comm.record_comm_event();
  }
}
}  // namespace

void GradientBuckets::launch(std::size_t b) {
  if (launched_[b]) return;
  launched_[b] = true;
  // The communication stream waits for an event recorded on the compute stream. Under a CUDA
  // graph capture of the compute stream that wait is what draws the communication stream into
  // the capture (the fork); end_backward's compute_wait_for_comm is the join.
  comm_.wait_for_compute();
  if (!options_.timed) {
    comm_.all_reduce_sum(buckets_[b]->flat);
    return;
  }
  Slot& slot = *ring_[step_ % kRingDepth];
  stamp(comm_, slot.start[b]);
  comm_.all_reduce_sum(buckets_[b]->flat);
  stamp(comm_, slot.done[b]);
}

void GradientBuckets::end_backward() {
  if (!in_step_) throw InternalError("GradientBuckets::end_backward without begin_step");
  Slot& slot = *ring_[step_ % kRingDepth];
  if (options_.wait_barrier) {
    comm_.wait_for_compute();
    stamp(comm_, slot.barrier_start);
    comm_.all_reduce_sum(barrier_tensor_);
    stamp(comm_, slot.barrier_done);
  }
  for (std::size_t b = 0; b < buckets_.size(); ++b) launch(b);
  comm_.compute_wait_for_comm();
  in_step_ = false;
  ++step_;
}

void GradientBuckets::harvest_slot(Slot& slot) {
  BucketStepTiming t;
  for (std::size_t b = 0; b < buckets_.size(); ++b)
    t.bucket_ms.push_back(slot.done[b]->elapsed_ms(*slot.start[b]));
  if (options_.wait_barrier) t.barrier_ms = slot.barrier_done->elapsed_ms(*slot.barrier_start);
  timings_.push_back(std::move(t));
  slot.pending = false;
}

void GradientBuckets::harvest(bool all) {
  // Steps [0, step_) were launched; without `all`, only those at least two steps old are certainly
  // complete (end_step waited for the one before the last).
  if (!options_.timed) return;
  std::vector<Slot*> ready;
  for (auto& s : ring_)
    if (s->pending && (all || s->step + 2 <= step_)) ready.push_back(s.get());
  std::sort(ready.begin(), ready.end(),
            [](const Slot* a, const Slot* b) { return a->step < b->step; });
  for (Slot* s : ready) harvest_slot(*s);
}

}  // namespace cnnergy::dist
