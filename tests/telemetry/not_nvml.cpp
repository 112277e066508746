// A shared library that exports something, but no NVML symbols: loading it as NVML must fail
// clearly.
extern "C" __attribute__((visibility("default"))) int cnnergy_not_nvml_marker() { return 42; }
