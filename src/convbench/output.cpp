// JSON and terminal rendering of a convolution study: one row per cell (flat keys, so the CSV of the
// "cells" rows is readable), the problems with the layers sharing each, transfers and hotspots.
#include "convbench/output.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "convbench/counter_profiler.hpp"

namespace cnnergy::convbench {
namespace {

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

Json summary_json(const Summary& s) {
  Json j = Json::object();
  j["n"] = s.n;
  j["median"] = s.median;
  j["mean"] = s.mean;
  j["stddev"] = s.stddev;
  j["min"] = s.min;
  j["max"] = s.max;
  return j;
}

Json cell_json(const StudyResult& r, const Cell& c) {
  const bool ok = c.status == kStatusOk;
  Json j = Json::object();
  j["problem"] = r.problems[c.problem].id;
  j["implementation"] = c.implementation;
  j["direction"] = c.direction;
  j["precision"] = c.precision;
  j["layout"] = c.layout;
  j["status"] = c.status;
  j["detail"] = c.detail;
  j["ran"] = c.ran;
  j["math_type"] = c.math_type;
  j["time_ms_median"] = ok ? Json(c.time_ms.median) : Json();
  j["time_ms_min"] = ok ? Json(c.time_ms.min) : Json();
  j["time_ms_max"] = ok ? Json(c.time_ms.max) : Json();
  j["time_ms_stddev"] = ok ? Json(c.time_ms.stddev) : Json();
  j["repetitions"] = ok ? Json(c.time_ms.n) : Json();
  j["flops"] = problem_flops(r.problems[c.problem].desc);
  j["tflops"] = ok ? Json(c.tflops) : Json();
  j["percent_of_peak"] = ok ? json_or_null(c.percent_of_peak) : Json();
  j["workspace_bytes"] = ok ? Json(c.workspace_bytes) : Json();
  j["tensor_bytes"] = c.tensor_bytes;
  j["arithmetic_intensity_flop_per_byte"] = c.arithmetic_intensity;
  j["joules_per_call_median"] = c.joules_per_call ? Json(c.joules_per_call->median) : Json();
  j["joules_per_call_stddev"] = c.joules_per_call ? Json(c.joules_per_call->stddev) : Json();
  j["average_watts"] = json_or_null(c.average_watts);
  j["energy_note"] = c.energy_note;
  j["max_batch"] = json_or_null(c.max_batch);
  j["max_batch_note"] = c.max_batch_note;
  if (c.kernels)  // flat, for the CSV: the counters' derived metrics (counter_profiler.hpp)
    for (const auto& m : derive_metrics(c.kernels->counter_values, c.time_ms.median)) j["counter_" + m.name] = m.value;
  if (c.kernels) {
    Json k = Json::object();
    k["calls"] = c.kernels->calls;
    k["counters"] = c.kernels->counters;
    Json list = Json::array();
    for (const auto& kr : c.kernels->kernels) {
      Json e = Json::object();
      e["name"] = kr.name;
      e["launches"] = kr.launches;
      e["total_ms"] = kr.total_ms;
      e["share"] = kr.share;
      e["registers_per_thread"] = kr.registers_per_thread;
      e["shared_bytes_per_block"] = kr.shared_bytes_per_block;
      e["block_threads"] = kr.block_threads;
      e["grid_blocks"] = kr.grid_blocks;
      list.push_back(std::move(e));
    }
    k["list"] = std::move(list);
    Json raw = Json::object();
    for (const auto& [name, v] : c.kernels->counter_values) raw[name] = v;
    k["counter_values"] = std::move(raw);
    Json derived = Json::object();
    for (const auto& m : derive_metrics(c.kernels->counter_values, c.time_ms.median)) {
      Json e = Json::object();
      e["value"] = m.value;
      e["unit"] = m.unit;
      derived[m.name] = std::move(e);
    }
    k["derived"] = std::move(derived);
    Json unsupported = Json::array();
    for (const auto& n : c.kernels->counters_unsupported) unsupported.push_back(n);
    k["counters_unsupported"] = std::move(unsupported);
    k["counter_passes"] = c.kernels->counter_passes;
    j["kernels"] = std::move(k);
  } else {
    j["kernels"] = Json();
  }
  return j;
}

}  // namespace

Json study_to_json(const StudyResult& r) {
  Json doc = Json::object();
  doc["schema"] = "cnnergy.convbench/1";
  doc["backend"] = r.backend;
  doc["device"] = r.device_name;
  doc["cuda_runtime"] = r.cuda_runtime;
  doc["cudnn"] = r.cudnn;
  doc["device_memory_bytes"] = r.device_memory_bytes;
  doc["timing"] = r.timing_note;
  doc["energy_source"] = r.energy_source.empty() ? Json() : Json(r.energy_source);
  if (r.peaks) {
    Json p = Json::object();
    p["matched"] = r.peaks->matched;
    p["source"] = r.peaks->source;
    p["fp32_tflops"] = r.peaks->fp32_tflops;
    p["tf32_tflops"] = r.peaks->tf32_tflops;
    p["bf16_tflops"] = r.peaks->bf16_tflops;
    p["fp16_tflops"] = r.peaks->fp16_tflops;
    p["dram_gb_per_s"] = r.peaks->dram_gb_per_s;
    doc["peaks"] = std::move(p);
  } else {
    doc["peaks"] = Json();
  }
  Json problems = Json::array();
  for (const auto& p : r.problems) {
    Json j = Json::object();
    j["id"] = p.id;
    j["source"] = p.source;
    j["n"] = p.desc.n;
    j["c"] = p.desc.c;
    j["h"] = p.desc.h;
    j["w"] = p.desc.w;
    j["k"] = p.desc.k;
    j["r"] = p.desc.r;
    j["s"] = p.desc.s;
    j["out_h"] = p.desc.out_h();
    j["out_w"] = p.desc.out_w();
    j["groups"] = p.desc.groups;
    j["flops"] = problem_flops(p.desc);
    Json layers = Json::array();
    for (const auto& l : p.layers) layers.push_back(l);
    j["layers"] = std::move(layers);
    j["backward_data_used"] = p.backward_data_used;
    problems.push_back(std::move(j));
  }
  doc["problems"] = std::move(problems);
  Json cells = Json::array();
  for (const auto& c : r.cells) cells.push_back(cell_json(r, c));
  doc["cells"] = std::move(cells);
  Json transfers = Json::array();
  for (const auto& t : r.transfers) {
    Json j = Json::object();
    j["problem"] = r.problems[t.problem].id;
    j["what"] = t.what;
    j["precision"] = t.precision;
    j["bytes"] = t.bytes;
    j["memory"] = t.memory;
    j["direction"] = t.direction;
    j["time_ms_median"] = t.time_ms.median;
    j["time_ms"] = summary_json(t.time_ms);
    j["gb_per_s"] = t.gb_per_s;
    j["conv_forward_ms"] = json_or_null(t.conv_forward_ms);
    j["share_of_total"] = json_or_null(t.share_of_total);
    transfers.push_back(std::move(j));
  }
  doc["transfers"] = std::move(transfers);
  Json hotspots = Json::array();
  for (const auto& h : r.hotspots) {
    Json j = Json::object();
    j["problem"] = r.problems[h.problem].id;
    Json layers = Json::array();
    for (const auto& l : r.problems[h.problem].layers) layers.push_back(l);
    j["layers"] = std::move(layers);
    j["total_ms"] = h.total_ms;
    j["share"] = h.share;
    Json winners = Json::object();
    for (const auto& [dir, impl] : h.winners) winners[dir] = impl;
    j["winners"] = std::move(winners);
    hotspots.push_back(std::move(j));
  }
  doc["hotspots"] = std::move(hotspots);
  Json notes = Json::array();
  for (const auto& n : r.notes) notes.push_back(n);
  doc["notes"] = std::move(notes);
  return doc;
}

std::string study_table(const StudyResult& r) {
  std::ostringstream os;
  os << "convbench on " << r.backend << " (" << r.device_name << ")";
  if (!r.cudnn.empty()) os << ", CUDA " << r.cuda_runtime << ", cuDNN " << r.cudnn;
  os << "\n" << r.timing_note << "\n";
  os << "peak: " << (r.peaks ? r.peaks->matched + " from " + r.peaks->source : std::string("unknown for this device"))
     << "; energy: " << (r.energy_source.empty() ? std::string("not measured") : r.energy_source) << "\n";
  for (std::size_t pi = 0; pi < r.problems.size(); ++pi) {
    const ConvProblem& p = r.problems[pi];
    os << "\nproblem " << p.id << "  [" << p.source << "]  " << fixed(problem_flops(p.desc) / 1e9, 2) << " GFLOP\n";
    if (!p.layers.empty()) os << "  layers: " << join(p.layers, ", ") << "\n";
    std::vector<std::vector<std::string>> rows = {{"implementation", "direction", "prec", "layout", "status", "ms med",
                                                   "ms min..max", "TFLOP/s", "% peak", "ws MiB", "J/call", "max N",
                                                   "detail"}};
    for (const auto& c : r.cells) {
      if (c.problem != pi) continue;
      const bool ok = c.status == kStatusOk;
      rows.push_back({c.implementation, c.direction, c.precision, c.layout, c.status,
                      ok ? fixed(c.time_ms.median, 3) : "-",
                      ok ? fixed(c.time_ms.min, 3) + ".." + fixed(c.time_ms.max, 3) : "-",
                      ok ? fixed(c.tflops, 3) : "-",
                      ok && c.percent_of_peak ? fixed(*c.percent_of_peak, 1) : "-",
                      ok ? fixed(static_cast<double>(c.workspace_bytes) / (1 << 20), 1) : "-",
                      c.joules_per_call ? fixed(c.joules_per_call->median, 4) : "-",
                      c.max_batch ? std::to_string(*c.max_batch) : "-",
                      ok ? c.ran : c.detail.substr(0, 100)});
    }
    std::vector<std::size_t> width(rows.front().size(), 0);
    for (const auto& row : rows)
      for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
    for (const auto& row : rows) {
      os << " ";
      for (std::size_t i = 0; i < row.size(); ++i) {
        const bool left = i < 5 || i + 1 == row.size();
        const std::string pad(width[i] - row[i].size(), ' ');
        os << " " << (left ? row[i] + (i + 1 == row.size() ? "" : pad) : pad + row[i]);
      }
      os << "\n";
    }
    for (const auto& c : r.cells)
      if (c.problem == pi && c.kernels) {
        os << "  kernels of " << c.implementation << " " << c.direction << " " << c.precision << " " << c.layout
           << " (" << c.kernels->calls << " calls): " << c.kernels->counters << "\n";
        for (const auto& k : c.kernels->kernels)
          os << "    " << fixed(100 * k.share, 1) << "%  " << k.launches << "x  regs " << k.registers_per_thread
             << "  smem " << k.shared_bytes_per_block << " B  " << k.name.substr(0, 90) << "\n";
        const auto derived = derive_metrics(c.kernels->counter_values, c.time_ms.median);
        if (!derived.empty()) {
          os << "    counters:";
          for (const auto& m : derived)
            os << " " << m.name << " " << (m.unit == "B" ? fixed(m.value / (1 << 20), 1) + " MiB" : fixed(m.value, 2) + " " + m.unit)
               << ";";
          os << "\n";
        }
      }
    for (const auto& t : r.transfers)
      if (t.problem == pi)
        os << "  transfer " << t.what << " " << t.precision << " " << t.memory << " " << t.direction << ": "
           << fixed(static_cast<double>(t.bytes) / (1 << 20), 1) << " MiB in " << fixed(t.time_ms.median, 3) << " ms, "
           << fixed(t.gb_per_s, 2) << " GB/s"
           << (t.share_of_total ? ", " + fixed(100 * *t.share_of_total, 1) + "% of transfer + fastest forward" : "")
           << "\n";
  }
  if (!r.hotspots.empty()) {
    os << "\nhotspot layers (fastest implementation per direction x layers sharing the problem):\n";
    for (const auto& h : r.hotspots) {
      std::vector<std::string> w;
      for (const auto& [dir, impl] : h.winners) w.push_back(dir + "=" + impl);
      os << "  " << fixed(100 * h.share, 1) << "%  " << fixed(h.total_ms, 3) << " ms  "
         << join(r.problems[h.problem].layers, ",").substr(0, 60) << "  wins: " << join(w, " ") << "\n";
    }
  }
  for (const auto& n : r.notes) os << "note: " << n << "\n";
  return os.str();
}

}  // namespace cnnergy::convbench
