/* gpt2_io.h - file formats and text utilities for the tinyjax GPT-2 demo.
 *
 * Single header, STB style.  In exactly one C or C++ file:
 *     #define GPT2_IO_IMPLEMENTATION
 *     #include "gpt2_io.h"
 * Compiles as C99 and as C++.  POSIX only (through tinyjax.h: open/fsync/rename for atomic
 * writes).  Public names start with gio_, private ones with gio__.
 *
 * Error convention: every fallible function returns int 0 on success and
 * nonzero on failure, and writes a one-line message naming the file and the
 * problem into the caller's (err, errlen) buffer (err may be NULL).  Nothing
 * in here exits, aborts or asserts on bad input; a corrupt file is an error
 * message, never a crash.
 *
 * Files are always written atomically, with tinyjax's tj_write_file_atomic:
 * data goes to "<path>.tmp.<pid>.<k>", is fsync'ed, then rename()d over
 * <path>, and the directory is fsync'ed, so a crash leaves either the old
 * file or the new one, never half of one.
 *
 * --- safetensors -----------------------------------------------------------
 * Safetensors files (GPT-2 checkpoints) are read and written by tinyjax
 * itself: tj_st_load / tj_st_parse / tj_st_find / tj_st_expect / tj_st_meta /
 * tj_st_array / tj_st_to_f32 / tj_st_save, and tj_tree_save / tj_tree_load for
 * whole parameter trees (see tinyjax.h, appendix [A]).  This header includes
 * "../tinyjax.h" for them (declarations only: define TINYJAX_IMPLEMENTATION
 * in one file of the program, as usual).
 *
 * --- llm.c token files (header: 256 int32: magic, version, count; then
 *     count tokens) ------------------------------------------------------------
 *   magic 20240520 version 1: uint16 tokens (GPT-2, llm.c's usual files)
 *   magic 20240520 version 2: uint32 tokens (vocabularies over 65,535)
 *   magic 20240801 version 7: uint32 tokens (llm.c's Llama 3 files; read only)
 *   int gio_tokens_read(const char *path, int32_t **tokens, size_t *n, char *err, size_t errlen);
 *   int gio_tokens_write(const char *path, const int32_t *tokens, size_t n, char *err, size_t errlen);
 *   (*tokens is malloc'ed; free() it.  The writer uses version 1 when every
 *   token fits in uint16, else version 2.  Token values above INT32_MAX are
 *   an error.)
 *
 * --- Hugging Face GPT-2 config.json ----------------------------------------------
 *   void gio_gpt2_config_init(gio_gpt2_config *c);       (every field absent)
 *   int  gio_gpt2_config_read(const char *path, gio_gpt2_config *c, char *err, size_t errlen);
 *   int  gio_gpt2_config_write(const char *path, const gio_gpt2_config *c, char *err, size_t errlen);
 *   Reads the fields that decide a GPT-2's shape and arithmetic (others are
 *   skipped); a field of the wrong type is an error naming it.  Integers are
 *   -1 when absent (n_inner, bos/eos_token_id: -2 for JSON null), booleans -1
 *   when absent, layer_norm_epsilon < 0 when absent, strings "" when absent.
 *   The writer gives what transformers.GPT2LMHeadModel.from_pretrained needs.
 *
 * --- tokenizers --------------------------------------------------------------
 *   void gio_tok_init_bytes(gio_tokenizer *t);            (vocab 256: id = byte)
 *   int  gio_tok_load_gpt2(gio_tokenizer *t, const char *vocab_json,
 *                          const char *merges_txt, char *err, size_t errlen);
 *        (GPT-2's files; its special token is <|endoftext|> when the vocabulary has it)
 *   int  gio_tok_load_hf(gio_tokenizer *t, const char *tokenizer_json, char *err, size_t errlen);
 *        (Hugging Face tokenizers' tokenizer.json of a byte-level BPE: model BPE,
 *        pre_tokenizer ByteLevel with GPT-2's regex (add_prefix_space honoured),
 *        no normalizer; merges as "a b" strings or ["a", "b"] pairs; ignore_merges
 *        honoured.  added_tokens are matched in the text before pre-tokenization,
 *        longest first, with lstrip / rstrip / single_word; the post_processor is
 *        not applied (no BOS/EOS added).  Anything else is an error naming it.)
 *   int  gio_tok_encode_special(const gio_tokenizer *t, const char *text, size_t len,
 *                               int allow_special, int32_t **ids, size_t *n, char *err, size_t errlen);
 *        (allow_special 0: special tokens in the text are encoded as ordinary
 *        text, as tiktoken's encode_ordinary; 1: as their ids.  Non-special
 *        added tokens are always matched, as Hugging Face tokenizers does.
 *        gio_tok_encode is allow_special 0.)
 *   int  gio_tok_special_count(const gio_tokenizer *t);
 *   int32_t gio_tok_special_id(const gio_tokenizer *t, int i);
 *   void gio_tok_free(gio_tokenizer *t);
 *   int  gio_tok_encode(const gio_tokenizer *t, const char *text, size_t len,
 *                       int32_t **ids, size_t *n, char *err, size_t errlen);
 *   int  gio_tok_decode(const gio_tokenizer *t, const int32_t *ids, size_t n,
 *                       char **text, size_t *len, char *err, size_t errlen);
 *        (outputs are malloc'ed; *text is NUL-terminated for convenience)
 *   const char *gio_tok_piece(const gio_tokenizer *t, int32_t id, size_t *len);
 *        (raw bytes of one token, for streaming output; NULL if invalid)
 *   int32_t gio_tok_lookup(const gio_tokenizer *t, const char *bytes, size_t len);
 *        (id of the token with exactly these raw bytes, e.g. "<|endoftext|>"; -1 if none)
 *   size_t gio_gpt2_pretok_next(const char *text, size_t len, size_t pos);
 *        (length of the GPT-2 regex pre-token starting at pos)
 *   uint32_t gio_gpt2_byte_to_unicode(unsigned char b);  (GPT-2 bytes_to_unicode)
 * Pre-tokenization is GPT-2's regex
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * implemented by hand, with \p{L}/\p{N}/\s from a generated range table of
 * all of Unicode (16.0, as tiktoken 0.14 and Hugging Face tokenizers 0.23
 * see it; unassigned code points are "other", as the regex classes them).
 * It splits every code point as tiktoken does; Python's regex (GPT-2's
 * encoder.py) 2026.5.9 has Unicode 17.0 and differs on the 4,657 code points
 * Unicode 17.0 assigned (tools/compare_hf.py checks all three).  Invalid UTF-8 bytes count as punctuation
 * (Python would never see them), so any byte string encodes and decodes
 * back losslessly.
 *
 * --- plots and traces ------------------------------------------------------------
 *   int gio_svg_plot(const char *path, const char *title, const char *xlabel,
 *                    const char *ylabel, const gio_series *s, int n_series,
 *                    char *err, size_t errlen);
 *   int gio_svg_loss_curve(const char *path, const char *title,
 *                          const double *train_step, const double *train_loss, size_t n_train,
 *                          const double *val_step, const double *val_loss, size_t n_val,
 *                          char *err, size_t errlen);
 *   (non-finite y values break the line instead of wrecking the axis range)
 *   void gio_trace_init(gio_trace *t);
 *   int  gio_trace_process_name(gio_trace *t, int pid, const char *name);
 *   int  gio_trace_track_name(gio_trace *t, int pid, int tid, const char *name);
 *   int  gio_trace_event(gio_trace *t, const char *name, const char *cat, int pid,
 *                        int tid, double ts_us, double dur_us, const char *args);
 *   int  gio_trace_counter(gio_trace *t, const char *name, int pid, double ts_us, double value);
 *   int  gio_trace_write(gio_trace *t, const char *path);
 *   void gio_trace_free(gio_trace *t);
 *   (errors go to t->err; args is free text shown as args.detail, may be NULL)
 *
 * --- files, strings, JSON: tinyjax.h ---------------------------------------------------
 * Reading and writing whole files (tj_read_file, tj_write_file_atomic), the
 * string buffer the writers here fill (tj_strbuf), UTF-8 and the JSON reader
 * of config.json, vocab.json and tokenizer.json (tj_json) are the header's
 * public helpers (tinyjax.h, [A]), with the same (err, errlen) convention
 * as this file. Strings they hand back are released with free() here: the
 * demo keeps tinyjax's default allocator (no TJ_MALLOC hooks).
 */
#ifndef GPT2_IO_H
#define GPT2_IO_H

#include <stddef.h>
#include <stdint.h>

#include "../tinyjax.h"   /* safetensors: tj_st_*, tj_tree_save/load */

#ifdef __cplusplus
extern "C" {
#endif

int gio_tokens_read(const char *path, int32_t **tokens, size_t *n, char *err, size_t errlen);
int gio_tokens_write(const char *path, const int32_t *tokens, size_t n, char *err, size_t errlen);

typedef struct {
    int n_layer, n_head, n_embd, n_positions, n_ctx, vocab_size;
    int n_inner;                      /* -2: null (4 * n_embd)              */
    int bos_token_id, eos_token_id;   /* -2: null                           */
    double layer_norm_epsilon;
    double resid_pdrop, embd_pdrop, attn_pdrop; /* written when >= 0 (not read) */
    char activation_function[32], model_type[32];
    int tie_word_embeddings, scale_attn_weights, scale_attn_by_inverse_layer_idx,
        reorder_and_upcast_attn, add_cross_attention;
} gio_gpt2_config;

void gio_gpt2_config_init(gio_gpt2_config *c);
int gio_gpt2_config_read(const char *path, gio_gpt2_config *c, char *err, size_t errlen);
int gio_gpt2_config_write(const char *path, const gio_gpt2_config *c, char *err, size_t errlen);

enum { GIO_TOK_BYTES = 1, GIO_TOK_GPT2 = 2 };
struct gio__bpe;
typedef struct {
    int kind;
    int vocab_size;
    struct gio__bpe *bpe;     /* GPT-2 tables; NULL for the byte tokenizer */
} gio_tokenizer;

void gio_tok_init_bytes(gio_tokenizer *t);
int gio_tok_load_gpt2(gio_tokenizer *t, const char *vocab_json, const char *merges_txt,
                      char *err, size_t errlen);
void gio_tok_free(gio_tokenizer *t);
int gio_tok_encode(const gio_tokenizer *t, const char *text, size_t len,
                   int32_t **ids, size_t *n, char *err, size_t errlen);
int gio_tok_load_hf(gio_tokenizer *t, const char *tokenizer_json, char *err, size_t errlen);
int gio_tok_encode_special(const gio_tokenizer *t, const char *text, size_t len, int allow_special,
                           int32_t **ids, size_t *n, char *err, size_t errlen);
int gio_tok_special_count(const gio_tokenizer *t);
int32_t gio_tok_special_id(const gio_tokenizer *t, int i);
int gio_tok_decode(const gio_tokenizer *t, const int32_t *ids, size_t n,
                   char **text, size_t *len, char *err, size_t errlen);
const char *gio_tok_piece(const gio_tokenizer *t, int32_t id, size_t *len);
int32_t gio_tok_lookup(const gio_tokenizer *t, const char *bytes, size_t len);
size_t gio_gpt2_pretok_next(const char *text, size_t len, size_t pos);
uint32_t gio_gpt2_byte_to_unicode(unsigned char b);

typedef struct {
    const char *label;
    const double *x, *y;
    size_t n;
    const char *color;        /* CSS color; NULL picks one */
} gio_series;

int gio_svg_plot(const char *path, const char *title, const char *xlabel,
                 const char *ylabel, const gio_series *s, int n_series,
                 char *err, size_t errlen);
int gio_svg_loss_curve(const char *path, const char *title,
                       const double *train_step, const double *train_loss, size_t n_train,
                       const double *val_step, const double *val_loss, size_t n_val,
                       char *err, size_t errlen);

typedef struct {
    tj_strbuf events;        /* serialized events, comma separated */
    size_t n_events;
    char err[256];
} gio_trace;

void gio_trace_init(gio_trace *t);
int gio_trace_process_name(gio_trace *t, int pid, const char *name);
int gio_trace_track_name(gio_trace *t, int pid, int tid, const char *name);
int gio_trace_event(gio_trace *t, const char *name, const char *cat, int pid, int tid,
                    double ts_us, double dur_us, const char *args);
int gio_trace_counter(gio_trace *t, const char *name, int pid, double ts_us, double value);
int gio_trace_write(gio_trace *t, const char *path);
void gio_trace_free(gio_trace *t);

#ifdef __cplusplus
}
#endif
#endif /* GPT2_IO_H */

/* ======================================================================== */
#ifdef GPT2_IO_IMPLEMENTATION
#ifndef GPT2_IO_IMPLEMENTATION_DONE
#define GPT2_IO_IMPLEMENTATION_DONE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>

#if defined(__GNUC__)
#define GIO__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define GIO__PRINTF(a, b)
#endif

static void gio__seterr(char *err, size_t errlen, const char *fmt, ...) GIO__PRINTF(3, 4);
static void gio__seterr(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    if (!err || errlen == 0) return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* malloc(0) may return NULL, which would look like out-of-memory. */
static void *gio__alloc(size_t n) { return malloc(n ? n : 1); }

/* ---- text and files: tinyjax.h [A] (tj_strbuf, tj_utf8_*, tj_read_file,
   tj_write_file_atomic, tj_json) ---- */

static void gio__sb_xml(tj_strbuf *b, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '<': tj_strbuf_puts(b, "&lt;"); break;
        case '>': tj_strbuf_puts(b, "&gt;"); break;
        case '&': tj_strbuf_puts(b, "&amp;"); break;
        case '"': tj_strbuf_puts(b, "&quot;"); break;
        default:
            /* XML 1.0 forbids most control characters outright. */
            if ((unsigned char)*s >= 0x20 || *s == '\t' || *s == '\n') tj_strbuf_put(b, s, 1);
        }
    }
}

