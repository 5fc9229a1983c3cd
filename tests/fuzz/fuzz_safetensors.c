/* Fuzz target: the safetensors parser (tj_st_parse) and the conversions of
   every tensor it accepts (tj_st_to_f32, tj_st_array). */
#include "tjf_common.h"

static int tjf_safetensors(const uint8_t *d, size_t n) {
    tj_ctx *c = tj_ctx_new();
    tj_safetensors *st = tj_st_parse(c, d, n, "fuzz");
    int i, k;
    if (!st) {
        TJF_ASSERT(tj_status_of(c) != TJ_OK && *tj_error(c), "a rejected file has an error message");
    }
    for (i = 0; st && i < tj_st_count(st); i++) {
        const tj_st_tensor *t = tj_st_at(st, i);
        char axes[64] = "";
        TJF_ASSERT(t && tj_st_find(st, t->name) != NULL, "tensor %d is found by name", i);
        TJF_ASSERT((size_t)t->numel * tj_st_dtype_size(t->dtype) == t->nbytes, "sizes agree");
        if (t->numel <= (1 << 16)) {
            float *f = (float *)malloc(sizeof(float) * (size_t)(t->numel + 1));
            if (f) tj_st_to_f32(t, f);
            free(f);
            for (k = 0; k < t->rank; k++) snprintf(axes + strlen(axes), sizeof axes - strlen(axes), "%sd%d", k ? " " : "", k);
            tj_array_free(tj_st_array(st, t->name, TJ_F32, axes));
            tj_array_free(tj_st_array(st, t->name, TJ_I32, axes));
            tj_clear_error(c);
        }
    }
    for (i = 0; st && i < tj_st_meta_count(st); i++) (void)tj_st_meta(st, tj_st_meta_key(st, i));
    tj_st_free(st);
    tj_ctx_free(c);
    return 0;
}
#ifndef TJF_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return tjf_safetensors(d, n); }
#endif
