// The HTML page of a convolution study (`cnnergy convbench --html`): time, extra memory and energy
// per implementation for each problem, and a roofline (achieved TFLOP/s against arithmetic
// intensity with the GPU's compute and bandwidth ceilings). Reads the study's JSON document.
#pragma once

#include <string>

#include "core/json.hpp"

namespace cnnergy::report {

// A self-contained page (inline SVG, no external resources) from convbench's JSON document.
std::string convbench_html(const Json& study);

}  // namespace cnnergy::report
