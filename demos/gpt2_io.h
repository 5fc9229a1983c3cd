/* gpt2_io.h - file formats and text utilities for the tinyjax GPT-2 demo.
 *
 * Single header, STB style.  In exactly one C or C++ file:
 *     #define GPT2_IO_IMPLEMENTATION
 *     #include "gpt2_io.h"
 * Compiles as C99 and as C++.  POSIX only (open/fsync/rename for atomic
 * writes).  Public names start with gio_, private ones with gio__.
 *
 * Error convention: every fallible function returns int 0 on success and
 * nonzero on failure, and writes a one-line message naming the file and the
 * problem into the caller's (err, errlen) buffer (err may be NULL).  Nothing
 * in here exits, aborts or asserts on bad input; a corrupt file is an error
 * message, never a crash.
 *
 * Files are always written atomically: data goes to "<path>.tmp.<pid>", is
 * fsync'ed, then rename()d over <path>, and the directory is fsync'ed, so a
 * crash leaves either the old file or the new one, never half of one.
 *
 * --- safetensors -----------------------------------------------------------
 *   int  gio_st_load(gio_safetensors *st, const char *path, char *err, size_t errlen);
 *   int  gio_st_parse(gio_safetensors *st, const void *bytes, size_t len,
 *                     const char *label, char *err, size_t errlen);   (copies bytes)
 *   void gio_st_free(gio_safetensors *st);
 *   const gio_tensor *gio_st_find(const gio_safetensors *st, const char *name);
 *   int  gio_st_expect(const gio_safetensors *st, const char *name, gio_dtype dtype,
 *                      int rank, const int64_t *shape,   (shape may be NULL)
 *                      const gio_tensor **out, char *err, size_t errlen);
 *   const char *gio_st_meta(const gio_safetensors *st, const char *key); (NULL if absent)
 *   int  gio_st_save(const char *path, const gio_st_entry *tensors, int n,
 *                    const char *const *meta_kv, int n_meta, char *err, size_t errlen);
 *   int  gio_tensor_to_f32(const gio_tensor *t, float *out);  (any dtype -> float)
 *   size_t gio_dtype_size(gio_dtype); const char *gio_dtype_name(gio_dtype);
 *   int  gio_dtype_parse(const char *name, gio_dtype *out);
 * st->tensors[0..n_tensors) is in header order.  tensor->data points into the
 * loaded file; files written by gio_st_save keep every tensor 8-byte aligned
 * (data is laid out largest itemsize first), foreign files may not be, so
 * memcpy out of it or use gio_tensor_to_f32 (which is alignment- and
 * endian-safe).  The reader enforces the format strictly, like the reference
 * Rust implementation: offsets must tile the data section with no holes.
 *
 * --- llm.c token files (header: 256 int32, magic 20240520, version 1, count;
 *     then count uint16 tokens) -------------------------------------------
 *   int gio_tokens_read(const char *path, int32_t **tokens, size_t *n, char *err, size_t errlen);
 *   int gio_tokens_write(const char *path, const int32_t *tokens, size_t n, char *err, size_t errlen);
 *   (*tokens is malloc'ed; free() it.)
 *
 * --- tokenizers --------------------------------------------------------------
 *   void gio_tok_init_bytes(gio_tokenizer *t);            (vocab 256: id = byte)
 *   int  gio_tok_load_gpt2(gio_tokenizer *t, const char *vocab_json,
 *                          const char *merges_txt, char *err, size_t errlen);
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
 * Unicode caveat: the GPT-2 split regex needs \p{L}/\p{N}/\s.  ASCII and
 * Latin-1 are classified exactly; above U+00FF a table of the common
 * punctuation/symbol/emoji/digit/space blocks is used and everything else
 * counts as a letter.  Invalid UTF-8 bytes count as punctuation.  So English
 * text tokenizes exactly like GPT-2; exotic scripts may split differently
 * (still round-trips losslessly, since decode just concatenates bytes).
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
 * --- misc --------------------------------------------------------------------------
 *   int gio_write_file_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen);
 *   int gio_read_file(const char *path, char **data, size_t *len, char *err, size_t errlen);
 *        (*data is malloc'ed and NUL-terminated)
 */
#ifndef GPT2_IO_H
#define GPT2_IO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    GIO_F32, GIO_BF16, GIO_F16, GIO_F64,
    GIO_I64, GIO_I32, GIO_I16, GIO_I8,
    GIO_U64, GIO_U32, GIO_U16, GIO_U8, GIO_BOOL,
    GIO_DTYPE_COUNT
} gio_dtype;

#define GIO_MAX_RANK 8

typedef struct {
    char *name;
    gio_dtype dtype;
    int rank;
    int64_t shape[GIO_MAX_RANK];
    uint64_t numel;
    size_t nbytes;
    uint64_t begin, end;      /* data_offsets, relative to the data section */
    const void *data;         /* points into the loaded file; may be unaligned */
} gio_tensor;

typedef struct {
    char *path;
    unsigned char *buf;       /* whole file */
    size_t len;
    size_t data_start;        /* 8 + header length */
    int n_tensors;
    gio_tensor *tensors;      /* header order */
    const gio_tensor **by_name;
    int n_meta;
    char **meta;              /* meta[2*i] = key, meta[2*i+1] = value */
} gio_safetensors;

typedef struct {
    const char *name;
    gio_dtype dtype;
    int rank;
    const int64_t *shape;     /* rank entries; may be NULL when rank == 0 */
    const void *data;         /* numel * itemsize bytes, little-endian */
} gio_st_entry;

size_t gio_dtype_size(gio_dtype d);
const char *gio_dtype_name(gio_dtype d);
int gio_dtype_parse(const char *name, gio_dtype *out);

int gio_st_load(gio_safetensors *st, const char *path, char *err, size_t errlen);
int gio_st_parse(gio_safetensors *st, const void *bytes, size_t len,
                 const char *label, char *err, size_t errlen);
void gio_st_free(gio_safetensors *st);
const gio_tensor *gio_st_find(const gio_safetensors *st, const char *name);
int gio_st_expect(const gio_safetensors *st, const char *name, gio_dtype dtype,
                  int rank, const int64_t *shape, const gio_tensor **out,
                  char *err, size_t errlen);
const char *gio_st_meta(const gio_safetensors *st, const char *key);
int gio_st_save(const char *path, const gio_st_entry *tensors, int n,
                const char *const *meta_kv, int n_meta, char *err, size_t errlen);
int gio_tensor_to_f32(const gio_tensor *t, float *out);

int gio_tokens_read(const char *path, int32_t **tokens, size_t *n, char *err, size_t errlen);
int gio_tokens_write(const char *path, const int32_t *tokens, size_t n, char *err, size_t errlen);

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
    char *p;
    size_t n, cap;
    int oom;
} gio_strbuf;

typedef struct {
    gio_strbuf events;        /* serialized events, comma separated */
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

int gio_write_file_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen);
int gio_read_file(const char *path, char **data, size_t *len, char *err, size_t errlen);

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
#include <errno.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/types.h>
#include <sys/stat.h>

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

/* ---- growable string buffer ---- */

static void gio__sb_put(gio_strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char *p;
        while (cap < b->n + n + 1) cap *= 2;
        p = (char *)realloc(b->p, cap);
        if (!p) { b->oom = 1; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void gio__sb_puts(gio_strbuf *b, const char *s) { gio__sb_put(b, s, strlen(s)); }

static void gio__sb_printf(gio_strbuf *b, const char *fmt, ...) GIO__PRINTF(2, 3);
static void gio__sb_printf(gio_strbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) { b->oom = 1; return; }
    if ((size_t)n < sizeof tmp) { gio__sb_put(b, tmp, (size_t)n); return; }
    {
        char *big = (char *)malloc((size_t)n + 1);
        if (!big) { b->oom = 1; return; }
        va_start(ap, fmt);
        vsnprintf(big, (size_t)n + 1, fmt, ap);
        va_end(ap);
        gio__sb_put(b, big, (size_t)n);
        free(big);
    }
}

/* JSON string literal; bytes >= 0x80 pass through (callers supply UTF-8). */
static void gio__sb_json_str(gio_strbuf *b, const char *s) {
    gio__sb_put(b, "\"", 1);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"') gio__sb_puts(b, "\\\"");
        else if (c == '\\') gio__sb_puts(b, "\\\\");
        else if (c == '\n') gio__sb_puts(b, "\\n");
        else if (c == '\t') gio__sb_puts(b, "\\t");
        else if (c < 0x20) gio__sb_printf(b, "\\u%04x", c);
        else gio__sb_put(b, (const char *)&c, 1);
    }
    gio__sb_put(b, "\"", 1);
}

