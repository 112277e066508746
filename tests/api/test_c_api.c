/* The C API from a program compiled as C (C11): monitors, nested and overlapping windows checked
 * against the fake NVML driver's true energy, bad input, and knob leases (nesting, restore, out of
 * range). Mode "permission" expects CNNERGY_FAKE_NVML_FAIL=set:no_permission: a refused change
 * leaves nothing changed and no journal. Run by ctest with the fake NVML in the environment. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cnnergy/cnnergy.h"

static int failures = 0;
#define CHECK(cond, ...)                                  \
  do {                                                    \
    if (!(cond)) {                                        \
      ++failures;                                         \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                       \
      fprintf(stderr, "\n");                              \
    }                                                     \
  } while (0)

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* The power limit (mW) the fake driver's state file records for GPU `gpu`; 0 when not set. */
static long state_power_limit_mw(int gpu) {
  const char* path = getenv("CNNERGY_FAKE_NVML_STATE");
  FILE* f = path ? fopen(path, "r") : NULL;
  char line[512], uuid_tail[32];
  long value = 0;
  if (!f) return 0;
  snprintf(uuid_tail, sizeof uuid_tail, "%012x ", 0x5eed0000u + (unsigned)gpu);
  while (fgets(line, sizeof line, f)) {
    const char* p = strstr(line, uuid_tail);
    const char* q = strstr(line, "power_limit_mw=");
    if (p && q) value = strtol(q + 15, NULL, 10);
  }
  fclose(f);
  return value;
}

static int journal_exists(void) {
  const char* path = getenv("CNNERGY_JOURNAL");
  return path && access(path, F_OK) == 0;
}

typedef int (*true_energy_fn)(unsigned, long long, double*);

