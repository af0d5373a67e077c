/* Scheduling points at the verbs boundary (points.c), driven from the control socket. */
#ifndef MC_VERBS_POINTS_H
#define MC_VERBS_POINTS_H

#include "emu.h"

enum { SP_POST, SP_POLL, SP_MODIFY, SP_DESTROY, SP_EVENT };

struct sched_parked {
    uint32_t id;
    int32_t tid;
    int kind;        /* SP_* */
    uint32_t qpn;    /* post, modify, destroy: the QP; poll: 0 */
    uint32_t cq;     /* poll: the CQ's id */
    uint64_t wr_id;  /* post: the first WR's wr_id */
    int arg;         /* modify: the next state; event: the event type; post: WRs in the chain */
    int go;          /* granted by the controller */
    uint64_t since_ns;
    struct sched_parked *next;
};

extern const char *const sched_point_names[];

/* A scheduling point: with the scheduler on, the calling thread parks until the controller
 * grants it (or the park timeout passes: then it goes on alone and the timeout is counted). */
void emu_sched_point(int kind, uint32_t qpn, uint32_t cq, uint64_t wr_id, int arg);
int emu_sched_holds_completions(void); /* 1: every completion waits for the controller */
void emu_sched_touch(void);             /* the set of parked threads or held completions changed */

/* control.c's side (sched_lock is taken inside). */
void sched_set(int on, uint64_t park_ns);
int sched_grant(uint32_t id);                   /* 0, or -1: no parked thread with that id */
typedef void (*sched_parked_fn)(const struct sched_parked *, uint64_t now_ns, void *);
void sched_list(sched_parked_fn fn, void *arg); /* parked threads, in parking order */
void sched_counts(int *on, uint64_t *points, uint64_t *timeouts, uint64_t *changed_ns,
                  uint64_t *nparked);
void sched_after_fork_child(void);

/* A thread inside ibv_destroy_qp/ibv_destroy_cq waiting for the acknowledgement of async events
 * it handed out (rdma-core blocks there until every one is acknowledged): listed by `sched
 * state` as `waiting` lines, so a controller sees a destroy wedged on an ack without waiting out
 * a transfer's deadline. `reader` is the thread that read the QP's last event (0: none read yet),
 * `ctx_reader` the thread that last called ibv_get_async_event on the QP's device. */
struct ack_wait {
    int32_t tid, reader, ctx_reader; /* ctx_reader: who last asked the device for events */
    const char *what; /* "QP", "CQ (completion)", "CQ (async)" */
    uint32_t qpn;
    const uint32_t *done, *reported; /* read under the object's mutex by the lister */
    pthread_mutex_t *mutex;
    uint64_t since_ns;
    struct ack_wait *next;
};
void ack_wait_begin(struct ack_wait *w);
void ack_wait_end(struct ack_wait *w);
typedef void (*ack_wait_fn)(const struct ack_wait *, uint32_t unacked, uint64_t now_ns, void *);
void ack_wait_list(ack_wait_fn fn, void *arg);

#endif
