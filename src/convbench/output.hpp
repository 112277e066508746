// The study as a JSON document (the shared vocabulary: SI units in key names, null for what was not
// measured, never 0) and as terminal tables. CSV is the document's "cells" rows (cli's json_to_csv).
#pragma once

#include <string>

#include "convbench/study.hpp"
#include "core/json.hpp"

namespace cnnergy::convbench {

Json study_to_json(const StudyResult& result);
std::string study_table(const StudyResult& result);

}  // namespace cnnergy::convbench
