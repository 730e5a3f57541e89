// cub/device/device_radix_sort.cuh of the CUDA emulator (tests/cuda/emu): SortPairs as a
// stable sort of the pairs by the key bits [begin_bit, end_bit), which is what an LSD radix
// sort computes; the temporary storage is asked for and handed back as CUB's protocol says.
#ifndef FSDPGEN_CUDA_EMU_CUB_RADIX_SORT_CUH
#define FSDPGEN_CUDA_EMU_CUB_RADIX_SORT_CUH

#include <algorithm>
#include <type_traits>
#include <vector>

#include "../../cuda_runtime.h"

namespace cub {
struct DeviceRadixSort {
    template <class K, class V>
    static cudaError_t SortPairs(void* temp, size_t& temp_bytes, const K* keys_in, K* keys_out,
                                 const V* values_in, V* values_out, int n, int begin_bit = 0,
                                 int end_bit = (int)(sizeof(K) * 8), cudaStream_t stream = 0) {
        if (temp == NULL) {
            temp_bytes = 256;
            return cudaSuccess;
        }
        emu_note_kernel(stream, "cub_radix_sort");
        return emu_enqueue(stream, [=] {
            const unsigned long long mask =
                end_bit - begin_bit >= 64 ? ~0ull : ((1ull << (end_bit - begin_bit)) - 1);
            std::vector<int> order((size_t)n);
            for (int i = 0; i < n; i++) order[(size_t)i] = i;
            // signed keys order as CUB orders them: the sign bit flipped
            const unsigned long long flip =
                std::is_signed<K>::value ? 1ull << (sizeof(K) * 8 - 1) : 0ull;
            auto key = [&](int i) {
                typedef typename std::make_unsigned<K>::type U;
                return (((unsigned long long)(U)keys_in[i] ^ flip) >> begin_bit) & mask;
            };
            std::stable_sort(order.begin(), order.end(),
                             [&](int a, int b) { return key(a) < key(b); });
            std::vector<K> k((size_t)n);
            std::vector<V> v((size_t)n);
            for (int i = 0; i < n; i++) {
                k[(size_t)i] = keys_in[order[(size_t)i]];
                v[(size_t)i] = values_in[order[(size_t)i]];
            }
            std::copy(k.begin(), k.end(), keys_out);
            std::copy(v.begin(), v.end(), values_out);
        });
    }
};
}  // namespace cub

#endif
