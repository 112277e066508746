// MPI for processes started by mpirun/srun: the session (MPI_Init_thread / MPI_Finalize as RAII),
// the node-local rank that picks a process's GPU, and a host-tensor communicator (the CPU backend
// all-reduces through it; GPU runs use it as the control plane and to share the NCCL unique id).
// Errors come back as return codes (MPI_ERRORS_RETURN) and every collective is non-blocking and
// polled against a deadline, so a dead or stalled peer is a DeviceError within the timeout.
// Built without MPI, MpiSession's constructor throws NotSupported.
#pragma once

#include <memory>
#include <string>

#include "train/parallel/communicator.hpp"

namespace cnnergy::dist {

bool mpi_built();
// True when this process was started by an MPI launcher (mpirun/mpiexec of Open MPI, MPICH,
// Intel MPI, MVAPICH, or srun with PMI/PMIx): the environment says so.
bool launched_by_mpi();

class MpiSession {
 public:
  MpiSession();   // MPI_Init_thread; NotSupported without MPI, DeviceError when it fails
  ~MpiSession();  // MPI_Finalize, unless a communicator failed (finalizing with a dead peer hangs)
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // Rank among the processes of this node, and how many there are (GPU choice: one per process).
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

  // Skip MPI_Finalize at destruction: for a rank that fails on its own (its peers may be blocked in
  // a collective it will never join; finalizing would wait for them).
  void abandon();

  // A communicator over all processes (a duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN).
  // The session must outlive it.
  std::unique_ptr<Communicator> communicator(const CommOptions& options);

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
  int world_rank_ = 0, world_size_ = 1, local_rank_ = 0, local_size_ = 1;
};

}  // namespace cnnergy::dist
