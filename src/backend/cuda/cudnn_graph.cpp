// The owning cuDNN backend descriptor (see cudnn_graph.hpp).
#include "backend/cuda/cudnn_graph.hpp"

#include <string>
#include <utility>

#include "backend/cuda/cuda_check.hpp"

namespace cnnergy::cuda {

namespace {
// The expression text of an error names the attribute by number: cuDNN has no name function.
void check_attribute(cudnnStatus_t s, const char* what, int attribute) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  const std::string expr = std::string(what) + " (attribute " + std::to_string(attribute) + ")";
  throw_cudnn_error(s, expr.c_str(), __FILE__, __LINE__);
}
}  // namespace

BackendDescriptor::BackendDescriptor(cudnnBackendDescriptorType_t type) {
  CNNERGY_CUDA_CALL(cudnnBackendCreateDescriptor(type, &desc_));
}

BackendDescriptor::~BackendDescriptor() {
  if (desc_) (void)cudnnBackendDestroyDescriptor(desc_);
}

BackendDescriptor::BackendDescriptor(BackendDescriptor&& other) noexcept
    : desc_(std::exchange(other.desc_, nullptr)) {}

BackendDescriptor& BackendDescriptor::operator=(BackendDescriptor&& other) noexcept {
  if (this != &other) {
    if (desc_) (void)cudnnBackendDestroyDescriptor(desc_);
    desc_ = std::exchange(other.desc_, nullptr);
  }
  return *this;
}

void BackendDescriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                            std::int64_t count, const void* values) {
  check_attribute(cudnnBackendSetAttribute(desc_, name, type, count, values),
                  "cudnnBackendSetAttribute", static_cast<int>(name));
}

void BackendDescriptor::set_int64(cudnnBackendAttributeName_t name,
                                  const std::vector<std::int64_t>& values) {
  set(name, CUDNN_TYPE_INT64, static_cast<std::int64_t>(values.size()), values.data());
}

void BackendDescriptor::set_descriptor(cudnnBackendAttributeName_t name,
                                       const BackendDescriptor& value) {
  cudnnBackendDescriptor_t d = value.get();
  set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d);
}

void BackendDescriptor::finalize() { CNNERGY_CUDA_CALL(cudnnBackendFinalize(desc_)); }

cudnnStatus_t BackendDescriptor::try_finalize() { return cudnnBackendFinalize(desc_); }

std::int64_t BackendDescriptor::get(cudnnBackendAttributeName_t name,
                                    cudnnBackendAttributeType_t type, std::int64_t capacity,
                                    void* values) const {
  std::int64_t count = 0;
  check_attribute(cudnnBackendGetAttribute(desc_, name, type, capacity, &count, values),
                  "cudnnBackendGetAttribute", static_cast<int>(name));
  return count;
}

std::int64_t BackendDescriptor::get_int64(cudnnBackendAttributeName_t name) const {
  std::int64_t v = 0;
  get(name, CUDNN_TYPE_INT64, 1, &v);
  return v;
}

}  // namespace cnnergy::cuda