static void test_windows(void) {
  cnnergy_monitor_options o;
  cnnergy_monitor* m = NULL;
  unsigned gpus[2] = {0, 1};
  cnnergy_window_id outer = 0, inner = 0, overlap = 0, id = 0;
  cnnergy_measurement r_outer, r_inner, r_overlap;
  true_energy_fn truth;
  void* fake;
  size_t i;

  CHECK(cnnergy_api_version() / 10000 == CNNERGY_API_VERSION / 10000, "version %u",
        cnnergy_api_version());
  cnnergy_monitor_options_init(&o);
  o.gpus = gpus;
  o.gpu_count = 2;
  CHECK(cnnergy_monitor_open(&o, &m) == CNNERGY_OK, "open: %s", cnnergy_last_error());
  if (!m) return;
  CHECK(cnnergy_monitor_gpu_count(m) == 2, "gpu count %zu", cnnergy_monitor_gpu_count(m));
  CHECK(cnnergy_monitor_running(m) == 1, "running");
  {
    cnnergy_gpu_info info;
    CHECK(cnnergy_monitor_gpu_info(m, 1, &info) == CNNERGY_OK, "info");
    CHECK(info.index == 1 && strncmp(info.uuid, "GPU-", 4) == 0, "uuid %s", info.uuid);
    CHECK(cnnergy_monitor_gpu_info(m, 2, &info) == CNNERGY_ERROR_INVALID_ARGUMENT, "slot 2");
  }

  /* outer contains inner; overlap starts inside outer and ends after it */
  CHECK(cnnergy_window_begin(m, "outer", &outer) == CNNERGY_OK, "%s", cnnergy_last_error());
  sleep_ms(150);
  CHECK(cnnergy_window_begin(m, "inner", &inner) == CNNERGY_OK, "%s", cnnergy_last_error());
  CHECK(cnnergy_window_begin(m, "inner", &id) == CNNERGY_ERROR_INVALID_ARGUMENT,
        "a name open twice");
  CHECK(strstr(cnnergy_last_error(), "already open") != NULL, "message '%s'", cnnergy_last_error());
  sleep_ms(300);
  CHECK(cnnergy_window_end(m, "inner", &inner) == CNNERGY_OK, "%s", cnnergy_last_error());
  CHECK(cnnergy_window_begin(m, "overlap", NULL) == CNNERGY_OK, "%s", cnnergy_last_error());
  sleep_ms(150);
  CHECK(cnnergy_window_end(m, "outer", &outer) == CNNERGY_OK, "%s", cnnergy_last_error());
  sleep_ms(150);
  CHECK(cnnergy_window_end(m, "overlap", &overlap) == CNNERGY_OK, "%s", cnnergy_last_error());

  /* bad input: nothing changes */
  CHECK(cnnergy_window_end(m, "never", &id) == CNNERGY_ERROR_INVALID_ARGUMENT, "never begun");
  CHECK(strstr(cnnergy_last_error(), "never begun") != NULL, "message '%s'", cnnergy_last_error());
  CHECK(cnnergy_window_begin(m, "", &id) == CNNERGY_ERROR_INVALID_ARGUMENT, "empty name");

  CHECK(cnnergy_window_result(m, outer, -1, &r_outer) == CNNERGY_OK, "%s", cnnergy_last_error());
  CHECK(cnnergy_window_result(m, inner, -1, &r_inner) == CNNERGY_OK, "%s", cnnergy_last_error());
  CHECK(cnnergy_window_result(m, overlap, -1, &r_overlap) == CNNERGY_OK, "%s",
        cnnergy_last_error());
  CHECK(cnnergy_window_result(m, outer, -1, &r_outer) == CNNERGY_ERROR_INVALID_ARGUMENT,
        "a window is read once");

  CHECK(strcmp(r_outer.name, "outer") == 0, "name %s", r_outer.name);
  CHECK(r_outer.time_s > r_inner.time_s && r_inner.time_s > 0.25, "times %f %f", r_outer.time_s,
        r_inner.time_s);
  CHECK(r_outer.gpu_count == 2 && r_outer.source == CNNERGY_SOURCE_COUNTER, "source %d",
        (int)r_outer.source);
  CHECK(r_outer.energy_j > r_inner.energy_j && r_inner.energy_j > 0, "energies %f %f",
        r_outer.energy_j, r_inner.energy_j);
  CHECK(fabs(r_outer.energy_j - r_outer.gpus[0].energy_j - r_outer.gpus[1].energy_j) < 1e-6,
        "sum of GPUs");
  CHECK(r_outer.below_sensor_period == 0 && r_outer.sensor_period_ms > 0, "flag");
  CHECK(fabs(r_outer.avg_power_w - r_outer.energy_j / r_outer.time_s) < 1e-6, "average power");

  /* against the fake driver's ground truth, within the reported uncertainty */
  fake = dlopen(getenv("CNNERGY_NVML_LIBRARY"), RTLD_NOW | RTLD_NOLOAD);
  truth = fake ? (true_energy_fn)(uintptr_t)dlsym(fake, "cnnergy_fake_nvml_true_energy_mj") : NULL;
  CHECK(truth != NULL, "fake NVML ground truth not reachable");
  if (truth) {
    const cnnergy_measurement* all[3] = {&r_outer, &r_inner, &r_overlap};
    size_t k;
    for (k = 0; k < 3; ++k) {
      for (i = 0; i < all[k]->gpu_count; ++i) {
        const cnnergy_gpu_energy* g = &all[k]->gpus[i];
        double e0 = 0, e1 = 0;
        truth(g->gpu_index, (long long)(all[k]->begin_s * 1e9), &e0);
        truth(g->gpu_index, (long long)(all[k]->end_s * 1e9), &e1);
        CHECK(fabs(g->energy_j - (e1 - e0) / 1000.0) <= g->uncertainty_j + 0.01 * g->energy_j,
              "%s GPU %u: %f J, truth %f J, +- %f J", all[k]->name, g->gpu_index, g->energy_j,
              (e1 - e0) / 1000.0, g->uncertainty_j);
      }
    }
  }

  /* 1.1: a window registered after the fact, at stamps taken earlier, equals one stamped live */
  {
    cnnergy_window_id live = 0, late = 0;
    cnnergy_measurement r_live, r_late;
    const int64_t t0 = cnnergy_now_ns();
    const size_t held = cnnergy_monitor_window_count(m);
    CHECK(cnnergy_window_begin(m, "live", &live) == CNNERGY_OK, "%s", cnnergy_last_error());
    sleep_ms(350);
    CHECK(cnnergy_window_end(m, "live", &live) == CNNERGY_OK, "%s", cnnergy_last_error());
    CHECK(cnnergy_window_begin_at(m, "late", t0, &late) == CNNERGY_OK, "%s", cnnergy_last_error());
    CHECK(cnnergy_monitor_window_count(m) == held + 2, "held %zu", cnnergy_monitor_window_count(m));
    CHECK(cnnergy_window_end_at(m, "late", t0 - 1, &late) == CNNERGY_ERROR_INVALID_ARGUMENT,
          "end before begin");
    CHECK(cnnergy_window_end_at(m, "late", cnnergy_now_ns() + 1000000000LL, &late) ==
              CNNERGY_ERROR_INVALID_ARGUMENT, "end in the future");
    CHECK(cnnergy_window_end_at(m, "late", t0 + 350000000LL,
                                &late) == CNNERGY_OK, "%s", cnnergy_last_error());
    CHECK(cnnergy_window_begin_at(m, "ancient", 1, NULL) == CNNERGY_ERROR_INVALID_ARGUMENT,
          "begin before the monitor started");
    CHECK(cnnergy_window_result(m, live, -1, &r_live) == CNNERGY_OK, "%s", cnnergy_last_error());
    CHECK(cnnergy_window_result(m, late, -1, &r_late) == CNNERGY_OK, "%s", cnnergy_last_error());
    CHECK(fabs(r_late.time_s - 0.35) < 1e-9, "late time %f", r_late.time_s);
    CHECK(fabs(r_late.energy_j - r_live.energy_j) <= 0.05 * r_live.energy_j + r_live.uncertainty_j,
          "late %f J vs live %f J", r_late.energy_j, r_live.energy_j);
    CHECK(r_late.gpus[0].samples + 1 >= r_live.gpus[0].samples && r_late.gpus[0].samples >= 2,
          "samples late %zu live %zu", r_late.gpus[0].samples, r_live.gpus[0].samples);
    CHECK(cnnergy_monitor_window_count(m) == held, "held %zu", cnnergy_monitor_window_count(m));
  }

  /* a short window is flagged; a non-waiting read says NOT_READY or gives the result */
  CHECK(cnnergy_window_begin(m, "short", NULL) == CNNERGY_OK, "%s", cnnergy_last_error());
  CHECK(cnnergy_window_end(m, "short", &id) == CNNERGY_OK, "%s", cnnergy_last_error());
  {
    cnnergy_status s = cnnergy_window_result(m, id, 0, &r_inner);
    CHECK(s == CNNERGY_NOT_READY || s == CNNERGY_OK, "status %s", cnnergy_status_name(s));
    if (s == CNNERGY_NOT_READY) s = cnnergy_window_result(m, id, -1, &r_inner);
    CHECK(s == CNNERGY_OK && r_inner.below_sensor_period == 1, "short window flag");
  }
  /* discard; stop; begin refused while stopped; start again */
  CHECK(cnnergy_window_begin(m, "x", NULL) == CNNERGY_OK, "%s", cnnergy_last_error());
  CHECK(cnnergy_window_end(m, "x", &id) == CNNERGY_OK, "%s", cnnergy_last_error());
  CHECK(cnnergy_window_discard(m, id) == CNNERGY_OK, "%s", cnnergy_last_error());
  CHECK(cnnergy_window_discard(m, id) == CNNERGY_ERROR_INVALID_ARGUMENT, "discard twice");
  CHECK(cnnergy_monitor_stop(m) == CNNERGY_OK, "stop");
  CHECK(cnnergy_monitor_running(m) == 0, "stopped");
  CHECK(cnnergy_window_begin(m, "y", NULL) == CNNERGY_ERROR_INVALID_ARGUMENT, "begin stopped");
  CHECK(cnnergy_monitor_start(m) == CNNERGY_OK, "start: %s", cnnergy_last_error());
  CHECK(cnnergy_window_begin(m, "y", NULL) == CNNERGY_OK, "%s", cnnergy_last_error());
  cnnergy_monitor_close(m);

  /* a GPU that does not exist */
  gpus[0] = 7;
  o.gpu_count = 1;
  m = NULL;
  CHECK(cnnergy_monitor_open(&o, &m) == CNNERGY_ERROR_INVALID_ARGUMENT && m == NULL, "GPU 7");
  CHECK(strstr(cnnergy_last_error(), "no GPU 7") != NULL, "message '%s'", cnnergy_last_error());
}

