#pragma once
// The methods shipped with the harness: one MethodInfo factory per method (name, parameters as data,
// make). Each is defined in the method's own file and listed once, in display order, by
// method_registry() in lib/methods/registry.cpp. A new method adds its declaration here, its
// definition in its own lib/methods/<name>.cpp and one line in the registry (docs/adding-a-method.md).
#include "methods/params.hpp"

namespace retro {

// Reference points (docs/methods/{full,oracle_topk,streaming}.md).
MethodInfo full_method_info();         ///< full.cpp: every visible token, exactly
MethodInfo oracle_topk_method_info();  ///< oracle_topk.cpp: the exact top-k by q.k (upper bound)
MethodInfo streaming_method_info();    ///< streaming.cpp: StreamingLLM's sinks + recent window

// RetroInfer's wave index (docs/methods/wave.md).
MethodInfo wave_method_info();  ///< wave.cpp

// Graph, inverted-list and hashing retrieval (docs/methods/{retrieval_attention,ctkvr,magicpig}.md).
MethodInfo retrieval_attention_method_info();  ///< retrieval_attention.cpp: RoarGraph over the keys
MethodInfo ctkvr_method_info();                ///< ctkvr.cpp: query-centroid inverted lists
MethodInfo magicpig_method_info();             ///< magicpig.cpp: SimHash sampling, importance weights

// FAISS indexes over the keys outside a static pattern (docs/methods/faiss*.md).
MethodInfo faiss_flat_method_info();  ///< faiss_methods.cpp
MethodInfo faiss_ivf_method_info();   ///< faiss_methods.cpp
MethodInfo faiss_hnsw_method_info();  ///< faiss_methods.cpp

// Quantized and page-bound selection (docs/methods/{pq,quest}.md).
MethodInfo pq_method_info();     ///< pq.cpp: PQCache's product-quantized key scores
MethodInfo quest_method_info();  ///< quest.cpp: Quest's per-page min/max bounds

}  // namespace retro
