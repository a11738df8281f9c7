/* The process grid against megatron-core's own RankGenerator (golden/grid.json from gen_grid.py):
 * every group of every layout, then locate() as the inverse of group_ranks(). */
#include <mt/comm.h>
#include <mt/testkit.h>

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static int get_int(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v)) mt_die(__FILE__, __LINE__, "grid.json: '%s' is not an integer", key);
    return (int)json_integer_value(v);
}

static void check_layout(json_t *l) {
    mt_grid g;
    int world = get_int(l, "world");
    const char *order = json_string_value(json_object_get(l, "order"));
    MT_CHECK(mt_grid_init(&g, world, get_int(l, "tp"), get_int(l, "cp"), get_int(l, "ep"),
                          get_int(l, "pp"), get_int(l, "etp"), order));
    json_t *groups = json_object_get(l, "groups");
    int ranks[64];
    for (int k = 0; k < MT_GROUP_COUNT; k++) {
        const char *name = mt_group_name((mt_group)k);
        json_t *want = json_object_get(groups, name);
        if (!MT_EXPECT(json_is_array(want), "grid.json has no group '%s'", name)) continue;
        int count = mt_grid_group_count(&g, (mt_group)k);
        if (!MT_EXPECT(count == (int)json_array_size(want), "world %d %s: %d groups, want %zu",
                       world, name, count, json_array_size(want)))
            continue;
        int bad = 0;
        for (int i = 0; i < count && !bad; i++) {
            json_t *w = json_array_get(want, i);
            int n = mt_grid_group_size(&g, (mt_group)k, i);
            MT_CHECK(mt_grid_group_ranks(&g, (mt_group)k, i, ranks));
            bad = n != (int)json_array_size(w);
            for (int p = 0; p < n && !bad; p++)
                bad = ranks[p] != json_integer_value(json_array_get(w, p));
            /* every member locates back to (i, p) */
            for (int p = 0; p < n && !bad; p++) {
                int idx, pos;
                MT_CHECK(mt_grid_locate(&g, (mt_group)k, ranks[p], &idx, &pos));
                bad = idx != i || pos != p;
            }
            MT_EXPECT(!bad, "world %d tp %d cp %d ep %d pp %d %s: group %d differs from megatron",
                      world, g.tp, g.cp, g.ep, g.pp, name, i);
        }
        /* a rank in no group says so */
        for (int r = 0; r < world; r++) {
            int idx, pos, member = 0;
            MT_CHECK(mt_grid_locate(&g, (mt_group)k, r, &idx, &pos));
            for (size_t i = 0; i < json_array_size(want); i++)
                for (size_t p = 0; p < json_array_size(json_array_get(want, i)); p++)
                    member |= json_integer_value(json_array_get(json_array_get(want, i), p)) == r;
            MT_EXPECT(member == (idx >= 0), "world %d %s: rank %d member %d but index %d", world,
                      name, r, member, idx);
        }
    }
}

int main(void) {
    json_error_t err;
    json_t *root = json_load_file(mt_test_golden_path("grid.json"), 0, &err);
    if (!root) mt_die(__FILE__, __LINE__, "grid.json: %s (line %d)", err.text, err.line);
    json_t *layouts = json_object_get(root, "layouts");
    MT_EXPECT(json_array_size(layouts) >= 12, "%zu layouts", json_array_size(layouts));
    for (size_t i = 0; i < json_array_size(layouts); i++)
        check_layout(json_array_get(layouts, i));
    json_decref(root);

    mt_grid g;
    MT_EXPECT_STATUS(mt_grid_init(&g, 12, 4, 2, 1, 1, 0, NULL), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_grid_init(&g, 8, 2, 1, 3, 1, 0, NULL), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_grid_init(&g, 8, 2, 1, 1, 1, 0, "tp-cp-dp-pp"), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_grid_init(&g, 8, 2, 1, 1, 1, 0, "tp-cp-ep-dp-tp"), MT_ERR_INVALID_ARG);
    MT_CHECK(mt_grid_init(&g, 8, 2, 1, 1, 2, 0, NULL));
    MT_EXPECT(g.dp == 2 && g.expert_dp == 2 && g.expert_tp == 2, "dp %d expert dp %d", g.dp,
              g.expert_dp);
    return mt_test_result();
}
