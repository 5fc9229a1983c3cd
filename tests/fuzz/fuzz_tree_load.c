/* Fuzz target: tj_tree_load of a file, into a tree that already has leaves.
   Properties: a failed load leaves the tree unchanged (all or nothing), and
   a tree that loaded from a tinyjax file saves and loads again (what load
   reads, save writes). */
#include "tjf_common.h"

static int tjf_tree_load(const uint8_t *d, size_t n) {
    tj_ctx *c = tj_ctx_new();
    tj_tree *t = tj_tree_new(c);
    const char *p = tjf_file(0, d, n);
    float w[6] = {1, 2, 3, 4, 5, 6}, back[6];
    tj_status st;
    tj_tree_set_array(t, "w", tj_array_new(c, TJ_F32, "a=2 b=3", w));
    tj_tree_set_int(t, "step", 7);
    st = tj_tree_load(t, p);
    if (st != TJ_OK) {
        TJF_ASSERT(*tj_error(c), "a failed load has a message");
        TJF_ASSERT(tj_tree_size(t) == 2 && tj_tree_int(t, "step") == 7 && !tj_array_read(tj_tree_array(t, "w"), TJ_F32, back) && !memcmp(w, back, sizeof w),
                   "a failed load leaves the tree unchanged");
    } else {
        tj_safetensors *s = tj_st_parse(c, d, n, "again");
        int ours = s && tj_st_meta(s, "tinyjax.order") != NULL;
        tj_st_free(s);
        if (ours) {
            tj_tree *t2 = tj_tree_new(c);
            st = tj_tree_save(t, tjf_path(1));
            TJF_ASSERT(st == TJ_OK, "a loaded tree saves: %s", tj_error(c));
            st = tj_tree_load(t2, tjf_path(1));
            TJF_ASSERT(st == TJ_OK && tj_tree_size(t2) == tj_tree_size(t), "and loads again: %s", tj_error(c));
            tj_tree_free(t2);
        }
    }
    unlink(tjf_path(0));
    unlink(tjf_path(1));
    tj_tree_free(t);
    tj_ctx_free(c);
    return 0;
}
#ifndef TJF_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return tjf_tree_load(d, n); }
#endif
