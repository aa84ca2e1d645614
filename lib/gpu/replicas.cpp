#include "gpu/replicas.hpp"

#include <algorithm>
#include <cmath>

namespace retro {

double replica_diff(const float* out, int B, size_t rows) {
    double worst = 0, ref = 0;
    for (size_t i = 0; i < rows; ++i) ref += (double)out[i] * out[i];
    for (int b = 1; b < B; ++b) {
        double diff = 0;
        for (size_t i = 0; i < rows; ++i) {
            const double e = (double)out[(size_t)b * rows + i] - out[i];
            diff += e * e;
        }
        worst = std::max(worst, ref > 0 ? std::sqrt(diff / ref) : std::sqrt(diff));
    }
    return worst;
}

}  // namespace retro
