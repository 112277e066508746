// The "threads" communicator: N replicas of one process meet in a shared ThreadGroup. Collectives
// are built from a generation-counting barrier with a deadline; a reduction posts every rank's
// tensor, each rank sums its own slice over all ranks in rank order into shared scratch, and every
// rank copies the whole result back, so all replicas hold the same bits. A rank that fails aborts
// the group, which wakes every blocked peer at once with the reason.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "core/dtype.hpp"
#include "core/errors.hpp"
#include "train/parallel/communicator.hpp"

namespace cnnergy::dist {

struct ThreadGroup::State {
  explicit State(int n, const CommOptions& o)
      : size(n),
        options(o),
        tensors(static_cast<std::size_t>(n)),
        strings(static_cast<std::size_t>(n)) {}
  const int size;
  const CommOptions options;
  std::mutex mutex;
  std::condition_variable cv;
  int arrived = 0;
  std::uint64_t generation = 0;
  std::optional<std::string> failure;
  std::vector<const Tensor*> tensors;  // posted by each rank for the current collective
  std::vector<std::string> strings;
  std::vector<float> scratch;  // reduction result, sized by the last rank to arrive
  std::vector<bool> taken;     // communicators handed out

  // Waits until all ranks arrived; the last one runs `on_complete` under the lock first. Throws
  // DeviceError on timeout (and fails the group) or when the group failed meanwhile.
  template <typename F>
  void arrive(int rank, const char* what, F&& on_complete) {
    std::unique_lock<std::mutex> lock(mutex);
    throw_if_failed(rank);
    const std::uint64_t gen = generation;
    if (++arrived == size) {
      on_complete();
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(options.timeout_s));
    const bool done =
        cv.wait_until(lock, deadline, [&] { return generation != gen || failure.has_value(); });
    if (generation != gen) return;
    if (!done && !failure) {
      failure = "rank " + std::to_string(rank) + " waited " + format_seconds(options.timeout_s) +
                " in " + what + " for " + std::to_string(size - arrived) +
                " peer(s) that never arrived (a replica died, hung or runs a different step)";
      cv.notify_all();
    }
    throw_if_failed(rank);
  }
  void arrive(int rank, const char* what) {
    arrive(rank, what, [] {});
  }

  void throw_if_failed(int rank) const {  // with the mutex held
    if (failure)
      throw DeviceError("threads communicator, rank " + std::to_string(rank) + ": " + *failure);
  }
  void check(int rank) {
    std::lock_guard<std::mutex> lock(mutex);
    throw_if_failed(rank);
  }
};

namespace {

float load(const Tensor& t, std::size_t i) {
  switch (t.dtype()) {
    case DType::kF32:
      return t.data<float>()[i];
    case DType::kF16:
      return half_bits_to_float(t.data<std::uint16_t>()[i]);
    case DType::kBF16:
      return bf16_bits_to_float(t.data<std::uint16_t>()[i]);
    case DType::kI32:
      return static_cast<float>(t.data<std::int32_t>()[i]);
  }
  return 0.0f;
}

void store(const Tensor& t, std::size_t i, float v) {
  switch (t.dtype()) {
    case DType::kF32:
      t.data<float>()[i] = v;
      break;
    case DType::kF16:
      t.data<std::uint16_t>()[i] = float_to_half_bits(v);
      break;
    case DType::kBF16:
      t.data<std::uint16_t>()[i] = float_to_bf16_bits(v);
      break;
    case DType::kI32:
      t.data<std::int32_t>()[i] = static_cast<std::int32_t>(v);
      break;
  }
}

void require_host(const Tensor& t, const char* op) {
  if (!t.defined()) throw InvalidArgument(std::string(op) + ": undefined tensor");
  if (!t.device().is_cpu())
    throw InvalidArgument(std::string(op) +
                          " on the threads communicator needs a host tensor, got " + t.describe() +
                          " (GPU replicas communicate through NCCL)");
}

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadGroup::State> state, int rank)
      : s_(std::move(state)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return s_->size; }
  std::string kind() const override { return "threads"; }
  const CommOptions& options() const override { return s_->options; }

  void all_reduce_sum(const Tensor& t) override {
    require_host(t, "all_reduce_sum");
    if (t.dtype() == DType::kI32) {
      // Integers stay exact: summed in 64 bits.
      all_reduce_int(t);
      return;
    }
    s_->tensors[static_cast<std::size_t>(rank_)] = &t;
    s_->arrive(rank_, "all_reduce_sum", [&] {
      for (int r = 1; r < s_->size; ++r) {
        const Tensor& a = *s_->tensors[0];
        const Tensor& b = *s_->tensors[static_cast<std::size_t>(r)];
        if (a.numel() != b.numel() || a.dtype() != b.dtype())
          s_->failure = "ranks all-reduce different tensors: rank 0 " + a.describe() + ", rank " +
                        std::to_string(r) + " " + b.describe() + " (different models or buckets)";
      }
      if (!s_->failure) s_->scratch.resize(static_cast<std::size_t>(t.numel()));
    });
    s_->check(rank_);
    const auto n = static_cast<std::size_t>(t.numel());
    const auto parts = static_cast<std::size_t>(s_->size);
    const std::size_t lo = n * static_cast<std::size_t>(rank_) / parts;
    const std::size_t hi = n * static_cast<std::size_t>(rank_ + 1) / parts;
    float* out = s_->scratch.data();
    if (t.dtype() == DType::kF32) {  // the common case, vectorisable; same rank order as below
      std::memcpy(out + lo, s_->tensors[0]->data<float>() + lo, (hi - lo) * sizeof(float));
      for (int r = 1; r < s_->size; ++r) {
        const float* src = s_->tensors[static_cast<std::size_t>(r)]->data<float>();
        for (std::size_t i = lo; i < hi; ++i) out[i] += src[i];
      }
    } else {
      for (std::size_t i = lo; i < hi; ++i) {
        float sum = 0.0f;
        for (int r = 0; r < s_->size; ++r)
          sum += load(*s_->tensors[static_cast<std::size_t>(r)], i);
        out[i] = sum;
      }
    }
    s_->arrive(rank_, "all_reduce_sum");
    if (t.dtype() == DType::kF32) {
      std::memcpy(t.raw(), s_->scratch.data(), n * sizeof(float));
    } else {
      for (std::size_t i = 0; i < n; ++i) store(t, i, s_->scratch[i]);
    }
  }

