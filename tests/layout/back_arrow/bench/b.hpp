#pragma once
// Fixture of the include-floor check.
#include "core/a.hpp"
