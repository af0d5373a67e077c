/* Hold rules, held work requests and chaos mode: shared by hold.c and control.c. */
#ifndef MC_VERBS_HOLD_H
#define MC_VERBS_HOLD_H

#include "emu.h"

enum { STAGE_COMPLETION, STAGE_EXECUTION, STAGE_POST };
extern const char *const stage_names[];

struct rule {
    uint32_t id;
    int stage, dev, opcode, has_wr_id;
    int32_t peer; /* pid owning the remote QP, 0: any */
    uint32_t qpn;
    uint64_t wr_id, nth, count, matched, taken;
    uint64_t addr_lo, addr_hi; /* first local address in [lo, hi); hi 0: any */
    int error;                 /* STAGE_POST: the errno ibv_post_send returns */
    int fail;                  /* STAGE_EXECUTION: complete the WR with this status, unexecuted */
    struct rule *next;
};

struct held {
    uint32_t id, rule, qpn, qp_gen, cq_id;
    int stage, dev, qp_slot, opcode;
    uint64_t seq, wr_id, auto_due_ns; /* auto_due_ns: held by chaos, released by time */
    uint64_t laddr;                   /* the WR's first local address */
    struct emu_cqe cqe;               /* stage completion */
    struct emu_cq *cq;                /* NULL once that CQ was destroyed */
    struct held *next;
};

struct chaos {
    int on;
    uint64_t seed, state, delay_ns;
    double reorder, fail;
    int fail_status;
};

/* All of these are guarded by hold_lock (lock order: g.objects -> qp->lock -> hold_lock). */
extern pthread_mutex_t hold_lock;
extern struct rule *rules;      /* in the order they were added */
extern struct held *held_list;  /* in the order the WRs were taken */
extern uint32_t next_rule_id, next_held_id;
extern uint64_t held_now, held_total;
extern struct chaos chaos;

struct emu_qp *local_qp(int slot, uint32_t gen); /* g.objects held; gen 0: any */
const char *release_one(struct held *h, int status, int keep_qp); /* h unlinked; NULL: done */
void release_due_chaos(void);
int release_where(int (*take)(const struct held *, const void *), const void *arg, int keep_qp);
int chaos_held_waiting(void);
uint64_t held_for(uint32_t qpn, uint32_t cq_id); /* hold_lock held */
void log_chaos(void);
void set_chaos_mode(uint64_t seed, uint64_t delay_ns, double reorder, double fail, int fail_status);
void forget_all_holds(void); /* hold_lock held */

#endif
