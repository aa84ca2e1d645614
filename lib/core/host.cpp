#include "core/host.hpp"

#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <faiss/Index.h>  // FAISS_VERSION_*
#include <hdf5.h>


extern "C" void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*,
                       const float*, const int*, const float*, const int*, const float*, float*,
                       const int*);

namespace retro {

std::string active_blas() {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&sgemm_), &info) == 0 || info.dli_fname == nullptr)
        return "unknown";
    std::error_code ec;
    auto canon = std::filesystem::canonical(info.dli_fname, ec);
    std::string path = ec ? std::string(info.dli_fname) : canon.string();
    std::string kind = path.find("openblas") != std::string::npos ? "OpenBLAS"
                       : path.find("mkl") != std::string::npos    ? "MKL"
                       : path.find("blis") != std::string::npos   ? "BLIS"
                       : path.find("atlas") != std::string::npos  ? "ATLAS"
                       : path.find("/blas/") != std::string::npos ? "reference BLAS (slow)"
                                                                  : "unknown";
    return kind + " (" + path + ")";
}

namespace {
std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("model name", 0) == 0) {
            auto p = line.find(':');
            if (p != std::string::npos) return line.substr(p + 2);
        }
    }
    return "unknown";
}
/// The vector instruction sets of /proc/cpuinfo's "flags" that decide which kernels this machine runs
/// (FAISS's and the attention's SIMD paths), in a fixed order; empty when unreadable.
std::vector<std::string> cpu_flags() {
    static const char* kKnown[] = {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
                                   "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "asimd", "sve"};
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("flags", 0) != 0 && line.rfind("Features", 0) != 0) continue;  // x86 / arm64
        std::istringstream words(line.substr(line.find(':') == std::string::npos ? 0 : line.find(':') + 1));
        const std::set<std::string> have{std::istream_iterator<std::string>(words), std::istream_iterator<std::string>()};
        std::vector<std::string> out;
        for (const char* f : kKnown)
            if (have.count(f)) out.push_back(f);
        return out;
    }
    return {};
}

/// The libraries' versions this binary runs with: FAISS (compiled in), HDF5 (the loaded library),
/// OpenBLAS's own description when the BLAS is OpenBLAS, CUDA (the toolkit the kernels were built with).
nlohmann::json library_versions() {
    nlohmann::json v;
    v["faiss"] = std::to_string(FAISS_VERSION_MAJOR) + "." + std::to_string(FAISS_VERSION_MINOR) + "." +
                 std::to_string(FAISS_VERSION_PATCH);
    unsigned maj = 0, min = 0, rel = 0;
    v["hdf5"] = H5get_libversion(&maj, &min, &rel) >= 0
                    ? std::to_string(maj) + "." + std::to_string(min) + "." + std::to_string(rel)
                    : std::string("unknown");
    using GetConfig = const char* (*)();
    const auto openblas = reinterpret_cast<GetConfig>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
    v["blas"] = openblas ? std::string(openblas()) : active_blas();  // "OpenBLAS 0.3.21 ... Cooperlake ..."
#ifdef RETRO_CUDA_VERSION
    v["cuda"] = std::string("toolkit ") + RETRO_CUDA_VERSION + " (kernels built)";
#else
    v["cuda"] = "not built";
#endif
    return v;
}

double memory_gb() {
    const long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && psize > 0 ? (double)pages * psize / (1024.0 * 1024 * 1024) : 0.0;
}
}  // namespace

nlohmann::json host_info() {
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    utsname u{};
    uname(&u);
    nlohmann::json j;
    j["hostname"] = host;
    j["cpu_model"] = cpu_model();
    j["cpu_cores"] = std::thread::hardware_concurrency();
    j["memory_gb"] = std::round(memory_gb() * 10) / 10;
    j["os"] = std::string(u.sysname) + " " + u.release + " " + u.machine;
    j["blas"] = active_blas();
    j["cpu_flags"] = cpu_flags();
    j["versions"] = library_versions();
    j["git_revision"] = git_revision();
    j["version"] = RETRO_VERSION;
#ifdef RETRO_HAVE_CUDA
    j["cuda_built"] = true;
#else
    j["cuda_built"] = false;
#endif
    return j;
}

double peak_rss_bytes() {
    struct rusage ru {};
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0.0;
    return (double)ru.ru_maxrss * 1024.0;  // Linux reports kilobytes
}

namespace {
std::string utc_now_formatted(const char* format) {
    const auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, format, &tm);
    return buf;
}
}  // namespace

std::string utc_now_iso() { return utc_now_formatted("%Y-%m-%dT%H:%M:%SZ"); }

std::string utc_now_compact() { return utc_now_formatted("%Y%m%dT%H%M%SZ"); }

}  // namespace retro
