#pragma once
// Fixture of the include-floor check: a lib folder without a floor must fail.
#include "core/a.hpp"
