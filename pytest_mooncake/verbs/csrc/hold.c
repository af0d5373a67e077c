/* Hold rules, held work requests and chaos mode (the control socket, control.c, drives them).
 *
 * A hold rule (stage, device, QP, peer process, opcode, wr_id, nth, count) catches WRs of this
 * process:
 *  - stage "completion": the WR executes (its bytes land) but its completion is parked in the
 *    held list instead of the CQ, until released, in any order, with its own or a chosen status;
 *  - stage "execution": the send queue stalls at the WR (it and everything behind it on that QP
 *    wait, as on a NIC that stopped making progress); a release executes it, or completes it with
 *    a chosen error without touching memory. If the QP goes to ERR meanwhile, it is flushed.
 * Held state lives in this process only: when the process dies, nothing of it remains.
 *
 * Chaos mode draws from one seeded generator: a random delay before each WR executes (order per
 * QP kept), a probability that a completion is held back for a random time (reordering across and
 * within QPs), and a probability that a WR fails with a chosen status.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hold.h"
#include "points.h"

const char *const stage_names[] = {"completion", "execution", "post"};
pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
struct rule *rules;
struct held *held_list;
uint32_t next_rule_id, next_held_id;
uint64_t held_now, held_total;
struct chaos chaos;

/* ------------------------------------------------------------------------------- randomness */

