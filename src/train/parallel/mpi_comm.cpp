// MpiSession and the MPI communicator: non-blocking collectives (MPI_I*) polled with MPI_Test
// against a deadline, MPI_ERRORS_RETURN so failures are codes we turn into DeviceError, fp16/bf16
// sums through user-defined MPI operations (MPI has no half types), int32 counts exact.
#include "train/parallel/mpi_comm.hpp"

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/dtype.hpp"
#include "core/errors.hpp"

#ifdef CNNERGY_HAVE_MPI
#include <mpi.h>
#endif

namespace cnnergy::dist {

bool mpi_built() {
#ifdef CNNERGY_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK",
                          "MV2_COMM_WORLD_SIZE", "MPI_LOCALNRANKS"}) {
    const char* v = std::getenv(var);
    if (v && *v) return true;
  }
  return false;
}

struct MpiSession::Impl {
  std::atomic<bool> failed{false};
  bool finalize = false;  // we initialised MPI, so we finalise it
};

#ifdef CNNERGY_HAVE_MPI

namespace {

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(len));
}

void check_mpi(int code, const char* expr) {
  if (code != MPI_SUCCESS)
    throw DeviceError(std::string("MPI call failed: ") + expr + ": " + mpi_error_text(code));
}
#define CNNERGY_MPI_CALL(expr) check_mpi((expr), #expr)

// Sums of 16-bit floats: each element converted to fp32, added, rounded once.
void sum_f16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = float_to_half_bits(half_bits_to_float(a[i]) + half_bits_to_float(b[i]));
}
void sum_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = float_to_bf16_bits(bf16_bits_to_float(a[i]) + bf16_bits_to_float(b[i]));
}

