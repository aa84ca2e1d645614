#pragma once
// Fixture of the include-floor check.