static int gio__write_sb(const char *path, const tj_strbuf *b, char *err, size_t errlen) {
    if (b->oom) { gio__seterr(err, errlen, "%s: out of memory", path); return 1; }
    return tj_write_file_atomic(path, b->p ? b->p : "", b->n, err, errlen) != TJ_OK;
}

/* little-endian unsigned integer of n bytes (token files) */
static uint64_t gio__le(const unsigned char *p, int n) {
    uint64_t v = 0;
    while (n-- > 0) v = (v << 8) | p[n];
    return v;
}

/* ---- llm.c token files ---- */

#define GIO__TOK_MAGIC 20240520
#define GIO__TOK_MAGIC_LLAMA3 20240801
#define GIO__TOK_HDR 256

int gio_tokens_read(const char *path, int32_t **tokens, size_t *n, char *err, size_t errlen) {
    char *buf;
    size_t len, i, want, w;
    const unsigned char *p;
    int32_t magic, version, count;
    *tokens = NULL;
    *n = 0;
    if (tj_read_file(path, &buf, &len, err, errlen)) return 1;
    p = (const unsigned char *)buf;
    if (len < GIO__TOK_HDR * 4) {
        gio__seterr(err, errlen, "%s: truncated: %zu bytes, header alone needs %d", path, len, GIO__TOK_HDR * 4);
        free(buf);
        return 1;
    }
    magic = (int32_t)(uint32_t)gio__le(p, 4);
    version = (int32_t)(uint32_t)gio__le(p + 4, 4);
    count = (int32_t)(uint32_t)gio__le(p + 8, 4);
    if (magic != GIO__TOK_MAGIC && magic != GIO__TOK_MAGIC_LLAMA3) {
        gio__seterr(err, errlen, "%s: bad magic %ld (want %d, or %d for llm.c's Llama 3 files)", path, (long)magic, GIO__TOK_MAGIC,
                    GIO__TOK_MAGIC_LLAMA3);
        free(buf);
        return 1;
    }
    if (magic == GIO__TOK_MAGIC && version == 1) w = 2;
    else if ((magic == GIO__TOK_MAGIC && version == 2) || (magic == GIO__TOK_MAGIC_LLAMA3 && version == 7)) w = 4;
    else {
        gio__seterr(err, errlen, "%s: unsupported version %ld for magic %ld (want 1: uint16 tokens, or 2: uint32 tokens; magic %d wants 7)", path,
                    (long)version, (long)magic, GIO__TOK_MAGIC_LLAMA3);
        free(buf);
        return 1;
    }
    if (count < 0) {
        gio__seterr(err, errlen, "%s: negative token count %ld", path, (long)count);
        free(buf);
        return 1;
    }
    want = GIO__TOK_HDR * 4 + w * (size_t)count;
    if (len != want) {
        gio__seterr(err, errlen, "%s: %s: header says %ld tokens (%zu bytes) but file has %zu bytes", path,
                    len < want ? "truncated" : "token count mismatch", (long)count, want, len);
        free(buf);
        return 1;
    }
    *tokens = (int32_t *)gio__alloc(sizeof(int32_t) * (size_t)count);
    if (!*tokens) {
        gio__seterr(err, errlen, "%s: out of memory", path);
        free(buf);
        return 1;
    }
    for (i = 0; i < (size_t)count; i++) {
        uint64_t v = gio__le(p + GIO__TOK_HDR * 4 + w * i, (int)w);
        if (v > (uint64_t)INT32_MAX) {
            gio__seterr(err, errlen, "%s: token %zu = %llu is too large (over %ld)", path, i, (unsigned long long)v, (long)INT32_MAX);
            free(*tokens);
            *tokens = NULL;
            free(buf);
            return 1;
        }
        (*tokens)[i] = (int32_t)v;
    }
    *n = (size_t)count;
    free(buf);
    return 0;
}

int gio_tokens_write(const char *path, const int32_t *tokens, size_t n, char *err, size_t errlen) {
    unsigned char *buf;
    size_t i, len, w = 2;
    int rc;
    if (n > (size_t)INT32_MAX) { gio__seterr(err, errlen, "%s: too many tokens (%zu)", path, n); return 1; }
    for (i = 0; i < n; i++) {
        if (tokens[i] < 0) {
            gio__seterr(err, errlen, "%s: token %zu = %ld is negative", path, i, (long)tokens[i]);
            return 1;
        }
        if (tokens[i] > 65535) w = 4;
    }
    len = GIO__TOK_HDR * 4 + w * n;
    buf = (unsigned char *)calloc(1, len);
    if (!buf) { gio__seterr(err, errlen, "%s: out of memory", path); return 1; }
    {
        uint32_t hdr[3];
        int k, b;
        hdr[0] = GIO__TOK_MAGIC;
        hdr[1] = w == 2 ? 1 : 2;
        hdr[2] = (uint32_t)n;
        for (k = 0; k < 3; k++)
            for (b = 0; b < 4; b++) buf[4 * k + b] = (unsigned char)(hdr[k] >> (8 * b));
    }
    for (i = 0; i < n; i++) {
        size_t b;
        for (b = 0; b < w; b++) buf[GIO__TOK_HDR * 4 + w * i + b] = (unsigned char)((uint32_t)tokens[i] >> (8 * b));
    }
    rc = tj_write_file_atomic(path, buf, len, err, errlen);
    free(buf);
    return rc;
}

/* ---- Hugging Face GPT-2 config.json ---- */

/* the shortest form of v that reads back as the same double (1e-05, not
   1.0000000000000001e-05) */
static const char *gio__shortest(char *num, size_t n, double v) {
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(num, n, "%.*g", prec, v);
        if (strtod(num, NULL) == v) break;
    }
    return num;
}
void gio_gpt2_config_init(gio_gpt2_config *c) {
    memset(c, 0, sizeof *c);
    c->n_layer = c->n_head = c->n_embd = c->n_positions = c->n_ctx = c->vocab_size = -1;
    c->n_inner = c->bos_token_id = c->eos_token_id = -1;
    c->layer_norm_epsilon = -1;
    c->resid_pdrop = c->embd_pdrop = c->attn_pdrop = -1;
    c->tie_word_embeddings = c->scale_attn_weights = c->scale_attn_by_inverse_layer_idx = -1;
    c->reorder_and_upcast_attn = c->add_cross_attention = -1;
}

int gio_gpt2_config_read(const char *path, gio_gpt2_config *c, char *err, size_t errlen) {
    static const char *const ints[] = {"n_layer", "n_head", "n_embd", "n_positions", "n_ctx", "vocab_size", "n_inner", "bos_token_id", "eos_token_id"};
    static const char *const bools[] = {"tie_word_embeddings", "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn",
                                        "add_cross_attention"};
    int *iv[9], *bv[5];
    char *buf, *key;
    size_t len, k;
    tj_json j;
    int first = 1, r, rc = 1;
    gio_gpt2_config_init(c);
    iv[0] = &c->n_layer; iv[1] = &c->n_head; iv[2] = &c->n_embd; iv[3] = &c->n_positions; iv[4] = &c->n_ctx;
    iv[5] = &c->vocab_size; iv[6] = &c->n_inner; iv[7] = &c->bos_token_id; iv[8] = &c->eos_token_id;
    bv[0] = &c->tie_word_embeddings; bv[1] = &c->scale_attn_weights; bv[2] = &c->scale_attn_by_inverse_layer_idx;
    bv[3] = &c->reorder_and_upcast_attn; bv[4] = &c->add_cross_attention;
    if (tj_read_file(path, &buf, &len, err, errlen)) return 1;
    tj_json_init(&j, buf, len, path, err, errlen);
    if (tj_json_expect(&j, '{')) goto done;
    while ((r = tj_json_object_next(&j, &first, &key)) == 1) {
        int hit = 0;
        for (k = 0; k < 9 && !hit; k++)
            if (!strcmp(key, ints[k])) {
                uint64_t v;
                int lit;
                hit = 1;
                if (k >= 6 && tj_json_peek(&j) == 'n') {
                    if (tj_json_literal(&j, &lit)) goto fail_key;
                    *iv[k] = -2;
                } else if (tj_json_u64(&j, &v) || v > (1u << 30)) {
                    gio__seterr(err, errlen, "%s: \"%s\" must be a non-negative integer%s (of at most 2^30)", path, key, k >= 6 ? " or null" : "");
                    goto fail_key;
                } else *iv[k] = (int)v;
            }
        for (k = 0; k < 5 && !hit; k++)
            if (!strcmp(key, bools[k])) {
                int b;
                hit = 1;
                if (tj_json_literal(&j, &b) || b < 0) {
                    gio__seterr(err, errlen, "%s: \"%s\" must be true or false", path, key);
                    goto fail_key;
                }
                *bv[k] = b;
            }
        if (!hit && !strcmp(key, "layer_norm_epsilon")) {
            hit = 1;
            if (tj_json_number(&j, &c->layer_norm_epsilon) || !(c->layer_norm_epsilon >= 0 && c->layer_norm_epsilon < 1)) {
                gio__seterr(err, errlen, "%s: \"layer_norm_epsilon\" must be a number in [0, 1)", path);
                goto fail_key;
            }
        }
        if (!hit && (!strcmp(key, "activation_function") || !strcmp(key, "model_type"))) {
            char *v = NULL;
            char *dst = key[0] == 'a' ? c->activation_function : c->model_type;
            hit = 1;
            if (tj_json_cstring(&j, &v) || strlen(v) >= sizeof c->model_type) {
                free(v);
                gio__seterr(err, errlen, "%s: \"%s\" must be a string of at most %d bytes", path, key, (int)sizeof c->model_type - 1);
                goto fail_key;
            }
            strcpy(dst, v);
            free(v);
        }
        if (!hit && tj_json_skip(&j)) goto fail_key;
        free(key);
        continue;
    fail_key:
        free(key);
        goto done;
    }
    if (r < 0) goto done;
    if (tj_json_peek(&j) != -1) { tj_json_fail(&j, "trailing garbage"); goto done; }
    rc = 0;
done:
    free(buf);
    return rc;
}

int gio_gpt2_config_write(const char *path, const gio_gpt2_config *c, char *err, size_t errlen) {
    tj_strbuf b;
    int rc;
    memset(&b, 0, sizeof b);
    if (c->n_layer < 1 || c->n_head < 1 || c->n_embd < 1 || c->n_positions < 1 || c->vocab_size < 1 || !(c->layer_norm_epsilon >= 0)) {
        gio__seterr(err, errlen, "%s: incomplete GPT-2 config (layers %d, heads %d, embed %d, positions %d, vocab %d)", path, c->n_layer, c->n_head,
                    c->n_embd, c->n_positions, c->vocab_size);
        return 1;
    }
    tj_strbuf_puts(&b, "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n");
    tj_strbuf_printf(&b, "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_embd\": %d,\n", c->n_layer, c->n_head, c->n_embd);
    tj_strbuf_printf(&b, "  \"n_positions\": %d,\n  \"n_ctx\": %d,\n  \"vocab_size\": %d,\n", c->n_positions, c->n_positions, c->vocab_size);
    if (c->n_inner >= 0) tj_strbuf_printf(&b, "  \"n_inner\": %d,\n", c->n_inner);
    else tj_strbuf_puts(&b, "  \"n_inner\": null,\n");
    {
        char num[40];
        tj_strbuf_printf(&b, "  \"layer_norm_epsilon\": %s,\n", gio__shortest(num, sizeof num, c->layer_norm_epsilon));
        /* the dropout the model was trained with (transformers' default when
           absent is 0.1) */
        if (c->resid_pdrop >= 0) tj_strbuf_printf(&b, "  \"resid_pdrop\": %s,\n", gio__shortest(num, sizeof num, c->resid_pdrop));
        if (c->embd_pdrop >= 0) tj_strbuf_printf(&b, "  \"embd_pdrop\": %s,\n", gio__shortest(num, sizeof num, c->embd_pdrop));
        if (c->attn_pdrop >= 0) tj_strbuf_printf(&b, "  \"attn_pdrop\": %s,\n", gio__shortest(num, sizeof num, c->attn_pdrop));
    }
    tj_strbuf_puts(&b, "  \"activation_function\": ");
    tj_strbuf_json(&b, c->activation_function[0] ? c->activation_function : "gelu_new");
    tj_strbuf_printf(&b, ",\n  \"tie_word_embeddings\": %s,\n", c->tie_word_embeddings == 0 ? "false" : "true");
    tj_strbuf_puts(&b, "  \"scale_attn_weights\": true,\n  \"scale_attn_by_inverse_layer_idx\": false,\n  \"reorder_and_upcast_attn\": false,\n");
    tj_strbuf_puts(&b, "  \"add_cross_attention\": false,\n");
    if (c->bos_token_id >= 0) tj_strbuf_printf(&b, "  \"bos_token_id\": %d,\n", c->bos_token_id);
    else tj_strbuf_puts(&b, "  \"bos_token_id\": null,\n");
    if (c->eos_token_id >= 0) tj_strbuf_printf(&b, "  \"eos_token_id\": %d,\n", c->eos_token_id);
    else tj_strbuf_puts(&b, "  \"eos_token_id\": null,\n");
    tj_strbuf_puts(&b, "  \"torch_dtype\": \"float32\"\n}\n");
    rc = gio__write_sb(path, &b, err, errlen);
    free(b.p);
    return rc;
}

/* ---- GPT-2 byte-level BPE ---- */

uint32_t gio_gpt2_byte_to_unicode(unsigned char b) {
    /* GPT-2 keeps printable Latin-1 bytes as themselves and shifts the rest
       (controls, space, 0x7F-0xA0, 0xAD) to U+0100.. in byte order, so every
       byte gets a visible, non-whitespace character. */
    unsigned c, shifted = 0;
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) return b;
    for (c = 0; c < b; c++)
        if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE))) shifted++;
    return 0x100 + shifted;
}

enum { GIO__CO = 0, GIO__CL = 1, GIO__CN = 2, GIO__CS = 3 };

