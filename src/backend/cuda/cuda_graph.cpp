// CUDA-graph capture and replay on a CUDA backend's stream, with the caching allocator told to keep
// every block freed during the capture (the graph addresses them on each replay).
#include "backend/cuda/cuda_graph.hpp"

#include <cuda_runtime_api.h>

#include <string>
#include <utility>

#include "backend/cuda/cuda_context.hpp"
#include "core/errors.hpp"

namespace cnnergy::cuda {

struct CudaGraph::Retained {
  std::vector<CachingAllocator::Block> blocks;  // freed during the capture
  std::shared_ptr<Buffer> conv_workspace;       // the one the captured convolutions address
};

namespace {
cudaGraph_t as_graph(void* p) { return static_cast<cudaGraph_t>(p); }
cudaGraphExec_t as_exec(void* p) { return static_cast<cudaGraphExec_t>(p); }
}  // namespace

CudaGraph::CudaGraph(const Backend& backend)
    : ctx_(context_of(backend)), retained_(std::make_unique<Retained>()) {}

CudaGraph::~CudaGraph() { reset(); }

void CudaGraph::reset() noexcept {
  if (exec_ != nullptr || graph_ != nullptr) {
    // Replays still queued must finish before the graph and its memory go.
    (void)cudaStreamSynchronize(ctx_->stream());
  }
  if (exec_ != nullptr) (void)cudaGraphExecDestroy(as_exec(exec_));
  if (graph_ != nullptr) (void)cudaGraphDestroy(as_graph(graph_));
  exec_ = nullptr;
  graph_ = nullptr;
  node_count_ = 0;
  ctx_->allocator().release_retained(retained_->blocks);
  retained_->blocks.clear();
  retained_->conv_workspace.reset();
}

void CudaGraph::capture(const std::function<void()>& work) {
  ctx_->activate();
  reset();
  cudaStream_t stream = ctx_->stream();
  CachingAllocator& allocator = ctx_->allocator();
  allocator.begin_retain();
  // Relaxed mode: allocations (cudaMalloc on a cache miss) stay legal while capturing; stream
  // synchronisation does not, and fails the capture with an error.
  cudaError_t begin = cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed);
  if (begin != cudaSuccess) {
    allocator.release_retained(allocator.end_retain());
    CNNERGY_CUDA_CALL(begin);
  }
  cudaGraph_t graph = nullptr;
  try {
    work();
  } catch (...) {
    (void)cudaStreamEndCapture(stream, &graph);  // leaves the stream usable again
    (void)cudaGetLastError();
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    allocator.release_retained(allocator.end_retain());
    throw;
  }
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  retained_->blocks = allocator.end_retain();
  if (end != cudaSuccess || graph == nullptr) {
    (void)cudaGetLastError();
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    allocator.release_retained(retained_->blocks);
    retained_->blocks.clear();
    throw DeviceError(
        std::string("CUDA graph capture failed: ") + cudaGetErrorString(end) +
        " (a host wait, a download or a convolution's first run inside the captured work?)");
  }
  graph_ = graph;
  retained_->conv_workspace = ctx_->conv_workspace_buffer();
  std::size_t nodes = 0;
  CNNERGY_CUDA_CALL(cudaGraphGetNodes(graph, nullptr, &nodes));
  node_count_ = nodes;
  cudaGraphExec_t exec = nullptr;
  // Each kernel keeps the priority of the stream it was captured from (a data-parallel step's
  // all-reduces were enqueued on a high-priority stream so that they run ahead of backward kernels);
  // without the flag every node would run at the priority of the stream the graph is launched into.
  CNNERGY_CUDA_CALL(cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagUseNodePriority));
  exec_ = exec;
}

void CudaGraph::replay() {
  if (exec_ == nullptr) throw InvalidArgument("CudaGraph::replay: nothing captured");
  ctx_->activate();
  CNNERGY_CUDA_CALL(cudaGraphLaunch(as_exec(exec_), ctx_->stream()));
}

}  // namespace cnnergy::cuda
