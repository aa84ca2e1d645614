#pragma once
// Fixture of the include-floor check: core/ (floor 0) including bench/ (floor 6) must fail.
#include "bench/b.hpp"
