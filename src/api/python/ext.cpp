// cnnergy._cnnergy_ext: the pybind11 backend of the Python package, a one-to-one wrapper of the C
// API (include/cnnergy/cnnergy.h) with the same functions as the ctypes backend (_ctypes_backend.py),
// which the package uses where this module was not built for the running Python. Errors become the
// package's exceptions through cnnergy._errors.raise_for(status, message).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "cnnergy/cnnergy.h"

namespace py = pybind11;

namespace {

[[noreturn]] void raise(cnnergy_status status) {
  py::module_::import("cnnergy._errors").attr("raise_for")(static_cast<int>(status),
                                                          std::string(cnnergy_last_error()));
  throw py::error_already_set();  // raise_for always raises; keep the compiler sure of it
}

void check(cnnergy_status status) {
  if (status != CNNERGY_OK) raise(status);
}

std::uintptr_t handle_of(cnnergy_monitor* m) { return reinterpret_cast<std::uintptr_t>(m); }
cnnergy_monitor* monitor_of(std::uintptr_t h) {
  if (!h) throw py::value_error("the monitor is closed");
  return reinterpret_cast<cnnergy_monitor*>(h);
}

// Calls a monitor function that may block (joining or starting the sampler) without the GIL.
void without_gil(cnnergy_status (*fn)(cnnergy_monitor*), cnnergy_monitor* m) {
  cnnergy_status s;
  {
    py::gil_scoped_release release;
    s = fn(m);
  }
  check(s);
}

py::object num(double v) { return std::isnan(v) ? py::none() : py::object(py::float_(v)); }

py::dict to_dict(const cnnergy_measurement& m) {
  py::list gpus;
  for (std::size_t i = 0; i < m.gpu_count; ++i) {
    const cnnergy_gpu_energy& g = m.gpus[i];
    py::dict d;
    d["gpu"] = g.gpu_index;
    d["source"] = cnnergy_source_name(g.source);
    d["energy_j"] = num(g.energy_j);
    d["uncertainty_j"] = num(g.uncertainty_j);
    d["avg_power_w"] = num(g.avg_power_w);
    d["peak_power_w"] = num(g.peak_power_w);
    d["samples"] = g.samples;
    gpus.append(d);
  }
  py::dict d;
  d["name"] = std::string(m.name);
  d["time_s"] = m.time_s;
  d["begin_s"] = m.begin_s;
  d["end_s"] = m.end_s;
  d["energy_j"] = num(m.energy_j);
  d["uncertainty_j"] = num(m.uncertainty_j);
  d["avg_power_w"] = num(m.avg_power_w);
  d["peak_power_w"] = num(m.peak_power_w);
  d["source"] = cnnergy_source_name(m.source);
  d["cpu_energy_j"] = num(m.cpu_energy_j);
  d["below_sensor_period"] = m.below_sensor_period != 0;
  d["sensor_period_ms"] = m.sensor_period_ms;
  d["gpus"] = gpus;
  return d;
}

}  // namespace

