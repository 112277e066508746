// The CUDA execution context: device, stream, library handles, workspace, algorithm cache; and
// the small helpers (dtype/layout mapping, argument checks) the kernel files share.
#include "backend/cuda/cuda_context.hpp"

#include <algorithm>
#include <climits>
#include <string>

#include "core/errors.hpp"

namespace cnnergy::cuda {

// ---- CudaContext -------------------------------------------------------------------------------
namespace {
int select_device(int index) {
  CNNERGY_CUDA_CALL(cudaSetDevice(index));
  return index;
}
}  // namespace

CudaContext::CudaContext(const BackendOptions& options)
    : options_(options),
      configured_workspace_limit_(options.workspace_limit_bytes),
      properties_([&] {
        select_device(options.device.index);  // before the stream and handles are created below
        cudaDeviceProp p{};
        CNNERGY_CUDA_CALL(cudaGetDeviceProperties(&p, options.device.index));
        return p;
      }()),
      allocator_(CachingAllocator::create(options.device.index)) {
  CNNERGY_CUDA_CALL(cudnnSetStream(cudnn_, stream_));
  CNNERGY_CUDA_CALL(cublasSetStream(cublas_, stream_));
  if (!options.algo_cache_dir.empty()) {
    // Decisions are valid for this GPU model, driver, cuDNN and CUDA runtime only.
    AlgoCacheContext c;
    c.gpu_name = properties_.name;
    c.compute_capability = properties_.major * 10 + properties_.minor;
    CNNERGY_CUDA_CALL(cudaDriverGetVersion(&c.driver_version));
    c.driver_release = nvidia_driver_release();
    CNNERGY_CUDA_CALL(cudaRuntimeGetVersion(&c.cuda_runtime_version));
    c.cudnn_version = static_cast<int>(cudnnGetVersion());
    algo_cache_ = shared_algo_cache(options.algo_cache_dir, c);
    search_clock_.set_cache_path(algo_cache_->file_path());
  }
}

CudaContext::~CudaContext() {
  // Let queued work finish before its handles and memory go away (errors cannot be reported here).
  (void)cudaSetDevice(options_.device.index);
  (void)cudaStreamSynchronize(stream_.get());
  (void)cudaGetLastError();
}

void CudaContext::activate() const {
  int current = -1;
  CNNERGY_CUDA_CALL(cudaGetDevice(&current));
  if (current != options_.device.index) CNNERGY_CUDA_CALL(cudaSetDevice(options_.device.index));
}

void* CudaContext::conv_workspace(std::size_t bytes) {
  if (region_data_ != nullptr) {
    const std::size_t skip = region_prefix_bytes_;  // a RegionPrefix's bytes (never more than the region)
    if (bytes <= region_bytes_ - skip) return static_cast<char*>(region_data_) + skip;
    ++region_overflows_;
    region_overflow_bytes_ = std::max(region_overflow_bytes_, skip + bytes);
  }
  if (bytes == 0) return workspace_ ? workspace_->data() : nullptr;
  if (!workspace_ || workspace_->size_bytes() < bytes) {
    workspace_.reset();  // back to the cache first, so that it can be reused for the larger block
    workspace_ = allocator_->allocate(bytes);
  }
  return workspace_->data();
}

CudaContext::RegionPrefix::RegionPrefix(CudaContext& ctx, std::size_t bytes) : ctx_(ctx) {
  CNNERGY_CHECK(ctx_.region_prefix_bytes_ == 0, "one region prefix at a time");
  const std::size_t aligned = footprint(bytes);
  if (ctx_.region_data_ == nullptr || aligned == 0 || aligned > ctx_.region_bytes_) return;
  data_ = ctx_.region_data_;
  ctx_.region_prefix_bytes_ = aligned;
}

CudaContext::RegionPrefix::~RegionPrefix() {
  if (data_ != nullptr) ctx_.region_prefix_bytes_ = 0;
}

// ---- helpers -----------------------------------------------------------------------------------
cudnnDataType_t cudnn_dtype(DType t) {
  switch (t) {
    case DType::kF32:
      return CUDNN_DATA_FLOAT;
    case DType::kF16:
      return CUDNN_DATA_HALF;
    case DType::kBF16:
      return CUDNN_DATA_BFLOAT16;
    case DType::kI32:
      break;
  }
  throw InvalidArgument("cuDNN kernels take fp32, fp16 or bf16 tensors, not " +
                        std::string(dtype_name(t)));
}

cudnnTensorFormat_t cudnn_format(Layout l) {
  return l == Layout::kNHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
}

kernels::Dims dims_of(const Tensor& t) {
  const Shape& s = t.shape();
  kernels::Dims d;
  if (s.rank() == 4) {
    d = {s[0], s[1], s[2], s[3], t.layout() == Layout::kNHWC};
  } else if (s.rank() >= 1) {
    d = {s[0], s.per_sample(), 1, 1, false};
  } else {
    d = {1, 1, 1, 1, false};
  }
  return d;
}

void check_device_tensor(const Tensor& t, const CudaContext& ctx, const char* op,
                         const char* name) {
  const std::string prefix = std::string(op) + ": " + name + " ";
  if (!t.defined()) throw InvalidArgument(prefix + "is undefined");
  const Device d = t.device();
  if (!d.is_cuda() || d.index != ctx.device_index())
    throw InvalidArgument(prefix + "must live on cuda:" + std::to_string(ctx.device_index()) +
                          ", got " + t.describe());
}

void check_device_tensor(const Tensor& t, const CudaContext& ctx, const char* op, const char* name,
                         const Shape& shape, DType dtype, Layout layout) {
  check_device_tensor(t, ctx, op, name);
  const std::string prefix = std::string(op) + ": " + name + " ";
  if (t.shape() != shape)
    throw ShapeError(prefix + "has shape " + t.shape().str() + ", expected " + shape.str());
  if (t.dtype() != dtype)
    throw InvalidArgument(prefix + "is " + std::string(dtype_name(t.dtype())) + ", expected " +
                          std::string(dtype_name(dtype)));
  if (shape.rank() == 4 && t.layout() != layout)
    throw InvalidArgument(prefix + "is " + std::string(layout_name(t.layout())) + ", expected " +
                          std::string(layout_name(layout)));
}

void set_tensor_4d(cudnnTensorDescriptor_t desc, DType dtype, Layout layout, std::int64_t n,
                   std::int64_t c, std::int64_t h, std::int64_t w) {
  if (n > INT_MAX || c > INT_MAX || h > INT_MAX || w > INT_MAX || n * c * h * w > INT_MAX)
    throw NotSupported("tensor " + std::to_string(n) + "x" + std::to_string(c) + "x" +
                       std::to_string(h) + "x" + std::to_string(w) +
                       " has more than 2^31-1 elements, beyond cuDNN's legacy descriptors");
  CNNERGY_CUDA_CALL(cudnnSetTensor4dDescriptor(desc, cudnn_format(layout), cudnn_dtype(dtype),
                                               static_cast<int>(n), static_cast<int>(c),
                                               static_cast<int>(h), static_cast<int>(w)));
}

std::string math_name(const BackendOptions& options) {
  if (options.dtype != DType::kF32) return "tensor_op";
  return options.allow_tf32 ? "tf32" : "fp32";
}

}  // namespace cnnergy::cuda
