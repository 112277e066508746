// The control half of GpuDevice: power limit, locked and application clocks. Every call maps an
// NVML error to a typed exception; KnobController (knobs.cpp) journals before calling any of these.
#include "telemetry/nvml.hpp"
#include "telemetry/nvml_library.hpp"

namespace cnnergy::telemetry {

using nvml_detail::dev;

namespace {
std::string gpu_label(const GpuDevice& d) {
  return "GPU " + std::to_string(d.index()) + " (" + d.uuid() + ")";
}
void require_handle(const GpuDevice& d, bool lost) {
  if (lost) throw DeviceError("GPU " + std::to_string(d.index()) + " is lost or not accessible");
}
}  // namespace

void GpuDevice::set_power_limit_mw(std::uint32_t limit_mw) const {
  require_handle(*this, lost());
  if (!lib_->set_limit)
    throw NotSupported("setting the power limit: the NVML library has no such call");
  CNNERGY_NVML_CHECK(*lib_, lib_->set_limit(dev(handle_), limit_mw),
                     "setting the power limit of " + gpu_label(*this));
}

void GpuDevice::set_locked_sm_clocks(std::uint32_t min_mhz, std::uint32_t max_mhz) const {
  require_handle(*this, lost());
  if (!lib_->set_locked_clocks)
    throw NotSupported("locking SM clocks: the NVML library has no such call");
  CNNERGY_NVML_CHECK(*lib_, lib_->set_locked_clocks(dev(handle_), min_mhz, max_mhz),
                     "locking the SM clocks of " + gpu_label(*this));
}

void GpuDevice::reset_locked_sm_clocks() const {
  require_handle(*this, lost());
  if (!lib_->reset_locked_clocks)
    throw NotSupported("unlocking SM clocks: the NVML library has no such call");
  CNNERGY_NVML_CHECK(*lib_, lib_->reset_locked_clocks(dev(handle_)),
                     "unlocking the SM clocks of " + gpu_label(*this));
}

bool GpuDevice::has_mem_locked_clocks() const {
  return lib_->set_mem_locked_clocks && lib_->reset_mem_locked_clocks;
}

void GpuDevice::set_locked_mem_clocks(std::uint32_t min_mhz, std::uint32_t max_mhz) const {
  require_handle(*this, lost());
  if (!has_mem_locked_clocks())
    throw NotSupported("locking memory clocks: the NVML library has no such call");
  CNNERGY_NVML_CHECK(*lib_, lib_->set_mem_locked_clocks(dev(handle_), min_mhz, max_mhz),
                     "locking the memory clocks of " + gpu_label(*this));
}

void GpuDevice::reset_locked_mem_clocks() const {
  require_handle(*this, lost());
  if (!has_mem_locked_clocks())
    throw NotSupported("unlocking memory clocks: the NVML library has no such call");
  CNNERGY_NVML_CHECK(*lib_, lib_->reset_mem_locked_clocks(dev(handle_)),
                     "unlocking the memory clocks of " + gpu_label(*this));
}

void GpuDevice::set_application_clocks(std::uint32_t mem_mhz, std::uint32_t sm_mhz) const {
  require_handle(*this, lost());
  if (!lib_->set_app_clocks)
    throw NotSupported("setting application clocks: the NVML library has no such call");
  CNNERGY_NVML_CHECK(*lib_, lib_->set_app_clocks(dev(handle_), mem_mhz, sm_mhz),
                     "setting the application clocks of " + gpu_label(*this));
}

void GpuDevice::reset_application_clocks() const {
  require_handle(*this, lost());
  if (!lib_->reset_app_clocks)
    throw NotSupported("resetting application clocks: the NVML library has no such call");
  CNNERGY_NVML_CHECK(*lib_, lib_->reset_app_clocks(dev(handle_)),
                     "resetting the application clocks of " + gpu_label(*this));
}

}  // namespace cnnergy::telemetry
