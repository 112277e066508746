/* cnnergy.h: the C API of libcnnergy, for measuring the time and energy of named windows inside
 * your own program (GPUs through NVML, the CPU package through RAPL) and for changing a GPU's power
 * limit or SM clocks through cnnergy's journaled controller. Plain C99; no C++ type crosses it.
 *
 * Versioning. CNNERGY_API_VERSION is the version this header describes; cnnergy_api_version()
 * the one the loaded library implements. The major version (value / 10000) changes only when a
 * function or struct changes incompatibly; minor versions only add. Structs that may grow start
 * with `struct_size`: set it to sizeof(the struct) (the *_init functions do) so an older caller
 * keeps working with a newer library.
 *
 * Errors. Every call that can fail returns a cnnergy_status; CNNERGY_OK is 0. The message of the
 * last failed call on the calling thread is cnnergy_last_error() (valid until the next failing call
 * on that thread). A failed call changes nothing: no window is opened or closed, no GPU setting is
 * left changed.
 *
 * How a window is measured. A monitor runs a sampler thread that reads every GPU's power and its
 * energy counter (and RAPL) once per sensor update period (about 100 ms; detected at open). The
 * counter read is slow on real GPUs (~4 ms), so begin/end never read a sensor: they only take a
 * steady-clock timestamp (a few microseconds). The energy at each edge is interpolated later from
 * the counter readings around it (each counter change is placed at the middle of the interval in
 * which the sensor must have updated, +- half its width: that is the uncertainty), or, where the GPU
 * has no counter, from the integral of the sampled power. A window's numbers are therefore ready
 * about one sampling interval plus one sensor period after it ends: cnnergy_window_result() waits
 * for that (or, with timeout 0, says CNNERGY_NOT_READY). A window shorter than the sensor's period
 * rests on one or two sensor updates: its `below_sensor_period` flag is set; repeat the work in a
 * longer window for a figure you can trust (see docs/python.md).
 *
 * Threads. A monitor may be used from several threads; window names are per monitor. The knob
 * functions act on a process-wide controller (GPU settings are process-wide and the journal is
 * per user): while any knob is changed, SIGINT/SIGTERM/SIGHUP restore every setting and then end
 * the process with that signal; after a crash or kill -9, `cnnergy restore` (or the next process
 * that changes a knob) puts the settings back from the journal. */
#ifndef CNNERGY_CNNERGY_H
#define CNNERGY_CNNERGY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define CNNERGY_EXPORT __attribute__((visibility("default")))
#else
#define CNNERGY_EXPORT
#endif

/* 1.1.0: cnnergy_now_ns, cnnergy_window_begin_at / _end_at, cnnergy_monitor_window_count
 * 1.2.0: cnnergy_gpu_knob_info_get (power-limit range, supported clocks, driver), cnnergy_memory_clock_set
 * 1.3.0: cnnergy_monitor_settle_check (the sweep's steady-state rule on the monitor's own samples) */
#define CNNERGY_API_VERSION 10300
#define CNNERGY_MAX_GPUS 64
#define CNNERGY_NAME_MAX 128

/* Status codes; the non-zero values are the exit codes of the `cnnergy` command for the same
 * kind of failure. */
typedef enum cnnergy_status {
  CNNERGY_OK = 0,
  CNNERGY_ERROR_INTERNAL = 1,          /* a bug or an unexpected failure */
  CNNERGY_ERROR_INVALID_ARGUMENT = 2,  /* bad value: no such GPU, window not open, out of range */
  CNNERGY_ERROR_DATA = 3,              /* unreadable or corrupt file (e.g. the knob journal) */
  CNNERGY_ERROR_NOT_SUPPORTED = 4,     /* no NVML/driver/GPU or the GPU lacks the feature */
  CNNERGY_ERROR_PERMISSION = 6,        /* changing a GPU setting needs root / CAP_SYS_ADMIN */
  CNNERGY_ERROR_DEVICE = 7,            /* an NVML call failed */
  CNNERGY_NOT_READY = 9                /* the sampler has not yet covered the window's end */
} cnnergy_status;

typedef enum cnnergy_energy_source {
  CNNERGY_SOURCE_NONE = 0,             /* no energy reading (no GPU, or no power sensor) */
  CNNERGY_SOURCE_COUNTER = 1,          /* the GPU's energy counter, interpolated at the edges */
  CNNERGY_SOURCE_INTEGRATED_POWER = 2  /* sampled power integrated over time */
} cnnergy_energy_source;

