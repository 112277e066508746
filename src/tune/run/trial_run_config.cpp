// A trial's run settings: its knobs over the sweep's (runners.hpp, trial_run_config).
#include "tune/run/runners.hpp"

namespace cnnergy::tune {

RunConfig trial_run_config(const TrialSpec& trial, const RunConfig& sweep) {
  SettingMap knobs;
  for (const KnobSetting& s : trial.knobs)
    if (!s.value.is_default()) knobs.emplace(std::string(knob_name(s.knob)), s.value.text);
  return RunConfig::from_knobs(knobs, sweep);
}

}  // namespace cnnergy::tune