/* Class of every code point >= U+0100 as a partition of the code space:
   entry = (first code point << 2) | class, sorted; a range runs up to the
   next entry.  Generated by tools/gen_unicode_table.py from tiktoken 0.14's
   regex (Rust regex-syntax data, Unicode 16.0), which Hugging Face
   tokenizers 0.23 shares, for \p{L} / \p{N} / \s.  Unassigned code points
   (and surrogates) are "other", as the regex classes them: neither letter,
   number nor space, so they join punctuation runs.  Python's regex 2026.5.9
   (Unicode 17.0) differs only on the 4,657 code points Unicode 17.0
   assigned.  About 6.3 KB. */
static const uint32_t gio__utab[] = {
    /* from tiktoken: 1580 entries; code points >= U+0100: 971033 other, 140911 letters, 1895 numbers, 17 spaces */
    0x401, 0xb08, 0xb19, 0xb48, 0xb81, 0xb94, 0xbb1, 0xbb4, 0xbb9, 0xbbc, 0xdc1, 0xdd4, 0xdd9,
    0xde0, 0xde9, 0xdf8, 0xdfd, 0xe00, 0xe19, 0xe1c, 0xe21, 0xe2c, 0xe31, 0xe34, 0xe39, 0xe88,
    0xe8d, 0xfd8, 0xfdd, 0x1208, 0x1229, 0x14c0, 0x14c5, 0x155c, 0x1565, 0x1568, 0x1581, 0x1624,
    0x1741, 0x17ac, 0x17bd, 0x17cc, 0x1881, 0x192c, 0x1982, 0x19a8, 0x19b9, 0x19c0, 0x19c5, 0x1b50,
    0x1b55, 0x1b58, 0x1b95, 0x1b9c, 0x1bb9, 0x1bc2, 0x1be9, 0x1bf4, 0x1bfd, 0x1c00, 0x1c41, 0x1c44,
    0x1c49, 0x1cc0, 0x1d35, 0x1e98, 0x1ec5, 0x1ec8, 0x1f02, 0x1f29, 0x1fac, 0x1fd1, 0x1fd8, 0x1fe9,
    0x1fec, 0x2001, 0x2058, 0x2069, 0x206c, 0x2091, 0x2094, 0x20a1, 0x20a4, 0x2101, 0x2164, 0x2181,
    0x21ac, 0x21c1, 0x2220, 0x2225, 0x223c, 0x2281, 0x2328, 0x2411, 0x24e8, 0x24f5, 0x24f8, 0x2541,
    0x2544, 0x2561, 0x2588, 0x259a, 0x25c0, 0x25c5, 0x2604, 0x2615, 0x2634, 0x263d, 0x2644, 0x264d,
    0x26a4, 0x26a9, 0x26c4, 0x26c9, 0x26cc, 0x26d9, 0x26e8, 0x26f5, 0x26f8, 0x2739, 0x273c, 0x2771,
    0x2778, 0x277d, 0x2788, 0x279a, 0x27c1, 0x27c8, 0x27d2, 0x27e8, 0x27f1, 0x27f4, 0x2815, 0x282c,
    0x283d, 0x2844, 0x284d, 0x28a4, 0x28a9, 0x28c4, 0x28c9, 0x28d0, 0x28d5, 0x28dc, 0x28e1, 0x28e8,
    0x2965, 0x2974, 0x2979, 0x297c, 0x299a, 0x29c0, 0x29c9, 0x29d4, 0x2a15, 0x2a38, 0x2a3d, 0x2a48,
    0x2a4d, 0x2aa4, 0x2aa9, 0x2ac4, 0x2ac9, 0x2ad0, 0x2ad5, 0x2ae8, 0x2af5, 0x2af8, 0x2b41, 0x2b44,
    0x2b81, 0x2b88, 0x2b9a, 0x2bc0, 0x2be5, 0x2be8, 0x2c15, 0x2c34, 0x2c3d, 0x2c44, 0x2c4d, 0x2ca4,
    0x2ca9, 0x2cc4, 0x2cc9, 0x2cd0, 0x2cd5, 0x2ce8, 0x2cf5, 0x2cf8, 0x2d71, 0x2d78, 0x2d7d, 0x2d88,
    0x2d9a, 0x2dc0, 0x2dc5, 0x2dca, 0x2de0, 0x2e0d, 0x2e10, 0x2e15, 0x2e2c, 0x2e39, 0x2e44, 0x2e49,
    0x2e58, 0x2e65, 0x2e6c, 0x2e71, 0x2e74, 0x2e79, 0x2e80, 0x2e8d, 0x2e94, 0x2ea1, 0x2eac, 0x2eb9,
    0x2ee8, 0x2f41, 0x2f44, 0x2f9a, 0x2fcc, 0x3015, 0x3034, 0x3039, 0x3044, 0x3049, 0x30a4, 0x30a9,
    0x30e8, 0x30f5, 0x30f8, 0x3161, 0x316c, 0x3175, 0x3178, 0x3181, 0x3188, 0x319a, 0x31c0, 0x31e2,
    0x31fc, 0x3201, 0x3204, 0x3215, 0x3234, 0x3239, 0x3244, 0x3249, 0x32a4, 0x32a9, 0x32d0, 0x32d5,
    0x32e8, 0x32f5, 0x32f8, 0x3375, 0x337c, 0x3381, 0x3388, 0x339a, 0x33c0, 0x33c5, 0x33cc, 0x3411,
    0x3434, 0x3439, 0x3444, 0x3449, 0x34ec, 0x34f5, 0x34f8, 0x3539, 0x353c, 0x3551, 0x355c, 0x3562,
    0x357d, 0x3588, 0x359a, 0x35e4, 0x35e9, 0x3600, 0x3615, 0x365c, 0x3669, 0x36c8, 0x36cd, 0x36f0,
    0x36f5, 0x36f8, 0x3701, 0x371c, 0x379a, 0x37c0, 0x3805, 0x38c4, 0x38c9, 0x38d0, 0x3901, 0x391c,
    0x3942, 0x3968, 0x3a05, 0x3a0c, 0x3a11, 0x3a14, 0x3a19, 0x3a2c, 0x3a31, 0x3a90, 0x3a95, 0x3a98,
    0x3a9d, 0x3ac4, 0x3ac9, 0x3ad0, 0x3af5, 0x3af8, 0x3b01, 0x3b14, 0x3b19, 0x3b1c, 0x3b42, 0x3b68,
    0x3b71, 0x3b80, 0x3c01, 0x3c04, 0x3c82, 0x3cd0, 0x3d01, 0x3d20, 0x3d25, 0x3db4, 0x3e21, 0x3e34,
    0x4001, 0x40ac, 0x40fd, 0x4102, 0x4128, 0x4141, 0x4158, 0x4169, 0x4178, 0x4185, 0x4188, 0x4195,
    0x419c, 0x41b9, 0x41c4, 0x41d5, 0x4208, 0x4239, 0x423c, 0x4242, 0x4268, 0x4281, 0x4318, 0x431d,
    0x4320, 0x4335, 0x4338, 0x4341, 0x43ec, 0x43f1, 0x4924, 0x4929, 0x4938, 0x4941, 0x495c, 0x4961,
    0x4964, 0x4969, 0x4978, 0x4981, 0x4a24, 0x4a29, 0x4a38, 0x4a41, 0x4ac4, 0x4ac9, 0x4ad8, 0x4ae1,
    0x4afc, 0x4b01, 0x4b04, 0x4b09, 0x4b18, 0x4b21, 0x4b5c, 0x4b61, 0x4c44, 0x4c49, 0x4c58, 0x4c61,
    0x4d6c, 0x4da6, 0x4df4, 0x4e01, 0x4e40, 0x4e81, 0x4fd8, 0x4fe1, 0x4ff8, 0x5005, 0x59b4, 0x59bd,
    0x5a03, 0x5a05, 0x5a6c, 0x5a81, 0x5bac, 0x5bba, 0x5bc5, 0x5be4, 0x5c01, 0x5c48, 0x5c7d, 0x5cc8,
    0x5d01, 0x5d48, 0x5d81, 0x5db4, 0x5db9, 0x5dc4, 0x5e01, 0x5ed0, 0x5f5d, 0x5f60, 0x5f71, 0x5f74,
    0x5f82, 0x5fa8, 0x5fc2, 0x5fe8, 0x6042, 0x6068, 0x6081, 0x61e4, 0x6201, 0x6214, 0x621d, 0x62a4,
    0x62a9, 0x62ac, 0x62c1, 0x63d8, 0x6401, 0x647c, 0x651a, 0x6541, 0x65b8, 0x65c1, 0x65d4, 0x6601,
    0x66b0, 0x66c1, 0x6728, 0x6742, 0x676c, 0x6801, 0x685c, 0x6881, 0x6954, 0x6a02, 0x6a28, 0x6a42,
    0x6a68, 0x6a9d, 0x6aa0, 0x6c15, 0x6cd0, 0x6d15, 0x6d34, 0x6d42, 0x6d68, 0x6e0d, 0x6e84, 0x6eb9,
    0x6ec2, 0x6ee9, 0x6f98, 0x7001, 0x7090, 0x7102, 0x7128, 0x7135, 0x7142, 0x7169, 0x71f8, 0x7201,
    0x722c, 0x7241, 0x72ec, 0x72f5, 0x7300, 0x73a5, 0x73b4, 0x73b9, 0x73d0, 0x73d5, 0x73dc, 0x73e9,
    0x73ec, 0x7401, 0x7700, 0x7801, 0x7c58, 0x7c61, 0x7c78, 0x7c81, 0x7d18, 0x7d21, 0x7d38, 0x7d41,
    0x7d60, 0x7d65, 0x7d68, 0x7d6d, 0x7d70, 0x7d75, 0x7d78, 0x7d7d, 0x7df8, 0x7e01, 0x7ed4, 0x7ed9,
    0x7ef4, 0x7ef9, 0x7efc, 0x7f09, 0x7f14, 0x7f19, 0x7f34, 0x7f41, 0x7f50, 0x7f59, 0x7f70, 0x7f81,
    0x7fb4, 0x7fc9, 0x7fd4, 0x7fd9, 0x7ff4, 0x8003, 0x802c, 0x80a3, 0x80a8, 0x80bf, 0x80c0, 0x817f,
    0x8180, 0x81c2, 0x81c5, 0x81c8, 0x81d2, 0x81e8, 0x81fd, 0x8202, 0x8228, 0x8241, 0x8274, 0x8409,
    0x840c, 0x841d, 0x8420, 0x8429, 0x8450, 0x8455, 0x8458, 0x8465, 0x8478, 0x8491, 0x8494, 0x8499,
    0x849c, 0x84a1, 0x84a4, 0x84a9, 0x84b8, 0x84bd, 0x84e8, 0x84f1, 0x8500, 0x8515, 0x8528, 0x8539,
    0x853c, 0x8542, 0x860d, 0x8616, 0x8628, 0x9182, 0x9270, 0x93aa, 0x9400, 0x9dda, 0x9e50, 0xb001,
    0xb394, 0xb3ad, 0xb3bc, 0xb3c9, 0xb3d0, 0xb3f6, 0xb3f8, 0xb401, 0xb498, 0xb49d, 0xb4a0, 0xb4b5,
    0xb4b8, 0xb4c1, 0xb5a0, 0xb5bd, 0xb5c0, 0xb601, 0xb65c, 0xb681, 0xb69c, 0xb6a1, 0xb6bc, 0xb6c1,
    0xb6dc, 0xb6e1, 0xb6fc, 0xb701, 0xb71c, 0xb721, 0xb73c, 0xb741, 0xb75c, 0xb761, 0xb77c, 0xb8bd,
    0xb8c0, 0xc003, 0xc004, 0xc015, 0xc01e, 0xc020, 0xc086, 0xc0a8, 0xc0c5, 0xc0d8, 0xc0e2, 0xc0ed,
    0xc0f4, 0xc105, 0xc25c, 0xc275, 0xc280, 0xc285, 0xc3ec, 0xc3f1, 0xc400, 0xc415, 0xc4c0, 0xc4c5,
    0xc63c, 0xc64a, 0xc658, 0xc681, 0xc700, 0xc7c1, 0xc800, 0xc882, 0xc8a8, 0xc922, 0xc940, 0xc946,
    0xc980, 0xca02, 0xca28, 0xcac6, 0xcb00, 0xd001, 0x13700, 0x13801, 0x29234, 0x29341, 0x293f8,
    0x29401, 0x29834, 0x29841, 0x29882, 0x298a9, 0x298b0, 0x29901, 0x299bc, 0x299fd, 0x29a78,
    0x29a81, 0x29b9a, 0x29bc0, 0x29c5d, 0x29c80, 0x29c89, 0x29e24, 0x29e2d, 0x29f38, 0x29f41,
    0x29f48, 0x29f4d, 0x29f50, 0x29f55, 0x29f74, 0x29fc9, 0x2a008, 0x2a00d, 0x2a018, 0x2a01d,
    0x2a02c, 0x2a031, 0x2a08c, 0x2a0c2, 0x2a0d8, 0x2a101, 0x2a1d0, 0x2a209, 0x2a2d0, 0x2a342,
    0x2a368, 0x2a3c9, 0x2a3e0, 0x2a3ed, 0x2a3f0, 0x2a3f5, 0x2a3fc, 0x2a402, 0x2a429, 0x2a498,
    0x2a4c1, 0x2a51c, 0x2a581, 0x2a5f4, 0x2a611, 0x2a6cc, 0x2a73d, 0x2a742, 0x2a768, 0x2a781,
    0x2a794, 0x2a799, 0x2a7c2, 0x2a7e9, 0x2a7fc, 0x2a801, 0x2a8a4, 0x2a901, 0x2a90c, 0x2a911,
    0x2a930, 0x2a942, 0x2a968, 0x2a981, 0x2a9dc, 0x2a9e9, 0x2a9ec, 0x2a9f9, 0x2aac0, 0x2aac5,
    0x2aac8, 0x2aad5, 0x2aadc, 0x2aae5, 0x2aaf8, 0x2ab01, 0x2ab04, 0x2ab09, 0x2ab0c, 0x2ab6d,
    0x2ab78, 0x2ab81, 0x2abac, 0x2abc9, 0x2abd4, 0x2ac05, 0x2ac1c, 0x2ac25, 0x2ac3c, 0x2ac45,
    0x2ac5c, 0x2ac81, 0x2ac9c, 0x2aca1, 0x2acbc, 0x2acc1, 0x2ad6c, 0x2ad71, 0x2ada8, 0x2adc1,
    0x2af8c, 0x2afc2, 0x2afe8, 0x2b001, 0x35e90, 0x35ec1, 0x35f1c, 0x35f2d, 0x35ff0, 0x3e401,
    0x3e9b8, 0x3e9c1, 0x3eb68, 0x3ec01, 0x3ec1c, 0x3ec4d, 0x3ec60, 0x3ec75, 0x3ec78, 0x3ec7d,
    0x3eca4, 0x3eca9, 0x3ecdc, 0x3ece1, 0x3ecf4, 0x3ecf9, 0x3ecfc, 0x3ed01, 0x3ed08, 0x3ed0d,
    0x3ed14, 0x3ed19, 0x3eec8, 0x3ef4d, 0x3f4f8, 0x3f541, 0x3f640, 0x3f649, 0x3f720, 0x3f7c1,
    0x3f7f0, 0x3f9c1, 0x3f9d4, 0x3f9d9, 0x3fbf4, 0x3fc42, 0x3fc68, 0x3fc85, 0x3fcec, 0x3fd05,
    0x3fd6c, 0x3fd99, 0x3fefc, 0x3ff09, 0x3ff20, 0x3ff29, 0x3ff40, 0x3ff49, 0x3ff60, 0x3ff69,
    0x3ff74, 0x40001, 0x40030, 0x40035, 0x4009c, 0x400a1, 0x400ec, 0x400f1, 0x400f8, 0x400fd,
    0x40138, 0x40141, 0x40178, 0x40201, 0x403ec, 0x4041e, 0x404d0, 0x40502, 0x405e4, 0x4062a,
    0x40630, 0x40a01, 0x40a74, 0x40a81, 0x40b44, 0x40b86, 0x40bf0, 0x40c01, 0x40c82, 0x40c90,
    0x40cb5, 0x40d06, 0x40d09, 0x40d2a, 0x40d2c, 0x40d41, 0x40dd8, 0x40e01, 0x40e78, 0x40e81,
    0x40f10, 0x40f21, 0x40f40, 0x40f46, 0x40f58, 0x41001, 0x41278, 0x41282, 0x412a8, 0x412c1,
    0x41350, 0x41361, 0x413f0, 0x41401, 0x414a0, 0x414c1, 0x41590, 0x415c1, 0x415ec, 0x415f1,
    0x4162c, 0x41631, 0x4164c, 0x41651, 0x41658, 0x4165d, 0x41688, 0x4168d, 0x416c8, 0x416cd,
    0x416e8, 0x416ed, 0x416f4, 0x41701, 0x417d0, 0x41801, 0x41cdc, 0x41d01, 0x41d58, 0x41d81,
    0x41da0, 0x41e01, 0x41e18, 0x41e1d, 0x41ec4, 0x41ec9, 0x41eec, 0x42001, 0x42018, 0x42021,
    0x42024, 0x42029, 0x420d8, 0x420dd, 0x420e4, 0x420f1, 0x420f4, 0x420fd, 0x42158, 0x42162,
    0x42181, 0x421dc, 0x421e6, 0x42201, 0x4227c, 0x4229e, 0x422c0, 0x42381, 0x423cc, 0x423d1,
    0x423d8, 0x423ee, 0x42401, 0x4245a, 0x42470, 0x42481, 0x424e8, 0x42601, 0x426e0, 0x426f2,
    0x426f9, 0x42702, 0x42740, 0x4274a, 0x42801, 0x42804, 0x42841, 0x42850, 0x42855, 0x42860,
    0x42865, 0x428d8, 0x42902, 0x42924, 0x42981, 0x429f6, 0x429fc, 0x42a01, 0x42a76, 0x42a80,
    0x42b01, 0x42b20, 0x42b25, 0x42b94, 0x42bae, 0x42bc0, 0x42c01, 0x42cd8, 0x42d01, 0x42d58,
    0x42d62, 0x42d81, 0x42dcc, 0x42de2, 0x42e01, 0x42e48, 0x42ea6, 0x42ec0, 0x43001, 0x43124,
    0x43201, 0x432cc, 0x43301, 0x433cc, 0x433ea, 0x43401, 0x43490, 0x434c2, 0x434e8, 0x43502,
    0x43529, 0x43598, 0x435bd, 0x43618, 0x43982, 0x439fc, 0x43a01, 0x43aa8, 0x43ac1, 0x43ac8,
    0x43b09, 0x43b14, 0x43c01, 0x43c76, 0x43c9d, 0x43ca0, 0x43cc1, 0x43d18, 0x43d46, 0x43d54,
    0x43dc1, 0x43e08, 0x43ec1, 0x43f16, 0x43f30, 0x43f81, 0x43fdc, 0x4400d, 0x440e0, 0x4414a,
    0x441c0, 0x441c5, 0x441cc, 0x441d5, 0x441d8, 0x4420d, 0x442c0, 0x44341, 0x443a4, 0x443c2,
    0x443e8, 0x4440d, 0x4449c, 0x444da, 0x44500, 0x44511, 0x44514, 0x4451d, 0x44520, 0x44541,
    0x445cc, 0x445d9, 0x445dc, 0x4460d, 0x446cc, 0x44705, 0x44714, 0x44742, 0x44769, 0x4476c,
    0x44771, 0x44774, 0x44786, 0x447d4, 0x44801, 0x44848, 0x4484d, 0x448b0, 0x448fd, 0x44904,
    0x44a01, 0x44a1c, 0x44a21, 0x44a24, 0x44a29, 0x44a38, 0x44a3d, 0x44a78, 0x44a7d, 0x44aa4,
    0x44ac1, 0x44b7c, 0x44bc2, 0x44be8, 0x44c15, 0x44c34, 0x44c3d, 0x44c44, 0x44c4d, 0x44ca4,
    0x44ca9, 0x44cc4, 0x44cc9, 0x44cd0, 0x44cd5, 0x44ce8, 0x44cf5, 0x44cf8, 0x44d41, 0x44d44,
    0x44d75, 0x44d88, 0x44e01, 0x44e28, 0x44e2d, 0x44e30, 0x44e39, 0x44e3c, 0x44e41, 0x44ed8,
    0x44edd, 0x44ee0, 0x44f45, 0x44f48, 0x44f4d, 0x44f50, 0x45001, 0x450d4, 0x4511d, 0x4512c,
    0x45142, 0x45168, 0x4517d, 0x45188, 0x45201, 0x452c0, 0x45311, 0x45318, 0x4531d, 0x45320,
    0x45342, 0x45368, 0x45601, 0x456bc, 0x45761, 0x45770, 0x45801, 0x458c0, 0x45911, 0x45914,
    0x45942, 0x45968, 0x45a01, 0x45aac, 0x45ae1, 0x45ae4, 0x45b02, 0x45b28, 0x45b42, 0x45b90,
    0x45c01, 0x45c6c, 0x45cc2, 0x45cf0, 0x45d01, 0x45d1c, 0x46001, 0x460b0, 0x46281, 0x46382,
    0x463cc, 0x463fd, 0x4641c, 0x46425, 0x46428, 0x46431, 0x46450, 0x46455, 0x4645c, 0x46461,
    0x464c0, 0x464fd, 0x46500, 0x46505, 0x46508, 0x46542, 0x46568, 0x46681, 0x466a0, 0x466a9,
    0x46744, 0x46785, 0x46788, 0x4678d, 0x46790, 0x46801, 0x46804, 0x4682d, 0x468cc, 0x468e9,
    0x468ec, 0x46941, 0x46944, 0x46971, 0x46a28, 0x46a75, 0x46a78, 0x46ac1, 0x46be4, 0x46f01,
    0x46f84, 0x46fc2, 0x46fe8, 0x47001, 0x47024, 0x47029, 0x470bc, 0x47101, 0x47104, 0x47142,
    0x471b4, 0x471c9, 0x47240, 0x47401, 0x4741c, 0x47421, 0x47428, 0x4742d, 0x474c4, 0x47519,
    0x4751c, 0x47542, 0x47568, 0x47581, 0x47598, 0x4759d, 0x475a4, 0x475a9, 0x47628, 0x47661,
    0x47664, 0x47682, 0x476a8, 0x47b81, 0x47bcc, 0x47c09, 0x47c0c, 0x47c11, 0x47c44, 0x47c49,
    0x47cd0, 0x47d42, 0x47d68, 0x47ec1, 0x47ec4, 0x47f02, 0x47f54, 0x48001, 0x48e68, 0x49002,
    0x491bc, 0x49201, 0x49510, 0x4be41, 0x4bfc4, 0x4c001, 0x4d0c0, 0x4d105, 0x4d11c, 0x4d181,
    0x50fec, 0x51001, 0x5191c, 0x58401, 0x58478, 0x584c2, 0x584e8, 0x5a001, 0x5a8e4, 0x5a901,
    0x5a97c, 0x5a982, 0x5a9a8, 0x5a9c1, 0x5aafc, 0x5ab02, 0x5ab28, 0x5ab41, 0x5abb8, 0x5ac01,
    0x5acc0, 0x5ad01, 0x5ad10, 0x5ad42, 0x5ad68, 0x5ad6e, 0x5ad88, 0x5ad8d, 0x5ade0, 0x5adf5,
    0x5ae40, 0x5b501, 0x5b5b4, 0x5b5c2, 0x5b5e8, 0x5b901, 0x5ba02, 0x5ba5c, 0x5bc01, 0x5bd2c,
    0x5bd41, 0x5bd44, 0x5be4d, 0x5be80, 0x5bf81, 0x5bf88, 0x5bf8d, 0x5bf90, 0x5c001, 0x61fe0,
    0x62001, 0x63358, 0x633fd, 0x63424, 0x6bfc1, 0x6bfd0, 0x6bfd5, 0x6bff0, 0x6bff5, 0x6bffc,
    0x6c001, 0x6c48c, 0x6c4c9, 0x6c4cc, 0x6c541, 0x6c54c, 0x6c555, 0x6c558, 0x6c591, 0x6c5a0,
    0x6c5c1, 0x6cbf0, 0x6f001, 0x6f1ac, 0x6f1c1, 0x6f1f4, 0x6f201, 0x6f224, 0x6f241, 0x6f268,
    0x733c2, 0x733e8, 0x74b02, 0x74b50, 0x74b82, 0x74bd0, 0x74d82, 0x74de4, 0x75001, 0x75154,
    0x75159, 0x75274, 0x75279, 0x75280, 0x75289, 0x7528c, 0x75295, 0x7529c, 0x752a5, 0x752b4,
    0x752b9, 0x752e8, 0x752ed, 0x752f0, 0x752f5, 0x75310, 0x75315, 0x75418, 0x7541d, 0x7542c,
    0x75435, 0x75454, 0x75459, 0x75474, 0x75479, 0x754e8, 0x754ed, 0x754fc, 0x75501, 0x75514,
    0x75519, 0x7551c, 0x75529, 0x75544, 0x75549, 0x75a98, 0x75aa1, 0x75b04, 0x75b09, 0x75b6c,
    0x75b71, 0x75bec, 0x75bf1, 0x75c54, 0x75c59, 0x75cd4, 0x75cd9, 0x75d3c, 0x75d41, 0x75dbc,
    0x75dc1, 0x75e24, 0x75e29, 0x75ea4, 0x75ea9, 0x75f0c, 0x75f11, 0x75f30, 0x75f3a, 0x76000,
    0x77c01, 0x77c7c, 0x77c95, 0x77cac, 0x780c1, 0x781b8, 0x78401, 0x784b4, 0x784dd, 0x784f8,
    0x78502, 0x78528, 0x78539, 0x7853c, 0x78a41, 0x78ab8, 0x78b01, 0x78bb0, 0x78bc2, 0x78be8,
    0x79341, 0x793b0, 0x793c2, 0x793e8, 0x79741, 0x797b8, 0x797c1, 0x797c6, 0x797ec, 0x79f81,
    0x79f9c, 0x79fa1, 0x79fb0, 0x79fb5, 0x79fbc, 0x79fc1, 0x79ffc, 0x7a001, 0x7a314, 0x7a31e,
    0x7a340, 0x7a401, 0x7a510, 0x7a52d, 0x7a530, 0x7a542, 0x7a568, 0x7b1c6, 0x7b2b0, 0x7b2b6,
    0x7b2c0, 0x7b2c6, 0x7b2d4, 0x7b406, 0x7b4b8, 0x7b4be, 0x7b4f8, 0x7b801, 0x7b810, 0x7b815,
    0x7b880, 0x7b885, 0x7b88c, 0x7b891, 0x7b894, 0x7b89d, 0x7b8a0, 0x7b8a5, 0x7b8cc, 0x7b8d1,
    0x7b8e0, 0x7b8e5, 0x7b8e8, 0x7b8ed, 0x7b8f0, 0x7b909, 0x7b90c, 0x7b91d, 0x7b920, 0x7b925,
    0x7b928, 0x7b92d, 0x7b930, 0x7b935, 0x7b940, 0x7b945, 0x7b94c, 0x7b951, 0x7b954, 0x7b95d,
    0x7b960, 0x7b965, 0x7b968, 0x7b96d, 0x7b970, 0x7b975, 0x7b978, 0x7b97d, 0x7b980, 0x7b985,
    0x7b98c, 0x7b991, 0x7b994, 0x7b99d, 0x7b9ac, 0x7b9b1, 0x7b9cc, 0x7b9d1, 0x7b9e0, 0x7b9e5,
    0x7b9f4, 0x7b9f9, 0x7b9fc, 0x7ba01, 0x7ba28, 0x7ba2d, 0x7ba70, 0x7ba85, 0x7ba90, 0x7ba95,
    0x7baa8, 0x7baad, 0x7baf0, 0x7c402, 0x7c434, 0x7efc2, 0x7efe8, 0x80001, 0xa9b80, 0xa9c01,
    0xadce8, 0xadd01, 0xae078, 0xae081, 0xb3a88, 0xb3ac1, 0xbaf84, 0xbafc1, 0xbb978, 0xbe001,
    0xbe878, 0xc0001, 0xc4d2c, 0xc4d41, 0xc8ec0,
};

