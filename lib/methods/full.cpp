// `full`: every visible token attended exactly. The accuracy reference and the GPU-only baseline.
#include "methods/builtin_methods.hpp"

#include <numeric>

namespace retro {

namespace {
struct FullParams {
    bool offloaded = false;  ///< KV lives in CPU memory and is streamed over PCIe every step
};

class Full final : public Method {
  public:
    explicit Full(FullParams p) : p_(p) {}
    void build(const MethodContext& ctx, const KVView& prompt) override {
        ctx_ = ctx;
        n_ = prompt.n;
    }
    void append(const KVView&, int pos) override { n_ = pos + 1; }
    void select(const float*, int, const KVView& kv, Selection& out) override {
        n_ = kv.n;
        auto& ids = out.shared();
        ids.resize((size_t)kv.n);
        std::iota(ids.begin(), ids.end(), 0);
        out.scan_ops = 0;  // no selection work: attention itself reads everything
        out.h2d_bytes = p_.offloaded ? (double)kv.n * ctx_.kv_token_bytes() : 0.0;
    }
    Footprint footprint() const override {
        const double all = (double)n_ * ctx_.kv_token_bytes();
        return p_.offloaded ? Footprint{0.0, all} : Footprint{all, 0.0};
    }

  private:
    FullParams p_;
    MethodContext ctx_;
    int n_ = 0;
};
}  // namespace

MethodInfo full_method_info() {
    MethodInfo m;
    m.name = "full";
    m.description = "exact attention over all visible tokens (reference; GPU-resident or offloaded KV)";
    m.paper = "-";
    m.params = {{"offloaded", ParamType::boolean, false,
                 "KV kept in CPU memory and copied over PCIe every step (false: all KV on the GPU)",
                 "ours"}};
    m.make = [](const nlohmann::json& j) {
        return std::make_unique<Full>(FullParams{j.at("offloaded").get<bool>()});
    };
    return m;
}

}  // namespace retro
