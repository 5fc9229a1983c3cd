/* gpt2_io_impl.c — demos/gpt2_io.h's implementation, compiled once for the
 * tests (build.sh: build/o2/gpt2_io_impl.o, build/asan/gpt2_io_impl.o) and
 * linked by those that include demos/gpt2_train.c: test_gpt2,
 * test_gpt2_cli, test_gpt2_train. They define GPT2_IO_IMPLEMENTATION_DONE (and
 * TINYJAX_IMPLEMENTATION_DONE) before including the demo, so the demo's
 * requests for both implementations are skipped there. */
#define _POSIX_C_SOURCE 200809L
#define GPT2_IO_IMPLEMENTATION
#include "../demos/gpt2_io.h"
