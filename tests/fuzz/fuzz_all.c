/* All fuzz targets in one libFuzzer binary (one compile for the smoke run
   of ./build.sh test): TJF_TARGET=safetensors|tree_load|bpe|tokens|parsers
   picks the target. */
#define TJF_NO_ENTRY
#include "fuzz_safetensors.c"
#include "fuzz_tree_load.c"
#include "fuzz_bpe.c"
#include "fuzz_tokens.c"
#include "fuzz_parsers.c"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {
    static int which = -1;
    if (which < 0) {
        const char *t = getenv("TJF_TARGET");
        static const char *names[5] = {"safetensors", "tree_load", "bpe", "tokens", "parsers"};
        for (which = 0; which < 5 && !(t && !strcmp(t, names[which])); which++) {}
        if (which == 5) {
            fprintf(stderr, "fuzz_all: set TJF_TARGET to safetensors, tree_load, bpe, tokens or parsers\n");
            abort();
        }
    }
    switch (which) {
    case 0: return tjf_safetensors(d, n);
    case 1: return tjf_tree_load(d, n);
    case 2: return tjf_bpe(d, n);
    case 3: return tjf_tokens(d, n);
    default: return tjf_parsers(d, n);
    }
}
