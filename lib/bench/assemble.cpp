#include "bench/assemble.hpp"

#include <algorithm>

#include "bench/cuda_runner.hpp"
#include "bench/measured_hardware.hpp"
#include "core/fs.hpp"
#include "core/hash.hpp"
#include "core/host.hpp"
#include "gpu/gpu_methods.hpp"
#include "methods/params.hpp"
#include "system/head_system.hpp"
#include "trace/trace.hpp"

namespace retro {

using json = nlohmann::json;

namespace {
double mean_of_steps(const std::vector<int>& s) {
    double sum = 0;
    for (int x : s) sum += x;
    return s.empty() ? 0.0 : sum / (double)s.size();
}
}  // namespace

std::vector<MetricInfo> sweep_metric_registry(const RunConfig& cfg) {
    auto reg = metric_registry(cfg.recall_k);
    if (cfg.backend == "cuda") {
        const auto more = gpu_metric_registry();
        reg.insert(reg.end(), more.begin(), more.end());
    }
    return reg;
}

std::vector<std::vector<std::string>> sweep_run_ids(const RunConfig& cfg, const std::vector<PreparedTrace>& traces) {
    std::vector<std::vector<std::string>> ids(traces.size());
    for (size_t ti = 0; ti < traces.size(); ++ti)
        for (const auto& r : cfg.runs) ids[ti].push_back(run_id_for(traces[ti], r, cfg));
    return ids;
}

std::string config_hash(const RunConfig& cfg) {
    json j = cfg.resolved();
    j.erase("threads");  // how many cores a machine used does not change a result
    return short_hash(j.dump());
}

json sweep_manifest(const SweepSummaryInput& in) {
    const RunConfig& cfg = in.cfg;
    json m = json::object();
    m["name"] = cfg.name;
    m["config_file"] = in.config_path;
    m["config"] = cfg.resolved();
    m["config_source"] = cfg.source;
    m["hardware_profile"] = cfg.hardware;
    if (cfg.hardware == kMeasuredHardware) m["hardware"] = in.hw.to_json();  // the measured profile, sources included
    m["backend"] = cfg.backend;
    if (cfg.backend == "cuda") m["device"] = in.device;
    m["metrics"] = json::array();
    for (const auto& x : in.reg)
        m["metrics"].push_back({{"name", x.name}, {"description", x.description}, {"unit", x.unit},
                                {"direction", direction_name(x.direction)}, {"level", level_name(x.level)}});
    m["traces"] = json::array();
    for (size_t ti = 0; ti < in.traces.size(); ++ti) {
        const auto& t = in.traces[ti];
        json runs = json::array();
        for (size_t r = 0; r < cfg.runs.size(); ++r)
            runs.push_back({{"run_id", in.ids[ti][r]}, {"label", cfg.runs[r].label()}});
        m["traces"].push_back({{"path", t.spec.path}, {"model", t.info.model}, {"source", t.info.source},
                               {"prompt_len", t.info.prompt_len}, {"decode_steps", t.info.num_decode_steps},
                               {"dtype", dtype_name(t.info.dtype)}, {"layers", t.layers},
                               {"kv_heads", t.kv_heads}, {"steps", t.steps}, {"runs", runs}});
        if (!t.fingerprint.empty()) m["traces"].back()["fingerprint"] = t.fingerprint;  // trace/fingerprint.hpp
    }
    return m;
}

std::vector<json> write_run_summaries(const SweepSummaryInput& in) {
    const RunConfig& cfg = in.cfg;
    const ResultsDir& rd = in.rd;
    std::vector<json> records;
    std::string csv = per_head_csv_header(in.reg);
    int index = 0;
    for (size_t ti = 0; ti < in.traces.size(); ++ti) {
        const auto& t = in.traces[ti];
        const auto& ids = in.ids[ti];
        for (size_t r = 0; r < cfg.runs.size(); ++r, ++index) {
            std::vector<HeadPart> parts;
            bool complete = true;
            for (int l : t.layers)
                for (int h : t.kv_heads) {
                    if (!rd.has_part(ids[r], l, h)) complete = false;
                    else if (complete) parts.push_back(rd.read_part(ids[r], l, h));
                }
            if (!complete) continue;
            const MethodRun& mr = cfg.runs[r];
            json rec = {{"index", index},
                        {"run_id", ids[r]},
                        {"config", cfg.name},
                        {"trace", t.spec.path},
                        {"trace_model", t.info.model},
                        {"prompt_len", t.info.prompt_len},
                        {"method", mr.method},
                        {"params", mr.params},
                        {"label", mr.label()},
                        {"hardware", cfg.hardware},
                        {"kv_dtype", cfg.kv_dtype == "trace" ? std::string(dtype_name(t.info.dtype)) : cfg.kv_dtype},
                        {"layers", t.layers},
                        {"kv_heads", t.kv_heads},
                        {"steps", t.steps.size()},
                        {"samples_per_metric", parts.size() * (size_t)t.info.group_size() * t.steps.size()},
                        {"revision", in.revision}};
            const json agg = aggregate_parts(parts, in.reg);
            if (!mr.system.is_null()) rec["system"] = mr.system;  // the run's system-model point
            if (const json& src = find_method(mr.method).source; !src.is_null()) rec["method_source"] = src;
            if (mr.batch > 0) {
                rec["backend"] = "cuda";
                rec["batch"] = mr.batch;
            }
            rec["metrics"] = agg["metrics"];
            rec["per_layer"] = agg["per_layer"];
            if (mr.batch > 0) {
                rec["cuda"] = cuda_record_summary(rec["metrics"], mr.batch, in.device);
                if (!mr.kernel.empty()) rec["cuda"]["kernel"] = mr.kernel;  // full: flashinfer | cudnn | own
                if (cfg.cuda.sequences > 1) rec["cuda"]["sequences"] = std::min(cfg.cuda.sequences, mr.batch);
                if (const GpuMethodInfo* t = find_gpu_method(mr.method); t && t->kv_axis) {
                    rec["cuda"]["kv"] = mr.kv.empty() ? "host" : mr.kv;  // wave, pq: host | gpu
                    // how the execution buffers were assembled: on the device (the cache's table on the GPU
                    // with the KV in host memory), or through the host's lookups (cuda.device_gather false)
                    if (t->lookup_axis) rec["cuda"]["lookups"] = cfg.cuda.device_gather ? "device" : "host";
                    if (cfg.cuda.async_update) rec["cuda"]["update"] = "async";  // applied at the next step
                }
            }
            if (!cfg.throughput.is_null())  // decode throughput vs batch (lib/system/cost_model.hpp)
                rec["throughput"] = record_throughput(
                    rec["metrics"], t.info.prompt_len + 1.0 + mean_of_steps(t.steps), t.info.head_dim,
                    t.info.group_size(),
                    (double)(cfg.kv_dtype == "trace" ? dtype_bytes(t.info.dtype) : dtype_bytes(parse_dtype(cfg.kv_dtype))),
                    mr.method, mr.params, mr.system, cfg.throughput, in.hw);
            // A record is immutable once written; rewrite only if it covers different heads.
            bool write = true;
            if (file_exists(rd.run_path(ids[r]))) {
                try {
                    const json old = json::parse(read_file(rd.run_path(ids[r])));
                    write = old.value("layers", json()) != rec["layers"] ||
                            old.value("kv_heads", json()) != rec["kv_heads"] || old.value("index", -1) != index;
                    if (!write) rec = old;
                } catch (const json::exception&) {
                }
            }
            if (write) {
                rec["finished_at"] = utc_now_iso();
                rd.write_run(ids[r], rec);
            }
            csv += per_head_csv_rows(rec, parts, in.reg);
            records.push_back(rec);
        }
    }
    std::string jsonl;
    for (const auto& rec : records) jsonl += rec.dump() + "\n";
    write_file_atomic(rd.path() + "/runs.jsonl", jsonl);
    write_file_atomic(rd.path() + "/per_head.csv", csv);
    return records;
}

}  // namespace retro