typedef struct cnnergy_monitor cnnergy_monitor; /* opaque */
typedef uint64_t cnnergy_window_id;
typedef uint64_t cnnergy_knob_lease;

/* ---- library ---------------------------------------------------------------------------------- */
CNNERGY_EXPORT unsigned cnnergy_api_version(void);
CNNERGY_EXPORT const char* cnnergy_last_error(void);                  /* "" when none */
CNNERGY_EXPORT const char* cnnergy_status_name(cnnergy_status status); /* "invalid_argument" ... */
CNNERGY_EXPORT const char* cnnergy_source_name(cnnergy_energy_source source); /* "counter" ... */

/* ---- monitor ---------------------------------------------------------------------------------- */
typedef struct cnnergy_monitor_options {
  uint32_t struct_size;   /* sizeof(cnnergy_monitor_options) */
  const unsigned* gpus;   /* NVML indices to measure; NULL with gpu_count 0: every GPU */
  size_t gpu_count;
  double interval_ms;     /* sampling interval; 0: the sensor's update period (detected) */
  int cpu;                /* 1: also measure the CPU packages through RAPL where readable */
  int start;              /* 1: start the sampler now (else call cnnergy_monitor_start) */
} cnnergy_monitor_options;

/* Defaults: every GPU, interval from the sensor, CPU on, started. */
CNNERGY_EXPORT void cnnergy_monitor_options_init(cnnergy_monitor_options* options);
/* INVALID_ARGUMENT for a GPU index NVML does not see; NOT_SUPPORTED when GPUs are asked for and
 * there is no NVML (with gpus NULL and no NVML the monitor measures time, and CPU where readable). */
CNNERGY_EXPORT cnnergy_status cnnergy_monitor_open(const cnnergy_monitor_options* options,
                                                   cnnergy_monitor** monitor);
CNNERGY_EXPORT void cnnergy_monitor_close(cnnergy_monitor* monitor); /* NULL is fine */

/* Start and stop the sampler thread. Windows can be begun only while it runs; a window ended
 * after stop is resolved with the data there is. Start after stop needs every window collected. */
CNNERGY_EXPORT cnnergy_status cnnergy_monitor_start(cnnergy_monitor* monitor);
CNNERGY_EXPORT cnnergy_status cnnergy_monitor_stop(cnnergy_monitor* monitor);
CNNERGY_EXPORT int cnnergy_monitor_running(const cnnergy_monitor* monitor);

typedef struct cnnergy_gpu_info {
  unsigned index;               /* NVML index */
  char uuid[96];
  char name[96];
  int has_energy_counter;       /* 0: energy comes from integrated power */
} cnnergy_gpu_info;

CNNERGY_EXPORT size_t cnnergy_monitor_gpu_count(const cnnergy_monitor* monitor);
CNNERGY_EXPORT cnnergy_status cnnergy_monitor_gpu_info(const cnnergy_monitor* monitor, size_t slot,
                                                       cnnergy_gpu_info* info);
CNNERGY_EXPORT int cnnergy_monitor_has_cpu(const cnnergy_monitor* monitor);
/* The sensor's update period and the sampling interval (ms) of the running or last sampler. */
CNNERGY_EXPORT double cnnergy_monitor_sensor_period_ms(const cnnergy_monitor* monitor);
CNNERGY_EXPORT double cnnergy_monitor_interval_ms(const cnnergy_monitor* monitor);

/* Serves this monitor's live metrics as OpenMetrics at http://127.0.0.1:PORT/metrics (the metric
 * names of `cnnergy monitor --prometheus-port`; prometheus_port 0: a free port the system picks,
 * given back in *bound_port; < 0: no server) and/or writes JSON lines to jsonl_path (NULL: none):
 * every sample, and every window as soon as the sampler covers its end (read or not). Once per
 * monitor. INVALID_ARGUMENT for a port in use; DATA for a file that cannot be written. */
CNNERGY_EXPORT cnnergy_status cnnergy_monitor_export(cnnergy_monitor* monitor, int prometheus_port,
                                                     const char* jsonl_path, unsigned* bound_port);

/* Since 1.3. Has the GPUs' temperature and power settled since `since_ns` (cnnergy_now_ns's clock:
 * a knob change, a new workload)? The steady-state rule of `cnnergy sweep --settle-s`, applied to the
 * samples this monitor took since then: over the last window_s seconds of them (at least five), the
 * hottest GPU's temperature slope is at most max_temp_slope_c_per_s and the summed power's slope at
 * most max_power_slope_per_s of its mean per second, each allowed two standard errors of its
 * least-squares fit. A rule field <= 0 takes the sweep's default (1 s, 0.1 C/s, 0.01 per s). Reads
 * only; the caller keeps its workload running between checks. INVALID_ARGUMENT when the monitor is
 * not running. */