static void test_knobs(void) {
  cnnergy_knob_lease a = 0, b = 0, c = 0;
  const long original = 350000; /* CNNERGY_FAKE_NVML_LIMITS_W=100,400,350: the default */
  CHECK(cnnergy_power_limit_set(0, 300, &a) == CNNERGY_OK, "%s", cnnergy_last_error());
  CHECK(state_power_limit_mw(0) == 300000, "300 W: %ld", state_power_limit_mw(0));
  CHECK(journal_exists(), "journal written before the change");
  CHECK(cnnergy_power_limit_set(0, 250, &b) == CNNERGY_OK, "%s", cnnergy_last_error());
  CHECK(cnnergy_sm_clocks_lock(1, 1200, 1410, &c) == CNNERGY_OK, "%s", cnnergy_last_error());
  CHECK(cnnergy_knob_active() == 3, "3 leases");
  CHECK(cnnergy_power_limit_set(0, 5000, NULL) == CNNERGY_ERROR_INVALID_ARGUMENT, "5000 W");
  CHECK(strstr(cnnergy_last_error(), "outside the range") != NULL, "'%s'", cnnergy_last_error());
  CHECK(state_power_limit_mw(0) == 250000, "unchanged by a refused limit");
  CHECK(cnnergy_sm_clocks_lock(0, 1201, 1201, NULL) == CNNERGY_ERROR_INVALID_ARGUMENT, "1201");
  CHECK(cnnergy_power_limit_set(9, 300, NULL) == CNNERGY_ERROR_INVALID_ARGUMENT, "GPU 9");
  CHECK(cnnergy_knob_release(b) == CNNERGY_OK, "%s", cnnergy_last_error());
  CHECK(state_power_limit_mw(0) == 300000, "back to the outer lease's 300 W");
  CHECK(cnnergy_knob_release(b) == CNNERGY_ERROR_INVALID_ARGUMENT, "released twice");
  CHECK(cnnergy_knob_release(a) == CNNERGY_OK, "%s", cnnergy_last_error());
  CHECK(state_power_limit_mw(0) == original, "original %ld: %ld", original,
        state_power_limit_mw(0));
  CHECK(journal_exists(), "the SM lock is still journaled");
  CHECK(cnnergy_knob_release(c) == CNNERGY_OK, "%s", cnnergy_last_error());
  CHECK(!journal_exists(), "journal removed after the last release");
}

