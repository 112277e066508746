// Which Slurm job holds each GPU of a node, as a Slurm prolog records it for the node exporter: a
// folder with one file per GPU, named by its NVML index, holding the job id (the convention of
// dcgm-exporter's HPC job mapping; packaging/slurm/ has the prolog and epilog that write it).
#pragma once

#include <string>

#include "exporter/openmetrics.hpp"

namespace cnnergy::exporter {

// The map as the folder holds it now: files whose name is not a GPU index are ignored, as is an
// empty file; a missing or unreadable folder is an empty map (no job holds a GPU). Only the first
// line of a file counts.
JobIds read_job_map(const std::string& dir);

}  // namespace cnnergy::exporter
