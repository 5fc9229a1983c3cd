/* Fuzz target: the llm.c token file reader (gio_tokens_read). */
#include "tjf_common.h"

static int tjf_tokens(const uint8_t *d, size_t n) {
    int32_t *tok = NULL;
    size_t nt = 0, i;
    char err[256];
    if (gio_tokens_read(tjf_file(4, d, n), &tok, &nt, err, sizeof err) == 0) {
        for (i = 0; i < nt; i++) TJF_ASSERT(tok[i] >= 0, "token %zu in range (version 1: uint16; versions 2 and 7: up to INT32_MAX)", i);
    } else
        TJF_ASSERT(err[0], "a rejected file has a message");
    free(tok);
    unlink(tjf_path(4));
    return 0;
}
#ifndef TJF_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return tjf_tokens(d, n); }
#endif
