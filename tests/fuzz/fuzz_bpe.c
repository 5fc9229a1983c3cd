/* Fuzz target: the GPT-2 BPE files (vocab.json, merges.txt) and the
   encoder. Input: a 2-byte little-endian length L, then L bytes of
   vocab.json, then merges.txt and text separated by the first 0 byte.
   Also encodes the whole input with the byte tokenizer. Property: what
   encodes decodes back to the same bytes. */
#include "tjf_common.h"

static void tjf_roundtrip(const gio_tokenizer *tok, const char *text, size_t len) {
    int32_t *ids = NULL;
    size_t nid = 0, dl = 0;
    char *dec = NULL, err[256];
    if (gio_tok_encode(tok, text, len, &ids, &nid, err, sizeof err) == 0) {
        size_t i;
        for (i = 0; i < nid; i++) TJF_ASSERT(ids[i] >= 0 && ids[i] < tok->vocab_size, "id %d in range", (int)ids[i]);
        if (gio_tok_decode(tok, ids, nid, &dec, &dl, err, sizeof err) == 0)
            TJF_ASSERT(dl == len && (!len || !memcmp(dec, text, len)), "decode(encode(x)) == x (%zu vs %zu bytes)", dl, len);
    }
    free(ids);
    free(dec);
}
static int tjf_bpe(const uint8_t *d, size_t n) {
    gio_tokenizer bytes, tok;
    size_t lv, rest, lm;
    const uint8_t *m, *z;
    char err[256];
    gio_tok_init_bytes(&bytes);
    tjf_roundtrip(&bytes, (const char *)d, n);
    gio_tok_free(&bytes);
    if (n < 2) return 0;
    lv = (size_t)d[0] | (size_t)d[1] << 8;
    if (lv > n - 2) lv = n - 2;
    m = d + 2 + lv;
    rest = n - 2 - lv;
    z = (const uint8_t *)memchr(m, 0, rest);
    lm = z ? (size_t)(z - m) : rest;
    tjf_file(2, d + 2, lv);
    tjf_file(3, m, lm);
    if (gio_tok_load_gpt2(&tok, tjf_path(2), tjf_path(3), err, sizeof err) == 0) {
        if (z) tjf_roundtrip(&tok, (const char *)z + 1, rest - lm - 1);
        gio_tok_free(&tok);
    } else
        TJF_ASSERT(err[0], "a rejected tokenizer has a message");
    unlink(tjf_path(2));
    unlink(tjf_path(3));
    return 0;
}
#ifndef TJF_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return tjf_bpe(d, n); }
#endif
