"""The closed loop's KV cache: transformers' DynamicCache with each layer in a preallocated buffer.

DynamicCache.update concatenates a layer's whole cache with the new token on every decode step: at a
32K prompt that is 24 layers x K and V x 16 MB copied per generated token (Qwen2.5-0.5B), in every run
of every case. Here update() writes the new rows in place (the buffer doubles when full) and keeps
key_cache[l] / value_cache[l] as views of the first n rows, so everything that reads the cache (the
attention, crop, get_seq_length, to_legacy_cache) sees what DynamicCache would hold, bit for bit.
Shapes: a layer's buffer [batch, kv_heads, capacity, head_dim]; the view [batch, kv_heads, n, head_dim]
(each head's [n, head_dim] rows contiguous)."""


def growing_cache_class(transformers):
    class GrowingCache(transformers.DynamicCache):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._kbuf, self._vbuf = [], []

        def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
            if layer_idx == 0:
                self._seen_tokens += key_states.shape[-2]
            while len(self.key_cache) <= layer_idx:
                self.key_cache.append([])
                self.value_cache.append([])
            while len(self._kbuf) <= layer_idx:
                self._kbuf.append(None)
                self._vbuf.append(None)
            cur_k, cur_v = self.key_cache[layer_idx], self.value_cache[layer_idx]
            n = cur_k.shape[-2] if not isinstance(cur_k, list) else 0  # a crop may have shortened the view
            t = key_states.shape[-2]
            kb, vb = self._kbuf[layer_idx], self._vbuf[layer_idx]
            if kb is None or kb.shape[-2] < n + t or kb.shape[:-2] != key_states.shape[:-2]:
                cap = max(n + t, 2 * (kb.shape[-2] if kb is not None else 0), 64)
                shape = tuple(key_states.shape[:-2]) + (cap, key_states.shape[-1])
                nk, nv = key_states.new_empty(shape), value_states.new_empty(shape)
                if n:
                    nk[..., :n, :] = cur_k
                    nv[..., :n, :] = cur_v
                kb, vb = self._kbuf[layer_idx], self._vbuf[layer_idx] = nk, nv
            kb[..., n:n + t, :] = key_states
            vb[..., n:n + t, :] = value_states
            self.key_cache[layer_idx] = kb[..., :n + t, :]
            self.value_cache[layer_idx] = vb[..., :n + t, :]
            return self.key_cache[layer_idx], self.value_cache[layer_idx]

    return GrowingCache
