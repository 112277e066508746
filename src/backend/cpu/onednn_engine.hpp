// The one oneDNN CPU engine of the process, shared by the convolution's forward path
// (conv_onednn_cpu.cpp) and the whole-network inference plan (onednn_plan.cpp). oneDNN builds only.
#pragma once

#ifdef CNNERGY_HAVE_ONEDNN
#include <dnnl.hpp>

namespace cnnergy::cpu {

dnnl::engine& onednn_cpu_engine();

}  // namespace cnnergy::cpu
#endif
