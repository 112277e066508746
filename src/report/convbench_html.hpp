// The HTML page of a convolution study (`cnnergy convbench --html`): time, extra memory and energy
// per implementation for each problem, and a roofline (achieved TFLOP/s against arithmetic
// intensity with the GPU's compute and bandwidth ceilings). Reads the study's JSON document.
#pragma once

#include <string>

#include "core/json.hpp"

namespace cnnergy::report {

// A self-contained page (inline SVG, no external resources) from convbench's JSON document.
std::string convbench_html(const Json& study);
// The same content as a section of a larger page (`cnnergy report`): headings one level down, chart
// ids prefixed with `id_prefix` so that several studies share a page.
std::string convbench_section(const Json& study, const std::string& title, const std::string& id_prefix);

}  // namespace cnnergy::report