static void gio__sb_xml(gio_strbuf *b, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '<': gio__sb_puts(b, "&lt;"); break;
        case '>': gio__sb_puts(b, "&gt;"); break;
        case '&': gio__sb_puts(b, "&amp;"); break;
        case '"': gio__sb_puts(b, "&quot;"); break;
        default:
            /* XML 1.0 forbids most control characters outright. */
            if ((unsigned char)*s >= 0x20 || *s == '\t' || *s == '\n') gio__sb_put(b, s, 1);
        }
    }
}

/* ---- UTF-8 ---- */

/* Returns sequence length, or 0 if s does not start with valid UTF-8
   (overlongs, surrogates and > U+10FFFF are invalid, as JSON requires). */
static size_t gio__utf8_dec(const unsigned char *s, size_t n, uint32_t *cp) {
    uint32_t c;
    size_t len, k;
    if (n == 0) return 0;
    c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    if (c >= 0xC2 && c <= 0xDF) { len = 2; c &= 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; c &= 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; c &= 0x07; }
    else return 0;
    if (n < len) return 0;
    for (k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (s[k] & 0x3F);
    }
    if ((len == 3 && c < 0x800) || (len == 4 && c < 0x10000) || c > 0x10FFFF ||
        (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    *cp = c;
    return len;
}

static size_t gio__utf8_enc(uint32_t c, char *o) {
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) { o[0] = (char)(0xC0 | (c >> 6)); o[1] = (char)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | (c >> 12)); o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (char)(0x80 | (c & 0x3F)); return 3;
    }
    o[0] = (char)(0xF0 | (c >> 18)); o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F)); o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

static int gio__utf8_valid(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), i = 0;
    uint32_t cp;
    while (i < n) {
        size_t l = gio__utf8_dec(p + i, n - i, &cp);
        if (!l) return 0;
        i += l;
    }
    return 1;
}

/* ---- file helpers ---- */