  void broadcast(const Tensor& t, int root) override {
    require_host(t, "broadcast");
    check_root(root);
    s_->tensors[static_cast<std::size_t>(rank_)] = &t;
    s_->arrive(rank_, "broadcast", [&] {
      const Tensor& src = *s_->tensors[static_cast<std::size_t>(root)];
      for (int r = 0; r < s_->size; ++r)
        if (s_->tensors[static_cast<std::size_t>(r)]->size_bytes() != src.size_bytes())
          s_->failure = "ranks broadcast tensors of different sizes: root " + src.describe() +
                        ", rank " + std::to_string(r) + " " +
                        s_->tensors[static_cast<std::size_t>(r)]->describe();
    });
    s_->check(rank_);
    if (rank_ != root)
      std::memcpy(t.raw(), s_->tensors[static_cast<std::size_t>(root)]->raw(), t.size_bytes());
    s_->arrive(rank_, "broadcast");
  }

  std::unique_ptr<DeviceEvent> record_comm_event() override { return make_host_event(); }

  void barrier() override { s_->arrive(rank_, "barrier"); }

  std::vector<std::string> all_gather(const std::string& mine) override {
    s_->strings[static_cast<std::size_t>(rank_)] = mine;
    s_->arrive(rank_, "all_gather");
    std::vector<std::string> out = s_->strings;
    s_->arrive(rank_, "all_gather");  // nobody overwrites a string before everyone copied it
    return out;
  }

  void abort(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(s_->mutex);
    if (!s_->failure) s_->failure = reason;
    s_->cv.notify_all();
  }

  std::optional<std::string> failure() const override {
    std::lock_guard<std::mutex> lock(s_->mutex);
    return s_->failure;
  }

 private:
  void check_root(int root) const {
    if (root < 0 || root >= s_->size)
      throw InvalidArgument("broadcast root " + std::to_string(root) + " outside [0, " +
                            std::to_string(s_->size) + ")");
  }

  void all_reduce_int(const Tensor& t) {
    std::vector<std::string> parts;
    std::string mine(reinterpret_cast<const char*>(t.raw()), t.size_bytes());
    parts = all_gather(mine);
    const auto n = static_cast<std::size_t>(t.numel());
    for (const auto& p : parts)
      if (p.size() != mine.size())
        throw InvalidArgument("ranks all-reduce int32 tensors of different sizes");
    for (std::size_t i = 0; i < n; ++i) {
      std::int64_t sum = 0;
      for (const auto& p : parts) {
        std::int32_t v;
        std::memcpy(&v, p.data() + i * sizeof(v), sizeof(v));
        sum += v;
      }
      t.data<std::int32_t>()[i] = static_cast<std::int32_t>(sum);
    }
  }

  std::shared_ptr<ThreadGroup::State> s_;
  int rank_;
};

}  // namespace

ThreadGroup::ThreadGroup(int size, const CommOptions& options) {
  if (size < 1)
    throw InvalidArgument("a group needs at least one replica, got " + std::to_string(size));
  if (!(options.timeout_s > 0)) throw InvalidArgument("the communication timeout must be > 0 s");
  state_ = std::make_shared<State>(size, options);
  state_->taken.assign(static_cast<std::size_t>(size), false);
}

ThreadGroup::~ThreadGroup() = default;

int ThreadGroup::size() const { return state_->size; }

std::unique_ptr<Communicator> ThreadGroup::communicator(int rank) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (rank < 0 || rank >= state_->size)
    throw InvalidArgument("rank " + std::to_string(rank) + " outside [0, " +
                          std::to_string(state_->size) + ")");
  if (state_->taken[static_cast<std::size_t>(rank)])
    throw InvalidArgument("the communicator of rank " + std::to_string(rank) +
                          " was already handed out");
  state_->taken[static_cast<std::size_t>(rank)] = true;
  return std::make_unique<ThreadCommunicator>(state_, rank);
}

void ThreadGroup::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (!state_->failure) state_->failure = reason;
  state_->cv.notify_all();
}

std::optional<std::string> ThreadGroup::failure() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->failure;
}

}  // namespace cnnergy::dist
