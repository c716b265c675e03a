/* Publishes an OpenTelemetry thread context (OTEP 4947) as a tracing SDK would: the exported
 * thread-local otel_thread_ctx_v1 points to the thread's current record, or is NULL. */
#include <stdint.h>
#include <string.h>

struct __attribute__((packed)) otel_thread_ctx_record {
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t valid;
    uint8_t trace_flags;
    uint16_t attrs_data_size;
};

__attribute__((visibility("default"))) __thread struct otel_thread_ctx_record *otel_thread_ctx_v1;

static __thread struct otel_thread_ctx_record records[2];
static __thread int next_record;

/* Makes the record with these ids current: a fresh record is filled, then the pointer swapped,
 * so a reader never sees a half-written current record. */
void set_span(const uint8_t *trace_id, const uint8_t *span_id) {
    struct otel_thread_ctx_record *r = &records[next_record];
    next_record ^= 1;
    r->valid = 0;
    memcpy(r->trace_id, trace_id, 16);
    memcpy(r->span_id, span_id, 8);
    r->trace_flags = 1;
    r->attrs_data_size = 0;
    r->valid = 1;
    __atomic_store_n(&otel_thread_ctx_v1, r, __ATOMIC_RELEASE);
}

/* No span. */
void clear_span(void) { __atomic_store_n(&otel_thread_ctx_v1, NULL, __ATOMIC_RELEASE); }
