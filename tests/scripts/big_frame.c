/* Two ways into one spinning C function: through big_frame_entry, whose frame holds 24 KiB
 * (more than the 16 KiB of stack a native sample copies, so the unwind stops inside it), and
 * through small_frame_entry. The native-stack tests build it and call both from Python. */
#include <stdint.h>
#include <string.h>

static volatile uint64_t sink;

/* xorshift64: a dependent chain of cheap operations the compiler cannot fold away. */
__attribute__((noinline, noclone)) static uint64_t frame_spin(uint64_t n) {
    uint64_t x = n | 1;
    while (n--) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    return x;
}

uint64_t big_frame_entry(uint64_t n) {
    volatile char pad[24 * 1024];
    memset((char *)pad, 1, sizeof pad);
    uint64_t r = frame_spin(n);
    sink += pad[n % sizeof pad];
    return r;
}

uint64_t small_frame_entry(uint64_t n) {
    uint64_t r = frame_spin(n);
    sink += r;
    return r + 1;
}