typedef struct cnnergy_settle_check {
  size_t struct_size;          /* set by the library */
  int settled;                 /* 1: both slopes within the rule */
  size_t samples;              /* samples in the rule's window */
  double temp_slope_c_per_s;   /* NaN: no temperature readings */
  double power_slope_per_s;    /* fraction of the mean power per second; NaN: no power readings */
  char reason[256];            /* why not settled ("" when settled) */
} cnnergy_settle_check;
CNNERGY_EXPORT cnnergy_status cnnergy_monitor_settle_check(const cnnergy_monitor* monitor, int64_t since_ns,
                                                           double window_s, double max_temp_slope_c_per_s,
                                                           double max_power_slope_per_s,
                                                           cnnergy_settle_check* out);

/* ---- windows ---------------------------------------------------------------------------------- */
/* Opens the window `name` (1 to CNNERGY_NAME_MAX-1 bytes). Windows may nest and overlap; a name can
 * be open once at a time (INVALID_ARGUMENT otherwise). Only stamps the time: microseconds. */
CNNERGY_EXPORT cnnergy_status cnnergy_window_begin(cnnergy_monitor* monitor, const char* name,
                                                   cnnergy_window_id* id);
/* Closes the open window `name` (INVALID_ARGUMENT when it was never begun or is already ended) and
 * gives its id for cnnergy_window_result. Only stamps the time. */
CNNERGY_EXPORT cnnergy_status cnnergy_window_end(cnnergy_monitor* monitor, const char* name,
                                                 cnnergy_window_id* id);

/* Since 1.1. The monitor's clock (CLOCK_MONOTONIC, ns; Python's time.monotonic_ns() reads the same
 * clock on Linux). */
CNNERGY_EXPORT int64_t cnnergy_now_ns(void);
/* Since 1.1. As begin/end, at a time the caller stamped earlier on the monitor's clock, so the
 * caller's thread can only stamp and hand the registration to another thread (the Python module
 * does). INVALID_ARGUMENT for a time in the future, a begin before the monitor (re)started, an end
 * before its begin. Samples the sampler took before the registration still count. */
CNNERGY_EXPORT cnnergy_status cnnergy_window_begin_at(cnnergy_monitor* monitor, const char* name,
                                                      int64_t t_ns, cnnergy_window_id* id);
CNNERGY_EXPORT cnnergy_status cnnergy_window_end_at(cnnergy_monitor* monitor, const char* name,
                                                    int64_t t_ns, cnnergy_window_id* id);
/* Since 1.1. Windows the monitor holds: open, or ended and neither read nor discarded. */
CNNERGY_EXPORT size_t cnnergy_monitor_window_count(cnnergy_monitor* monitor);

typedef struct cnnergy_gpu_energy {
  unsigned gpu_index;
  cnnergy_energy_source source;
  double energy_j;       /* NaN when unknown */
  double uncertainty_j;  /* bound on |error| from sensor granularity and timing; NaN when unknown */
  double avg_power_w;    /* energy / time */
  double peak_power_w;   /* highest power sample inside the window; NaN when none fell inside */
  size_t samples;        /* power samples inside the window */
} cnnergy_gpu_energy;

typedef struct cnnergy_measurement {
  uint32_t struct_size;  /* sizeof(cnnergy_measurement) */
  char name[CNNERGY_NAME_MAX];
  double time_s;
  double begin_s, end_s;          /* steady clock (CLOCK_MONOTONIC) seconds */
  double energy_j;                /* over the monitor's GPUs; NaN when any is unknown */
  double uncertainty_j;
  double avg_power_w;             /* energy_j / time_s */
  double peak_power_w;            /* sum of each GPU's peak (an upper bound of the total's peak) */
  cnnergy_energy_source source;   /* the weakest over the GPUs (none < integrated < counter) */
  double cpu_energy_j;            /* RAPL packages; NaN when not readable */
  int below_sensor_period;        /* 1: shorter than one sensor update: do not trust it alone */
  double sensor_period_ms;
  size_t gpu_count;
  cnnergy_gpu_energy gpus[CNNERGY_MAX_GPUS];
} cnnergy_measurement;

