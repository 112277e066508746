// The collective-communication interface data-parallel training runs on, and its in-process
// implementation (ThreadGroup: N replicas in one process, one thread each). MPI (mpi_comm.hpp) and
// NCCL (nccl_comm.hpp) implement the same interface. Every blocking operation is bounded by the
// communicator's timeout, so a dead or stalled peer becomes an error with a message, never a hang.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/ops.hpp"
#include "core/tensor.hpp"

namespace cnnergy::dist {

struct CommOptions {
  double timeout_s = 300.0;  // longest any collective may wait for its peers
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string kind() const = 0;   // "threads", "mpi", "nccl"
  virtual std::string host_name() const;  // the node this rank runs on (per-node energy sums)
  virtual const CommOptions& options() const = 0;

  // ---- tensor collectives, in place. Host communicators ("threads", "mpi") run them at once on
  // host tensors (fp32, fp16, bf16, int32; half types are summed in fp32 and rounded once) and
  // every rank gets bit-identical results. The NCCL communicator enqueues them on its
  // communication stream (device tensors): see the ordering calls below.
  virtual void all_reduce_sum(const Tensor& t) = 0;
  virtual void broadcast(const Tensor& t, int root) = 0;

  // ---- ordering between the backend's compute stream and the communication stream (no-ops for
  // host communicators, whose collectives are synchronous).
  virtual void wait_for_compute() {}       // later collectives start after compute enqueued so far
  virtual void compute_wait_for_comm() {}  // later compute starts after collectives enqueued so far
  // A timestamp in stream order on the communication stream (the host clock on host communicators).
  // Two such events give a collective's duration with elapsed_ms().
  virtual std::unique_ptr<DeviceEvent> record_comm_event() = 0;
  // End of a training step: a bounded wait until the collectives of the step *before* finished, so
  // the host runs at most one step ahead and a hung peer is noticed within the timeout.
  virtual void end_step() {}
  // Bounded wait until every collective enqueued so far has finished.
  virtual void synchronize() {}

  // ---- host control plane: small messages, blocking, bounded by the timeout.
  virtual void barrier() = 0;
  virtual std::vector<std::string> all_gather(const std::string& mine) = 0;

  // Marks this rank failed: later operations throw at once and, where the transport can tell its
  // peers (threads), blocked peers wake up with `reason` instead of waiting for the timeout.
  virtual void abort(const std::string& reason) = 0;
  // Why the group failed, when a rank aborted (empty while healthy).
  virtual std::optional<std::string> failure() const = 0;
};

// Throws InvalidArgument when the ranks do not all hold the same `value` for `what` (model,
// batch, precision, data ...), naming the first rank that differs from rank 0 and both values.
void agree(Communicator& comm, const std::string& what, const std::string& value);

// The same on every rank: the sum over ranks of `value` (host control plane, exact for integers).
double all_reduce_host_sum(Communicator& comm, double value);

// "2 s", "0.5 s", "300 s": timeouts in messages.
std::string format_seconds(double seconds);

// A DeviceEvent on the host clock: records when record() is called (host communicators, whose
// collectives are synchronous, time themselves with it).
std::unique_ptr<DeviceEvent> make_host_event();

// A group of one: every collective is the identity and costs nothing, so a one-GPU baseline
// measures training alone (on any backend, host or device tensors).
std::unique_ptr<Communicator> make_solo_communicator(const CommOptions& options);

// N replicas in one process: the shared state their communicators meet in. Reductions are done
// in rank order, chunk by chunk in parallel, so every replica gets the same bits. Create one group,
// then one communicator per rank, each used from its own thread.
class ThreadGroup {
 public:
  ThreadGroup(int size, const CommOptions& options);
  ~ThreadGroup();
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;

  int size() const;
  // The communicator of `rank` (each rank once); the group must outlive it.
  std::unique_ptr<Communicator> communicator(int rank);
  // Fails the group: every blocked and later operation throws with `reason`. The first reason wins.
  void abort(const std::string& reason);
  std::optional<std::string> failure() const;

  struct State;  // defined in thread_comm.cpp

 private:
  std::shared_ptr<State> state_;
};

}  // namespace cnnergy::dist
