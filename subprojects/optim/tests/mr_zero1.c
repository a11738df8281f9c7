/* multirank: the distributed optimizer (ZeRO-1) on host tensors over MPI, DP 2 and 4, equals the
 * all-reduce optimizer and the single-rank reference bit for bit (f32 and bf16 params, grads
 * reduced in fp32 or bf16), and grads reduced in bf16 are rounded to it. */
#include "zero1_common.h"

/* The grad norm and zero count over a model-parallel group (here the world, one TP rank each):
 * every rank's own grads count, the shared output layer nowhere, the TP-replicated norm weight on
 * TP rank 0 only. The expected values are summed locally from the same formula. */
static void mp_norm(mt_comm *w) {
    int rank = mt_comm_rank(w), n = mt_comm_size(w);
    mt_optim_buffer_config bc = MT_OPTIM_BUFFER_CONFIG_INIT;
    bc.tp_rank = rank;
    mt_optim_buffer *b;
    MT_CHECK(mt_optim_buffer_create(&bc, &b));
    for (int i = 0; i < ZR_NP; i++) {
        int flags = i == 5 ? MT_OPTIM_PARAM_SHARED : i == 3 ? MT_OPTIM_PARAM_TP_REPLICATED : 0;
        MT_CHECK(mt_optim_buffer_add(b, zr_names[i], zr_ndims[i], zr_shapes[i], flags, NULL));
    }
    size_t bytes, sbytes;
    MT_CHECK(mt_optim_buffer_finalize(b, &bytes));
    mt_optim_config oc = MT_OPTIM_CONFIG_INIT;
    oc.log_num_zeros_in_grad = 1;
    oc.mp = w;
    MT_CHECK(mt_optim_state_bytes(&oc, b, &sbytes));
    mt_arena *ar;
    MT_CHECK(mt_arena_create(MT_DEVICE_CPU, bytes + sbytes, &ar));
    MT_CHECK(mt_optim_buffer_bind(b, ar));
    mt_optim *o;
    MT_CHECK(mt_optim_create(&oc, b, ar, &o));
    zr_rig r = { b, o, ar };
    zr_set_grads(&r, rank, n, 0, -1);
    double sumsq = 0, zeros = 0;
    for (int q = 0; q < n; q++)
        for (int i = 0; i < ZR_NP; i++) {
            if (i == 5 || (i == 3 && q != 0)) continue;
            int64_t numel = zr_shapes[i][0] * (zr_ndims[i] == 2 ? zr_shapes[i][1] : 1);
            for (int64_t j = 0; j < numel; j++) {
                double g = zr_grad(q, 0, i, j);
                sumsq += g * g;
                zeros += g == 0.0;
            }
        }
    mt_optim_step_info info;
    MT_CHECK(mt_optim_step(o, 1e-3, 0.0, NULL, &info, NULL));
    MT_EXPECT(info.grad_norm == sqrt(sumsq) && (double)info.num_zeros == zeros,
              "rank %d: model-parallel norm %.17g want %.17g, zeros %lld want %.0f", rank,
              info.grad_norm, sqrt(sumsq), (long long)info.num_zeros, zeros);
    zr_destroy(&r);
}

int main(void) {
    if (!mt_comm_have_mpi()) mt_test_skip("built without MPI");
    mt_test_require_ranks(2);
    mt_comm_config cfg = MT_COMM_CONFIG_INIT;
    cfg.backends = MT_COMM_HOST;
    cfg.timeout_s = 60;
    mt_comm *w;
    MT_CHECK(mt_comm_world_create(&cfg, &w));
    zr_run(w, MT_DEVICE_CPU, MT_F32);
    zr_run(w, MT_DEVICE_CPU, MT_BF16);
    zr_bf16_rounding(w, MT_DEVICE_CPU);
    mp_norm(w);
    zr_expert(w, MT_DEVICE_CPU, MT_F32);
    zr_expert(w, MT_DEVICE_CPU, MT_BF16);
    mt_comm_destroy(w);
    return mt_test_result();
}
