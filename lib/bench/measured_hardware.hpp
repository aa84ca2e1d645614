#pragma once
// "hardware": "measured" for `retro-bench run` on the cuda backend (docs/config.md): the profile the
// device's name suggests (configs/hardware/, gpu/measured.hpp base_profile_for) with the ceilings the
// backend measured on it, each measured field's source saying so; recorded whole in the manifest.
#include "gpu/measured.hpp"
#include "system/hardware.hpp"

namespace retro {

/// The reserved profile name.
inline constexpr const char* kMeasuredHardware = "measured";

/// The calibrated profile for `m` (base: base_profile_for(m.device), loaded from configs/hardware).
HardwareProfile measured_profile(const MeasuredDevice& m);

}  // namespace retro
