#pragma once
// Baselines from the vector-retrieval line of work (issue 6): RetrievalAttention's attention-aware
// graph index (RoarGraph), CTKVR's query-centroid inverted lists, and MagicPIG's LSH sampling with
// importance-sampling correction. See docs/methods/{retrieval_attention,ctkvr,magicpig}.md.
#include "methods/params.hpp"

namespace retro {

MethodInfo retrieval_attention_method_info();
MethodInfo ctkvr_method_info();
MethodInfo magicpig_method_info();

}  // namespace retro