constexpr std::int64_t kMaxCount = INT_MAX / 2;  // MPI counts are int: larger tensors go in chunks

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(std::shared_ptr<MpiSession::Impl> session, const CommOptions& options)
      : session_(std::move(session)), options_(options) {
    if (!(options.timeout_s > 0)) throw InvalidArgument("the communication timeout must be > 0 s");
    CNNERGY_MPI_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    CNNERGY_MPI_CALL(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    CNNERGY_MPI_CALL(MPI_Comm_rank(comm_, &rank_));
    CNNERGY_MPI_CALL(MPI_Comm_size(comm_, &size_));
    CNNERGY_MPI_CALL(MPI_Type_contiguous(2, MPI_BYTE, &half_type_));
    CNNERGY_MPI_CALL(MPI_Type_commit(&half_type_));
    CNNERGY_MPI_CALL(MPI_Op_create(&sum_f16, 1, &op_f16_));
    CNNERGY_MPI_CALL(MPI_Op_create(&sum_bf16, 1, &op_bf16_));
  }

  ~MpiCommunicator() override {
    // With a failed peer, freeing may block in some MPI implementations: leave it to process exit.
    if (session_->failed.load()) return;
    (void)MPI_Op_free(&op_f16_);
    (void)MPI_Op_free(&op_bf16_);
    (void)MPI_Type_free(&half_type_);
    (void)MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string kind() const override { return "mpi"; }
  const CommOptions& options() const override { return options_; }

  void all_reduce_sum(const Tensor& t) override {
    require_host(t, "all_reduce_sum");
    MPI_Datatype type = MPI_FLOAT;
    MPI_Op op = MPI_SUM;
    switch (t.dtype()) {
      case DType::kF32:
        break;
      case DType::kI32:
        type = MPI_INT;
        break;
      case DType::kF16:
        type = half_type_;
        op = op_f16_;
        break;
      case DType::kBF16:
        type = half_type_;
        op = op_bf16_;
        break;
    }
    const std::size_t elem = dtype_size_bytes(t.dtype());
    auto* base = static_cast<char*>(t.raw());
    for (std::int64_t first = 0; first < t.numel(); first += kMaxCount) {
      const int count = static_cast<int>(std::min(kMaxCount, t.numel() - first));
      MPI_Request req;
      start(MPI_Iallreduce(MPI_IN_PLACE, base + static_cast<std::size_t>(first) * elem, count, type,
                           op, comm_, &req),
            "all-reduce");
      wait(req, "all-reduce of " + t.describe());
    }
  }

  void broadcast(const Tensor& t, int root) override {
    require_host(t, "broadcast");
    if (root < 0 || root >= size_)
      throw InvalidArgument("broadcast root " + std::to_string(root) + " out of range");
    auto* base = static_cast<char*>(t.raw());
    const auto bytes = static_cast<std::int64_t>(t.size_bytes());
    for (std::int64_t first = 0; first < bytes; first += kMaxCount) {
      const int count = static_cast<int>(std::min(kMaxCount, bytes - first));
      MPI_Request req;
      start(MPI_Ibcast(base + first, count, MPI_BYTE, root, comm_, &req), "broadcast");
      wait(req, "broadcast of " + t.describe());
    }
  }

  std::unique_ptr<DeviceEvent> record_comm_event() override { return make_host_event(); }

  void barrier() override {
    MPI_Request req;
    start(MPI_Ibarrier(comm_, &req), "barrier");
    wait(req, "barrier");
  }

  std::vector<std::string> all_gather(const std::string& mine) override {
    if (mine.size() > static_cast<std::size_t>(kMaxCount))
      throw InvalidArgument("all_gather message too long");
    int my_len = static_cast<int>(mine.size());
    std::vector<int> lens(static_cast<std::size_t>(size_));
    MPI_Request req;
    start(MPI_Iallgather(&my_len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm_, &req), "all-gather");
    wait(req, "all-gather of message sizes");
    std::vector<int> displs(static_cast<std::size_t>(size_));
    std::int64_t total = 0;
    for (int r = 0; r < size_; ++r) {
      displs[static_cast<std::size_t>(r)] = static_cast<int>(total);
      total += lens[static_cast<std::size_t>(r)];
    }
    if (total > kMaxCount) throw InvalidArgument("all_gather messages too long in total");
    std::string all(static_cast<std::size_t>(total), '\0');
    start(MPI_Iallgatherv(mine.data(), my_len, MPI_CHAR, all.data(), lens.data(), displs.data(),
                          MPI_CHAR, comm_, &req),
          "all-gather");
    wait(req, "all-gather");
    std::vector<std::string> out;
    for (int r = 0; r < size_; ++r)
      out.push_back(all.substr(static_cast<std::size_t>(displs[static_cast<std::size_t>(r)]),
                               static_cast<std::size_t>(lens[static_cast<std::size_t>(r)])));
    return out;
  }

  void abort(const std::string& reason) override {
    session_->failed = true;
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_) failure_ = reason;
  }

  std::optional<std::string> failure() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return failure_;
  }

 private:
  void require_host(const Tensor& t, const char* op) const {
    check_healthy();
    if (!t.defined()) throw InvalidArgument(std::string(op) + ": undefined tensor");
    if (!t.device().is_cpu())
      throw InvalidArgument(std::string(op) + " on the MPI communicator needs a host tensor, got " +
                            t.describe() + " (GPU tensors go through NCCL)");
  }

  void check_healthy() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_)
      throw DeviceError("MPI rank " + std::to_string(rank_) +
                        ": communicator failed earlier: " + *failure_);
  }

  void start(int code, const char* what) {
    if (code != MPI_SUCCESS)
      fail(std::string("starting the ") + what + " failed: " + mpi_error_text(code));
  }

  // Polls until the request completes; the first milliseconds spin (latency), then short sleeps.
  void wait(MPI_Request& req, const std::string& what) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto limit = std::chrono::duration<double>(options_.timeout_s);
    for (std::int64_t polls = 0;; ++polls) {
      int done = 0;
      const int code = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (code != MPI_SUCCESS)
        fail(what + " failed: " + mpi_error_text(code) + " (a peer rank probably died)");
      if (done) return;
      if (std::chrono::steady_clock::now() - t0 > limit)
        fail(what + " did not complete within " + format_seconds(options_.timeout_s) +
             ": a peer rank died, hung, or runs a different step or model");
      if (polls > 2000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  [[noreturn]] void fail(const std::string& message) {
    abort(message);
    throw DeviceError("MPI rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": " +
                      message);
  }

  std::shared_ptr<MpiSession::Impl> session_;
  CommOptions options_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  MPI_Datatype half_type_ = MPI_DATATYPE_NULL;
  MPI_Op op_f16_ = MPI_OP_NULL, op_bf16_ = MPI_OP_NULL;
  mutable std::mutex mutex_;
  std::optional<std::string> failure_;
};

}  // namespace

MpiSession::MpiSession() : impl_(std::make_shared<Impl>()) {
  int initialized = 0;
  CNNERGY_MPI_CALL(MPI_Initialized(&initialized));
  if (!initialized) {
    int provided = 0;
    CNNERGY_MPI_CALL(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
    impl_->finalize = true;
  }
  CNNERGY_MPI_CALL(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  CNNERGY_MPI_CALL(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  CNNERGY_MPI_CALL(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
  MPI_Comm node = MPI_COMM_NULL;
  CNNERGY_MPI_CALL(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank_, MPI_INFO_NULL, &node));
  CNNERGY_MPI_CALL(MPI_Comm_rank(node, &local_rank_));
  CNNERGY_MPI_CALL(MPI_Comm_size(node, &local_size_));
  CNNERGY_MPI_CALL(MPI_Comm_free(&node));
}

MpiSession::~MpiSession() {
  if (impl_->finalize && !impl_->failed.load()) (void)MPI_Finalize();
}

std::unique_ptr<Communicator> MpiSession::communicator(const CommOptions& options) {
  return std::make_unique<MpiCommunicator>(impl_, options);
}

void MpiSession::abandon() { impl_->failed = true; }

#else  // no MPI

MpiSession::MpiSession() {
  throw NotSupported(
      "this cnnergy was built without MPI: install an MPI (e.g. libopenmpi-dev) and rebuild");
}
MpiSession::~MpiSession() = default;
std::unique_ptr<Communicator> MpiSession::communicator(const CommOptions&) {
  throw NotSupported("this cnnergy was built without MPI");
}
void MpiSession::abandon() {}

#endif

}  // namespace cnnergy::dist