PYBIND11_MODULE(_cnnergy_ext, mod) {
  mod.doc() = "pybind11 backend of the cnnergy package (use the cnnergy package, not this)";
  mod.def("api_version", [] { return cnnergy_api_version(); });
  mod.def("open", [](std::optional<std::vector<unsigned>> gpus, double interval_ms, bool cpu) {
    cnnergy_monitor_options o;
    cnnergy_monitor_options_init(&o);
    if (gpus) {
      o.gpus = gpus->data();
      o.gpu_count = gpus->size();
    }
    o.interval_ms = interval_ms;
    o.cpu = cpu ? 1 : 0;
    cnnergy_monitor* m = nullptr;
    cnnergy_status s;
    {
      py::gil_scoped_release release;  // sensor-period detection takes up to ~0.7 s
      s = cnnergy_monitor_open(&o, &m);
    }
    check(s);
    return handle_of(m);
  });
  mod.def("close", [](std::uintptr_t h) {
    py::gil_scoped_release release;
    cnnergy_monitor_close(reinterpret_cast<cnnergy_monitor*>(h));
  });
  mod.def("start", [](std::uintptr_t h) { without_gil(cnnergy_monitor_start, monitor_of(h)); });
  mod.def("stop", [](std::uintptr_t h) { without_gil(cnnergy_monitor_stop, monitor_of(h)); });
  mod.def("running", [](std::uintptr_t h) { return cnnergy_monitor_running(monitor_of(h)) != 0; });
  mod.def("info", [](std::uintptr_t h) {
    cnnergy_monitor* m = monitor_of(h);
    py::list gpus;
    for (std::size_t i = 0; i < cnnergy_monitor_gpu_count(m); ++i) {
      cnnergy_gpu_info info;
      check(cnnergy_monitor_gpu_info(m, i, &info));
      gpus.append(py::make_tuple(info.index, std::string(info.uuid), std::string(info.name),
                                 info.has_energy_counter != 0));
    }
    py::dict d;
    d["gpus"] = gpus;
    d["has_cpu"] = cnnergy_monitor_has_cpu(m) != 0;
    d["sensor_period_ms"] = cnnergy_monitor_sensor_period_ms(m);
    d["interval_ms"] = cnnergy_monitor_interval_ms(m);
    return d;
  });
  mod.def("export", [](std::uintptr_t h, int port, std::optional<std::string> jsonl) {
    unsigned bound = 0;
    check(cnnergy_monitor_export(monitor_of(h), port, jsonl ? jsonl->c_str() : nullptr, &bound));
    return bound;
  });
  mod.def("begin", [](std::uintptr_t h, const std::string& name) {
    cnnergy_window_id id = 0;
    check(cnnergy_window_begin(monitor_of(h), name.c_str(), &id));
    return id;
  });
  mod.def("end", [](std::uintptr_t h, const std::string& name) {
    cnnergy_window_id id = 0;
    check(cnnergy_window_end(monitor_of(h), name.c_str(), &id));
    return id;
  });
  mod.def("begin_at", [](std::uintptr_t h, const std::string& name, std::int64_t t_ns) {
    cnnergy_window_id id = 0;
    check(cnnergy_window_begin_at(monitor_of(h), name.c_str(), t_ns, &id));
    return id;
  });
  mod.def("end_at", [](std::uintptr_t h, const std::string& name, std::int64_t t_ns) {
    cnnergy_window_id id = 0;
    check(cnnergy_window_end_at(monitor_of(h), name.c_str(), t_ns, &id));
    return id;
  });
  mod.def("now_ns", [] { return cnnergy_now_ns(); });
  mod.def("settle_check", [](std::uintptr_t h, std::int64_t since_ns, double window_s, double max_temp_slope,
                             double max_power_slope) {
    cnnergy_settle_check c;
    check(cnnergy_monitor_settle_check(monitor_of(h), since_ns, window_s, max_temp_slope, max_power_slope, &c));
    py::dict d;
    d["settled"] = c.settled != 0;
    d["samples"] = c.samples;
    d["temp_slope_c_per_s"] = std::isnan(c.temp_slope_c_per_s) ? py::object(py::none()) : py::float_(c.temp_slope_c_per_s);
    d["power_slope_per_s"] = std::isnan(c.power_slope_per_s) ? py::object(py::none()) : py::float_(c.power_slope_per_s);
    d["reason"] = std::string(c.reason);
    return d;
  });
  mod.def("window_count",
          [](std::uintptr_t h) { return cnnergy_monitor_window_count(monitor_of(h)); });
  // Returns the measurement as a dict, or None when timeout_ms == 0 and it is not ready yet.
  mod.def("result", [](std::uintptr_t h, cnnergy_window_id id, double timeout_ms) -> py::object {
    cnnergy_monitor* monitor = monitor_of(h);
    cnnergy_measurement m;
    cnnergy_status s;
    {
      py::gil_scoped_release release;
      s = cnnergy_window_result(monitor, id, timeout_ms, &m);
    }
    if (s == CNNERGY_NOT_READY) return py::none();
    check(s);
    return to_dict(m);
  });
  mod.def("discard", [](std::uintptr_t h, cnnergy_window_id id) {
    check(cnnergy_window_discard(monitor_of(h), id));
  });
  mod.def("power_limit_set", [](unsigned gpu, double watts) {
    cnnergy_knob_lease lease = 0;
    check(cnnergy_power_limit_set(gpu, watts, &lease));
    return lease;
  });
  mod.def("sm_clocks_lock", [](unsigned gpu, unsigned lo, unsigned hi) {
    cnnergy_knob_lease lease = 0;
    check(cnnergy_sm_clocks_lock(gpu, lo, hi, &lease));
    return lease;
  });
  mod.def("memory_clock_set", [](unsigned gpu, unsigned mhz) {
    cnnergy_knob_lease lease = 0;
    check(cnnergy_memory_clock_set(gpu, mhz, &lease));
    return lease;
  });
  mod.def("gpu_knob_info", [](unsigned gpu) {
    cnnergy_gpu_knob_info info;
    cnnergy_gpu_knob_info_init(&info);
    check(cnnergy_gpu_knob_info_get(gpu, &info));
    py::dict d;
    d["index"] = info.index;
    d["name"] = std::string(info.name);
    d["uuid"] = std::string(info.uuid);
    d["driver_version"] = std::string(info.driver_version);
    d["power_limit_min_w"] = num(info.power_limit_min_w);
    d["power_limit_max_w"] = num(info.power_limit_max_w);
    d["power_limit_default_w"] = num(info.power_limit_default_w);
    d["power_limit_current_w"] = num(info.power_limit_current_w);
    d["sm_clocks_mhz"] = std::vector<unsigned>(info.sm_clocks_mhz, info.sm_clocks_mhz + info.sm_clock_count);
    d["mem_clocks_mhz"] =
        std::vector<unsigned>(info.mem_clocks_mhz, info.mem_clocks_mhz + info.mem_clock_count);
    return d;
  });
  mod.def("knob_release", [](cnnergy_knob_lease lease) { check(cnnergy_knob_release(lease)); });
  mod.def("knob_restore_all", [] { check(cnnergy_knob_restore_all()); });
  mod.def("knob_active", [] { return cnnergy_knob_active(); });
}
