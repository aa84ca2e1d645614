#pragma once
// Host API of PQCache's kernels (kernels/cuda_api.hpp, docs/cuda.md "PQCache on the GPU"): pq/pq.cu; CPU
// emulation pq/pq_emulation.cpp, checks pq/pq_checks.cpp, microbenchmarks pq/pq_bench.cpp. The attention
// over the chosen tokens is decode_attention_pages with page = 1 (decode_api.hpp).
// The CPU twin is the method `pq` (lib/methods/pq.cpp, JSON-free core lib/methods/pq_head.hpp): the same
// lookup tables (q sub-vector . centroid, dimension by dimension), the same asymmetric-distance sums
// (sub-space by sub-space from 0), the same group ranking (max or sum over the query heads in head
// order, or per query head) and the same top-k (ties to the lower position, best first), so on the same
// codebooks and codes the GPU retrieves exactly the tokens the CPU retrieves, in the same order.
#include <cstddef>
#include <cstdint>

namespace retro::cuda {

/// How a KV head's query heads rank its coded tokens: the method's gqa "max" (max of the heads' scores),
/// "mean" (their sum: the same order as the mean) or "per_head" (a list per query head).
enum class PqRank { max, sum, per_head };

struct PqShape {
    int seqs = 1;      ///< sequences: (replica, KV head) pairs, B * Hkv
    int group = 1;     ///< query heads per KV head (1-8)
    int d = 128;       ///< head dim: 64, 128 or 256
    int m = 2;         ///< sub-spaces (divides d)
    int nbits = 6;     ///< bits per code: 2^nbits centroids per sub-space; m * 2^nbits <= 12288 (a LUT in shared memory)
    int capacity = 0;  ///< coded-token rows per sequence in the codes and the scores
    PqRank rank = PqRank::max;
    int ksub() const { return 1 << nbits; }
    int dsub() const { return m > 0 ? d / m : 0; }
    int per() const { return rank == PqRank::per_head ? group : 1; }  ///< lists per sequence
    int lists() const { return seqs * per(); }
};

/// The lookup tables and the asymmetric-distance scores of the first `coded` (0..capacity) coded tokens of
/// every sequence for every query head: lut[qh][j][c] = sum over e < dsub, in order, of q_j[e] * C_j[c][e]
/// (one rounding per product and per sum, from 0; ProductQuantizer::inner_product_table), score[qh][i] =
/// sum over j < m, in order from 0, of lut[qh][j][code_j(i)] (pq_adc_scores).
/// d_q: [seqs * group, d] f32 (= [B, Hkv*g, d]); d_codebooks: [seqs, m, ksub, dsub] f32; d_codes: [seqs,
/// capacity, m] uint16; d_lut: [seqs * group, m, ksub] f32, out; d_scores: [seqs * group, capacity] f32,
/// out (the first `coded` of each row written).
void pq_scores(const PqShape& s, const float* d_q, const float* d_codebooks, const uint16_t* d_codes, int coded,
               float* d_lut, float* d_scores, void* stream = nullptr);

/// Where the attended tokens of a step are: PQCache's layout at n visible tokens.
struct PqLists {
    int n = 0;          ///< visible tokens
    int sink_end = 0;   ///< initial tokens [0, sink_end)
    int coded_end = 0;  ///< coded tokens [sink_end, coded_end): codes rows [0, coded_end - sink_end)
    int k = 0;          ///< tokens retrieved per list (0..coded)
    int kv_rows = 0;    ///< rows per sequence of the KV pool (a list's entries: seq * kv_rows + token)
    int width = 0;      ///< the table's row stride (>= sink_end + n - coded_end + k)
    int coded() const { return coded_end - sink_end; }
};

/// Bytes of pq_select's scratch: two lists() * capacity 64-bit ranking keys, segment offsets, the sort's.
size_t pq_select_scratch_bytes(const PqShape& s);

/// PQCache's selection of every list from pq_scores' scores: the ranking score of each coded token (the
/// list's query head's, or the group's max or sum, in head order) as a 64-bit key (score, then the lower
/// position), all keys sorted descending (a segmented radix sort), then the list of attended tokens in the
/// CPU method's order: [0, sink_end), [coded_end, n), then the top k coded tokens best first.
/// d_scores: pq_scores'; d_table: [lists, width] int32, out: entries seq * kv_rows + token (the rows of the
/// KV pool [seqs * kv_rows, d] that decode_attention_pages reads with page = 1); d_lens: [lists] int32,
/// out: sink_end + n - coded_end + k; d_scratch: pq_select_scratch_bytes(s) bytes.
void pq_select(const PqShape& s, const float* d_scores, const PqLists& l, int32_t* d_table, int32_t* d_lens,
               void* d_scratch, void* stream = nullptr);

/// Where the rows of pq_select's lists are read from when the KV is offloaded (PQCache's block-level GPU
/// cache, §3.4 of its paper; kernels/run/pq_layer.cpp): a list's static tokens ([0, sink_end) and
/// [coded_end, n)) from the device's static store, a coded token from the GPU block cache's pool when its
/// unit (unit_tokens consecutive positions) is resident, else from the pinned host store through UVA
/// (zero-copy over PCIe: only the chosen tokens cross, as PQCache's SyncFetchKV moves them).
struct PqRowSources {
    int seqs = 1;         ///< sequences: (replica, KV head) pairs
    int per = 1;          ///< lists per sequence (the list's sequence is list / per)
    int d = 128;          ///< head dim, a multiple of 8
    int kv_rows = 0;      ///< the table's row stride per sequence: an entry is seq * kv_rows + token
    int sink_end = 0;     ///< static tokens [0, sink_end) ...
    int coded_end = 0;    ///< ... and [coded_end, n)
    int static_from = 0;  ///< the static store holds tokens [0, sink_end) then [static_from, kv_rows) (<= coded_end)
    /// [seqs, static_rows, d] fp16 device memory: token t's row is t (t < sink_end) or sink_end + t - static_from
    const uint16_t* static_k = nullptr;
    const uint16_t* static_v = nullptr;
    int static_rows = 0;
    /// [seqs, kv_rows, d] fp16: every token's K and V, pinned host memory (or device memory)
    const uint16_t* store_k = nullptr;
    const uint16_t* store_v = nullptr;
    int unit_tokens = 128;  ///< tokens per cache unit (system.token_block)
    int block_tokens = 16;  ///< rows per pool block (divides unit_tokens)
    /// [seqs, units * unit_tokens / block_tokens] int32 (units = ceil(kv_rows / unit_tokens)): the pool block
    /// holding rows [j * block_tokens, (j + 1) * block_tokens) of unit u at entry u * unit_tokens / block_tokens
    /// + j, -1 when the unit is not resident; null: no cache (every coded token from the store)
    const int32_t* blocks = nullptr;
    const uint16_t* pool_k = nullptr;  ///< [seqs, pool_rows, d] fp16 device memory: block b = rows [b*bt, (b+1)*bt)
    const uint16_t* pool_v = nullptr;
    int64_t pool_rows = 0;
    int units() const { return unit_tokens > 0 ? (kv_rows + unit_tokens - 1) / unit_tokens : 0; }
    int unit_blocks() const { return block_tokens > 0 ? unit_tokens / block_tokens : 0; }
};

/// "" when the sources can be read as pq_gather_rows reads them, else what is wrong (both the kernel and
/// its emulation refuse such a call with this text).
inline const char* pq_row_sources_error(const PqRowSources& s, int lists, int width) {
    if (s.seqs < 1 || s.per < 1 || lists != s.seqs * s.per || lists > 65535 || width < 0) return "lists = seqs * per, 1..65535";
    if (s.d % 8 != 0 || s.d <= 0) return "d a positive multiple of 8";
    if (s.sink_end < 0 || s.sink_end > s.static_from || s.static_from > s.coded_end || s.coded_end > s.kv_rows)
        return "0 <= sink_end <= static_from <= coded_end <= kv_rows";
    if (s.static_rows < s.sink_end + s.kv_rows - s.static_from || !s.static_k || !s.static_v || !s.store_k || !s.store_v)
        return "a static store of sink_end + kv_rows - static_from rows and a store";
    if (s.blocks && (s.block_tokens < 1 || s.unit_tokens < s.block_tokens || s.unit_tokens % s.block_tokens != 0 ||
                     !s.pool_k || !s.pool_v || s.pool_rows < s.block_tokens))
        return "a cache of whole blocks per unit (unit_tokens a multiple of block_tokens) with its pool";
    return "";
}

/// The execution buffer of every list: row i of list l = the K and V of its table entry i (i < lens[l]),
/// from where PqRowSources says. d_table: [lists, width] int32 (pq_select's); d_lens: [lists];
/// d_xk, d_xv: [lists, width, d] fp16 out (rows past a list's length not written). ParamError on a bad
/// shape. CPU reference: the loop in pq/pq_checks.cpp (PqGatherRows).
void pq_gather_rows(const PqRowSources& src, const int32_t* d_table, const int32_t* d_lens, int lists, int width,
                    uint16_t* d_xk, uint16_t* d_xv, void* stream = nullptr);

}  // namespace retro::cuda