/* Fills `out` for an ended window and forgets the window (a second call gives INVALID_ARGUMENT).
 * timeout_ms < 0: wait until the sampler covers the end (about one interval plus one sensor
 * period; after a generous limit, the data there is); 0: never wait, NOT_READY if not covered yet
 * (the window stays); > 0: wait at most that long, then the data there is. */
CNNERGY_EXPORT cnnergy_status cnnergy_window_result(cnnergy_monitor* monitor, cnnergy_window_id id,
                                                    double timeout_ms, cnnergy_measurement* out);
/* Forgets an ended window without reading it (each ended window costs the sampler a little until
 * it is collected or discarded). */
CNNERGY_EXPORT cnnergy_status cnnergy_window_discard(cnnergy_monitor* monitor, cnnergy_window_id id);

/* ---- knobs (journaled; see the top of this file) ----------------------------------------------
 * The changes take the path a `cnnergy` command takes: as root, directly through NVML (journaled
 * in $CNNERGY_JOURNAL or ~/.cache/cnnergy); otherwise (since 1.2) through the cnnergyd daemon when
 * its socket answers ($CNNERGY_DAEMON_SOCKET, default /run/cnnergy/cnnergyd.sock), which restores
 * everything this process changed as soon as it ends, even after kill -9 (docs/daemon.md).
 * $CNNERGY_KNOBS=auto|direct|daemon|dry-run picks one; PERMISSION without root and without a
 * daemon names how to get one. */
/* Sets GPU `gpu`'s power limit (INVALID_ARGUMENT naming the allowed range in W; PERMISSION without
 * root). Returns a lease: releasing it puts back the value before it (leases on the same GPU and
 * setting nest: the latest one still held is applied again). */
CNNERGY_EXPORT cnnergy_status cnnergy_power_limit_set(unsigned gpu, double watts,
                                                      cnnergy_knob_lease* lease);
/* Locks GPU `gpu`'s SM clock to [min_mhz, max_mhz]; each must be a supported clock
 * (INVALID_ARGUMENT names the nearest one). */
CNNERGY_EXPORT cnnergy_status cnnergy_sm_clocks_lock(unsigned gpu, unsigned min_mhz,
                                                     unsigned max_mhz, cnnergy_knob_lease* lease);
/* Since 1.2. Sets GPU `gpu`'s memory clock (locked where the driver can, else the application
 * clock); `mhz` must be a supported memory clock (INVALID_ARGUMENT names the nearest one). */
CNNERGY_EXPORT cnnergy_status cnnergy_memory_clock_set(unsigned gpu, unsigned mhz,
                                                       cnnergy_knob_lease* lease);
CNNERGY_EXPORT cnnergy_status cnnergy_knob_release(cnnergy_knob_lease lease);
/* Restores every setting changed through this library in this process and deletes the journal. */
CNNERGY_EXPORT cnnergy_status cnnergy_knob_restore_all(void);
CNNERGY_EXPORT size_t cnnergy_knob_active(void); /* leases held */

/* ---- what can be changed (since 1.2) ---------------------------------------------------------- */
#define CNNERGY_MAX_CLOCKS 512
typedef struct cnnergy_gpu_knob_info {
  uint32_t struct_size;          /* sizeof(cnnergy_gpu_knob_info) (cnnergy_gpu_knob_info_init) */
  unsigned index;                /* NVML index */
  char name[96];
  char uuid[96];
  char driver_version[80];
  double power_limit_min_w, power_limit_max_w;   /* NaN when the GPU does not say */
  double power_limit_default_w, power_limit_current_w;
  size_t sm_clock_count;         /* supported SM clocks at the highest memory clock, descending */
  unsigned sm_clocks_mhz[CNNERGY_MAX_CLOCKS];
  size_t mem_clock_count;        /* supported memory clocks, descending */
  unsigned mem_clocks_mhz[CNNERGY_MAX_CLOCKS];
} cnnergy_gpu_knob_info;

CNNERGY_EXPORT void cnnergy_gpu_knob_info_init(cnnergy_gpu_knob_info* info);
/* Reads GPU `gpu`'s knob ranges (reading needs no permission). NOT_SUPPORTED without NVML;
 * INVALID_ARGUMENT for a GPU NVML does not see. */
CNNERGY_EXPORT cnnergy_status cnnergy_gpu_knob_info_get(unsigned gpu, cnnergy_gpu_knob_info* info);

#ifdef __cplusplus
}
#endif
#endif /* CNNERGY_CNNERGY_H */
