// `streaming`: StreamingLLM's static pattern, the first `sink` tokens plus the last `window` tokens.
#include <algorithm>

#include "methods/builtin_methods.hpp"

namespace retro {

namespace {
struct StreamingParams {
    int sink = 4;     ///< attention-sink tokens at the start
    int window = 64;  ///< most recent tokens (the current token included)
};

class Streaming final : public Method {
  public:
    explicit Streaming(StreamingParams p) : p_(p) {}
    void build(const MethodContext& ctx, const KVView&) override { ctx_ = ctx; }
    void select(const float*, int, const KVView& kv, Selection& out) override {
        auto& ids = out.shared();
        ids.clear();
        const int n = kv.n;
        const int s = std::min(p_.sink, n);
        for (int i = 0; i < s; ++i) ids.push_back(i);
        for (int i = std::max(s, n - p_.window); i < n; ++i) ids.push_back(i);
        out.scan_ops = 0;
        out.h2d_bytes = 0;  // sink and window stay on the GPU; new tokens are produced there
    }
    Footprint footprint() const override {
        return {(double)(p_.sink + p_.window) * ctx_.kv_token_bytes(), 0.0};
    }

  private:
    StreamingParams p_;
    MethodContext ctx_;
};
}  // namespace

MethodInfo streaming_method_info() {
    MethodInfo m;
    m.name = "streaming";
    m.description = "StreamingLLM static pattern: first `sink` tokens + last `window` tokens";
    m.paper = "Xiao et al., Efficient Streaming Language Models with Attention Sinks (ICLR 2024)";
    m.params = {
        {"sink", ParamType::integer, 4, "initial (attention-sink) tokens kept",
         "RetroInfer steady zone (4+64); RetrievalAttention uses 128", 0, 1e9},
        {"window", ParamType::integer, 64, "most recent tokens kept, the current one included",
         "RetroInfer steady zone (4+64); RetrievalAttention uses 512", 1, 1e9},
    };
    m.make = [](const nlohmann::json& j) {
        return std::make_unique<Streaming>(
            StreamingParams{j.at("sink").get<int>(), j.at("window").get<int>()});
    };
    return m;
}

}  // namespace retro
