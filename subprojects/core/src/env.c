/* Integer switches from the environment (speed and comparison knobs, tests' overrides). */
#include <mt/core.h>

#include <stdlib.h>

int mt_env_int(const char *name, int unset) {
    const char *e = getenv(name);
    return e && *e ? atoi(e) : unset;
}

int mt_env_int_once(const char *name, int unset, int *cache) {
    /* why: callers on several threads may race on the first read; each stores the same value */
    int v = __atomic_load_n(cache, __ATOMIC_RELAXED);
    if (v == MT_ENV_UNREAD) {
        v = mt_env_int(name, unset);
        __atomic_store_n(cache, v, __ATOMIC_RELAXED);
    }
    return v;
}
