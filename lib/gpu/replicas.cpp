#include "gpu/replicas.hpp"

#include <algorithm>
#include <cmath>

namespace retro {

double replica_diff(const float* out, int B, size_t rows, int sequences) {
    const int D = std::max(1, sequences);
    double worst = 0;
    for (int b = D; b < B; ++b) {
        const float* first = out + (size_t)(b % D) * rows;  // the first replica of b's sequence
        double diff = 0, ref = 0;
        for (size_t i = 0; i < rows; ++i) {
            const double e = (double)out[(size_t)b * rows + i] - first[i];
            diff += e * e, ref += (double)first[i] * first[i];
        }
        worst = std::max(worst, ref > 0 ? std::sqrt(diff / ref) : std::sqrt(diff));
    }
    return worst;
}

}  // namespace retro
