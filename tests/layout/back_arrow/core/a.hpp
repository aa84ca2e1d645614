#pragma once
// Fixture of the include-floor check: core/ (floor 0) including bench/ (floor 5) must fail.
#include "bench/b.hpp"
