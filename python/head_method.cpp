#include "head_method.hpp"

#include <cmath>

#include "bench/head_run.hpp"
#include "core/error.hpp"
#include "methods/params.hpp"

namespace retro {

HeadMethod::HeadMethod(const std::string& method, const nlohmann::json& params, int head_dim, int group,
                       const HeadMethodOptions& opt)
    : method_(method) {
    const MethodInfo& info = find_method(method);
    params_ = resolve_params(info, params);
    if (head_dim <= 0) throw ParamError("HeadMethod: head_dim must be positive, got " + std::to_string(head_dim));
    if (group <= 0) throw ParamError("HeadMethod: group must be positive, got " + std::to_string(group));
    if (opt.layer < 0 || opt.kv_head < 0)
        throw ParamError("HeadMethod: layer and kv_head must be >= 0, got " + std::to_string(opt.layer) + ", " +
                         std::to_string(opt.kv_head));
    slice_.layer = opt.layer;
    slice_.kv_head = opt.kv_head;
    slice_.head_dim = head_dim;
    slice_.group = group;
    slice_.first_q_head = opt.kv_head * group;
    // The context head_context gives the runner's methods; prompt_len is set in build.
    ctx_ = head_context(slice_, opt.storage);
    ctx_.seed = opt.seed_given ? opt.seed : method_seed(method, params_, opt.layer, opt.kv_head);
    m_ = info.make(params_);
}

void HeadMethod::require_built(const char* what) const {
    if (!built_) throw ParamError("HeadMethod('" + method_ + "')." + what + ": call build() first");
}

void HeadMethod::build(const float* keys, const float* values, int n, const float* prefill_queries, int n_prefill) {
    if (built_) throw ParamError("HeadMethod('" + method_ + "').build: already built (make a new HeadMethod)");
    if (n <= 0) throw ParamError("HeadMethod('" + method_ + "').build: the prompt needs at least one token");
    const int d = ctx_.head_dim;
    slice_.prompt_len = n;
    slice_.num_steps = 0;
    slice_.keys.assign(keys, keys + (size_t)n * d);
    slice_.values.assign(values, values + (size_t)n * d);
    slice_.num_prefill = n_prefill;
    slice_.prefill_first_position = n - n_prefill;
    if (n_prefill > 0)
        slice_.prefill_queries.assign(prefill_queries, prefill_queries + (size_t)ctx_.group * n_prefill * d);
    ctx_.prompt_len = n;
    ctx_.slice = &slice_;
    m_->build(ctx_, kv());
    built_ = true;
}

std::unique_ptr<HeadMethod> HeadMethod::clone_for(const nlohmann::json& params) const {
    require_built("clone");
    const std::string where = "HeadMethod('" + method_ + "').clone: ";
    if (visible() != prompt_len())
        throw ParamError(where + std::to_string(visible() - prompt_len()) +
                         " decode token(s) appended; a build is shared before any append");
    HeadMethodOptions opt;
    opt.layer = ctx_.layer;
    opt.kv_head = ctx_.kv_head;
    opt.seed_given = true;
    opt.seed = ctx_.seed;
    opt.storage = ctx_.storage;
    auto c = std::make_unique<HeadMethod>(method_, params, ctx_.head_dim, ctx_.group, opt);
    const MethodInfo& info = find_method(method_);
    std::string differ;
    for (const auto& s : info.params)
        if (!s.search && c->params_.at(s.name) != params_.at(s.name))
            differ += (differ.empty() ? "" : ", ") + s.name + " " + params_.at(s.name).dump() + " -> " +
                      c->params_.at(s.name).dump();
    if (!differ.empty())
        throw ParamError(where + "build parameter(s) differ (" + differ +
                         "): only search-time ones may (list-methods marks them); build a new HeadMethod");
    auto m = m_->clone_built(*c->m_);
    if (!m) return nullptr;
    c->m_ = std::move(m);
    c->slice_ = slice_;
    c->ctx_.prompt_len = ctx_.prompt_len;
    c->ctx_.slice = &c->slice_;
    c->built_ = true;
    return c;
}

void HeadMethod::append(const float* keys, const float* values, int m) {
    require_built("append");
    const int d = ctx_.head_dim;
    slice_.keys.insert(slice_.keys.end(), keys, keys + (size_t)m * d);
    slice_.values.insert(slice_.values.end(), values, values + (size_t)m * d);
    for (int i = 0; i < m; ++i) {
        const int pos = visible();
        ++slice_.num_steps;
        m_->append(kv(), pos);
    }
}

void HeadMethod::attend(const float* queries, int step, AttendResult& r) {
    require_built("attend");
    const int expected = visible() - prompt_len() - 1;
    if (step != expected)
        throw ParamError("HeadMethod('" + method_ + "').attend: step " + std::to_string(step) + " needs " +
                         std::to_string(prompt_len() + step + 1) + " visible tokens (prompt " +
                         std::to_string(prompt_len()) + " + decode tokens 0.." + std::to_string(step) +
                         " appended); " + std::to_string(visible()) + " are visible, so the step is " +
                         (expected < 0 ? std::string("none yet (append the step's token first)")
                                       : std::to_string(expected)));
    const int d = ctx_.head_dim, g = ctx_.group;
    const KVView view = kv();
    r.sel.clear();
    m_->select(queries, step, view, r.sel);
    check_selection(r.sel, method_, g, view.n, step, check_);
    r.n_visible = view.n;
    r.out.resize((size_t)g * d);
    r.lse.resize((size_t)g);
    selection_outputs(queries, view, r.sel, g, ctx_.scale, r.out.data(), r.lse.data(), group_scratch_);
    r.est_clusters = (int)r.sel.estimated.size();
    r.est_tokens = 0;
    for (const auto& c : r.sel.estimated) r.est_tokens += c.size;
    r.sel.estimated.clear();  // its pointers belong to the method and go stale at its next call
    r.fetch_tokens = 0;
    if (!r.sel.fetch_units.empty())
        for (int32_t t : r.sel.fetch_unit_tokens) r.fetch_tokens += t;
    else
        r.fetch_tokens = (double)r.sel.fetch_tokens.size();
}

Footprint HeadMethod::footprint() const { return m_->footprint(); }

}  // namespace retro
