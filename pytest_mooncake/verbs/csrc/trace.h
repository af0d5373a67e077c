/* The post log, per-thread post/poll counts and retired QPs (trace.c), read by control.c. */
#ifndef MC_VERBS_TRACE_H
#define MC_VERBS_TRACE_H

#include "emu.h"

struct trace_post {
    uint64_t n; /* 1, 2, ...: the order of posting in this process */
    uint32_t qpn;
    int dev;
    uint64_t wr_id;
    int opcode;
    uint64_t laddr, raddr, length;
    uint32_t rkey;
    int32_t tid;
    int32_t peer; /* the process owning the remote QP then (0: none) */
    int qp_state; /* the QP's state when the WR was posted (err: it flushes at once) */
    int refused;  /* ibv_post_send returned this WR as bad_wr */
    uint64_t ns;
};

#define TRACE_THREAD_CQS 16

struct trace_thread {
    int32_t tid;
    uint64_t posted, refused, polls, polled;
    uint32_t cqs[TRACE_THREAD_CQS]; /* the CQs it polled, by id, in first-poll order */
    int ncqs;
};

struct trace_gone {
    uint32_t qpn;
    int dev;
    int32_t peer;
    int state;
    uint64_t posted, completed, outstanding, held, posted_in_err, posted_after_retire;
    int app_err; /* the application itself had moved it to ERR before destroying it */
    uint64_t err_ns, destroy_ns;
    int32_t tid;
};

/* One completion ibv_poll_cq handed to the application. */
struct trace_polled {
    uint64_t n;          /* 1, 2, ...: the order of polling in this process */
    uint64_t after_post; /* the post log's length then: posts 1..after_post came before it */
    uint32_t qpn, cq;
    uint64_t wr_id;
    int status; /* enum ibv_wc_status */
    int32_t tid;
};

typedef void (*trace_polled_fn)(const struct trace_polled *, void *);
void emu_trace_polled(uint32_t cq, const struct ibv_wc *wc, int k);
uint64_t emu_trace_polls(uint64_t since, uint64_t limit, trace_polled_fn fn, void *arg);

typedef void (*trace_post_fn)(const struct trace_post *, void *);
typedef void (*trace_thread_fn)(const struct trace_thread *, void *);
typedef void (*trace_gone_fn)(const struct trace_gone *, void *);

int32_t emu_tid(void);
void emu_trace_post(const struct emu_qp *qp, const struct emu_wqe *w, int refused);
void emu_trace_poll(uint32_t cq, int polled);
void emu_trace_destroy(const struct emu_qp *qp, uint64_t completed, uint64_t held, int32_t peer);
uint64_t emu_trace_posts(uint64_t since, uint64_t limit, trace_post_fn fn, void *arg);
void emu_trace_threads(trace_thread_fn fn, void *arg);
uint64_t emu_trace_gone(trace_gone_fn fn, void *arg);
void emu_trace_after_fork_child(void);

#endif