/* \p{L} / \p{N} / \s / other, as the GPT-2 split regex sees them. */
static int gio__uclass(uint32_t c) {
    size_t lo = 0, hi = sizeof gio__utab / sizeof gio__utab[0];
    if (c < 0x80) {
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return GIO__CL;
        if (c >= '0' && c <= '9') return GIO__CN;
        if (c == ' ' || (c >= 9 && c <= 13)) return GIO__CS;
        return GIO__CO;
    }
    if (c < 0x100) {
        if (c == 0x85 || c == 0xA0) return GIO__CS;
        if (c == 0xAA || c == 0xB5 || c == 0xBA || (c >= 0xC0 && c != 0xD7 && c != 0xF7)) return GIO__CL;
        if (c == 0xB2 || c == 0xB3 || c == 0xB9 || (c >= 0xBC && c <= 0xBE)) return GIO__CN;
        return GIO__CO;
    }
    /* largest entry whose start <= c; entry 0 starts at U+0100 */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if ((gio__utab[mid] >> 2) <= c) lo = mid;
        else hi = mid;
    }
    return (int)(gio__utab[lo] & 3);
}

/* Invalid UTF-8 advances one byte and counts as punctuation, so arbitrary
   bytes still tokenize (and round-trip) instead of failing. */
static size_t gio__cp_at(const unsigned char *s, size_t n, size_t i, int *cls) {
    uint32_t cp;
    size_t l = tj_utf8_decode(s + i, n - i, &cp);
    if (!l) { *cls = GIO__CO; return 1; }
    *cls = gio__uclass(cp);
    return l;
}

