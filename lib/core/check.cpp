#include "core/check.hpp"

#include <cmath>
#include <cstdio>

namespace retro {

ErrorStats compare(const float* got, const float* ref, size_t n) {
    ErrorStats st;
    st.n = n;
    double num = 0, den = 0;
    for (size_t i = 0; i < n; ++i) {
        const double g = got[i], r = ref[i];
        if (!std::isfinite(r)) {
            // only an identical infinity matches a non-finite reference
            if (!(std::isinf(r) && g == r)) ++st.nonfinite;
            continue;
        }
        if (!std::isfinite(g)) {
            ++st.nonfinite;
            continue;
        }
        const double e = g - r;
        st.max_abs = std::max(st.max_abs, std::fabs(e));
        num += e * e;
        den += r * r;
    }
    st.rel_l2 = st.nonfinite ? INFINITY : std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
    return st;
}

bool Checker::expect(bool ok, const std::string& what) {
    if (!ok) failures_.push_back(what);
    return ok;
}

bool Checker::expect_close(const std::string& what, const float* got, const float* ref, size_t n,
                           double rel_tol) {
    const ErrorStats st = compare(got, ref, n);
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s: n=%zu nonfinite=%zu rel_l2=%.3g max_abs=%.3g (tol %.3g)", what.c_str(),
                  st.n, st.nonfinite, st.rel_l2, st.max_abs, rel_tol);
    note(buf);
    return expect(st.nonfinite == 0 && st.rel_l2 <= rel_tol, buf);
}

std::string Checker::report() const {
    std::string r;
    for (const auto& f : failures_) r += "FAIL " + f + "\n";
    for (const auto& s : notes_) r += "  " + s + "\n";
    return r;
}

std::string json_quote(const std::string& s) {
    std::string r = "\"";
    for (const unsigned char c : s) {
        if (c == '"' || c == '\\') {
            r += '\\';
            r += (char)c;
        } else if (c < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", c);
            r += b;
        } else {
            r += (char)c;
        }
    }
    return r + "\"";
}

}  // namespace retro
