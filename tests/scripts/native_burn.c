/* Named C functions that burn CPU, in a chain: fixture_entry (exported) -> fixture_outer ->
 * fixture_middle -> fixture_leaf (static: only a symbol table names them, which stripping
 * removes). The symbol-source tests build it, strip it, and give its names back through
 * MiniDebugInfo or a separate debug file. Each call keeps its caller's frame (no inlining, no
 * clones, no tail calls: the result is used after the call). */
#include <stdint.h>

static volatile uint64_t sink;

__attribute__((noinline, noclone)) static uint64_t fixture_leaf(uint64_t n) {
    uint64_t x = n;
    for (uint64_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    }
    return x;
}

__attribute__((noinline, noclone)) static uint64_t fixture_middle(uint64_t n) {
    uint64_t r = fixture_leaf(n);
    sink += r;
    return r + 1;
}

__attribute__((noinline, noclone)) static uint64_t fixture_outer(uint64_t n) {
    uint64_t r = fixture_middle(n);
    sink += r;
    return r + 2;
}

uint64_t fixture_entry(uint64_t n) {
    uint64_t r = fixture_outer(n);
    sink += r;
    return r;
}