int gio_read_file(const char *path, char **data, size_t *len, char *err, size_t errlen) {
    FILE *f;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    *data = NULL;
    *len = 0;
    f = fopen(path, "rb");
    if (!f) { gio__seterr(err, errlen, "%s: cannot open: %s", path, strerror(errno)); return 1; }
    /* Read in chunks rather than trusting ftell, so pipes and files that
       change size under us still give a consistent buffer. */
    for (;;) {
        size_t got;
        if (cap - n < 65536) {
            size_t ncap = cap ? cap * 2 : 1 << 20;
            char *p = (char *)realloc(buf, ncap + 1);
            if (!p) {
                free(buf); fclose(f);
                gio__seterr(err, errlen, "%s: out of memory reading file", path);
                return 1;
            }
            buf = p;
            cap = ncap;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        free(buf); fclose(f);
        gio__seterr(err, errlen, "%s: read error", path);
        return 1;
    }
    fclose(f);
    buf[n] = 0;
    *data = buf;
    *len = n;
    return 0;
}

typedef struct {
    int fd;
    char *tmp;
    const char *path;
} gio__afile;

static int gio__af_open(gio__afile *f, const char *path, char *err, size_t errlen) {
    size_t n = strlen(path) + 32;
    f->path = path;
    f->fd = -1;
    f->tmp = (char *)malloc(n);
    if (!f->tmp) { gio__seterr(err, errlen, "%s: out of memory", path); return 1; }
    snprintf(f->tmp, n, "%s.tmp.%ld", path, (long)getpid());
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (f->fd < 0) {
        gio__seterr(err, errlen, "%s: cannot create %s: %s", path, f->tmp, strerror(errno));
        free(f->tmp);
        f->tmp = NULL;
        return 1;
    }
    return 0;
}

static void gio__af_abort(gio__afile *f) {
    if (f->fd >= 0) close(f->fd);
    if (f->tmp) { unlink(f->tmp); free(f->tmp); }
    f->fd = -1;
    f->tmp = NULL;
}

static int gio__af_write(gio__afile *f, const void *data, size_t len, char *err, size_t errlen) {
    const char *p = (const char *)data;
    while (len > 0) {
        size_t chunk = len > ((size_t)1 << 30) ? ((size_t)1 << 30) : len;
        ssize_t w = write(f->fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            gio__seterr(err, errlen, "%s: write failed: %s", f->tmp, strerror(errno));
            gio__af_abort(f);
            return 1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

static int gio__af_commit(gio__afile *f, char *err, size_t errlen) {
    const char *slash;
    char *dir;
    int dfd;
    /* fsync before rename: otherwise the rename can reach the disk before
       the data, and a crash would leave an empty or partial file at path. */
    if (fsync(f->fd) != 0) {
        gio__seterr(err, errlen, "%s: fsync failed: %s", f->tmp, strerror(errno));
        gio__af_abort(f);
        return 1;
    }
    if (close(f->fd) != 0) {
        f->fd = -1;
        gio__seterr(err, errlen, "%s: close failed: %s", f->tmp, strerror(errno));
        gio__af_abort(f);
        return 1;
    }
    f->fd = -1;
    if (rename(f->tmp, f->path) != 0) {
        gio__seterr(err, errlen, "%s: rename from %s failed: %s", f->path, f->tmp, strerror(errno));
        gio__af_abort(f);
        return 1;
    }
    /* The rename itself lives in the directory; sync it so it survives a
       power loss.  Best effort: some filesystems refuse fsync on dirs. */
    slash = strrchr(f->path, '/');
    if (slash) {
        size_t dl = (size_t)(slash - f->path);
        dir = (char *)malloc(dl + 2);
        if (dir) {
            if (dl == 0) { dir[0] = '/'; dir[1] = 0; }
            else { memcpy(dir, f->path, dl); dir[dl] = 0; }
        }
    } else {
        dir = (char *)malloc(2);
        if (dir) { dir[0] = '.'; dir[1] = 0; }
    }
    if (dir) {
        dfd = open(dir, O_RDONLY);
        if (dfd >= 0) { (void)fsync(dfd); close(dfd); }
        free(dir);
    }
    free(f->tmp);
    f->tmp = NULL;
    return 0;
}

int gio_write_file_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen) {
    gio__afile f;
    if (gio__af_open(&f, path, err, errlen)) return 1;
    if (gio__af_write(&f, data, len, err, errlen)) return 1;
    return gio__af_commit(&f, err, errlen);
}

static int gio__write_sb(const char *path, const gio_strbuf *b, char *err, size_t errlen) {
    if (b->oom) { gio__seterr(err, errlen, "%s: out of memory", path); return 1; }
    return gio_write_file_atomic(path, b->p ? b->p : "", b->n, err, errlen);
}

/* ---- minimal JSON cursor ---- */

/* A streaming cursor instead of a DOM: the callers know the schema they
   want, and this keeps memory proportional to what they keep. */
typedef struct {
    const unsigned char *s;
    size_t n, i;
    size_t base;              /* offset of s[0] in the file, for messages */
    const char *label;
    char *err;
    size_t errlen;
    int depth;
} gio__js;

static int gio__js_fail(gio__js *j, const char *fmt, ...) GIO__PRINTF(2, 3);
static int gio__js_fail(gio__js *j, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    gio__seterr(j->err, j->errlen, "%s: bad JSON at byte %zu: %s", j->label, j->base + j->i, msg);
    return 1;
}

static void gio__js_ws(gio__js *j) {
    while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\n' ||
                           j->s[j->i] == '\r'))
        j->i++;
}

static int gio__js_peek(gio__js *j) {
    gio__js_ws(j);
    return j->i < j->n ? j->s[j->i] : -1;
}

static int gio__js_expect(gio__js *j, char c) {
    if (gio__js_peek(j) != (unsigned char)c) return gio__js_fail(j, "expected '%c'", c);
    j->i++;
    return 0;
}

static int gio__hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int gio__js_hex4(gio__js *j, size_t at, uint32_t *v) {
    size_t k;
    *v = 0;
    for (k = 0; k < 4; k++) {
        int h = gio__hexval(j->s[at + k]);
        if (h < 0) return 1;
        *v = (*v << 4) | (uint32_t)h;
    }
    return 0;
}

/* Parses a string; out == NULL just validates.  Output is NUL-terminated but
   may contain NULs from \u0000, hence outlen. */
static int gio__js_str(gio__js *j, char **out, size_t *outlen) {
    size_t k, m = 0;
    char *o = NULL;
    if (out) *out = NULL;
    if (gio__js_peek(j) != '"') return gio__js_fail(j, "expected string");
    /* Find the closing quote first: escapes never expand, so its distance
       bounds the decoded size and we allocate once. */
    k = j->i + 1;
    while (k < j->n && j->s[k] != '"') k += (j->s[k] == '\\') ? 2 : 1;
    if (k >= j->n) return gio__js_fail(j, "unterminated string");
    if (out) {
        o = (char *)malloc(k - j->i);
        if (!o) return gio__js_fail(j, "out of memory");
    }
    j->i++;
    while (j->i < k) {
        unsigned char c = j->s[j->i];
        if (c < 0x20) { free(o); return gio__js_fail(j, "control character in string"); }
        if (c == '\\') {
            unsigned char e = j->s[j->i + 1];   /* j->i + 1 < k: scan skipped it */
            const char *simple = "\"\\/bfnrt", *rep = "\"\\/\b\f\n\r\t";
            const char *hit = e ? strchr(simple, e) : NULL;
            if (hit) {
                if (o) o[m] = rep[hit - simple];
                m++;
                j->i += 2;
            } else if (e == 'u') {
                uint32_t cp, lo;
                if (j->i + 6 > k || gio__js_hex4(j, j->i + 2, &cp)) {
                    free(o); return gio__js_fail(j, "bad \\u escape");
                }
                j->i += 6;
                if (cp >= 0xDC00 && cp <= 0xDFFF) { free(o); return gio__js_fail(j, "unpaired surrogate"); }
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (j->i + 6 > k || j->s[j->i] != '\\' || j->s[j->i + 1] != 'u' ||
                        gio__js_hex4(j, j->i + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
                        free(o); return gio__js_fail(j, "unpaired surrogate");
                    }
                    j->i += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                if (o) m += gio__utf8_enc(cp, o + m);
                else { char tmp[4]; m += gio__utf8_enc(cp, tmp); }
            } else {
                free(o);
                return gio__js_fail(j, "bad escape");
            }
        } else if (c >= 0x80) {
            uint32_t cp;
            size_t l = gio__utf8_dec(j->s + j->i, k - j->i, &cp);
            if (!l) { free(o); return gio__js_fail(j, "invalid UTF-8 in string"); }
            if (o) memcpy(o + m, j->s + j->i, l);
            m += l;
            j->i += l;
        } else {
            if (o) o[m] = (char)c;
            m++;
            j->i++;
        }
    }
    j->i = k + 1;
    if (o) { o[m] = 0; *out = o; }
    if (outlen) *outlen = m;
    return 0;
}

/* Strings we store as C strings must not hide a \u0000 inside. */
static int gio__js_cstr(gio__js *j, char **out) {
    size_t l;
    size_t at = j->i;
    if (gio__js_str(j, out, &l)) return 1;
    if (strlen(*out) != l) {
        free(*out);
        *out = NULL;
        j->i = at;
        return gio__js_fail(j, "string contains \\u0000");
    }
    return 0;
}

static int gio__js_u64(gio__js *j, uint64_t *v) {
    int c = gio__js_peek(j);
    *v = 0;
    if (c < '0' || c > '9') return gio__js_fail(j, "expected non-negative integer");
    if (c == '0' && j->i + 1 < j->n && j->s[j->i + 1] >= '0' && j->s[j->i + 1] <= '9')
        return gio__js_fail(j, "leading zero in number");
    while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') {
        unsigned d = (unsigned)(j->s[j->i] - '0');
        if (*v > (UINT64_MAX - d) / 10) return gio__js_fail(j, "integer overflow");
        *v = *v * 10 + d;
        j->i++;
    }
    if (j->i < j->n && (j->s[j->i] == '.' || j->s[j->i] == 'e' || j->s[j->i] == 'E'))
        return gio__js_fail(j, "expected integer, got fraction/exponent");
    return 0;
}

static int gio__js_digits(gio__js *j) {
    size_t at = j->i;
    while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') j->i++;
    return j->i > at ? 0 : gio__js_fail(j, "expected digit");
}

static int gio__js_obj_next(gio__js *j, int *first, char **key);
static int gio__js_arr_next(gio__js *j, int *first);

static int gio__js_skip(gio__js *j) {
    int c = gio__js_peek(j), first = 1, r;
    if (c == '"') return gio__js_str(j, NULL, NULL);
    if (c == '{' || c == '[') {
        /* Bounded recursion: a file of 1e6 '[' must not blow the stack. */
        if (++j->depth > 64) return gio__js_fail(j, "nesting too deep");
        j->i++;
        if (c == '{') {
            char *key;
            while ((r = gio__js_obj_next(j, &first, &key)) == 1) {
                free(key);
                if (gio__js_skip(j)) return 1;
            }
        } else {
            while ((r = gio__js_arr_next(j, &first)) == 1)
                if (gio__js_skip(j)) return 1;
        }
        j->depth--;
        return r < 0 ? 1 : 0;
    }
    if (c == 't' || c == 'f' || c == 'n') {
        const char *lit = c == 't' ? "true" : c == 'f' ? "false" : "null";
        size_t l = strlen(lit);
        if (j->n - j->i < l || memcmp(j->s + j->i, lit, l) != 0) return gio__js_fail(j, "bad literal");
        j->i += l;
        return 0;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        if (c == '-') j->i++;
        if (j->i < j->n && j->s[j->i] == '0') j->i++;
        else if (gio__js_digits(j)) return 1;
        if (j->i < j->n && j->s[j->i] == '.') { j->i++; if (gio__js_digits(j)) return 1; }
        if (j->i < j->n && (j->s[j->i] == 'e' || j->s[j->i] == 'E')) {
            j->i++;
            if (j->i < j->n && (j->s[j->i] == '+' || j->s[j->i] == '-')) j->i++;
            if (gio__js_digits(j)) return 1;
        }
        return 0;
    }
    return gio__js_fail(j, c < 0 ? "unexpected end" : "unexpected character");
}

/* Object member iteration after the '{' is consumed: 1 = *key read and ':'
   consumed (caller frees key), 0 = '}' consumed, -1 = error. */
static int gio__js_obj_next(gio__js *j, int *first, char **key) {
    int c = gio__js_peek(j);
    *key = NULL;
    if (c == '}') { j->i++; return 0; }
    if (!*first) {
        if (c != ',') { gio__js_fail(j, "expected ',' or '}'"); return -1; }
        j->i++;
    }
    *first = 0;
    /* Keys become C strings (tensor names, tokens): a \u0000 inside would
       make two different keys compare equal, so reject it. */
    if (gio__js_cstr(j, key)) return -1;
    if (gio__js_peek(j) != ':') { free(*key); *key = NULL; gio__js_fail(j, "expected ':'"); return -1; }
    j->i++;
    return 1;
}

static int gio__js_arr_next(gio__js *j, int *first) {
    int c = gio__js_peek(j);
    if (c == ']') { j->i++; return 0; }
    if (!*first) {
        if (c != ',') { gio__js_fail(j, "expected ',' or ']'"); return -1; }
        j->i++;
    }
    *first = 0;
    return 1;
}

/* ---- dtypes ---- */

static const char *const gio__dtype_names[GIO_DTYPE_COUNT] = {
    "F32", "BF16", "F16", "F64", "I64", "I32", "I16", "I8",
    "U64", "U32", "U16", "U8", "BOOL"};
static const unsigned char gio__dtype_sizes[GIO_DTYPE_COUNT] = {4, 2, 2, 8, 8, 4, 2, 1, 8, 4, 2, 1, 1};

size_t gio_dtype_size(gio_dtype d) {
    return (unsigned)d < GIO_DTYPE_COUNT ? gio__dtype_sizes[d] : 0;
}

const char *gio_dtype_name(gio_dtype d) {
    return (unsigned)d < GIO_DTYPE_COUNT ? gio__dtype_names[d] : "?";
}

int gio_dtype_parse(const char *name, gio_dtype *out) {
    int i;
    for (i = 0; i < GIO_DTYPE_COUNT; i++)
        if (strcmp(name, gio__dtype_names[i]) == 0) { *out = (gio_dtype)i; return 0; }
    return 1;
}

/* ---- safetensors reader ---- */

void gio_st_free(gio_safetensors *st) {
    int i;
    if (!st) return;
    for (i = 0; i < st->n_tensors; i++) free(st->tensors[i].name);
    for (i = 0; i < 2 * st->n_meta; i++) free(st->meta[i]);
    free(st->tensors);
    free((void *)st->by_name);
    free(st->meta);
    free(st->buf);
    free(st->path);
    memset(st, 0, sizeof *st);
}

static int gio__cmp_name(const void *a, const void *b) {
    return strcmp((*(const gio_tensor *const *)a)->name, (*(const gio_tensor *const *)b)->name);
}

static int gio__cmp_offset(const void *a, const void *b) {
    const gio_tensor *x = *(const gio_tensor *const *)a, *y = *(const gio_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int gio__st_tensor(gio__js *j, gio_tensor *t) {
    int first = 1, r, have_dtype = 0, have_shape = 0, have_off = 0;
    char *key;
    if (gio__js_expect(j, '{')) return 1;
    while ((r = gio__js_obj_next(j, &first, &key)) == 1) {
        if (strcmp(key, "dtype") == 0) {
            char *v;
            free(key);
            if (have_dtype++) return gio__js_fail(j, "tensor '%s': duplicate dtype", t->name);
            if (gio__js_cstr(j, &v)) return 1;
            if (gio_dtype_parse(v, &t->dtype)) {
                gio__js_fail(j, "tensor '%s': unsupported dtype \"%.32s\"", t->name, v);
                free(v);
                return 1;
            }
            free(v);
        } else if (strcmp(key, "shape") == 0) {
            int af = 1, ar;
            free(key);
            if (have_shape++) return gio__js_fail(j, "tensor '%s': duplicate shape", t->name);
            if (gio__js_expect(j, '[')) return 1;
            t->rank = 0;
            while ((ar = gio__js_arr_next(j, &af)) == 1) {
                uint64_t d;
                if (t->rank >= GIO_MAX_RANK)
                    return gio__js_fail(j, "tensor '%s': rank exceeds %d", t->name, GIO_MAX_RANK);
                if (gio__js_u64(j, &d)) return 1;
                if (d > (uint64_t)INT64_MAX) return gio__js_fail(j, "tensor '%s': dimension too large", t->name);
                t->shape[t->rank++] = (int64_t)d;
            }
            if (ar < 0) return 1;
        } else if (strcmp(key, "data_offsets") == 0) {
            int af = 1, ar, cnt = 0;
            uint64_t v[2] = {0, 0};
            free(key);
            if (have_off++) return gio__js_fail(j, "tensor '%s': duplicate data_offsets", t->name);
            if (gio__js_expect(j, '[')) return 1;
            while ((ar = gio__js_arr_next(j, &af)) == 1) {
                if (cnt >= 2) return gio__js_fail(j, "tensor '%s': data_offsets needs 2 entries", t->name);
                if (gio__js_u64(j, &v[cnt++])) return 1;
            }
            if (ar < 0) return 1;
            if (cnt != 2) return gio__js_fail(j, "tensor '%s': data_offsets needs 2 entries", t->name);
            t->begin = v[0];
            t->end = v[1];
        } else {
            /* Unknown fields are tolerated, as serde does by default. */
            free(key);
            if (gio__js_skip(j)) return 1;
        }
    }
    if (r < 0) return 1;
    if (!have_dtype || !have_shape || !have_off)
        return gio__js_fail(j, "tensor '%s': missing %s", t->name,
                            !have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");
    return 0;
}

static int gio__st_meta(gio__js *j, gio_safetensors *st) {
    int first = 1, r, cap = 0;
    char *key;
    if (gio__js_expect(j, '{')) return 1;
    while ((r = gio__js_obj_next(j, &first, &key)) == 1) {
        char *val;
        int k;
        for (k = 0; k < st->n_meta; k++)
            if (strcmp(st->meta[2 * k], key) == 0) {
                gio__js_fail(j, "duplicate __metadata__ key '%.64s'", key);
                free(key);
                return 1;
            }
        if (gio__js_peek(j) != '"') {
            gio__js_fail(j, "__metadata__ value for '%.64s' is not a string", key);
            free(key);
            return 1;
        }
        if (gio__js_cstr(j, &val)) { free(key); return 1; }
        if (st->n_meta == cap) {
            int ncap = cap ? cap * 2 : 8;
            char **m = (char **)realloc(st->meta, sizeof(char *) * 2 * (size_t)ncap);
            if (!m) { free(key); free(val); return gio__js_fail(j, "out of memory"); }
            st->meta = m;
            cap = ncap;
        }
        st->meta[2 * st->n_meta] = key;
        st->meta[2 * st->n_meta + 1] = val;
        st->n_meta++;
    }
    return r < 0 ? 1 : 0;
}

/* Takes ownership of buf (malloc'ed, len bytes). */
static int gio__st_parse_owned(gio_safetensors *st, unsigned char *buf, size_t len,
                               const char *label, char *err, size_t errlen) {
    uint64_t hlen = 0;
    size_t data_len;
    int k, first = 1, r, cap = 0, seen_meta = 0;
    gio__js j;
    char *key;
    const gio_tensor **by_off = NULL;
    uint64_t pos;

    memset(st, 0, sizeof *st);
    st->buf = buf;
    st->len = len;
    st->path = (char *)malloc(strlen(label) + 1);
    if (!st->path) { gio__seterr(err, errlen, "%s: out of memory", label); goto fail; }
    strcpy(st->path, label);

    if (len < 8) {
        gio__seterr(err, errlen, "%s: file is %zu bytes, too short for the 8-byte header length", label, len);
        goto fail;
    }
    for (k = 7; k >= 0; k--) hlen = (hlen << 8) | buf[k];
    if (hlen > len - 8) {
        gio__seterr(err, errlen, "%s: header length %llu exceeds file size %zu", label,
                    (unsigned long long)hlen, len);
        goto fail;
    }
    if (hlen < 2) {
        gio__seterr(err, errlen, "%s: header length %llu too small for a JSON object", label,
                    (unsigned long long)hlen);
        goto fail;
    }
    st->data_start = 8 + (size_t)hlen;
    data_len = len - st->data_start;

    memset(&j, 0, sizeof j);
    j.s = buf + 8;
    j.n = (size_t)hlen;
    j.base = 8;
    j.label = label;
    j.err = err;
    j.errlen = errlen;
    /* The spec requires the header to start with '{' (no leading space). */
    if (buf[8] != '{') { j.i = 0; gio__js_fail(&j, "header must start with '{'"); goto fail; }
    j.i = 1;
    while ((r = gio__js_obj_next(&j, &first, &key)) == 1) {
        gio_tensor *t;
        if (strcmp(key, "__metadata__") == 0) {
            free(key);
            if (seen_meta++) { gio__js_fail(&j, "duplicate __metadata__"); goto fail; }
            if (gio__st_meta(&j, st)) goto fail;
            continue;
        }
        if (st->n_tensors == cap) {
            int ncap = cap ? cap * 2 : 16;
            gio_tensor *nt = (gio_tensor *)realloc(st->tensors, sizeof(gio_tensor) * (size_t)ncap);
            if (!nt) { free(key); gio__js_fail(&j, "out of memory"); goto fail; }
            st->tensors = nt;
            cap = ncap;
        }
        t = &st->tensors[st->n_tensors++];
        memset(t, 0, sizeof *t);
        t->name = key;
        if (gio__st_tensor(&j, t)) goto fail;
    }
    if (r < 0) goto fail;
    /* Only whitespace padding may follow the object. */
    gio__js_ws(&j);
    if (j.i != j.n) { gio__js_fail(&j, "trailing garbage after header object"); goto fail; }

    for (k = 0; k < st->n_tensors; k++) {
        gio_tensor *t = &st->tensors[k];
        size_t isz = gio_dtype_size(t->dtype);
        uint64_t numel = 1, nbytes;
        int d;
        for (d = 0; d < t->rank; d++) {
            uint64_t dim = (uint64_t)t->shape[d];
            if (dim != 0 && numel > UINT64_MAX / dim) {
                gio__seterr(err, errlen, "%s: tensor '%s': element count overflows", label, t->name);
                goto fail;
            }
            numel *= dim;
        }
        if (numel > UINT64_MAX / isz) {
            gio__seterr(err, errlen, "%s: tensor '%s': byte size overflows", label, t->name);
            goto fail;
        }
        nbytes = numel * isz;
        if (t->begin > t->end || t->end > data_len) {
            gio__seterr(err, errlen, "%s: tensor '%s': data_offsets [%llu,%llu] outside data section of %zu bytes",
                        label, t->name, (unsigned long long)t->begin, (unsigned long long)t->end, data_len);
            goto fail;
        }
        if (t->end - t->begin != nbytes) {
            gio__seterr(err, errlen, "%s: tensor '%s': data_offsets [%llu,%llu] span %llu bytes, but %s shape needs %llu",
                        label, t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                        (unsigned long long)(t->end - t->begin), gio_dtype_name(t->dtype),
                        (unsigned long long)nbytes);
            goto fail;
        }
        t->numel = numel;
        t->nbytes = (size_t)nbytes;
        t->data = buf + st->data_start + t->begin;
    }

    st->by_name = (const gio_tensor **)gio__alloc(sizeof(gio_tensor *) * (size_t)st->n_tensors);
    by_off = (const gio_tensor **)gio__alloc(sizeof(gio_tensor *) * (size_t)st->n_tensors);
    if (!st->by_name || !by_off) { gio__seterr(err, errlen, "%s: out of memory", label); goto fail; }
    for (k = 0; k < st->n_tensors; k++) st->by_name[k] = by_off[k] = &st->tensors[k];
    qsort((void *)st->by_name, (size_t)st->n_tensors, sizeof(gio_tensor *), gio__cmp_name);
    for (k = 1; k < st->n_tensors; k++)
        if (strcmp(st->by_name[k - 1]->name, st->by_name[k]->name) == 0) {
            gio__seterr(err, errlen, "%s: duplicate tensor name '%s'", label, st->by_name[k]->name);
            goto fail;
        }
    /* Tensors must tile the data section exactly: overlaps would alias
       weights, holes could smuggle other content (the spec forbids both). */
    qsort((void *)by_off, (size_t)st->n_tensors, sizeof(gio_tensor *), gio__cmp_offset);
    pos = 0;
    for (k = 0; k < st->n_tensors; k++) {
        if (by_off[k]->begin < pos) {
            gio__seterr(err, errlen, "%s: tensor '%s' [%llu,%llu] overlaps tensor '%s' [%llu,%llu]", label,
                        by_off[k]->name, (unsigned long long)by_off[k]->begin, (unsigned long long)by_off[k]->end,
                        by_off[k - 1]->name, (unsigned long long)by_off[k - 1]->begin,
                        (unsigned long long)by_off[k - 1]->end);
            goto fail;
        }
        if (by_off[k]->begin > pos) {
            gio__seterr(err, errlen, "%s: hole in data section at bytes [%llu,%llu) before tensor '%s'", label,
                        (unsigned long long)pos, (unsigned long long)by_off[k]->begin, by_off[k]->name);
            goto fail;
        }
        pos = by_off[k]->end;
    }
    if (pos != data_len) {
        gio__seterr(err, errlen, "%s: data section has %llu trailing bytes not covered by any tensor", label,
                    (unsigned long long)(data_len - pos));
        goto fail;
    }
    free((void *)by_off);
    return 0;
fail:
    free((void *)by_off);
    gio_st_free(st);
    return 1;
}

int gio_st_parse(gio_safetensors *st, const void *bytes, size_t len, const char *label,
                 char *err, size_t errlen) {
    unsigned char *copy = (unsigned char *)gio__alloc(len);
    if (!copy) {
        memset(st, 0, sizeof *st);
        gio__seterr(err, errlen, "%s: out of memory", label);
        return 1;
    }
    if (len) memcpy(copy, bytes, len);
    return gio__st_parse_owned(st, copy, len, label, err, errlen);
}

int gio_st_load(gio_safetensors *st, const char *path, char *err, size_t errlen) {
    char *buf;
    size_t len;
    memset(st, 0, sizeof *st);
    if (gio_read_file(path, &buf, &len, err, errlen)) return 1;
    return gio__st_parse_owned(st, (unsigned char *)buf, len, path, err, errlen);
}

const gio_tensor *gio_st_find(const gio_safetensors *st, const char *name) {
    size_t lo = 0, hi = (size_t)st->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->by_name[mid]->name, name);
        if (c == 0) return st->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

static void gio__fmt_shape(char *o, size_t on, int rank, const int64_t *shape) {
    size_t m = 0;
    int d;
    if (on == 0) return;
    m += (size_t)snprintf(o, on, "[");
    for (d = 0; d < rank && m < on; d++)
        m += (size_t)snprintf(o + m, on - m, d ? ",%lld" : "%lld", (long long)shape[d]);
    if (m < on) snprintf(o + m, on - m, "]");
}

int gio_st_expect(const gio_safetensors *st, const char *name, gio_dtype dtype, int rank,
                  const int64_t *shape, const gio_tensor **out, char *err, size_t errlen) {
    const gio_tensor *t = gio_st_find(st, name);
    int d;
    if (out) *out = t;
    if (!t) { gio__seterr(err, errlen, "%s: no tensor named '%s'", st->path, name); return 1; }
    if (t->dtype != dtype) {
        gio__seterr(err, errlen, "%s: tensor '%s' has dtype %s, want %s", st->path, name,
                    gio_dtype_name(t->dtype), gio_dtype_name(dtype));
        return 1;
    }
    if (shape || rank != t->rank) {
        int bad = rank != t->rank;
        for (d = 0; !bad && shape && d < rank; d++) bad = t->shape[d] != shape[d];
        if (bad) {
            char a[160], b[160];
            gio__fmt_shape(a, sizeof a, t->rank, t->shape);
            if (shape) gio__fmt_shape(b, sizeof b, rank, shape);
            else snprintf(b, sizeof b, "rank %d", rank);
            gio__seterr(err, errlen, "%s: tensor '%s' has shape %s, want %s", st->path, name, a, b);
            return 1;
        }
    }
    return 0;
}

const char *gio_st_meta(const gio_safetensors *st, const char *key) {
    int k;
    for (k = 0; k < st->n_meta; k++)
        if (strcmp(st->meta[2 * k], key) == 0) return st->meta[2 * k + 1];
    return NULL;
}

static uint64_t gio__le(const unsigned char *p, int n) {
    uint64_t v = 0;
    while (n-- > 0) v = (v << 8) | p[n];
    return v;
}

static float gio__f16_to_f32(uint32_t h) {
    uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
    float f;
    if (exp == 0) {
        if (man == 0) bits = sign;
        else {
            /* Subnormal: renormalize so the f32 exponent can hold it. */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) { man <<= 1; exp--; }
            man &= 0x3FF;
            bits = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31) bits = sign | 0x7F800000u | (man << 13);
    else bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    memcpy(&f, &bits, 4);
    return f;
}

int gio_tensor_to_f32(const gio_tensor *t, float *out) {
    const unsigned char *p = (const unsigned char *)t->data;
    size_t isz = gio_dtype_size(t->dtype), i;
    if (!isz) return 1;
    for (i = 0; i < (size_t)t->numel; i++, p += isz) {
        uint64_t v = gio__le(p, (int)isz);
        float f = 0;
        switch (t->dtype) {
        case GIO_F32: { uint32_t b = (uint32_t)v; memcpy(&f, &b, 4); } break;
        case GIO_BF16: { uint32_t b = (uint32_t)v << 16; memcpy(&f, &b, 4); } break;
        case GIO_F16: f = gio__f16_to_f32((uint32_t)v); break;
        case GIO_F64: { double d; memcpy(&d, &v, 8); f = (float)d; } break;
        case GIO_I64: f = (float)(int64_t)v; break;
        case GIO_I32: f = (float)(int32_t)(uint32_t)v; break;
        case GIO_I16: f = (float)(int16_t)(uint16_t)v; break;
        case GIO_I8: f = (float)(int8_t)(uint8_t)v; break;
        default: f = (float)v; break;
        }
        out[i] = f;
    }
    return 0;
}

/* ---- safetensors writer ---- */

static int gio__cmp_cstr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int gio_st_save(const char *path, const gio_st_entry *tensors, int n, const char *const *meta_kv,
                int n_meta, char *err, size_t errlen) {
    gio_strbuf h;
    gio__afile f;
    uint64_t *offs = NULL, pos = 0;
    size_t *nbytes = NULL;
    int *order = NULL, i, k, no = 0, rc = 1;
    const char **names = NULL;
    unsigned char lenb[8];
    unsigned sz;

    memset(&h, 0, sizeof h);
    if (n < 0 || n_meta < 0) { gio__seterr(err, errlen, "%s: negative tensor/metadata count", path); return 1; }
    offs = (uint64_t *)gio__alloc(sizeof(uint64_t) * (size_t)n);
    nbytes = (size_t *)gio__alloc(sizeof(size_t) * (size_t)n);
    order = (int *)gio__alloc(sizeof(int) * (size_t)n);
    names = (const char **)gio__alloc(sizeof(char *) * (size_t)n);
    if (!offs || !nbytes || !order || !names) { gio__seterr(err, errlen, "%s: out of memory", path); goto done; }

    for (i = 0; i < n; i++) {
        const gio_st_entry *e = &tensors[i];
        uint64_t numel = 1;
        size_t isz = gio_dtype_size(e->dtype);
        if (!e->name || !gio__utf8_valid(e->name) || strcmp(e->name, "__metadata__") == 0) {
            gio__seterr(err, errlen, "%s: tensor %d: invalid name", path, i);
            goto done;
        }
        if (!isz) { gio__seterr(err, errlen, "%s: tensor '%s': invalid dtype %d", path, e->name, (int)e->dtype); goto done; }
        if (e->rank < 0 || e->rank > GIO_MAX_RANK || (e->rank > 0 && !e->shape)) {
            gio__seterr(err, errlen, "%s: tensor '%s': invalid rank %d", path, e->name, e->rank);
            goto done;
        }
        for (k = 0; k < e->rank; k++) {
            if (e->shape[k] < 0) {
                gio__seterr(err, errlen, "%s: tensor '%s': negative dimension", path, e->name);
                goto done;
            }
            if (e->shape[k] != 0 && numel > (uint64_t)SIZE_MAX / isz / (uint64_t)e->shape[k]) {
                gio__seterr(err, errlen, "%s: tensor '%s': too large", path, e->name);
                goto done;
            }
            numel *= (uint64_t)e->shape[k];
        }
        nbytes[i] = (size_t)(numel * isz);
        if (nbytes[i] && !e->data) {
            gio__seterr(err, errlen, "%s: tensor '%s': NULL data", path, e->name);
            goto done;
        }
        names[i] = e->name;
    }
    qsort((void *)names, (size_t)n, sizeof(char *), gio__cmp_cstr);
    for (i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) == 0) {
            gio__seterr(err, errlen, "%s: duplicate tensor name '%s'", path, names[i]);
            goto done;
        }
    for (i = 0; i < n_meta; i++)
        if (!meta_kv[2 * i] || !meta_kv[2 * i + 1] || !gio__utf8_valid(meta_kv[2 * i]) ||
            !gio__utf8_valid(meta_kv[2 * i + 1])) {
            gio__seterr(err, errlen, "%s: metadata entry %d is NULL or not UTF-8", path, i);
            goto done;
        }

    /* Lay data out largest itemsize first so that, with the 8-aligned data
       start, every tensor is naturally aligned for zero-copy use. */
    for (sz = 8; sz >= 1; sz /= 2)
        for (i = 0; i < n; i++)
            if (gio_dtype_size(tensors[i].dtype) == sz) {
                order[no++] = i;
                offs[i] = pos;
                pos += nbytes[i];
            }

    gio__sb_put(&h, "{", 1);
    if (n_meta > 0) {
        gio__sb_puts(&h, "\"__metadata__\":{");
        for (i = 0; i < n_meta; i++) {
            if (i) gio__sb_put(&h, ",", 1);
            gio__sb_json_str(&h, meta_kv[2 * i]);
            gio__sb_put(&h, ":", 1);
            gio__sb_json_str(&h, meta_kv[2 * i + 1]);
        }
        gio__sb_put(&h, "}", 1);
    }
    for (i = 0; i < n; i++) {
        const gio_st_entry *e = &tensors[i];
        if (i || n_meta > 0) gio__sb_put(&h, ",", 1);
        gio__sb_json_str(&h, e->name);
        gio__sb_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", gio_dtype_name(e->dtype));
        for (k = 0; k < e->rank; k++) gio__sb_printf(&h, k ? ",%lld" : "%lld", (long long)e->shape[k]);
        gio__sb_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offs[i],
                       (unsigned long long)(offs[i] + nbytes[i]));
    }
    gio__sb_put(&h, "}", 1);
    while ((8 + h.n) % 8) gio__sb_put(&h, " ", 1);
    if (h.oom) { gio__seterr(err, errlen, "%s: out of memory", path); goto done; }
    for (k = 0; k < 8; k++) lenb[k] = (unsigned char)((uint64_t)h.n >> (8 * k));

    if (gio__af_open(&f, path, err, errlen)) goto done;
    if (gio__af_write(&f, lenb, 8, err, errlen) || gio__af_write(&f, h.p, h.n, err, errlen)) goto done;
    for (k = 0; k < no; k++)
        if (nbytes[order[k]] && gio__af_write(&f, tensors[order[k]].data, nbytes[order[k]], err, errlen))
            goto done;
    if (gio__af_commit(&f, err, errlen)) goto done;
    rc = 0;
done:
    free(h.p);
    free(offs);
    free(nbytes);
    free(order);
    free((void *)names);
    return rc;
}

/* ---- llm.c token files ---- */

#define GIO__TOK_MAGIC 20240520
#define GIO__TOK_HDR 256

int gio_tokens_read(const char *path, int32_t **tokens, size_t *n, char *err, size_t errlen) {
    char *buf;
    size_t len, i, want;
    const unsigned char *p;
    int32_t magic, version, count;
    *tokens = NULL;
    *n = 0;
    if (gio_read_file(path, &buf, &len, err, errlen)) return 1;
    p = (const unsigned char *)buf;
    if (len < GIO__TOK_HDR * 4) {
        gio__seterr(err, errlen, "%s: truncated: %zu bytes, header alone needs %d", path, len, GIO__TOK_HDR * 4);
        free(buf);
        return 1;
    }
    magic = (int32_t)(uint32_t)gio__le(p, 4);
    version = (int32_t)(uint32_t)gio__le(p + 4, 4);
    count = (int32_t)(uint32_t)gio__le(p + 8, 4);
    if (magic != GIO__TOK_MAGIC) {
        gio__seterr(err, errlen, "%s: bad magic %ld (want %d)", path, (long)magic, GIO__TOK_MAGIC);
        free(buf);
        return 1;
    }
    if (version != 1) {
        gio__seterr(err, errlen, "%s: unsupported version %ld (want 1: uint16 GPT-2 tokens)", path, (long)version);
        free(buf);
        return 1;
    }
    if (count < 0) {
        gio__seterr(err, errlen, "%s: negative token count %ld", path, (long)count);
        free(buf);
        return 1;
    }
    want = GIO__TOK_HDR * 4 + 2 * (size_t)count;
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
    for (i = 0; i < (size_t)count; i++) (*tokens)[i] = (int32_t)gio__le(p + GIO__TOK_HDR * 4 + 2 * i, 2);
    *n = (size_t)count;
    free(buf);
    return 0;
}

int gio_tokens_write(const char *path, const int32_t *tokens, size_t n, char *err, size_t errlen) {
    unsigned char *buf;
    size_t i, len;
    int rc;
    if (n > (size_t)INT32_MAX) { gio__seterr(err, errlen, "%s: too many tokens (%zu)", path, n); return 1; }
    for (i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] > 65535) {
            gio__seterr(err, errlen, "%s: token %zu = %ld does not fit in uint16", path, i, (long)tokens[i]);
            return 1;
        }
    len = GIO__TOK_HDR * 4 + 2 * n;
    buf = (unsigned char *)calloc(1, len);
    if (!buf) { gio__seterr(err, errlen, "%s: out of memory", path); return 1; }
    {
        uint32_t hdr[3];
        int k, b;
        hdr[0] = GIO__TOK_MAGIC;
        hdr[1] = 1;
        hdr[2] = (uint32_t)n;
        for (k = 0; k < 3; k++)
            for (b = 0; b < 4; b++) buf[4 * k + b] = (unsigned char)(hdr[k] >> (8 * b));
    }
    for (i = 0; i < n; i++) {
        buf[GIO__TOK_HDR * 4 + 2 * i] = (unsigned char)(tokens[i] & 0xFF);
        buf[GIO__TOK_HDR * 4 + 2 * i + 1] = (unsigned char)(tokens[i] >> 8);
    }
    rc = gio_write_file_atomic(path, buf, len, err, errlen);
    free(buf);
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

/* Approximates \p{L}, \p{N}, \s for the GPT-2 split (see manual above). */
static int gio__uclass(uint32_t c) {
    if (c < 0x80) {
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return GIO__CL;
        if (c >= '0' && c <= '9') return GIO__CN;
        if (c == ' ' || (c >= 9 && c <= 13)) return GIO__CS;
        return GIO__CO;
    }
    if (c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
        c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000)
        return GIO__CS;
    if (c < 0x100) {
        if (c == 0xAA || c == 0xB5 || c == 0xBA || (c >= 0xC0 && c != 0xD7 && c != 0xF7)) return GIO__CL;
        if (c == 0xB2 || c == 0xB3 || c == 0xB9 || (c >= 0xBC && c <= 0xBE)) return GIO__CN;
        return GIO__CO;
    }
    if ((c >= 0x660 && c <= 0x669) || (c >= 0x6F0 && c <= 0x6F9) || (c >= 0x966 && c <= 0x96F) ||
        (c >= 0x9E6 && c <= 0x9EF) || c == 0x2070 || (c >= 0x2074 && c <= 0x2079) ||
        (c >= 0x2080 && c <= 0x2089) || (c >= 0x2150 && c <= 0x2189) || (c >= 0x2460 && c <= 0x249B) ||
        (c >= 0x2776 && c <= 0x2793) || c == 0x3007 || (c >= 0x3021 && c <= 0x3029) ||
        (c >= 0xFF10 && c <= 0xFF19))
        return GIO__CN;
    if ((c >= 0x300 && c <= 0x36F) ||                       /* combining marks */
        (c >= 0x2000 && c <= 0x2BFF) ||                     /* punctuation, symbols, arrows, math, box, dingbats */
        (c >= 0x2E00 && c <= 0x2E7F) || (c >= 0x3000 && c <= 0x303F) ||
        (c >= 0xE000 && c <= 0xF8FF) ||                     /* private use */
        (c >= 0xFE00 && c <= 0xFE0F) || (c >= 0xFE30 && c <= 0xFE6F) ||
        (c >= 0xFF01 && c <= 0xFF0F) || (c >= 0xFF1A && c <= 0xFF20) || (c >= 0xFF3B && c <= 0xFF40) ||
        (c >= 0xFF5B && c <= 0xFF65) || (c >= 0xFFF0 && c <= 0xFFFF) ||
        (c >= 0x1F000 && c <= 0x1FAFF) ||                   /* emoji and pictographs */
        (c >= 0xE0000 && c <= 0xE007F))
        return GIO__CO;
    return GIO__CL;
}

/* Invalid UTF-8 advances one byte and counts as punctuation, so arbitrary
   bytes still tokenize (and round-trip) instead of failing. */
static size_t gio__cp_at(const unsigned char *s, size_t n, size_t i, int *cls) {
    uint32_t cp;
    size_t l = gio__utf8_dec(s + i, n - i, &cp);
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

struct gio__bpe {
    int vocab_size;
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
    if (!b) return;
    for (i = 0; i < b->vocab_size; i++) free(b->tok[i]);
    free(b->tok);
    free(b->tok_len);
    free(b->vslot);
    free(b->mkey);
    free(b->mrank);
    free(b->mres);
    free(b);
}

/* Vocab/merges strings are in GPT-2's printable byte alphabet; map back to
   raw bytes so encode/decode work on bytes.  Characters outside the
   alphabet (e.g. in added special tokens) are kept as their UTF-8. */
static char *gio__unmap(const char *s, size_t n, size_t *outn) {
    static int inv_ready = 0;
    static int16_t inv[0x144];
    char *o = (char *)gio__alloc(n + 1);
    size_t i = 0, m = 0;
    if (!o) return NULL;
    if (!inv_ready) {
        int b;
        for (b = 0; b < 0x144; b++) inv[b] = -1;
        for (b = 0; b < 256; b++) inv[gio_gpt2_byte_to_unicode((unsigned char)b)] = (int16_t)b;
        inv_ready = 1;
    }
    while (i < n) {
        uint32_t cp;
        size_t l = gio__utf8_dec((const unsigned char *)s + i, n - i, &cp);
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

static int gio__bpe_load(struct gio__bpe *b, const char *vpath, const char *mpath, char *err, size_t errlen) {
    char *vb = NULL, *mb = NULL, *key;
    size_t vlen, mlen, i, nent = 0, ecap = 0, nmerge = 0, line_no = 0, p;
    gio__vent *ent = NULL;
    gio__js j;
    int first = 1, r, rc = 1;
    uint64_t max_id = 0;

    if (gio_read_file(vpath, &vb, &vlen, err, errlen)) return 1;
    memset(&j, 0, sizeof j);
    j.s = (const unsigned char *)vb;
    j.n = vlen;
    j.label = vpath;
    j.err = err;
    j.errlen = errlen;
    if (gio__js_expect(&j, '{')) goto done;
    while ((r = gio__js_obj_next(&j, &first, &key)) == 1) {
        uint64_t id;
        size_t raw_n;
        char *raw;
        if (gio__js_u64(&j, &id)) { free(key); goto done; }
        if (id >= (1u << 24)) { free(key); gio__js_fail(&j, "token id %llu too large", (unsigned long long)id); goto done; }
        raw = gio__unmap(key, strlen(key), &raw_n);
        free(key);
        if (!raw) { gio__js_fail(&j, "out of memory"); goto done; }
        if (nent == ecap) {
            size_t ncap = ecap ? ecap * 2 : 1024;
            gio__vent *ne = (gio__vent *)realloc(ent, sizeof *ent * ncap);
            if (!ne) { free(raw); gio__js_fail(&j, "out of memory"); goto done; }
            ent = ne;
            ecap = ncap;
        }
        ent[nent].s = raw;
        ent[nent].n = raw_n;
        ent[nent].id = id;
        nent++;
        if (id > max_id) max_id = id;
    }
    if (r < 0) goto done;
    if (gio__js_peek(&j) != -1) { gio__js_fail(&j, "trailing garbage"); goto done; }
    if (nent == 0) { gio__seterr(err, errlen, "%s: empty vocabulary", vpath); goto done; }

    b->vocab_size = (int)max_id + 1;
    b->tok = (char **)calloc((size_t)b->vocab_size, sizeof(char *));
    b->tok_len = (size_t *)calloc((size_t)b->vocab_size, sizeof(size_t));
    for (b->vcap = 16; b->vcap < 2 * nent; b->vcap *= 2) {}
    b->vslot = (int32_t *)malloc(sizeof(int32_t) * b->vcap);
    if (!b->tok || !b->tok_len || !b->vslot) { gio__seterr(err, errlen, "%s: out of memory", vpath); goto done; }
    for (i = 0; i < b->vcap; i++) b->vslot[i] = -1;
    for (i = 0; i < nent; i++) {
        int32_t id = (int32_t)ent[i].id;
        if (b->tok[id]) { gio__seterr(err, errlen, "%s: id %ld assigned to two tokens", vpath, (long)id); goto done; }
        b->tok[id] = ent[i].s;
        b->tok_len[id] = ent[i].n;
        ent[i].s = NULL;
        /* First entry wins if two vocab strings map to the same bytes. */
        if (gio__bpe_find(b, b->tok[id], b->tok_len[id]) < 0) {
            size_t m = b->vcap - 1, s;
            for (s = (size_t)gio__hash(b->tok[id], b->tok_len[id]) & m; b->vslot[s] >= 0; s = (s + 1) & m) {}
            b->vslot[s] = id;
        }
    }
    for (i = 0; i < 256; i++) {
        char c = (char)i;
        b->byte_id[i] = gio__bpe_find(b, &c, 1);
        if (b->byte_id[i] < 0) {
            gio__seterr(err, errlen, "%s: no token for byte 0x%02x (byte-level BPE needs all 256)", vpath, (unsigned)i);
            goto done;
        }
    }

    if (gio_read_file(mpath, &mb, &mlen, err, errlen)) goto done;
    for (i = 0; i < mlen; i++) nmerge += mb[i] == '\n';
    for (b->mcap = 16; b->mcap < 2 * (nmerge + 1); b->mcap *= 2) {}
    b->mkey = (uint64_t *)malloc(sizeof(uint64_t) * b->mcap);
    b->mrank = (int32_t *)malloc(sizeof(int32_t) * b->mcap);
    b->mres = (int32_t *)malloc(sizeof(int32_t) * b->mcap);
    if (!b->mkey || !b->mrank || !b->mres) { gio__seterr(err, errlen, "%s: out of memory", mpath); goto done; }
    for (i = 0; i < b->mcap; i++) b->mres[i] = -1;
    nmerge = 0;
    for (p = 0; p < mlen;) {
        size_t e = p, le, sp, na, nb2, nc;
        char *ra = NULL, *rb = NULL, *rcat;
        int32_t ia, ib, ic, rk, rs;
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
        ra = gio__unmap(mb + p, sp - p, &na);
        rb = gio__unmap(mb + sp + 1, le - sp - 1, &nb2);
        rcat = (ra && rb) ? (char *)malloc(na + nb2 + 1) : NULL;
        if (!rcat) { free(ra); free(rb); gio__seterr(err, errlen, "%s: out of memory", mpath); goto done; }
        memcpy(rcat, ra, na);
        memcpy(rcat + na, rb, nb2);
        nc = na + nb2;
        ia = gio__bpe_find(b, ra, na);
        ib = gio__bpe_find(b, rb, nb2);
        ic = gio__bpe_find(b, rcat, nc);
        free(ra);
        free(rb);
        free(rcat);
        if (ia < 0 || ib < 0 || ic < 0) {
            gio__seterr(err, errlen, "%s:%zu: merge \"%.*s\": %s not in %s", mpath, line_no,
                        (int)(le - p > 60 ? 60 : le - p), mb + p,
                        ia < 0 ? "left part" : ib < 0 ? "right part" : "merged token", vpath);
            goto done;
        }
        /* A repeated pair keeps its first (highest priority) rank. */
        if (!gio__bpe_merge_find(b, ia, ib, &rk, &rs)) {
            uint64_t k2 = ((uint64_t)(uint32_t)ia << 32) | (uint32_t)ib;
            size_t m = b->mcap - 1, s;
            for (s = (size_t)gio__mix(k2) & m; b->mres[s] >= 0; s = (s + 1) & m) {}
            b->mkey[s] = k2;
            b->mrank[s] = (int32_t)nmerge;
            b->mres[s] = ic;
        }
        nmerge++;
        p = e + 1;
    }
    rc = 0;
done:
    for (i = 0; i < nent; i++) free(ent[i].s);
    free(ent);
    free(vb);
    free(mb);
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

int gio_tok_encode(const gio_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n,
                   char *err, size_t errlen) {
    int32_t *out;
    size_t m = 0, i = 0;
    *ids = NULL;
    *n = 0;
    /* Every token covers at least one byte, so len bounds the output. */
    out = (int32_t *)gio__alloc(sizeof(int32_t) * len);
    if (!out) { gio__seterr(err, errlen, "encode: out of memory for %zu bytes", len); return 1; }
    if (t->kind == GIO_TOK_BYTES) {
        for (i = 0; i < len; i++) out[i] = (unsigned char)text[i];
        m = len;
    } else if (t->kind == GIO_TOK_GPT2 && t->bpe) {
        const struct gio__bpe *b = t->bpe;
        while (i < len) {
            size_t pl = gio_gpt2_pretok_next(text, len, i), w = pl, k;
            int32_t *sym = out + m;
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
    } else {
        free(out);
        gio__seterr(err, errlen, "encode: tokenizer not initialized");
        return 1;
    }
    *ids = out;
    *n = m;
    return 0;
}

const char *gio_tok_piece(const gio_tokenizer *t, int32_t id, size_t *len) {
    static const char bytes[256] = {
#define GIO__B16(x) x, x + 1, x + 2, x + 3, x + 4, x + 5, x + 6, x + 7, x + 8, x + 9, x + 10, x + 11, x + 12, x + 13, x + 14, x + 15
        GIO__B16(0), GIO__B16(16), GIO__B16(32), GIO__B16(48), GIO__B16(64), GIO__B16(80), GIO__B16(96), GIO__B16(112),
        GIO__B16(-128), GIO__B16(-112), GIO__B16(-96), GIO__B16(-80), GIO__B16(-64), GIO__B16(-48), GIO__B16(-32), GIO__B16(-16)
#undef GIO__B16
    };
    *len = 0;
    if (id < 0 || id >= t->vocab_size) return NULL;
    if (t->kind == GIO_TOK_BYTES) { *len = 1; return bytes + id; }
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
    gio_strbuf b;
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
        gio__sb_put(&b, p, pl);
    }
    gio__sb_put(&b, "", 0);
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
    gio_strbuf b;
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
    gio__sb_printf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" viewBox=\"0 0 %g %g\" "
                       "font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H);
    gio__sb_puts(&b, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
    if (title) {
        gio__sb_printf(&b, "<text x=\"%g\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">", W / 2);
        gio__sb_xml(&b, title);
        gio__sb_puts(&b, "</text>\n");
    }
    for (i = 0;; i++) {
        v = x0 + i * xs;
        if (v > x1 + xs * 1e-9) break;
        gio__sb_printf(&b, "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#e0e0e0\"/>\n",
                       GIO__PX(v), T, GIO__PX(v), H - B);
        gio__sb_printf(&b, "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"black\"/>\n",
                       GIO__PX(v), H - B, GIO__PX(v), H - B + 5);
        gio__sb_printf(&b, "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%g</text>\n", GIO__PX(v), H - B + 18,
                       (v < xs * 1e-9 && v > -xs * 1e-9) ? 0.0 : v);
    }
    for (i = 0;; i++) {
        v = y0 + i * ys;
        if (v > y1 + ys * 1e-9) break;
        gio__sb_printf(&b, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n",
                       L, GIO__PY(v), W - R, GIO__PY(v));
        gio__sb_printf(&b, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"black\"/>\n",
                       L - 5, GIO__PY(v), L, GIO__PY(v));
        gio__sb_printf(&b, "<text x=\"%g\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", L - 8, GIO__PY(v) + 4,
                       (v < ys * 1e-9 && v > -ys * 1e-9) ? 0.0 : v);
    }
    gio__sb_printf(&b, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"black\"/>\n",
                   L, T, W - L - R, H - T - B);
    if (xlabel) {
        gio__sb_printf(&b, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">", L + (W - L - R) / 2, H - 15);
        gio__sb_xml(&b, xlabel);
        gio__sb_puts(&b, "</text>\n");
    }
    if (ylabel) {
        gio__sb_printf(&b, "<text x=\"18\" y=\"%g\" text-anchor=\"middle\" transform=\"rotate(-90 18 %g)\">",
                       T + (H - T - B) / 2, T + (H - T - B) / 2);
        gio__sb_xml(&b, ylabel);
        gio__sb_puts(&b, "</text>\n");
    }
    for (i = 0; i < n_series; i++) {
        const char *col = s[i].color ? s[i].color : palette[i % 6];
        int open = 0;
        for (k = 0; k < s[i].n; k++) {
            int ok = gio__finite(s[i].x[k]) && gio__finite(s[i].y[k]);
            if (ok && !open) {
                gio__sb_puts(&b, "<polyline fill=\"none\" stroke=\"");
                gio__sb_xml(&b, col);
                gio__sb_puts(&b, "\" stroke-width=\"1.5\" points=\"");
                open = 1;
            }
            if (ok) gio__sb_printf(&b, "%.1f,%.1f ", GIO__PX(s[i].x[k]), GIO__PY(s[i].y[k]));
            if (open && (!ok || k + 1 == s[i].n)) { gio__sb_puts(&b, "\"/>\n"); open = 0; }
        }
        /* Sparse series (eval every N steps) are unreadable as bare lines. */
        if (s[i].n <= 60)
            for (k = 0; k < s[i].n; k++)
                if (gio__finite(s[i].x[k]) && gio__finite(s[i].y[k])) {
                    gio__sb_printf(&b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"", GIO__PX(s[i].x[k]),
                                   GIO__PY(s[i].y[k]));
                    gio__sb_xml(&b, col);
                    gio__sb_puts(&b, "\"/>\n");
                }
        gio__sb_printf(&b, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"", W - R - 150,
                       T + 15 + 18.0 * i, W - R - 125, T + 15 + 18.0 * i);
        gio__sb_xml(&b, col);
        gio__sb_puts(&b, "\" stroke-width=\"2\"/>\n");
        gio__sb_printf(&b, "<text x=\"%g\" y=\"%g\">", W - R - 118, T + 19 + 18.0 * i);
        gio__sb_xml(&b, s[i].label ? s[i].label : "");
        gio__sb_puts(&b, "</text>\n");
    }
#undef GIO__PX
#undef GIO__PY
    gio__sb_puts(&b, "</svg>\n");
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
    if (t->n_events) gio__sb_puts(&t->events, ",\n");
}

/* JSON has no NaN/Infinity; a stray one would make the whole file invalid. */
static double gio__fin(double x) { return gio__finite(x) ? x : 0.0; }

int gio_trace_process_name(gio_trace *t, int pid, const char *name) {
    gio__trace_begin(t);
    gio__sb_printf(&t->events, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":", pid);
    gio__sb_json_str(&t->events, name);
    gio__sb_puts(&t->events, "}}");
    return gio__trace_done(t);
}

int gio_trace_track_name(gio_trace *t, int pid, int tid, const char *name) {
    gio__trace_begin(t);
    gio__sb_printf(&t->events, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":",
                   pid, tid);
    gio__sb_json_str(&t->events, name);
    gio__sb_puts(&t->events, "}},\n");
    /* Without a sort index viewers order tracks by tid anyway, but make it
       explicit so device 0 is always on top. */
    gio__sb_printf(&t->events, "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                               "\"args\":{\"sort_index\":%d}}", pid, tid, tid);
    return gio__trace_done(t);
}

int gio_trace_event(gio_trace *t, const char *name, const char *cat, int pid, int tid, double ts_us,
                    double dur_us, const char *args) {
    gio__trace_begin(t);
    gio__sb_puts(&t->events, "{\"name\":");
    gio__sb_json_str(&t->events, name ? name : "");
    gio__sb_puts(&t->events, ",\"cat\":");
    gio__sb_json_str(&t->events, cat ? cat : "");
    gio__sb_printf(&t->events, ",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f", pid, tid,
                   gio__fin(ts_us), dur_us > 0 ? gio__fin(dur_us) : 0.0);
    if (args) {
        gio__sb_puts(&t->events, ",\"args\":{\"detail\":");
        gio__sb_json_str(&t->events, args);
        gio__sb_puts(&t->events, "}");
    }
    gio__sb_puts(&t->events, "}");
    return gio__trace_done(t);
}

int gio_trace_counter(gio_trace *t, const char *name, int pid, double ts_us, double value) {
    gio__trace_begin(t);
    gio__sb_puts(&t->events, "{\"name\":");
    gio__sb_json_str(&t->events, name ? name : "");
    gio__sb_printf(&t->events, ",\"ph\":\"C\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"args\":{\"value\":%.9g}}", pid,
                   gio__fin(ts_us), gio__fin(value));
    return gio__trace_done(t);
}

int gio_trace_write(gio_trace *t, const char *path) {
    gio_strbuf b;
    int rc;
    memset(&b, 0, sizeof b);
    if (t->events.oom) { snprintf(t->err, sizeof t->err, "%s: trace ran out of memory earlier", path); return 1; }
    gio__sb_puts(&b, "{\"traceEvents\":[\n");
    if (t->events.n) gio__sb_put(&b, t->events.p, t->events.n);
    gio__sb_puts(&b, "\n],\"displayTimeUnit\":\"ms\"}\n");
    rc = gio__write_sb(path, &b, t->err, sizeof t->err);
    free(b.p);
    return rc;
}

#endif /* GPT2_IO_IMPLEMENTATION_DONE */
#endif /* GPT2_IO_IMPLEMENTATION */
