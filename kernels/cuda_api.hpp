#pragma once
// Host API of the CUDA kernels (docs/cuda.md). Plain C++: no CUDA header is needed to call it, so the
// checks, the GTest wrappers and the gpu-check driver compile with the host compiler.
//
// Conventions: every pointer argument named d_* is device memory (or, where said, pinned host memory
// read zero-copy through unified addressing); KV storage is IEEE fp16 (uint16_t bits), queries and
// outputs float32, accumulation float32. `stream` is a cudaStream_t passed as void* (nullptr = the
// default stream). Launchers never synchronize and never print; they throw retro::Error on a launch
// error or an invalid argument.
//
// GQA layout: query head qh of a batch item belongs to KV head qh / g (g = Hq / Hkv), i.e. the g query
// heads of one KV head are consecutive.
//
// One header per kernel family, in the family's folder (docs/adding-a-kernel.md); this one includes them
// all, so callers include only "cuda_api.hpp".
#include "common/runtime_api.hpp"
#include "decode/decode_api.hpp"
#include "dense/dense_api.hpp"
#include "kmeans/kmeans_api.hpp"
#include "library/library_api.hpp"
#include "magicpig/magicpig_api.hpp"
#include "pq/pq_api.hpp"
#include "quest/quest_api.hpp"
#include "wave/wave_api.hpp"
