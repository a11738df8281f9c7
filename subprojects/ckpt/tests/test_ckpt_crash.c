/* slow: a child process saves iteration after iteration (sync and async, fsync on) and is
 * SIGKILLed at a random moment, many times over. After every kill, the iteration latest names
 * must open, verify every checksum and hold exactly that iteration's values. */
#include "ckpt_test.h"

#include <signal.h>
#include <sys/wait.h>
#include <time.h>

enum {
    R = 512,
    C = 1024
}; /* 2 MiB per tensor, two tensors */

static void child(const char *dir, int64_t first, int async) {
    static float a[R * C], b[R * C];
    int64_t off[2] = { 0, 0 }, shape[2] = { R, C };
    mt_tensor ta = mt_tensor_2d(a, MT_F32, R, C, MT_DEVICE_CPU);
    mt_tensor tb = mt_tensor_2d(b, MT_F32, R, C, MT_DEVICE_CPU);
    mt_ckpt_item items[] = { { "a", &ta, NULL, NULL, 0 }, { "b", &tb, NULL, NULL, 0 } };
    mt_ckpt_writer_config cfg = MT_CKPT_WRITER_CONFIG_INIT;
    cfg.dir = dir;
    cfg.async = async;
    cfg.keep = 2;
    mt_ckpt_writer *w;
    MT_CHECK(mt_ckpt_writer_create(&cfg, &w));
    for (int64_t it = first;; it++) {
        ct_fill2(a, C, off, shape, 0, it);
        ct_fill2(b, C, off, shape, 1, it);
        char args[64];
        snprintf(args, sizeof args, "{\"iteration\": %lld}", (long long)it);
        mt_ckpt_state st = { args, NULL, NULL };
        MT_CHECK(mt_ckpt_save(w, it, items, 2, &st));
    }
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 150;
    char dir[64];
    ct_tmpdir(dir);
    srand((unsigned)time(NULL));
    static float got[R * C];
    int64_t last = 0, loaded = 0;
    for (int k = 0; k < rounds; k++) {
        pid_t pid = fork();
        if (pid == 0) {
            child(dir, last + 1, k % 2);
            _exit(0);
        }
        struct timespec ts = { 0, (long)(rand() % 150) * 1000000L + rand() % 1000000 };
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        int64_t it;
        if (mt_ckpt_latest(dir, &it) != MT_OK) {
            MT_EXPECT(last == 0, "round %d: latest vanished after iteration %lld", k,
                      (long long)last);
            continue;
        }
        MT_EXPECT(it >= last, "round %d: latest went back from %lld to %lld", k, (long long)last,
                  (long long)it);
        mt_ckpt *c;
        mt_status st = mt_ckpt_open(dir, MT_CKPT_ITER_LATEST, MT_CKPT_OPEN_VERIFY, &c);
        if (!MT_EXPECT(st == MT_OK, "round %d: latest %lld does not load: %s", k, (long long)it,
                       mt_last_error()))
            break;
        int64_t off[2] = { 0, 0 }, shape[2] = { R, C };
        mt_tensor t = mt_tensor_2d(got, MT_F32, R, C, MT_DEVICE_CPU);
        MT_CHECK(mt_ckpt_read(c, "a", &t, NULL));
        int ok = ct_check2("a after kill", got, C, off, shape, 0, it);
        MT_CHECK(mt_ckpt_read(c, "b", &t, NULL));
        ok &= ct_check2("b after kill", got, C, off, shape, 1, it);
        mt_ckpt_close(c);
        if (!ok) break;
        loaded += it > last;
        last = it;
    }
    printf("%d kills, %lld new checkpoints loaded and verified, last iteration %lld\n", rounds,
           (long long)loaded, (long long)last);
    MT_EXPECT(loaded > 0, "some saves completed between kills");
    ct_rmdir(dir);
    return mt_test_result();
}
