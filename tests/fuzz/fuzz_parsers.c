/* Fuzz target: the string parsers of the library: named shapes
   ("a=2 b=3"), axis lists, meshes ("data=4 model=2"), sharding specs
   ("batch:data embed:model+data") and logical rules. The input is split at
   0 bytes into a shape, a mesh, a spec and a rule string. Every string is
   either accepted or rejected with a message; nothing is allocated for the
   shapes (only parsed), so a huge legal shape costs nothing. The parsers
   are the library's statics, reached through tests/tj_internal.h. */
#include "tjf_common.h"

static int tjf_parsers(const uint8_t *d, size_t n) {
    char *buf = (char *)malloc(n + 4), *part[4];
    const char *value = "batch=8 pos=16 embed=32 vocab=64"; /* what the specs and rules shard */
    tj_ctx *c = tj_ctx_new();
    int64_t dims[TJ_MAXDIM];
    uint8_t sh[TJ_MAXDIM];
    int ids[TJ_MAXDIM], k, r, rank;
    size_t i;
    if (!buf || !c) {
        free(buf);
        tj_ctx_free(c);
        return 0;
    }
    memcpy(buf, d, n);
    buf[n] = buf[n + 1] = buf[n + 2] = buf[n + 3] = 0;
    part[0] = buf;
    for (k = 1, i = 0; k < 4; k++) {
        while (i < n && buf[i]) i++;
        part[k] = buf + (i < n ? ++i : n + k);
    }
    r = tjt_parse_shape(c, part[0], TJ_F32, &rank, dims, "fuzz");
    TJF_ASSERT(r == 0 ? tj_status_of(c) == TJ_OK : *tj_error(c) != 0, "shape: accepted, or an error with a message");
    if (r == 0) { /* what the checked multiply promises */
        int64_t e = 1;
        for (k = 0; k < rank; k++) {
            TJF_ASSERT(dims[k] >= 1 && dims[k] <= ((int64_t)1 << 40), "axis size in range");
            TJF_ASSERT(e <= INT64_MAX / dims[k], "element count fits");
            e *= dims[k];
        }
    }
    tj_clear_error(c);
    r = tjt_parse_names(c, part[0], ids, TJ_MAXDIM, "fuzz");
    TJF_ASSERT(r >= 0 || *tj_error(c), "axis list: a message");
    tj_clear_error(c);
    tj_set_devices(c, 8);
    if (tj_set_mesh(c, part[1]) != TJ_OK) {
        TJF_ASSERT(*tj_error(c), "mesh: a message");
        tj_clear_error(c);
        tj_set_mesh(c, "data=4 model=2");
    }
    if (tjt_parse_shape(c, value, TJ_F32, &rank, dims, "fuzz") == 0) {
        r = tjt_parse_spec(c, part[2], value, sh, 1, "fuzz spec");
        TJF_ASSERT(r == 0 || *tj_error(c), "spec: a message");
        tj_clear_error(c);
        r = tjt_parse_spec(c, part[3], value, sh, 0, "fuzz rules");
        TJF_ASSERT(r == 0 || *tj_error(c), "rules: a message");
        tj_clear_error(c);
    }
    tj_ctx_free(c);
    free(buf);
    return 0;
}
#ifndef TJF_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return tjf_parsers(d, n); }
#endif
