// cuDNN's graph (backend descriptor) API, thinly wrapped: an owning, move-only descriptor with typed
// attribute setters and getters that throw on error. Used by the graph-API convolution plans
// (conv_graph_plan.hpp); nothing here knows about convolutions.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <vector>

namespace cnnergy::cuda {

class BackendDescriptor {
 public:
  explicit BackendDescriptor(cudnnBackendDescriptorType_t type);
  ~BackendDescriptor();
  BackendDescriptor(BackendDescriptor&& other) noexcept;
  BackendDescriptor& operator=(BackendDescriptor&& other) noexcept;
  BackendDescriptor(const BackendDescriptor&) = delete;
  BackendDescriptor& operator=(const BackendDescriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return desc_; }

  // cudnnBackendSetAttribute; throws DeviceError naming the attribute on failure.
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, std::int64_t count,
           const void* values);
  void set_int64(cudnnBackendAttributeName_t name, const std::vector<std::int64_t>& values);
  void set_descriptor(cudnnBackendAttributeName_t name, const BackendDescriptor& value);
  // cudnnBackendFinalize, throwing.
  void finalize();
  // cudnnBackendFinalize, returning the status (callers that skip what cuDNN does not support).
  cudnnStatus_t try_finalize();

  // cudnnBackendGetAttribute into `capacity` elements; returns how many cuDNN reported.
  std::int64_t get(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                   std::int64_t capacity, void* values) const;
  std::int64_t get_int64(cudnnBackendAttributeName_t name) const;

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
};

}  // namespace cnnergy::cuda