static void test_knob_info(void) {
  cnnergy_gpu_knob_info info;
  cnnergy_knob_lease m = 0;
  cnnergy_gpu_knob_info_init(&info);
  CHECK(info.struct_size == sizeof info, "struct_size");
  CHECK(cnnergy_gpu_knob_info_get(0, &info) == CNNERGY_OK, "%s", cnnergy_last_error());
  CHECK(info.power_limit_min_w == 100 && info.power_limit_max_w == 400, "range %g-%g",
        info.power_limit_min_w, info.power_limit_max_w);
  CHECK(info.power_limit_default_w == 350, "default %g", info.power_limit_default_w);
  CHECK(info.sm_clock_count > 2 && info.sm_clocks_mhz[0] == 1980 &&
            info.sm_clocks_mhz[1] < info.sm_clocks_mhz[0], "SM clocks, descending");
  CHECK(info.mem_clock_count == 1 && info.mem_clocks_mhz[0] == 2619, "memory clocks");
  CHECK(strstr(info.name, "fake") != NULL && strlen(info.driver_version) > 0, "name, driver");
  CHECK(cnnergy_gpu_knob_info_get(9, &info) == CNNERGY_ERROR_INVALID_ARGUMENT, "GPU 9");
  CHECK(cnnergy_memory_clock_set(0, 1000, NULL) == CNNERGY_ERROR_INVALID_ARGUMENT, "1000 MHz");
  CHECK(strstr(cnnergy_last_error(), "nearest supported clock is 2619") != NULL, "'%s'",
        cnnergy_last_error());
  CHECK(cnnergy_memory_clock_set(0, 2619, &m) == CNNERGY_OK, "%s", cnnergy_last_error());
  CHECK(journal_exists() && cnnergy_knob_active() == 1, "journaled memory clock");
  CHECK(cnnergy_knob_release(m) == CNNERGY_OK, "%s", cnnergy_last_error());
  CHECK(!journal_exists() && cnnergy_knob_active() == 0, "memory clock restored");
}

static void test_permission(void) {
  cnnergy_knob_lease a = 0;
  const long original = state_power_limit_mw(0);
  CHECK(cnnergy_power_limit_set(0, 300, &a) == CNNERGY_ERROR_PERMISSION, "no permission");
  CHECK(strlen(cnnergy_last_error()) > 0, "a message");
  fprintf(stderr, "message: %s\n", cnnergy_last_error());
  CHECK(state_power_limit_mw(0) == original, "nothing changed");
  CHECK(!journal_exists(), "no journal left");
  CHECK(cnnergy_knob_active() == 0, "no lease");
}

int main(int argc, char** argv) {
  /* a fresh simulated GPU: no settings left by an earlier run */
  if (getenv("CNNERGY_FAKE_NVML_STATE")) unlink(getenv("CNNERGY_FAKE_NVML_STATE"));
  if (getenv("CNNERGY_JOURNAL")) unlink(getenv("CNNERGY_JOURNAL"));
  if (argc > 1 && strcmp(argv[1], "permission") == 0) {
    test_permission();
  } else {
    test_windows();
    test_knobs();
    test_knob_info();
  }
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("all checks passed\n");
  return 0;
}