static uint64_t next_random(void) { /* splitmix64; hold_lock held */
    uint64_t z = (chaos.state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double random_unit(void) { return (next_random() >> 11) * (1.0 / 9007199254740992.0); }

uint64_t emu_chaos_delay_ns(void) {
    if (!__atomic_load_n(&chaos.on, __ATOMIC_ACQUIRE) || !chaos.delay_ns) return 0;
    pthread_mutex_lock(&hold_lock);
    uint64_t d = chaos.on && chaos.delay_ns ? next_random() % (chaos.delay_ns + 1) : 0;
    pthread_mutex_unlock(&hold_lock);
    return d;
}

int emu_chaos_fail(enum ibv_wc_status *status) {
    if (!__atomic_load_n(&chaos.on, __ATOMIC_ACQUIRE) || chaos.fail <= 0) return 0;
    pthread_mutex_lock(&hold_lock);
    int hit = chaos.on && random_unit() < chaos.fail;
    if (hit) *status = chaos.fail_status;
    pthread_mutex_unlock(&hold_lock);
    return hit;
}

/* -------------------------------------------------------------------------------- holding */

/* The process owning the QP `qp` is connected to (0 if none): a rule can follow a peer across
 * the QPs an application replaces. */
int32_t emu_peer_pid(const struct emu_qp *qp) {
    int i = (int)qp->dest_qpn - EMU_QPN_BASE;
    if (i < 0 || i >= EMU_MAX_QPS) return 0;
    shm_lock();
    int32_t pid = g.shm->qp[i].used ? g.shm->qp[i].owner.pid : 0;
    shm_unlock();
    return pid;
}

static int rule_takes(struct rule *r, int stage, struct emu_qp *qp, int opcode, uint64_t wr_id,
                      uint64_t laddr) {
    if (r->stage != stage || (r->dev >= 0 && r->dev != qp->dev) ||
        (r->qpn && r->qpn != qp->qp.qp_num) || (r->opcode >= 0 && r->opcode != opcode) ||
        (r->has_wr_id && r->wr_id != wr_id) ||
        (r->addr_hi && (laddr < r->addr_lo || laddr >= r->addr_hi)) ||
        (r->peer && r->peer != emu_peer_pid(qp)))
        return 0;
    r->matched++;
    if (r->matched < r->nth || (r->count && r->taken >= r->count)) return 0;
    r->taken++;
    return 1;
}

static struct held *new_held(struct emu_qp *qp, int stage, uint32_t rule, uint64_t seq,
                             uint64_t wr_id, int opcode) {
    struct held *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->id = ++next_held_id;
    h->stage = stage;
    h->rule = rule;
    h->dev = qp->dev;
    h->qpn = qp->qp.qp_num;
    h->qp_slot = qp->slot;
    h->qp_gen = qp->gen;
    h->seq = seq;
    h->wr_id = wr_id;
    h->opcode = opcode;
    struct held **p = &held_list; /* keep the order they were taken in */
    while (*p) p = &(*p)->next;
    *p = h;
    held_now++;
    held_total++;
    return h;
}

int emu_hold_completion(struct emu_qp *qp, const struct emu_cqe *e) {
    struct held *h = NULL;
    pthread_mutex_lock(&hold_lock);
    for (struct rule *r = rules; r && !h; r = r->next)
        if (rule_takes(r, STAGE_COMPLETION, qp, e->opcode, e->wc.wr_id, e->laddr))
            h = new_held(qp, STAGE_COMPLETION, r->id, e->seq, e->wc.wr_id, e->opcode);
    if (!h && chaos.on && chaos.reorder > 0 && random_unit() < chaos.reorder) {
        h = new_held(qp, STAGE_COMPLETION, 0, e->seq, e->wc.wr_id, e->opcode);
        if (h) {
            uint64_t span = chaos.delay_ns ? chaos.delay_ns : 1000000;
            h->auto_due_ns = emu_now_ns() + 1 + next_random() % span;
        }
    }
    if (!h && emu_sched_holds_completions()) /* the scheduler delivers every completion */
        h = new_held(qp, STAGE_COMPLETION, 0, e->seq, e->wc.wr_id, e->opcode);
    if (h) {
        h->cqe = *e;
        h->laddr = e->laddr;
        h->cq = qp->scq;
        h->cq_id = qp->scq->id;
    }
    pthread_mutex_unlock(&hold_lock);
    if (h) emu_sched_touch(), emu_control_kick();
    return h != NULL;
}

int emu_hold_execution(struct emu_qp *qp, struct emu_wqe *w) {
    struct held *h = NULL;
    int fail = 0;
    pthread_mutex_lock(&hold_lock);
    for (struct rule *r = rules; r && !h && !fail; r = r->next) {
        if (!rule_takes(r, STAGE_EXECUTION, qp, w->opcode, w->wr_id,
                        w->num_sge > 0 ? w->sge[0].addr : 0))
            continue;
        if (r->fail > 0) fail = r->fail; /* a fail rule: no stall, an error completion */
        else h = new_held(qp, STAGE_EXECUTION, r->id, w->seq, w->wr_id, w->opcode);
    }
    pthread_mutex_unlock(&hold_lock);
    if (fail) {
        w->hold = WQE_RELEASED;
        w->forced = 1;
        w->forced_status = fail;
        return 0;
    }
    if (!h) return 0;
    h->laddr = w->num_sge > 0 ? w->sge[0].addr : 0;
    w->hold = WQE_STALLED;
    emu_control_kick();
    return 1;
}

/* A `refuse` rule: ibv_post_send stops at this WR and returns it as bad_wr with the rule's errno
 * (what a full send queue does on hardware); the WRs before it in the chain are posted. */
int emu_refuse_post(struct emu_qp *qp, const struct ibv_send_wr *wr) {
    if (!__atomic_load_n(&rules, __ATOMIC_ACQUIRE)) return 0;
    int error = 0;
    pthread_mutex_lock(&hold_lock);
    for (struct rule *r = rules; r && !error; r = r->next)
        if (rule_takes(r, STAGE_POST, qp, wr->opcode, wr->wr_id,
                       wr->num_sge > 0 ? wr->sg_list[0].addr : 0))
            error = r->error ? r->error : ENOMEM;
    pthread_mutex_unlock(&hold_lock);
    return error;
}

void emu_hold_forget_wqes(struct emu_qp *qp) {
    pthread_mutex_lock(&hold_lock);
    for (struct held **p = &held_list; *p;) {
        struct held *h = *p;
        if (h->stage == STAGE_EXECUTION && h->qp_slot == qp->slot && h->qp_gen == qp->gen) {
            *p = h->next;
            free(h);
            held_now--;
        } else {
            p = &h->next;
        }
    }
    pthread_mutex_unlock(&hold_lock);
}

void emu_hold_forget_cq(struct emu_cq *cq) {
    pthread_mutex_lock(&hold_lock);
    for (struct held *h = held_list; h; h = h->next)
        if (h->cq == cq) h->cq = NULL;
    pthread_mutex_unlock(&hold_lock);
}

struct emu_qp *local_qp(int slot, uint32_t gen) { /* g.objects held */
    if (slot < 0 || slot >= EMU_MAX_QPS) return NULL;
    struct emu_qp *qp = g.qp_by_slot[slot];
    return qp && (!gen || qp->gen == gen) ? qp : NULL;
}

static int cq_alive(struct emu_cq *cq, uint32_t id) { /* g.objects held */
    for (struct emu_cq *c = g.cqs; c; c = c->next)
        if (c == cq && c->id == id) return 1;
    return 0;
}

/* Releases one held entry (already unlinked). status < 0 keeps the original. */
const char *release_one(struct held *h, int status, int keep_qp) {
    const char *problem = NULL;
    pthread_mutex_lock(&g.objects);
    if (h->stage == STAGE_EXECUTION) {
        struct emu_qp *qp = local_qp(h->qp_slot, h->qp_gen);
        if (!qp) {
            problem = "its QP was destroyed";
        } else {
            pthread_mutex_lock(&qp->lock);
            struct emu_wqe *w = &qp->ring[h->seq % qp->cap];
            if (w->seq == h->seq && w->hold == WQE_STALLED && h->seq >= qp->exec) {
                w->hold = WQE_RELEASED;
                w->forced = status > 0;
                w->forced_status = status > 0 ? status : IBV_WC_SUCCESS;
                emu_qp_progress(qp);
            } else {
                problem = "its WR is no longer in the send queue";
            }
            pthread_mutex_unlock(&qp->lock);
        }
    } else if (!h->cq || !cq_alive(h->cq, h->cq_id)) {
        problem = "its CQ was destroyed";
    } else {
        struct emu_cqe e = h->cqe;
        if (status >= 0) e.wc.status = status;
        emu_cq_push(h->cq, &e);
        struct emu_qp *qp = local_qp(h->qp_slot, h->qp_gen);
        if (e.wc.status != IBV_WC_SUCCESS && !keep_qp && qp) {
            pthread_mutex_lock(&qp->lock); /* an error completion leaves the QP in ERR */
            if (qp->state != IBV_QPS_ERR) {
                qp->errors++;
                emu_qp_to_error(qp);
            }
            pthread_mutex_unlock(&qp->lock);
        }
    }
    pthread_mutex_unlock(&g.objects);
    free(h);
    emu_sched_touch(); /* a poller may now park at its poll: the next quiet window waits for it */
    return problem;
}

/* Releases (own status) every held entry `take` selects, in the order they were taken; keep_qp as
 * release_one's. Returns how many were delivered. */
int release_where(int (*take)(const struct held *, const void *), const void *arg, int keep_qp) {
    struct held *due = NULL, **tail = &due;
    pthread_mutex_lock(&hold_lock);
    for (struct held **p = &held_list; *p;) {
        struct held *h = *p;
        if (take(h, arg)) {
            *p = h->next;
            h->next = NULL;
            *tail = h;
            tail = &h->next;
            held_now--;
        } else {
            p = &h->next;
        }
    }
    pthread_mutex_unlock(&hold_lock);
    int n = 0;
    while (due) {
        struct held *next = due->next;
        n += release_one(due, -1, keep_qp) == NULL;
        due = next;
    }
    return n;
}

static int chaos_due(const struct held *h, const void *now) {
    return h->auto_due_ns && h->auto_due_ns <= *(const uint64_t *)now;
}

void release_due_chaos(void) {
    uint64_t now = emu_now_ns();
    release_where(chaos_due, &now, 1);
}

int chaos_held_waiting(void) {
    pthread_mutex_lock(&hold_lock);
    int any = 0;
    for (struct held *h = held_list; h && !any; h = h->next) any = h->auto_due_ns != 0;
    pthread_mutex_unlock(&hold_lock);
    return any;
}

uint64_t held_for(uint32_t qpn, uint32_t cq_id) { /* hold_lock held */
    uint64_t n = 0;
    for (struct held *h = held_list; h; h = h->next)
        if ((qpn && h->qpn == qpn) || (cq_id && h->stage == STAGE_COMPLETION && h->cq &&
                                       h->cq_id == cq_id))
            n++;
    return n;
}

void log_chaos(void) {
    if (chaos.on)
        emu_log("chaos on: seed=%llu delay_us=%llu reorder=%g fail=%g fail_status=%s",
                (unsigned long long)chaos.seed, (unsigned long long)(chaos.delay_ns / 1000),
                chaos.reorder, chaos.fail, emu_status_name(chaos.fail_status));
}

/* Turns chaos mode on with these draws (hold_lock is taken here). */
void set_chaos_mode(uint64_t seed, uint64_t delay_ns, double reorder, double fail, int fail_status) {
    pthread_mutex_lock(&hold_lock);
    chaos.seed = seed;
    chaos.state = seed;
    chaos.delay_ns = delay_ns;
    chaos.reorder = reorder;
    chaos.fail = fail;
    chaos.fail_status = fail_status;
    __atomic_store_n(&chaos.on, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&hold_lock);
    log_chaos();
}

/* In a forked child: the parent's rules and held entries are not the child's. */
void forget_all_holds(void) {
    while (rules) {
        struct rule *next = rules->next;
        free(rules);
        rules = next;
    }
    while (held_list) {
        struct held *next = held_list->next;
        free(held_list);
        held_list = next;
    }
    held_now = 0;
}
