// NcclCommunicator: non-blocking NCCL communicator with bounded waits (see nccl_comm.hpp). Every
// wait polls the CUDA event it waits for, NCCL's asynchronous error and the control plane's
// failure flag; on a timeout or an error it aborts the NCCL communicator (which releases kernels
// stuck waiting for a dead peer) and tells the peers through the control plane.
#include "train/parallel/nccl_comm.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <thread>

#include "core/errors.hpp"
#include "core/log.hpp"

#ifdef CNNERGY_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "backend/cuda/cuda_check.hpp"
#endif

namespace cnnergy::dist {

bool nccl_built() {
#ifdef CNNERGY_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

#ifdef CNNERGY_HAVE_NCCL

namespace {

// A timing event on the communication stream; read only after the stream was waited for.
class CommEvent final : public DeviceEvent {
 public:
  CommEvent(int device, cudaStream_t stream) : device_(device), stream_(stream) {
    CNNERGY_CUDA_CALL(cudaEventCreateWithFlags(&event_, cudaEventDefault));
  }
  ~CommEvent() override { (void)cudaEventDestroy(event_); }
  CommEvent(const CommEvent&) = delete;
  CommEvent& operator=(const CommEvent&) = delete;

  void record() override { CNNERGY_CUDA_CALL(cudaEventRecord(event_, stream_)); }
  void synchronize() override { CNNERGY_CUDA_CALL(cudaEventSynchronize(event_)); }
  bool ready() const override { return cudaEventQuery(event_) == cudaSuccess; }
  double elapsed_ms(const DeviceEvent& since) const override {
    const auto* start = dynamic_cast<const CommEvent*>(&since);
    if (!start || start->device_ != device_)
      throw InternalError("communication events of different devices");
    CNNERGY_CUDA_CALL(cudaEventSynchronize(event_));
    float ms = 0;
    CNNERGY_CUDA_CALL(cudaEventElapsedTime(&ms, start->event_, event_));
    return ms;
  }

 private:
  int device_;
  cudaStream_t stream_;
  cudaEvent_t event_ = nullptr;
};

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF16:
      return ncclFloat16;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kI32:
      return ncclInt32;
  }
  return ncclFloat32;
}

// Owners of the raw handles, so a constructor that throws half-way leaks nothing.
class EventHandle {
 public:
  EventHandle() { CNNERGY_CUDA_CALL(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming)); }
  ~EventHandle() { (void)cudaEventDestroy(e_); }
  EventHandle(const EventHandle&) = delete;
  EventHandle& operator=(const EventHandle&) = delete;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

class StreamHandle {
 public:
  StreamHandle() {
    int least = 0, greatest = 0;
    CNNERGY_CUDA_CALL(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    // High priority: a bucket's all-reduce kernels are scheduled ahead of the backward kernels
    // queued behind them, so communication really overlaps.
    CNNERGY_CUDA_CALL(cudaStreamCreateWithPriority(&s_, cudaStreamNonBlocking, greatest));
  }
  ~StreamHandle() { (void)cudaStreamDestroy(s_); }
  StreamHandle(const StreamHandle&) = delete;
  StreamHandle& operator=(const StreamHandle&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// The NCCL communicator handle: finalize (flushing outstanding work) when healthy, bounded, and
// abort otherwise; a dead peer would make a plain finalize wait forever.
//
// The abort runs on a thread of its own. ncclCommAbort raises the communicator's abort flags at
// once (kernels waiting for a dead peer return), then, since NCCL 2.26, does not return before
// every CUDA graph that captured one of its collectives is destroyed. With `--cuda-graph` those
// graphs belong to the training step of the very thread that aborts, which destroys them only
// while unwinding after the abort: done inline, the abort would wait for ever. The destructor
// waits for the abort thread (bounded; a thread still stuck after that is left behind).
class CommHandle {
 public:
  CommHandle() = default;
  ~CommHandle() {
    reset();
    join_aborter();
  }
  CommHandle(const CommHandle&) = delete;
  CommHandle& operator=(const CommHandle&) = delete;
  ncclComm_t get() const { return c_; }
  ncclComm_t* out() { return &c_; }
  void abort() {
    if (!c_) return;
    ncclComm_t c = c_;
    c_ = nullptr;
    auto done = std::make_shared<std::atomic<bool>>(false);
    aborter_done_ = done;
    try {
      aborter_ = std::thread([c, done] {
        (void)ncclCommAbort(c);
        done->store(true);
      });
    } catch (const std::system_error&) {  // no thread to be had: abort here, inline
      (void)ncclCommAbort(c);
      done->store(true);
    }
  }
  void reset() {
    if (!c_) return;
    const ncclResult_t r = ncclCommFinalize(c_);
    bool clean = r == ncclSuccess || r == ncclInProgress;
    const auto t0 = std::chrono::steady_clock::now();
    while (clean) {
      ncclResult_t st = ncclSuccess;
      if (ncclCommGetAsyncError(c_, &st) != ncclSuccess ||
          (st != ncclSuccess && st != ncclInProgress))
        clean = false;
      if (!clean || st == ncclSuccess) break;
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) clean = false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (clean) {
      (void)ncclCommDestroy(c_);
      c_ = nullptr;
    } else {
      abort();
    }
  }

 private:
  void join_aborter() {
    if (!aborter_.joinable()) return;
    const auto t0 = std::chrono::steady_clock::now();
    const auto limit = std::chrono::seconds(60);
    while (!aborter_done_->load() && std::chrono::steady_clock::now() - t0 < limit)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (aborter_done_->load()) {
      aborter_.join();
    } else {
      log_warn(
          "ncclCommAbort has not returned after 60 s (a CUDA graph holding this communicator's "
          "collectives still alive?): leaving it behind");
      aborter_.detach();
    }
  }

  ncclComm_t c_ = nullptr;
  std::thread aborter_;
  std::shared_ptr<std::atomic<bool>> aborter_done_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Backend& backend, std::unique_ptr<Communicator> control)
      : control_(std::move(control)), device_(backend.device().index) {
    if (!backend.device().is_cuda())
      throw InvalidArgument("NCCL needs a CUDA backend, got " + backend.device().str());
    compute_stream_ = static_cast<cudaStream_t>(backend.native_stream());
    if (!compute_stream_)
      throw NotSupported(
          "the CUDA backend does not expose its stream (Backend::native_stream): NCCL cannot order "
          "collectives after its kernels");
    activate();
    streams_ = std::make_unique<Handles>();

    // Rank 0 makes the unique id; the control plane carries it to everyone.
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    std::string mine;
    if (control_->rank() == 0) {
      check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      mine.assign(reinterpret_cast<const char*>(&id), sizeof(id));
    }
    const std::vector<std::string> all = control_->all_gather(mine);
    if (all.at(0).size() != sizeof(id))
      throw InternalError("rank 0 sent an NCCL unique id of the wrong size");
    std::memcpy(&id, all[0].data(), sizeof(id));

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t r =
        ncclCommInitRankConfig(comm_.out(), control_->size(), id, control_->rank(), &config);
    if (r != ncclSuccess && r != ncclInProgress)
      fail("ncclCommInitRankConfig failed: " + describe(r));
    wait_ready("creating the NCCL communicator");
  }

  ~NcclCommunicator() override {
    (void)cudaSetDevice(device_);
    comm_.reset();  // before the stream and events it may still use
  }

  int rank() const override { return control_->rank(); }
  int size() const override { return control_->size(); }
  std::string kind() const override { return "nccl"; }
  std::string host_name() const override { return control_->host_name(); }
  const CommOptions& options() const override { return control_->options(); }

  void all_reduce_sum(const Tensor& t) override {
    require_device(t, "all_reduce_sum");
    activate();
    enqueue(ncclAllReduce(t.raw(), t.raw(), static_cast<std::size_t>(t.numel()),
                          nccl_type(t.dtype()), ncclSum, comm_.get(), h().comm_stream.get()),
            "ncclAllReduce");
  }

  void broadcast(const Tensor& t, int root) override {
    require_device(t, "broadcast");
    if (root < 0 || root >= size())
      throw InvalidArgument("broadcast root " + std::to_string(root) + " out of range");
    activate();
    enqueue(ncclBroadcast(t.raw(), t.raw(), t.size_bytes(), ncclUint8, root, comm_.get(),
                          h().comm_stream.get()),
            "ncclBroadcast");
  }

  void wait_for_compute() override {
    activate();
    CNNERGY_CUDA_CALL(cudaEventRecord(h().compute_done.get(), compute_stream_));
    CNNERGY_CUDA_CALL(cudaStreamWaitEvent(h().comm_stream.get(), h().compute_done.get(), 0));
  }

  void compute_wait_for_comm() override {
    activate();
    CNNERGY_CUDA_CALL(cudaEventRecord(h().comm_done.get(), h().comm_stream.get()));
    CNNERGY_CUDA_CALL(cudaStreamWaitEvent(compute_stream_, h().comm_done.get(), 0));
  }

  std::unique_ptr<DeviceEvent> record_comm_event() override {
    activate();
    auto e = std::make_unique<CommEvent>(device_, h().comm_stream.get());
    e->record();
    return e;
  }

  void end_step() override {
    healthy();
    activate();
    const std::size_t cur = steps_ % 2;
    CNNERGY_CUDA_CALL(cudaEventRecord(h().fences[cur].get(), h().comm_stream.get()));
    if (steps_ > 0) wait_event(h().fences[1 - cur].get(), "the all-reduces of the previous step");
    ++steps_;
  }

  void synchronize() override {
    healthy();
    activate();
    CNNERGY_CUDA_CALL(cudaEventRecord(h().sync_fence.get(), h().comm_stream.get()));
    wait_event(h().sync_fence.get(), "the outstanding collectives");
  }

  void barrier() override { control_->barrier(); }
  std::vector<std::string> all_gather(const std::string& mine) override {
    return control_->all_gather(mine);
  }

  void abort(const std::string& reason) override {
    comm_.abort();
    control_->abort(reason);
  }

  std::optional<std::string> failure() const override { return control_->failure(); }

 private:
  void activate() const { CNNERGY_CUDA_CALL(cudaSetDevice(device_)); }

  void healthy() {
    if (!comm_.get())
      throw DeviceError("NCCL rank " + std::to_string(rank()) +
                        ": the communicator was aborted earlier");
  }

  void require_device(const Tensor& t, const char* op) {
    healthy();
    if (!t.defined()) throw InvalidArgument(std::string(op) + ": undefined tensor");
    if (!t.device().is_cuda() || t.device().index != device_)
      throw InvalidArgument(std::string(op) + " on NCCL rank " + std::to_string(rank()) +
                            " (cuda:" + std::to_string(device_) +
                            ") needs a tensor on that GPU, got " + t.describe());
  }

  std::string describe(ncclResult_t r) const {
    std::string s = ncclGetErrorString(r);
    if (comm_.get()) {
      const char* last = ncclGetLastError(comm_.get());
      if (last && *last) s += std::string(" (") + last + ")";
    }
    return s;
  }

  void check(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) fail(std::string(what) + " failed: " + describe(r));
  }

  // A non-blocking communicator may answer ncclInProgress: the call completes in the background
  // and the next NCCL call must wait until the communicator reports success.
  void enqueue(ncclResult_t r, const char* what) {
    if (r == ncclSuccess) return;
    if (r != ncclInProgress) fail(std::string(what) + " failed: " + describe(r));
    wait_ready(what);
  }

  template <typename Done>
  void poll(const std::string& what, Done&& done) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto limit = std::chrono::duration<double>(options().timeout_s);
    for (std::int64_t polls = 0;; ++polls) {
      if (done()) return;
      ncclResult_t st = ncclSuccess;
      if (comm_.get() && ncclCommGetAsyncError(comm_.get(), &st) == ncclSuccess &&
          st != ncclSuccess && st != ncclInProgress)
        fail(what + ": NCCL reported " + describe(st));
      if (auto f = control_->failure()) fail(what + " interrupted: " + *f);
      if (std::chrono::steady_clock::now() - t0 > limit)
        fail(what + " did not complete within " + format_seconds(options().timeout_s) +
             ": a peer rank died, hung, or runs a different step or model");
      if (polls > 2000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  void wait_ready(const std::string& what) {
    poll(what, [&] {
      ncclResult_t st = ncclInProgress;
      const ncclResult_t q = ncclCommGetAsyncError(comm_.get(), &st);
      if (q != ncclSuccess) fail(what + ": ncclCommGetAsyncError failed: " + describe(q));
      if (st != ncclSuccess && st != ncclInProgress) fail(what + " failed: " + describe(st));
      return st == ncclSuccess;
    });
  }

  void wait_event(cudaEvent_t e, const std::string& what) {
    poll("waiting for " + what, [&] {
      const cudaError_t q = cudaEventQuery(e);
      if (q == cudaSuccess) return true;
      if (q != cudaErrorNotReady) fail("waiting for " + what + ": " + cudaGetErrorString(q));
      return false;
    });
  }

  [[noreturn]] void fail(const std::string& message) {
    const std::string full = "NCCL rank " + std::to_string(rank()) + " of " +
                             std::to_string(size()) + " (cuda:" + std::to_string(device_) +
                             "): " + message;
    abort(full);
    throw DeviceError(full);
  }

  struct Handles {
    StreamHandle comm_stream;
    EventHandle compute_done, comm_done, sync_fence;
    EventHandle fences[2];
  };
  Handles& h() const { return *streams_; }

  std::unique_ptr<Communicator> control_;
  int device_;
  cudaStream_t compute_stream_ = nullptr;  // the backend's
  std::unique_ptr<Handles> streams_;
  std::uint64_t steps_ = 0;
  CommHandle comm_;  // last: destroyed first
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Backend& backend,
                                                     std::unique_ptr<Communicator> control) {
  if (!control) throw InvalidArgument("NCCL needs a control communicator");
  return std::make_unique<NcclCommunicator>(backend, std::move(control));
}

#else  // no NCCL

std::unique_ptr<Communicator> make_nccl_communicator(Backend& backend,
                                                     std::unique_ptr<Communicator> control) {
  (void)backend;
  (void)control;
  throw NotSupported("this cnnergy was built without CUDA/NCCL: GPU data parallelism needs NCCL");
}

#endif

}  // namespace cnnergy::dist
