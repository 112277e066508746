// Device-side helpers shared by the own convolution kernels (own_conv_*.cu): the geometry
// (own_conv_geom.hpp) of an OwnConvProblem, the rules, the dtype conversions.
#pragma once

#include <climits>
#include <cstdint>
#include <string>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/own_conv.hpp"
#include "backend/cuda/own_conv_geom.hpp"
#include "backend/cuda/own_conv_rules.hpp"

namespace cnnergy::cuda::own {

inline ConvGeom geom_of(const OwnConvProblem& p) { return geom_of(p.d, p.nhwc); }

}  // namespace cnnergy::cuda::own
