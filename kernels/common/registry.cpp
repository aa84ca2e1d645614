// The kernel families' registry (registry.hpp): what the families' files registered at static
// initialization, listed in their order. Host code only.
#include "common/registry.hpp"

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace retro::cuda {

namespace {

template <class T>
struct Entry {
    std::string family;
    int order = 0;
    T item;
};

struct Registry {
    std::vector<Entry<CheckCase>> checks;
    std::vector<Entry<BenchCase>> benches;
    std::set<std::string> emulated;
};

// Constructed on first use: the registrations run during static initialization, in any file order.
Registry& registry() {
    static Registry r;
    return r;
}

// By order, then family name; a family's entries keep their registration order.
template <class T>
std::vector<Entry<T>> in_order(std::vector<Entry<T>> v) {
    std::stable_sort(v.begin(), v.end(), [](const Entry<T>& a, const Entry<T>& b) {
        return a.order != b.order ? a.order < b.order : a.family < b.family;
    });
    return v;
}

}  // namespace

int register_checks(const std::string& family, int order, std::vector<CheckCase> checks) {
    for (CheckCase& c : checks) registry().checks.push_back({family, order, std::move(c)});
    return 0;
}

int register_benches(const std::string& family, int order, std::vector<BenchCase> benches) {
    for (BenchCase& b : benches) registry().benches.push_back({family, order, std::move(b)});
    return 0;
}

int register_emulation(const std::string& family) {
    registry().emulated.insert(family);
    return 0;
}

std::vector<CheckCase> gpu_checks() {
    std::vector<CheckCase> out;
    for (const auto& e : in_order(registry().checks)) out.push_back(e.item);
    return out;
}

std::vector<KernelFamily> kernel_families() {
    std::vector<KernelFamily> fams;
    const auto family = [&](const std::string& name, int order) -> KernelFamily& {
        for (KernelFamily& f : fams)
            if (f.name == name) {
                f.order = std::min(f.order, order);
                return f;
            }
        fams.push_back({name, order, {}, {}, false});
        return fams.back();
    };
    for (const auto& e : in_order(registry().checks)) family(e.family, e.order).checks.push_back(e.item);
    for (const auto& e : in_order(registry().benches)) family(e.family, e.order).benches.push_back(e.item);
    for (const std::string& name : registry().emulated) {
        const auto f = std::find_if(fams.begin(), fams.end(), [&](const KernelFamily& k) { return k.name == name; });
        if (f != fams.end()) f->emulated = true;
        else fams.push_back({name, 0, {}, {}, true});
    }
    std::stable_sort(fams.begin(), fams.end(), [](const KernelFamily& a, const KernelFamily& b) {
        return a.order != b.order ? a.order < b.order : a.name < b.name;
    });
    return fams;
}

bool BenchContext::want(const std::string& group) const {
    return options.only.empty() || group.find(options.only) != std::string::npos;
}

std::vector<BenchRow> run_benches(const BenchOptions& o, const DeviceCeilings& c) {
    if (registry().benches.empty() && !registry().emulated.empty()) throw Error("CPU emulation: no benchmarks");
    BenchContext ctx{o, c};
    ctx.reps = o.quick ? 5 : o.reps;
    ctx.contexts = o.quick ? std::vector<int>{32768} : std::vector<int>{32768, 131072};
    ctx.batches = o.quick ? std::vector<int>{1, 8} : std::vector<int>{1, 8, 16, 32, 64};
    if (!o.contexts.empty()) ctx.contexts = o.contexts;
    if (!o.batches.empty()) ctx.batches = o.batches, std::sort(ctx.batches.begin(), ctx.batches.end());
    std::vector<BenchRow> rows;
    for (const auto& e : in_order(registry().benches)) {
        std::vector<BenchRow> r = e.item.body(ctx);
        rows.insert(rows.end(), r.begin(), r.end());
    }
    return rows;
}

}  // namespace retro::cuda
