// The NCCL communicator: device-tensor collectives for GPU replicas, on a high-priority
// communication stream of its own that is ordered against the backend's compute stream with events
// (so bucket all-reduces overlap the rest of backward). It is created from an ncclUniqueId that a
// host "control" communicator shares (MPI across processes and nodes, or a ThreadGroup for one
// process driving N GPUs with one thread each), as a non-blocking communicator
// (ncclCommInitRankConfig, blocking = 0): every wait polls ncclCommGetAsyncError and the control
// plane's failure flag against a deadline, and ncclCommAbort()s on timeout, so a dead peer is a
// DeviceError in bounded time. Built without CUDA/NCCL, creation throws NotSupported.
#pragma once

#include <memory>

#include "backend/ops.hpp"
#include "train/parallel/communicator.hpp"

namespace cnnergy::dist {

bool nccl_built();

// `backend` is this rank's CUDA backend (one GPU per rank); `control` a host communicator over the
// same ranks, used for the unique id, barriers, all-gathers and failure propagation. The timeout
// is control->options().timeout_s. Call from the thread that drives `backend`.
std::unique_ptr<Communicator> make_nccl_communicator(Backend& backend,
                                                     std::unique_ptr<Communicator> control);

}  // namespace cnnergy::dist
