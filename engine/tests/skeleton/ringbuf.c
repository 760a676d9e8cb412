/*
 * Fixed-capacity byte ring buffer with an overflow policy and a callback
 * that fires when data has to be dropped.
 */
#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

enum overflow_policy {
    OVERFLOW_REJECT,
    OVERFLOW_DROP_OLDEST
};

struct ringbuf {
    uint8_t *data;
    size_t capacity;
    size_t head;
    size_t tail;
    size_t count;
    enum overflow_policy policy;
    void (*on_drop)(void *ctx, size_t dropped);
    void *ctx;
};

struct ringbuf *ringbuf_create(size_t capacity, enum overflow_policy policy)
{
    struct ringbuf *rb = calloc(1, sizeof(*rb));
    if (rb == NULL || (rb->data = malloc(capacity)) == NULL) {
        free(rb);
        return NULL;
    }
    rb->capacity = capacity;
    rb->policy = policy;
    return rb;
}

void ringbuf_destroy(struct ringbuf *rb)
{
    if (rb != NULL) {
        free(rb->data);
        free(rb);
    }
}

size_t ringbuf_free_space(const struct ringbuf *rb)
{
    assert(rb != NULL);
    return rb->capacity - rb->count;
}

ssize_t ringbuf_write(struct ringbuf *rb, const void *src, size_t len)
{
    const uint8_t *input_bytes = src;
    size_t overflow_bytes = 0;
    if (len > rb->capacity) {
        errno = EMSGSIZE;
        return -1;
    }
    if (len > ringbuf_free_space(rb)) {
        if (rb->policy == OVERFLOW_REJECT) {
            errno = EAGAIN;
            return -1;
        }
        overflow_bytes = len - ringbuf_free_space(rb);
        rb->head = (rb->head + overflow_bytes) % rb->capacity;
        rb->count -= overflow_bytes;
        if (rb->on_drop != NULL) {
            rb->on_drop(rb->ctx, overflow_bytes);
        }
    }
    size_t first_chunk = rb->capacity - rb->tail;
    if (first_chunk > len) {
        first_chunk = len;
    }
    memcpy(rb->data + rb->tail, input_bytes, first_chunk);
    memcpy(rb->data, input_bytes + first_chunk, len - first_chunk);
    rb->tail = (rb->tail + len) % rb->capacity;
    rb->count += len;
    return (ssize_t)len;
}

size_t ringbuf_read(struct ringbuf *rb, void *dst, size_t max_len, bool peek)
{
    uint8_t *output_bytes = dst;
    size_t wanted_bytes = max_len < rb->count ? max_len : rb->count;
    size_t cursor_pos = rb->head;
    size_t copied_total = 0;
    while (copied_total < wanted_bytes) {
        size_t contiguous_run = rb->capacity - cursor_pos;
        if (contiguous_run > wanted_bytes - copied_total) {
            contiguous_run = wanted_bytes - copied_total;
        }
        memcpy(output_bytes + copied_total, rb->data + cursor_pos, contiguous_run);
        copied_total += contiguous_run;
        cursor_pos = (cursor_pos + contiguous_run) % rb->capacity;
    }
    if (!peek) {
        rb->head = cursor_pos;
        rb->count -= copied_total;
        if (rb->count == 0) {
            rb->head = 0;
            rb->tail = 0;
        }
    }
    return copied_total;
}