size_t gio_gpt2_pretok_next(const char *text, size_t n, size_t i) {
    const unsigned char *s = (const unsigned char *)text;
    size_t j, l, k, last;
    int c;
    if (i >= n) return 0;
    /* 's|'t|'re|'ve|'m|'ll|'d  (case-sensitive, as in GPT-2) */
    if (s[i] == '\'' && i + 1 < n) {
        unsigned char a = s[i + 1];
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
        if (i + 2 < n && ((a == 'r' && s[i + 2] == 'e') || (a == 'v' && s[i + 2] == 'e') ||
                          (a == 'l' && s[i + 2] == 'l')))
            return 3;
    }
    /*  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+  */
    j = i;
    gio__cp_at(s, n, j, &c);
    if (s[i] == ' ' && i + 1 < n) {
        int c2;
        gio__cp_at(s, n, i + 1, &c2);
        if (c2 != GIO__CS) { j = i + 1; c = c2; }
    }
    if (c != GIO__CS) {
        int c2 = c;
        while (j < n) {
            l = gio__cp_at(s, n, j, &c2);
            if (c2 != c) break;
            j += l;
        }
        return j - i;
    }
    /* \s+(?!\S) | \s+ : a whitespace run gives up its last character to a
       following word, so " world" stays one piece after "\n\n". */
    k = i;
    last = i;
    while (k < n) {
        int c3;
        size_t l3 = gio__cp_at(s, n, k, &c3);
        if (c3 != GIO__CS) break;
        last = k;
        k += l3;
    }
    if (k == n || last == i) return k - i;
    return last - i;
}

typedef struct {
    int32_t id;
    int special, lstrip, rstrip, single_word;
} gio__added;

struct gio__bpe {
    int vocab_size;
    gio__added *added;        /* added tokens (content = tok[id])           */
    size_t nadded, acap;
    unsigned char added_first[256]; /* first bytes of added tokens         */
    int ignore_merges;        /* a piece that is a token is taken whole     */
    int add_prefix_space;     /* ByteLevel: a space before each segment     */
    char **tok;               /* id -> raw bytes (NULL for unused ids) */
    size_t *tok_len;
    size_t vcap;              /* power of two */
    int32_t *vslot;           /* raw bytes -> id, open addressing, -1 empty */
    size_t mcap;
    uint64_t *mkey;           /* (left << 32 | right) */
    int32_t *mrank, *mres;    /* mres == -1: empty slot */
    int32_t byte_id[256];
};

