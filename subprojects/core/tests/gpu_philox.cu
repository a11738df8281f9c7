/* gpu: the CUDA path of Philox gives the same uniforms (bit-exact) and normals as the CPU, and
 * device memory, copies and arenas work on a real GPU. */
#include <mt/core_cuda.h>
#include <mt/testkit.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static __global__ void draw_kernel(float *u, float *z, uint32_t *w, uint64_t seed, uint64_t stream,
                                   int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    u[i] = mt_philox_uniform(seed, stream, (uint64_t)i);
    z[i] = mt_philox_normal(seed, stream, (uint64_t)i);
    w[i] = mt_philox_u32(seed, stream, (uint64_t)i);
}

int main(void) {
    mt_test_require_gpus(1);
    const int n = 1 << 20;
    const uint64_t seed = 0xdeadbeefcafeull, stream = 12345;
    mt_arena *arena;
    MT_CHECK(mt_arena_create(mt_device_cuda(0), 3 * (size_t)n * 4 + 3 * MT_ARENA_ALIGN, &arena));
    float *du, *dz;
    uint32_t *dw;
    MT_CHECK(mt_arena_alloc(arena, (size_t)n * 4, (void **)&du));
    MT_CHECK(mt_arena_alloc(arena, (size_t)n * 4, (void **)&dz));
    MT_CHECK(mt_arena_alloc(arena, (size_t)n * 4, (void **)&dw));
    draw_kernel<<<(n + 255) / 256, 256>>>(du, dz, dw, seed, stream, n);
    MT_CHECK(mt_stream_sync(NULL));
    float *u = (float *)malloc((size_t)n * 4), *z = (float *)malloc((size_t)n * 4);
    uint32_t *w = (uint32_t *)malloc((size_t)n * 4);
    MT_CHECK(mt_memcpy(u, MT_DEVICE_CPU, du, mt_device_cuda(0), (size_t)n * 4, NULL));
    MT_CHECK(mt_memcpy(z, MT_DEVICE_CPU, dz, mt_device_cuda(0), (size_t)n * 4, NULL));
    MT_CHECK(mt_memcpy(w, MT_DEVICE_CPU, dw, mt_device_cuda(0), (size_t)n * 4, NULL));
    float *ru = (float *)malloc((size_t)n * 4), *rz = (float *)malloc((size_t)n * 4);
    size_t wbad = 0;
    for (int i = 0; i < n; i++) {
        ru[i] = mt_philox_uniform(seed, stream, (uint64_t)i);
        rz[i] = mt_philox_normal(seed, stream, (uint64_t)i);
        wbad += w[i] != mt_philox_u32(seed, stream, (uint64_t)i);
    }
    MT_EXPECT(wbad == 0, "%zu raw words differ", wbad);
    mt_test_close_f32("uniform gpu vs cpu", u, ru, (size_t)n, 0, 0);
    mt_test_close_f32("normal gpu vs cpu", z, rz, (size_t)n, 1e-6, 1e-6);
    char name[256];
    MT_CHECK(mt_device_name(0, name, sizeof name));
    fprintf(stderr, "device 0: %s\n", name);
    mt_arena_destroy(arena);
    free(u), free(z), free(w), free(ru), free(rz);
    return mt_test_result();
}
