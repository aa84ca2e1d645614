// The named presets of SynthParams: a model shape, and for smollm2 the calibration against a real trace.
#include "core/error.hpp"
#include "trace/synth.hpp"

namespace retro {

SynthParams SynthParams::preset(const std::string& name) {
    SynthParams p;
    p.preset_name = name;
    if (name == "llama3-8b") {
        p.num_q_heads = 32;
        p.num_kv_heads = 8;
        p.head_dim = 128;
        p.rope_theta = 500000.0;
    } else if (name == "smollm2") {
        p.num_q_heads = 9;
        p.num_kv_heads = 3;
        p.head_dim = 64;
        p.rope_theta = 100000.0;
        // Calibrated against a real SmolLM2-135M-Instruct trace (8K Moby-Dick NIAH prompt, 30 layers;
        // docs/traces.md): sinks won by queries pointing away from a large low-band key mean (sink keys
        // lack it), tokens carrying more or less of that mean (heavy hitters), queries that are only ~2.5x
        // out of distribution and turn more between steps, no sinks in the lower 40% of the layers, a
        // diffuse first layer, more local mass with a long recency tail (mass at 64-512 tokens back).
        p.sink_mode = "mean";
        p.key_mean = 1.5;
        p.key_mean_low_gain = 2.2;
        p.key_mean_jitter = 0.12;
        p.query_offset = 0.0;
        p.key_noise = 0.6;
        p.query_noise_gain = 1.3;
        p.focus_ar = 0.97;
        p.local_mass_min = 0.15;
        p.local_mass_max = 0.9;
        p.recency_span_factor = 64.0;
        p.sink_mass_min = 0.2;
        p.sink_mass_max = 0.95;
        p.sink_onset = 0.4;
        p.sharp_min = 0.8;
        p.sharp_max = 3.0;
        p.diffuse_layers = 1;
        p.peaked_fraction = 0.8;
    } else {
        throw ParamError("unknown synth preset '" + name + "' (expected llama3-8b or smollm2)");
    }
    return p;
}

std::vector<std::string> SynthParams::preset_names() { return {"llama3-8b", "smollm2"}; }

}  // namespace retro