static uint64_t gio__hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    size_t i;
    for (i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static uint64_t gio__mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static int32_t gio__bpe_find(const struct gio__bpe *b, const char *s, size_t n) {
    size_t m = b->vcap - 1, i;
    if (!b->vcap) return -1;
    for (i = (size_t)gio__hash(s, n) & m; b->vslot[i] >= 0; i = (i + 1) & m) {
        int32_t id = b->vslot[i];
        if (b->tok_len[id] == n && memcmp(b->tok[id], s, n) == 0) return id;
    }
    return -1;
}

static void gio__bpe_free(struct gio__bpe *b) {
    int i;
    void *own[8];
    if (!b) return;
    for (i = 0; b->tok && i < b->vocab_size; i++) free(b->tok[i]);
    own[0] = b->added, own[1] = b->tok, own[2] = b->tok_len, own[3] = b->vslot;
    own[4] = b->mkey, own[5] = b->mrank, own[6] = b->mres, own[7] = b;
    for (i = 0; i < 8; i++) free(own[i]);
}

/* Vocab/merges strings are in GPT-2's printable byte alphabet; map back to
   raw bytes so encode/decode work on bytes.  Characters outside the
   alphabet (e.g. in added special tokens) are kept as their UTF-8. */
static char *gio__unmap(const int16_t *inv, const char *s, size_t n, size_t *outn) {
    char *o = (char *)gio__alloc(n + 1);
    size_t i = 0, m = 0;
    if (!o) return NULL;
    while (i < n) {
        uint32_t cp;
        size_t l = tj_utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (!l) { o[m++] = s[i++]; continue; }
        if (cp < 0x144 && inv[cp] >= 0) o[m++] = (char)inv[cp];
        else { memcpy(o + m, s + i, l); m += l; }
        i += l;
    }
    o[m] = 0;
    *outn = m;
    return o;
}

static int gio__bpe_merge_find(const struct gio__bpe *b, int32_t x, int32_t y, int32_t *rank, int32_t *res) {
    uint64_t key = ((uint64_t)(uint32_t)x << 32) | (uint32_t)y;
    size_t m = b->mcap - 1, i;
    if (!b->mcap) return 0;
    for (i = (size_t)gio__mix(key) & m; b->mres[i] >= 0; i = (i + 1) & m)
        if (b->mkey[i] == key) { *rank = b->mrank[i]; *res = b->mres[i]; return 1; }
    return 0;
}

typedef struct { char *s; size_t n; uint64_t id; } gio__vent;

/* growable arrays of vocab entries and merge pairs, before the tables exist */
typedef struct {
    gio__vent *ent;
    size_t nent, ecap;
    char **mleft, **mright;   /* merge pairs as raw bytes (NUL-terminated copies) */
    size_t *mlen_l, *mlen_r;
    size_t *mline;            /* merges.txt line of each merge, for messages (0: none) */
    size_t nmerge, mcap;
} gio__bpe_src;

static void gio__src_free(gio__bpe_src *s) {
    size_t i;
    for (i = 0; i < s->nent; i++) free(s->ent[i].s);
    for (i = 0; i < s->nmerge; i++) { free(s->mleft[i]); free(s->mright[i]); }
    {
        void *own[6];
        own[0] = s->ent, own[1] = s->mleft, own[2] = s->mright, own[3] = s->mlen_l, own[4] = s->mlen_r, own[5] = s->mline;
        for (i = 0; i < 6; i++) free(own[i]);
    }
    memset(s, 0, sizeof *s);
}

/* takes ownership of raw */
static int gio__src_vocab(gio__bpe_src *s, char *raw, size_t n, uint64_t id) {
    if (s->nent == s->ecap) {
        size_t ncap = s->ecap ? s->ecap * 2 : 1024;
        gio__vent *ne = (gio__vent *)realloc(s->ent, sizeof *ne * ncap);
        if (!ne) { free(raw); return 1; }
        s->ent = ne;
        s->ecap = ncap;
    }
    s->ent[s->nent].s = raw;
    s->ent[s->nent].n = n;
    s->ent[s->nent].id = id;
    s->nent++;
    return 0;
}

/* takes ownership of l and r */
static int gio__src_merge(gio__bpe_src *s, char *l, size_t nl, char *r, size_t nr, size_t line) {
    if (s->nmerge == s->mcap) {
        size_t ncap = s->mcap ? s->mcap * 2 : 1024;
        char **a = (char **)realloc(s->mleft, sizeof(char *) * ncap);
        char **b;
        size_t *c, *d;
        if (a) s->mleft = a;
        b = a ? (char **)realloc(s->mright, sizeof(char *) * ncap) : NULL;
        if (b) s->mright = b;
        c = b ? (size_t *)realloc(s->mlen_l, sizeof(size_t) * ncap) : NULL;
        if (c) s->mlen_l = c;
        d = c ? (size_t *)realloc(s->mlen_r, sizeof(size_t) * ncap) : NULL;
        if (d) s->mlen_r = d;
        c = d ? (size_t *)realloc(s->mline, sizeof(size_t) * ncap) : NULL;
        if (c) s->mline = c;
        if (!c) { free(l); free(r); return 1; }
        s->mcap = ncap;
    }
    s->mleft[s->nmerge] = l;
    s->mright[s->nmerge] = r;
    s->mlen_l[s->nmerge] = nl;
    s->mlen_r[s->nmerge] = nr;
    s->mline[s->nmerge] = line;
    s->nmerge++;
    return 0;
}

static void gio__inv_table(int16_t inv[0x144]) {
    int bt;
    for (bt = 0; bt < 0x144; bt++) inv[bt] = -1;
    for (bt = 0; bt < 256; bt++) inv[gio_gpt2_byte_to_unicode((unsigned char)bt)] = (int16_t)bt;
}

static void gio__bpe_index(struct gio__bpe *b, int32_t id) {
    /* First entry wins if two ids have the same bytes. */
    if (gio__bpe_find(b, b->tok[id], b->tok_len[id]) < 0) {
        size_t m = b->vcap - 1, s;
        for (s = (size_t)gio__hash(b->tok[id], b->tok_len[id]) & m; b->vslot[s] >= 0; s = (s + 1) & m) {}
        b->vslot[s] = id;
    }
}

/* Builds the tables from the vocabulary entries (ownership of their
   strings moves to b), then adds the merges in rank order.  `extra` more
   ids may be added later (added tokens): the hash table leaves room. */
static int gio__bpe_build(struct gio__bpe *b, gio__bpe_src *src, uint64_t max_id, size_t extra, const char *vlabel,
                          const char *mlabel, char *err, size_t errlen) {
    size_t i;
    if (src->nent == 0) { gio__seterr(err, errlen, "%s: empty vocabulary", vlabel); return 1; }
    b->tok = (char **)calloc((size_t)max_id + 1, sizeof(char *));
    b->tok_len = (size_t *)calloc((size_t)max_id + 1, sizeof(size_t));
    if (!b->tok || !b->tok_len) { gio__seterr(err, errlen, "%s: out of memory", vlabel); return 1; }
    b->vocab_size = (int)max_id + 1;
    for (b->vcap = 16; b->vcap < 2 * (src->nent + extra); b->vcap *= 2) {}
    b->vslot = (int32_t *)malloc(sizeof(int32_t) * b->vcap);
    if (!b->vslot) { gio__seterr(err, errlen, "%s: out of memory", vlabel); return 1; }
    for (i = 0; i < b->vcap; i++) b->vslot[i] = -1;
    for (i = 0; i < src->nent; i++) {
        int32_t id = (int32_t)src->ent[i].id;
        if (id >= b->vocab_size) continue; /* caller's max_id is below: cannot happen */
        if (b->tok[id]) { gio__seterr(err, errlen, "%s: id %ld assigned to two tokens", vlabel, (long)id); return 1; }
        b->tok[id] = src->ent[i].s;
        b->tok_len[id] = src->ent[i].n;
        src->ent[i].s = NULL;
        gio__bpe_index(b, id);
    }
    for (i = 0; i < 256; i++) {
        char c = (char)i;
        b->byte_id[i] = gio__bpe_find(b, &c, 1);
        if (b->byte_id[i] < 0) {
            gio__seterr(err, errlen, "%s: no token for byte 0x%02x (byte-level BPE needs all 256)", vlabel, (unsigned)i);
            return 1;
        }
    }
    for (b->mcap = 16; b->mcap < 2 * (src->nmerge + 1); b->mcap *= 2) {}
    b->mkey = (uint64_t *)malloc(sizeof(uint64_t) * b->mcap);
    b->mrank = (int32_t *)malloc(sizeof(int32_t) * b->mcap);
    b->mres = (int32_t *)malloc(sizeof(int32_t) * b->mcap);
    if (!b->mkey || !b->mrank || !b->mres) { gio__seterr(err, errlen, "%s: out of memory", mlabel); return 1; }
    for (i = 0; i < b->mcap; i++) b->mres[i] = -1;
    for (i = 0; i < src->nmerge; i++) {
        size_t na = src->mlen_l[i], nb2 = src->mlen_r[i];
        char *rcat = (char *)malloc(na + nb2 + 1);
        int32_t ia, ib, ic, rk, rs;
        if (!rcat) { gio__seterr(err, errlen, "%s: out of memory", mlabel); return 1; }
        memcpy(rcat, src->mleft[i], na);
        memcpy(rcat + na, src->mright[i], nb2);
        ia = gio__bpe_find(b, src->mleft[i], na);
        ib = gio__bpe_find(b, src->mright[i], nb2);
        ic = gio__bpe_find(b, rcat, na + nb2);
        free(rcat);
        if (ia < 0 || ib < 0 || ic < 0) {
            /* merges.txt: file:line; tokenizer.json: the merge's index */
            char where[700];
            if (src->mline[i]) snprintf(where, sizeof where, "%s:%zu:", mlabel, src->mline[i]);
            else snprintf(where, sizeof where, "%s[%zu]:", mlabel, i);
            gio__seterr(err, errlen, "%s merge \"%.*s\" + \"%.*s\": %s not in %s", where, (int)(na > 30 ? 30 : na), src->mleft[i],
                        (int)(nb2 > 30 ? 30 : nb2), src->mright[i], ia < 0 ? "left part" : ib < 0 ? "right part" : "merged token", vlabel);
            return 1;
        }
        /* A repeated pair keeps its first (highest priority) rank. */
        if (!gio__bpe_merge_find(b, ia, ib, &rk, &rs)) {
            uint64_t k2 = ((uint64_t)(uint32_t)ia << 32) | (uint32_t)ib;
            size_t m = b->mcap - 1, s;
            for (s = (size_t)gio__mix(k2) & m; b->mres[s] >= 0; s = (s + 1) & m) {}
            b->mkey[s] = k2;
            b->mrank[s] = (int32_t)i;
            b->mres[s] = ic;
        }
    }
    return 0;
}

/* An added token (tokenizer.json's added_tokens, or GPT-2's <|endoftext|>):
   content is raw UTF-8, matched in the text before pre-tokenization. */
static int gio__bpe_add_token(struct gio__bpe *b, const char *s, size_t n, int32_t id, int special, int lstrip, int rstrip, int single_word,
                              const char *label, char *err, size_t errlen) {
    gio__added *a;
    if (n == 0) { gio__seterr(err, errlen, "%s: added token %ld has empty content", label, (long)id); return 1; }
    if (id < 0 || id >= b->vocab_size) { gio__seterr(err, errlen, "%s: added token id %ld out of range", label, (long)id); return 1; }
    if (b->tok[id] && (b->tok_len[id] != n || memcmp(b->tok[id], s, n))) {
        gio__seterr(err, errlen, "%s: added token \"%.*s\" has id %ld, which the vocabulary gives to \"%.*s\"", label, (int)(n > 40 ? 40 : n), s, (long)id,
                    (int)(b->tok_len[id] > 40 ? 40 : b->tok_len[id]), b->tok[id]);
        return 1;
    }
    if (!b->tok[id]) {
        b->tok[id] = (char *)gio__alloc(n + 1);
        if (!b->tok[id]) { gio__seterr(err, errlen, "%s: out of memory", label); return 1; }
        memcpy(b->tok[id], s, n);
        b->tok[id][n] = 0;
        b->tok_len[id] = n;
        gio__bpe_index(b, id);
    }
    if (b->nadded == b->acap) {
        size_t ncap = b->acap ? b->acap * 2 : 8;
        gio__added *na = (gio__added *)realloc(b->added, sizeof *na * ncap);
        if (!na) { gio__seterr(err, errlen, "%s: out of memory", label); return 1; }
        b->added = na;
        b->acap = ncap;
    }
    a = &b->added[b->nadded++];
    a->id = id;
    a->special = special;
    a->lstrip = lstrip;
    a->rstrip = rstrip;
    a->single_word = single_word;
    b->added_first[(unsigned char)s[0]] = 1;
    return 0;
}

static int gio__bpe_load(struct gio__bpe *b, const char *vpath, const char *mpath, char *err, size_t errlen) {
    char *vb = NULL, *mb = NULL, *key;
    size_t vlen, mlen, line_no = 0, p;
    gio__bpe_src src;
    tj_json j;
    int first = 1, r, rc = 1;
    uint64_t max_id = 0;
    int16_t inv[0x144];       /* GPT-2 alphabet code point -> byte */
    char mlabel[600];

    memset(&src, 0, sizeof src);
    gio__inv_table(inv);
    if (tj_read_file(vpath, &vb, &vlen, err, errlen)) return 1;
    tj_json_init(&j, vb, vlen, vpath, err, errlen);
    if (tj_json_expect(&j, '{')) goto done;
    while ((r = tj_json_object_next(&j, &first, &key)) == 1) {
        uint64_t id;
        size_t raw_n;
        char *raw;
        if (tj_json_u64(&j, &id)) { free(key); goto done; }
        if (id >= (1u << 24)) { free(key); tj_json_fail(&j, "token id %llu too large", (unsigned long long)id); goto done; }
        raw = gio__unmap(inv, key, strlen(key), &raw_n);
        free(key);
        if (!raw || gio__src_vocab(&src, raw, raw_n, id)) { tj_json_fail(&j, "out of memory"); goto done; }
        if (id > max_id) max_id = id;
    }
    if (r < 0) goto done;
    if (tj_json_peek(&j) != -1) { tj_json_fail(&j, "trailing garbage"); goto done; }

    if (tj_read_file(mpath, &mb, &mlen, err, errlen)) goto done;
    for (p = 0; p < mlen;) {
        size_t e = p, le, sp, na, nb2;
        char *ra, *rb;
        while (e < mlen && mb[e] != '\n') e++;
        line_no++;
        le = e;
        if (le > p && mb[le - 1] == '\r') le--;
        if (le == p || (line_no == 1 && le - p >= 8 && memcmp(mb + p, "#version", 8) == 0)) { p = e + 1; continue; }
        for (sp = p; sp < le && mb[sp] != ' '; sp++) {}
        if (sp == le || sp == p || sp + 1 == le || memchr(mb + sp + 1, ' ', le - sp - 1)) {
            gio__seterr(err, errlen, "%s:%zu: expected \"left right\", got \"%.*s\"", mpath, line_no,
                        (int)(le - p > 60 ? 60 : le - p), mb + p);
            goto done;
        }
        ra = gio__unmap(inv, mb + p, sp - p, &na);
        rb = gio__unmap(inv, mb + sp + 1, le - sp - 1, &nb2);
        if (!ra || !rb) { free(ra); free(rb); gio__seterr(err, errlen, "%s: out of memory", mpath); goto done; }
        if (gio__src_merge(&src, ra, na, rb, nb2, line_no)) { gio__seterr(err, errlen, "%s: out of memory", mpath); goto done; }
        p = e + 1;
    }
    snprintf(mlabel, sizeof mlabel, "%s", mpath);
    if (gio__bpe_build(b, &src, max_id, 1, vpath, mlabel, err, errlen)) goto done;
    /* GPT-2's one special token, when the vocabulary has it */
    {
        int32_t eot = gio__bpe_find(b, "<|endoftext|>", 13);
        if (eot >= 0 && gio__bpe_add_token(b, "<|endoftext|>", 13, eot, 1, 0, 0, 0, vpath, err, errlen)) goto done;
    }
    rc = 0;
done:
    gio__src_free(&src);
    free(vb);
    free(mb);
    return rc;
}

/* ---- tokenizer.json (Hugging Face tokenizers) ---- */

/* value of "type" in an object (after its '{'), other members skipped;
   type gets "" if absent, "null" for a JSON null instead of an object */
static int gio__json_type_of(tj_json *j, char *type, size_t tn, int *use_regex, int *add_prefix_space) {
    int first = 1, r, lit;
    char *key;
    type[0] = 0;
    if (tj_json_peek(j) == 'n') {
        if (tj_json_literal(j, &lit) || lit != -1) return 1;
        snprintf(type, tn, "null");
        return 0;
    }
    if (tj_json_expect(j, '{')) return 1;
    while ((r = tj_json_object_next(j, &first, &key)) == 1) {
        int bad = 0;
        if (!strcmp(key, "type")) {
            char *v = NULL;
            if (tj_json_cstring(j, &v)) bad = 1;
            else snprintf(type, tn, "%s", v);
            free(v);
        } else if (use_regex && !strcmp(key, "use_regex")) {
            if (tj_json_literal(j, use_regex) || *use_regex < 0) bad = 1;
        } else if (add_prefix_space && !strcmp(key, "add_prefix_space")) {
            if (tj_json_literal(j, add_prefix_space) || *add_prefix_space < 0) bad = 1;
        } else bad = tj_json_skip(j);
        free(key);
        if (bad) return 1;
    }
    return r < 0;
}

typedef struct { char *content; size_t n; int64_t id; int special, lstrip, rstrip, single_word; } gio__atok;

static int gio__tj_added(tj_json *j, gio__atok **out, size_t *nout) {
    size_t cap = 0;
    int firstel = 1;
    *out = NULL;
    *nout = 0;
    if (tj_json_expect(j, '[')) return 1;
    for (;;) {
        int c = tj_json_peek(j), first = 1, r;
        char *key;
        gio__atok t;
        if (c == ']') { j->i++; return 0; }
        if (!firstel) {
            if (c != ',') return tj_json_fail(j, "expected ',' or ']'");
            j->i++;
        }
        firstel = 0;
        memset(&t, 0, sizeof t);
        t.id = -1;
        if (tj_json_expect(j, '{')) return 1;
        while ((r = tj_json_object_next(j, &first, &key)) == 1) {
            int bad = 0, lit = 0;
            if (!strcmp(key, "id")) {
                uint64_t v;
                if (tj_json_u64(j, &v) || v >= (1u << 24)) bad = 1;
                else t.id = (int64_t)v;
            } else if (!strcmp(key, "content")) {
                free(t.content);
                t.content = NULL;
                bad = tj_json_string(j, &t.content, &t.n);
            } else if (!strcmp(key, "special") || !strcmp(key, "lstrip") || !strcmp(key, "rstrip") || !strcmp(key, "single_word")) {
                if (tj_json_literal(j, &lit) || lit < 0) bad = 1;
                else if (key[0] == 's' && key[1] == 'p') t.special = lit;
                else if (key[0] == 'l') t.lstrip = lit;
                else if (key[0] == 'r') t.rstrip = lit;
                else t.single_word = lit;
            } else bad = tj_json_skip(j);
            free(key);
            if (bad) { free(t.content); return tj_json_fail(j, "bad added_tokens entry"); }
        }
        if (r < 0) { free(t.content); return 1; }
        if (t.id < 0 || !t.content) { free(t.content); return tj_json_fail(j, "added_tokens entry without id or content"); }
        if (*nout == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            gio__atok *na = (gio__atok *)realloc(*out, sizeof *na * ncap);
            if (!na) { free(t.content); return tj_json_fail(j, "out of memory"); }
            *out = na;
            cap = ncap;
        }
        (*out)[(*nout)++] = t;
    }
}

/* model: {"type": "BPE", "vocab": {..}, "merges": ["a b", ..] or [["a", "b"], ..], ..} */
static int gio__tj_model(tj_json *j, const int16_t *inv, gio__bpe_src *src, uint64_t *max_id, int *ignore_merges, const char *path,
                         char *err, size_t errlen) {
    int first = 1, r;
    char *key;
    if (tj_json_expect(j, '{')) return 1;
    while ((r = tj_json_object_next(j, &first, &key)) == 1) {
        int bad = 0, lit;
        if (!strcmp(key, "type")) {
            char *v = NULL;
            if (tj_json_cstring(j, &v)) bad = 1;
            else if (strcmp(v, "BPE")) {
                gio__seterr(err, errlen, "%s: model type \"%s\" is not supported (tinyjax reads byte-level BPE)", path, v);
                bad = 2;
            }
            free(v);
        } else if (!strcmp(key, "vocab")) {
            int f2 = 1, r2;
            char *tk;
            if (tj_json_expect(j, '{')) bad = 1;
            while (!bad && (r2 = tj_json_object_next(j, &f2, &tk)) == 1) {
                uint64_t id;
                size_t raw_n;
                char *raw;
                if (tj_json_u64(j, &id) || id >= (1u << 24)) { free(tk); bad = 1; tj_json_fail(j, "bad token id"); break; }
                raw = gio__unmap(inv, tk, strlen(tk), &raw_n);
                free(tk);
                if (!raw || gio__src_vocab(src, raw, raw_n, id)) { bad = 1; tj_json_fail(j, "out of memory"); break; }
                if (id > *max_id) *max_id = id;
            }
            if (!bad && r2 < 0) bad = 1;
        } else if (!strcmp(key, "merges")) {
            int f2 = 1;
            if (tj_json_expect(j, '[')) bad = 1;
            while (!bad) {
                int c = tj_json_peek(j);
                char *a = NULL, *b2 = NULL, *ra, *rb;
                size_t la, lb, na, nb2;
                if (c == ']') { j->i++; break; }
                if (!f2) {
                    if (c != ',') { bad = 1; tj_json_fail(j, "expected ',' or ']'"); break; }
                    j->i++;
                }
                f2 = 0;
                if (tj_json_peek(j) == '[') { /* ["left", "right"] */
                    j->i++;
                    if (tj_json_string(j, &a, &la) || tj_json_expect(j, ',') || tj_json_string(j, &b2, &lb) || tj_json_expect(j, ']')) {
                        free(a); free(b2); bad = 1; break;
                    }
                } else { /* "left right" */
                    char *sp;
                    if (tj_json_string(j, &a, &la)) { bad = 1; break; }
                    sp = (char *)memchr(a, ' ', la);
                    if (!sp || sp == a || sp + 1 == a + la || memchr(sp + 1, ' ', la - (size_t)(sp + 1 - a))) {
                        tj_json_fail(j, "merge \"%.*s\" is not \"left right\"", (int)(la > 40 ? 40 : la), a);
                        free(a); bad = 1; break;
                    }
                    lb = la - (size_t)(sp + 1 - a);
                    b2 = (char *)malloc(lb + 1);
                    if (!b2) { free(a); bad = 1; break; }
                    memcpy(b2, sp + 1, lb);
                    b2[lb] = 0;
                    la = (size_t)(sp - a);
                }
                ra = gio__unmap(inv, a, la, &na);
                rb = gio__unmap(inv, b2, lb, &nb2);
                free(a);
                free(b2);
                if (!ra || !rb) { free(ra); free(rb); bad = 1; tj_json_fail(j, "out of memory"); break; }
                if (gio__src_merge(src, ra, na, rb, nb2, 0)) { bad = 1; tj_json_fail(j, "out of memory"); break; }
            }
        } else if (!strcmp(key, "ignore_merges") || !strcmp(key, "byte_fallback")) {
            if (tj_json_peek(j) == 'n') { if (tj_json_literal(j, &lit)) bad = 1; }
            else if (tj_json_literal(j, &lit) || lit < 0) bad = 1;
            else if (key[0] == 'i') *ignore_merges = lit;
            else if (lit) { gio__seterr(err, errlen, "%s: model.byte_fallback true is not supported (byte-level BPE needs none)", path); bad = 2; }
        } else if (!strcmp(key, "continuing_subword_prefix") || !strcmp(key, "end_of_word_suffix")) {
            if (tj_json_peek(j) == 'n') { if (tj_json_literal(j, &lit)) bad = 1; }
            else {
                size_t l;
                char *v = NULL;
                if (tj_json_string(j, &v, &l)) bad = 1;
                else if (l) {
                    gio__seterr(err, errlen, "%s: model.%s \"%s\" is not supported (byte-level BPE has none)", path, key, v);
                    bad = 2;
                }
                free(v);
            }
        } else if (!strcmp(key, "dropout")) {
            if (tj_json_peek(j) == 'n') { if (tj_json_literal(j, &lit)) bad = 1; }
            else {
                double d;
                if (tj_json_number(j, &d)) bad = 1;
                else if (d != 0) { gio__seterr(err, errlen, "%s: model.dropout %g is not supported (encoding is deterministic)", path, d); bad = 2; }
            }
        } else bad = tj_json_skip(j);
        free(key);
        if (bad) return 1;
    }
    return r < 0;
}

int gio_tok_load_hf(gio_tokenizer *t, const char *path, char *err, size_t errlen) {
    struct gio__bpe *b = (struct gio__bpe *)calloc(1, sizeof *b);
    char *buf = NULL, *key, typ[64], mlabel[600];
    size_t len, i, nat = 0;
    tj_json j;
    gio__bpe_src src;
    gio__atok *at = NULL;
    int first = 1, r, rc = 1, have_model = 0, ignore_merges = 0, use_regex = 1, aps = 0;
    uint64_t max_id = 0;
    int16_t inv[0x144];
    memset(t, 0, sizeof *t);
    memset(&src, 0, sizeof src);
    if (!b) { gio__seterr(err, errlen, "%s: out of memory", path); return 1; }
    gio__inv_table(inv);
    if (tj_read_file(path, &buf, &len, err, errlen)) { free(b); return 1; }
    tj_json_init(&j, buf, len, path, err, errlen);
    if (tj_json_expect(&j, '{')) goto done;
    while ((r = tj_json_object_next(&j, &first, &key)) == 1) {
        int bad = 0;
        if (!strcmp(key, "added_tokens")) {
            for (i = 0; i < nat; i++) free(at[i].content);
            free(at);
            at = NULL;
            nat = 0;
            bad = gio__tj_added(&j, &at, &nat);
        } else if (!strcmp(key, "model")) {
            bad = gio__tj_model(&j, inv, &src, &max_id, &ignore_merges, path, err, errlen);
            have_model = 1;
        } else if (!strcmp(key, "normalizer")) {
            bad = gio__json_type_of(&j, typ, sizeof typ, NULL, NULL);
            if (!bad && strcmp(typ, "null")) {
                gio__seterr(err, errlen, "%s: normalizer \"%s\" is not supported (GPT-2's byte-level BPE has none)", path, typ);
                bad = 2;
            }
        } else if (!strcmp(key, "pre_tokenizer")) {
            bad = gio__json_type_of(&j, typ, sizeof typ, &use_regex, &aps);
            if (!bad && (strcmp(typ, "ByteLevel") || !use_regex)) {
                gio__seterr(err, errlen, "%s: pre_tokenizer \"%s\"%s is not supported (tinyjax reads ByteLevel with GPT-2's split regex)", path, typ,
                            !strcmp(typ, "ByteLevel") ? " with use_regex false" : "");
                bad = 2;
            }
        } else if (!strcmp(key, "decoder")) {
            bad = gio__json_type_of(&j, typ, sizeof typ, NULL, NULL);
            if (!bad && strcmp(typ, "null") && strcmp(typ, "ByteLevel")) {
                gio__seterr(err, errlen, "%s: decoder \"%s\" is not supported (want ByteLevel)", path, typ);
                bad = 2;
            }
        } else bad = tj_json_skip(&j);
        free(key);
        if (bad) goto done;
    }
    if (r < 0) goto done;
    if (tj_json_peek(&j) != -1) { tj_json_fail(&j, "trailing garbage"); goto done; }
    if (!have_model) { gio__seterr(err, errlen, "%s: no \"model\": not a tokenizers tokenizer.json", path); goto done; }
    for (i = 0; i < nat; i++) if ((uint64_t)at[i].id > max_id) max_id = (uint64_t)at[i].id;
    snprintf(mlabel, sizeof mlabel, "%s: model.merges", path);
    if (gio__bpe_build(b, &src, max_id, nat, path, mlabel, err, errlen)) goto done;
    for (i = 0; i < nat; i++)
        if (gio__bpe_add_token(b, at[i].content, at[i].n, (int32_t)at[i].id, at[i].special, at[i].lstrip, at[i].rstrip, at[i].single_word, path, err,
                               errlen))
            goto done;
    b->ignore_merges = ignore_merges;
    b->add_prefix_space = aps;
    t->kind = GIO_TOK_GPT2;
    t->vocab_size = b->vocab_size;
    t->bpe = b;
    b = NULL;
    rc = 0;
done:
    for (i = 0; i < nat; i++) free(at[i].content);
    free(at);
    gio__src_free(&src);
    gio__bpe_free(b);
    free(buf);
    return rc;
}

void gio_tok_init_bytes(gio_tokenizer *t) {
    t->kind = GIO_TOK_BYTES;
    t->vocab_size = 256;
    t->bpe = NULL;
}

int gio_tok_load_gpt2(gio_tokenizer *t, const char *vocab_json, const char *merges_txt, char *err, size_t errlen) {
    struct gio__bpe *b = (struct gio__bpe *)calloc(1, sizeof *b);
    memset(t, 0, sizeof *t);
    if (!b) { gio__seterr(err, errlen, "%s: out of memory", vocab_json); return 1; }
    if (gio__bpe_load(b, vocab_json, merges_txt, err, errlen)) { gio__bpe_free(b); return 1; }
    t->kind = GIO_TOK_GPT2;
    t->vocab_size = b->vocab_size;
    t->bpe = b;
    return 0;
}

void gio_tok_free(gio_tokenizer *t) {
    if (!t) return;
    gio__bpe_free(t->bpe);
    memset(t, 0, sizeof *t);
}

/* BPE of one segment (text between added tokens) into out; returns the count */
static size_t gio__bpe_segment(const struct gio__bpe *b, const char *text, size_t len, int32_t *out) {
    size_t m = 0, i = 0;
    while (i < len) {
        size_t pl = gio_gpt2_pretok_next(text, len, i), w = pl, k;
        int32_t *sym = out + m, whole;
        if (b->ignore_merges && (whole = gio__bpe_find(b, text + i, pl)) >= 0) {
            sym[0] = whole;
            m++;
            i += pl;
            continue;
        }
        for (k = 0; k < pl; k++) sym[k] = b->byte_id[(unsigned char)text[i + k]];
        /* Classic GPT-2 loop: merge the best-ranked adjacent pair
           everywhere, repeat.  Quadratic in piece length, but pieces are
           words, so this is fine. */
        for (;;) {
            int32_t best = INT32_MAX, bx = -1, by = -1, bres = -1, rk, rs;
            size_t q, o;
            for (k = 0; k + 1 < w; k++)
                if (gio__bpe_merge_find(b, sym[k], sym[k + 1], &rk, &rs) && rk < best) {
                    best = rk; bx = sym[k]; by = sym[k + 1]; bres = rs;
                }
            if (bres < 0) break;
            for (q = 0, o = 0; q < w;) {
                if (q + 1 < w && sym[q] == bx && sym[q + 1] == by) { sym[o++] = bres; q += 2; }
                else sym[o++] = sym[q++];
            }
            w = o;
        }
        m += w;
        i += pl;
    }
    return m;
}

/* whitespace as the split regex's \s, and word characters (\w) for single_word */
static int gio__space_at(const char *s, size_t n, size_t i, size_t *l) {
    int c;
    *l = gio__cp_at((const unsigned char *)s, n, i, &c);
    return c == GIO__CS;
}
static int gio__wordch_before(const char *s, size_t i) {
    size_t k = i;
    int c;
    if (i == 0) return 0;
    while (k > 0 && ((unsigned char)s[k - 1] & 0xC0) == 0x80 && i - k < 3) k--;
    if (k > 0) k--;
    if (s[k] == '_') return 1;
    gio__cp_at((const unsigned char *)s, i, k, &c);
    return c == GIO__CL || c == GIO__CN;
}
static int gio__wordch_at(const char *s, size_t n, size_t i) {
    int c;
    if (i >= n) return 0;
    if (s[i] == '_') return 1;
    gio__cp_at((const unsigned char *)s, n, i, &c);
    return c == GIO__CL || c == GIO__CN;
}

/* the longest enabled added token at text[i] (its index in b->added), or -1 */
static long gio__added_at(const struct gio__bpe *b, const char *text, size_t len, size_t i, int allow_special) {
    size_t k, best_n = 0;
    long best = -1;
    if (!b->added_first[(unsigned char)text[i]]) return -1;
    for (k = 0; k < b->nadded; k++) {
        const gio__added *a = &b->added[k];
        size_t an = b->tok_len[a->id];
        if (a->special && !allow_special) continue;
        if (an <= best_n || an > len - i || memcmp(text + i, b->tok[a->id], an)) continue;
        if (a->single_word && (gio__wordch_before(text, i) || gio__wordch_at(text, len, i + an))) continue;
        best = (long)k;
        best_n = an;
    }
    return best;
}

int gio_tok_encode_special(const gio_tokenizer *t, const char *text, size_t len, int allow_special, int32_t **ids, size_t *n,
                           char *err, size_t errlen) {
    int32_t *out;
    size_t m = 0, i = 0;
    *ids = NULL;
    *n = 0;
    /* Every token covers at least one byte, and each segment may gain a
       prefix space, so 2 len + 1 bounds the output. */
    out = (int32_t *)gio__alloc(sizeof(int32_t) * (2 * len + 1));
    if (!out) { gio__seterr(err, errlen, "encode: out of memory for %zu bytes", len); return 1; }
    if (t->kind == GIO_TOK_BYTES) {
        for (i = 0; i < len; i++) out[i] = (unsigned char)text[i];
        m = len;
    } else if (t->kind == GIO_TOK_GPT2 && t->bpe) {
        const struct gio__bpe *b = t->bpe;
        size_t seg = 0;
        char *tmp = NULL;
        if (b->add_prefix_space && !(tmp = (char *)gio__alloc(len + 1))) {
            free(out);
            gio__seterr(err, errlen, "encode: out of memory for %zu bytes", len);
            return 1;
        }
        for (;;) {
            long hit = -1;
            size_t end = i, after = i, l;
            if (i < len && b->nadded) hit = gio__added_at(b, text, len, i, allow_special);
            if (hit < 0 && i < len) { i++; continue; }
            if (hit >= 0) {
                const gio__added *a = &b->added[hit];
                after = i + b->tok_len[a->id];
                if (a->lstrip) /* the token takes the whitespace before it */
                    while (end > seg) {
                        size_t k = end - 1;
                        while (k > seg && ((unsigned char)text[k] & 0xC0) == 0x80) k--;
                        if (!gio__space_at(text, len, k, &l) || k + l != end) break;
                        end = k;
                    }
                if (a->rstrip)
                    while (after < len && gio__space_at(text, len, after, &l)) after += l;
            }
            if (end > seg) {
                if (b->add_prefix_space && text[seg] != ' ') {
                    tmp[0] = ' ';
                    memcpy(tmp + 1, text + seg, end - seg);
                    m += gio__bpe_segment(b, tmp, end - seg + 1, out + m);
                } else m += gio__bpe_segment(b, text + seg, end - seg, out + m);
            }
            if (hit < 0) break;
            out[m++] = b->added[hit].id;
            i = seg = after;
        }
        free(tmp);
    } else {
        free(out);
        gio__seterr(err, errlen, "encode: tokenizer not initialized");
        return 1;
    }
    *ids = out;
    *n = m;
    return 0;
}

int gio_tok_encode(const gio_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n, char *err, size_t errlen) {
    return gio_tok_encode_special(t, text, len, 0, ids, n, err, errlen);
}

int gio_tok_special_count(const gio_tokenizer *t) {
    size_t k;
    int c = 0;
    if (t->kind != GIO_TOK_GPT2 || !t->bpe) return 0;
    for (k = 0; k < t->bpe->nadded; k++) c += t->bpe->added[k].special;
    return c;
}

int32_t gio_tok_special_id(const gio_tokenizer *t, int i) {
    size_t k;
    if (t->kind != GIO_TOK_GPT2 || !t->bpe) return -1;
    for (k = 0; k < t->bpe->nadded; k++)
        if (t->bpe->added[k].special && i-- == 0) return t->bpe->added[k].id;
    return -1;
}

const char *gio_tok_piece(const gio_tokenizer *t, int32_t id, size_t *len) {
    static const unsigned char bytes[256] = {
#define GIO__B16(x) x, x + 1, x + 2, x + 3, x + 4, x + 5, x + 6, x + 7, x + 8, x + 9, x + 10, x + 11, x + 12, x + 13, x + 14, x + 15
        GIO__B16(0), GIO__B16(16), GIO__B16(32), GIO__B16(48), GIO__B16(64), GIO__B16(80), GIO__B16(96), GIO__B16(112),
        GIO__B16(128), GIO__B16(144), GIO__B16(160), GIO__B16(176), GIO__B16(192), GIO__B16(208), GIO__B16(224), GIO__B16(240)
#undef GIO__B16
    };
    *len = 0;
    if (id < 0 || id >= t->vocab_size) return NULL;
    if (t->kind == GIO_TOK_BYTES) { *len = 1; return (const char *)bytes + id; }
    if (t->kind != GIO_TOK_GPT2 || !t->bpe || !t->bpe->tok[id]) return NULL;
    *len = t->bpe->tok_len[id];
    return t->bpe->tok[id];
}

int32_t gio_tok_lookup(const gio_tokenizer *t, const char *bytes, size_t len) {
    if (t->kind == GIO_TOK_BYTES) return len == 1 ? (int32_t)(unsigned char)bytes[0] : -1;
    if (t->kind == GIO_TOK_GPT2 && t->bpe) return gio__bpe_find(t->bpe, bytes, len);
    return -1;
}

int gio_tok_decode(const gio_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len,
                   char *err, size_t errlen) {
    tj_strbuf b;
    size_t i;
    memset(&b, 0, sizeof b);
    *text = NULL;
    *len = 0;
    for (i = 0; i < n; i++) {
        size_t pl;
        const char *p = gio_tok_piece(t, ids[i], &pl);
        if (!p) {
            free(b.p);
            gio__seterr(err, errlen, "decode: token %zu has invalid id %ld (vocab size %d)", i, (long)ids[i],
                        t->vocab_size);
            return 1;
        }
        tj_strbuf_put(&b, p, pl);
    }
    tj_strbuf_put(&b, "", 0);
    if (b.oom) { free(b.p); gio__seterr(err, errlen, "decode: out of memory"); return 1; }
    *text = b.p;
    *len = b.n;
    return 0;
}

/* ---- SVG plots ---- */

static int gio__finite(double x) { return x - x == 0.0; }

/* floor without libm, so users need not link -lm. */
static double gio__floor(double x) {
    double t;
    if (!(x > -9e15 && x < 9e15)) return x;
    t = (double)(long long)x;
    return t > x ? t - 1 : t;
}

static double gio__nice_step(double range, int target) {
    double raw = range / target, mag = 1, norm;
    while (mag * 10 <= raw) mag *= 10;
    while (mag > raw) mag /= 10;
    norm = raw / mag;
    return (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
}

int gio_svg_plot(const char *path, const char *title, const char *xlabel, const char *ylabel,
                 const gio_series *s, int n_series, char *err, size_t errlen) {
    static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};
    const double W = 800, H = 480, L = 70, R = 30, T = 40, B = 60;
    double x0 = 0, x1 = 0, y0 = 0, y1 = 0, xs, ys, v;
    int have = 0, i, rc;
    size_t k;
    tj_strbuf b;
    memset(&b, 0, sizeof b);
    for (i = 0; i < n_series; i++)
        for (k = 0; k < s[i].n; k++) {
            if (!gio__finite(s[i].x[k]) || !gio__finite(s[i].y[k])) continue;
            if (!have) { x0 = x1 = s[i].x[k]; y0 = y1 = s[i].y[k]; have = 1; }
            if (s[i].x[k] < x0) x0 = s[i].x[k];
            if (s[i].x[k] > x1) x1 = s[i].x[k];
            if (s[i].y[k] < y0) y0 = s[i].y[k];
            if (s[i].y[k] > y1) y1 = s[i].y[k];
        }
    if (!have) { x0 = 0; x1 = 1; y0 = 0; y1 = 1; }
    if (x1 - x0 < 1e-300) { x0 -= 1; x1 += 1; }
    if (y1 - y0 < 1e-300) { y0 -= 1; y1 += 1; }
    /* Round the axes out to whole ticks so the frame has labeled ends. */
    xs = gio__nice_step(x1 - x0, 8);
    ys = gio__nice_step(y1 - y0, 6);
    x0 = gio__floor(x0 / xs) * xs;
    x1 = -gio__floor(-x1 / xs) * xs;
    y0 = gio__floor(y0 / ys) * ys;
    y1 = -gio__floor(-y1 / ys) * ys;

#define GIO__PX(x) (L + ((x) - x0) / (x1 - x0) * (W - L - R))
#define GIO__PY(y) (H - B - ((y) - y0) / (y1 - y0) * (H - T - B))
    tj_strbuf_printf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" viewBox=\"0 0 %g %g\" "
                       "font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H);
    tj_strbuf_puts(&b, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
    if (title) {
        tj_strbuf_printf(&b, "<text x=\"%g\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">", W / 2);
        gio__sb_xml(&b, title);
        tj_strbuf_puts(&b, "</text>\n");
    }
    for (i = 0;; i++) {
        v = x0 + i * xs;
        if (v > x1 + xs * 1e-9) break;
        tj_strbuf_printf(&b, "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#e0e0e0\"/>\n",
                       GIO__PX(v), T, GIO__PX(v), H - B);
        tj_strbuf_printf(&b, "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"black\"/>\n",
                       GIO__PX(v), H - B, GIO__PX(v), H - B + 5);
        tj_strbuf_printf(&b, "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%g</text>\n", GIO__PX(v), H - B + 18,
                       (v < xs * 1e-9 && v > -xs * 1e-9) ? 0.0 : v);
    }
    for (i = 0;; i++) {
        v = y0 + i * ys;
        if (v > y1 + ys * 1e-9) break;
        tj_strbuf_printf(&b, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n",
                       L, GIO__PY(v), W - R, GIO__PY(v));
        tj_strbuf_printf(&b, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"black\"/>\n",
                       L - 5, GIO__PY(v), L, GIO__PY(v));
        tj_strbuf_printf(&b, "<text x=\"%g\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", L - 8, GIO__PY(v) + 4,
                       (v < ys * 1e-9 && v > -ys * 1e-9) ? 0.0 : v);
    }
    tj_strbuf_printf(&b, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"black\"/>\n",
                   L, T, W - L - R, H - T - B);
    if (xlabel) {
        tj_strbuf_printf(&b, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">", L + (W - L - R) / 2, H - 15);
        gio__sb_xml(&b, xlabel);
        tj_strbuf_puts(&b, "</text>\n");
    }
    if (ylabel) {
        tj_strbuf_printf(&b, "<text x=\"18\" y=\"%g\" text-anchor=\"middle\" transform=\"rotate(-90 18 %g)\">",
                       T + (H - T - B) / 2, T + (H - T - B) / 2);
        gio__sb_xml(&b, ylabel);
        tj_strbuf_puts(&b, "</text>\n");
    }
    for (i = 0; i < n_series; i++) {
        const char *col = s[i].color ? s[i].color : palette[i % 6];
        int open = 0;
        for (k = 0; k < s[i].n; k++) {
            int ok = gio__finite(s[i].x[k]) && gio__finite(s[i].y[k]);
            if (ok && !open) {
                tj_strbuf_puts(&b, "<polyline fill=\"none\" stroke=\"");
                gio__sb_xml(&b, col);
                tj_strbuf_puts(&b, "\" stroke-width=\"1.5\" points=\"");
                open = 1;
            }
            if (ok) tj_strbuf_printf(&b, "%.1f,%.1f ", GIO__PX(s[i].x[k]), GIO__PY(s[i].y[k]));
            if (open && (!ok || k + 1 == s[i].n)) { tj_strbuf_puts(&b, "\"/>\n"); open = 0; }
        }
        /* Sparse series (eval every N steps) are unreadable as bare lines. */
        if (s[i].n <= 60)
            for (k = 0; k < s[i].n; k++)
                if (gio__finite(s[i].x[k]) && gio__finite(s[i].y[k])) {
                    tj_strbuf_printf(&b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"", GIO__PX(s[i].x[k]),
                                   GIO__PY(s[i].y[k]));
                    gio__sb_xml(&b, col);
                    tj_strbuf_puts(&b, "\"/>\n");
                }
    }
    /* Legend after all lines, on an opaque box, so curves never cross it. */
    if (n_series > 0)
        tj_strbuf_printf(&b, "<rect x=\"%g\" y=\"%g\" width=\"150\" height=\"%g\" fill=\"white\" "
                           "fill-opacity=\"0.85\" stroke=\"#cccccc\"/>\n", W - R - 158, T + 4, 18.0 * n_series + 8);
    for (i = 0; i < n_series; i++) {
        const char *col = s[i].color ? s[i].color : palette[i % 6];
        tj_strbuf_printf(&b, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"", W - R - 150,
                       T + 15 + 18.0 * i, W - R - 125, T + 15 + 18.0 * i);
        gio__sb_xml(&b, col);
        tj_strbuf_puts(&b, "\" stroke-width=\"2\"/>\n");
        tj_strbuf_printf(&b, "<text x=\"%g\" y=\"%g\">", W - R - 118, T + 19 + 18.0 * i);
        gio__sb_xml(&b, s[i].label ? s[i].label : "");
        tj_strbuf_puts(&b, "</text>\n");
    }
#undef GIO__PX
#undef GIO__PY
    tj_strbuf_puts(&b, "</svg>\n");
    rc = gio__write_sb(path, &b, err, errlen);
    free(b.p);
    return rc;
}

int gio_svg_loss_curve(const char *path, const char *title, const double *train_step, const double *train_loss,
                       size_t n_train, const double *val_step, const double *val_loss, size_t n_val,
                       char *err, size_t errlen) {
    gio_series s[2];
    memset(s, 0, sizeof s);
    s[0].label = "train loss";
    s[0].x = train_step;
    s[0].y = train_loss;
    s[0].n = n_train;
    s[1].label = "val loss";
    s[1].x = val_step;
    s[1].y = val_loss;
    s[1].n = n_val;
    return gio_svg_plot(path, title ? title : "loss", "step", "loss", s, 2, err, errlen);
}

/* ---- Chrome trace ---- */

void gio_trace_init(gio_trace *t) { memset(t, 0, sizeof *t); }

void gio_trace_free(gio_trace *t) {
    free(t->events.p);
    memset(t, 0, sizeof *t);
}

static int gio__trace_done(gio_trace *t) {
    if (t->events.oom) { snprintf(t->err, sizeof t->err, "trace: out of memory"); return 1; }
    t->n_events++;
    return 0;
}

static void gio__trace_begin(gio_trace *t) {
    if (t->n_events) tj_strbuf_puts(&t->events, ",\n");
}

/* JSON has no NaN/Infinity; a stray one would make the whole file invalid. */
static double gio__fin(double x) { return gio__finite(x) ? x : 0.0; }

int gio_trace_process_name(gio_trace *t, int pid, const char *name) {
    gio__trace_begin(t);
    tj_strbuf_printf(&t->events, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":", pid);
    tj_strbuf_json(&t->events, name);
    tj_strbuf_puts(&t->events, "}}");
    return gio__trace_done(t);
}

int gio_trace_track_name(gio_trace *t, int pid, int tid, const char *name) {
    gio__trace_begin(t);
    tj_strbuf_printf(&t->events, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":",
                   pid, tid);
    tj_strbuf_json(&t->events, name);
    tj_strbuf_puts(&t->events, "}},\n");
    /* Without a sort index viewers order tracks by tid anyway, but make it
       explicit so device 0 is always on top. */
    tj_strbuf_printf(&t->events, "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                               "\"args\":{\"sort_index\":%d}}", pid, tid, tid);
    return gio__trace_done(t);
}

int gio_trace_event(gio_trace *t, const char *name, const char *cat, int pid, int tid, double ts_us,
                    double dur_us, const char *args) {
    gio__trace_begin(t);
    tj_strbuf_puts(&t->events, "{\"name\":");
    tj_strbuf_json(&t->events, name ? name : "");
    tj_strbuf_puts(&t->events, ",\"cat\":");
    tj_strbuf_json(&t->events, cat ? cat : "");
    tj_strbuf_printf(&t->events, ",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f", pid, tid,
                   gio__fin(ts_us), dur_us > 0 ? gio__fin(dur_us) : 0.0);
    if (args) {
        tj_strbuf_puts(&t->events, ",\"args\":{\"detail\":");
        tj_strbuf_json(&t->events, args);
        tj_strbuf_puts(&t->events, "}");
    }
    tj_strbuf_puts(&t->events, "}");
    return gio__trace_done(t);
}

int gio_trace_counter(gio_trace *t, const char *name, int pid, double ts_us, double value) {
    gio__trace_begin(t);
    tj_strbuf_puts(&t->events, "{\"name\":");
    tj_strbuf_json(&t->events, name ? name : "");
    tj_strbuf_printf(&t->events, ",\"ph\":\"C\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"args\":{\"value\":%.9g}}", pid,
                   gio__fin(ts_us), gio__fin(value));
    return gio__trace_done(t);
}

int gio_trace_write(gio_trace *t, const char *path) {
    tj_strbuf b;
    int rc;
    memset(&b, 0, sizeof b);
    if (t->events.oom) { snprintf(t->err, sizeof t->err, "%s: trace ran out of memory earlier", path); return 1; }
    tj_strbuf_puts(&b, "{\"traceEvents\":[\n");
    if (t->events.n) tj_strbuf_put(&b, t->events.p, t->events.n);
    tj_strbuf_puts(&b, "\n],\"displayTimeUnit\":\"ms\"}\n");
    rc = gio__write_sb(path, &b, t->err, sizeof t->err);
    free(b.p);
    return rc;
}

#endif /* GPT2_IO_IMPLEMENTATION_DONE */
#endif /* GPT2_IO_IMPLEMENTATION */
