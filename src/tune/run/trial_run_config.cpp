// A trial's run settings and knob texts: its knobs over the sweep's (runners.hpp).
#include "tune/run/runners.hpp"

namespace cnnergy::tune {

RunConfig trial_run_config(const TrialSpec& trial, const RunConfig& sweep) {
  SettingMap knobs;
  for (const KnobSetting& s : trial.knobs)
    if (!s.value.is_default()) knobs.emplace(std::string(knob_name(s.knob)), s.value.text);
  return RunConfig::from_knobs(knobs, sweep);
}

std::string knob_text(const TrialSpec& trial, Knob knob, const std::string& fallback) {
  const KnobValue* v = trial.find(knob);
  return v && !v->is_default() ? v->text : fallback;
}

}  // namespace cnnergy::tune
