/* What the application did to its NIC, kept for the control socket (control.c) to report:
 *
 *  - the post log: the last TRACE_POSTS work requests ibv_post_send was handed (accepted or
 *    refused), with the QP, wr_id, opcode, local and remote address, length, rkey, the posting
 *    thread and the QP's state at that moment: a test sees which attempt carried which wr_id,
 *    and whether anything was posted to a QP already in ERR;
 *  - threads: per thread of the process, how many WRs it posted, how many completions it
 *    polled and which CQs it polled: the worker model (who posts, who polls which CQ) seen
 *    from outside;
 *  - the poll log: the last TRACE_POLLS completions ibv_poll_cq handed out, each with the post
 *    log's length at that moment, so a checker can tell a completion polled after its wr_id
 *    was posted again elsewhere (a stale completion of a retried slice);
 *  - retired QPs: the last TRACE_GONE QPs the application destroyed, with what was still
 *    outstanding on them and whether the application itself had moved them to ERR first.
 *
 * All of it is private to the process and dies with it, like the held completions (hold.c).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "trace.h"

#define TRACE_POSTS 8192
#define TRACE_THREADS 128
#define TRACE_GONE 1024

static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static struct trace_post posts[TRACE_POSTS];
static uint64_t nposts; /* ever logged; posts[n % TRACE_POSTS] */
static struct trace_thread threads[TRACE_THREADS];
static int nthreads;
static struct trace_gone gone[TRACE_GONE];
static uint64_t ngone;
static __thread int32_t my_tid;
#define TRACE_POLLS 8192
static struct trace_polled polls[TRACE_POLLS];
static uint64_t npolls;

void emu_trace_polled(uint32_t cq, const struct ibv_wc *wc, int k) {
    if (k <= 0) return;
    int32_t tid = emu_tid();
    pthread_mutex_lock(&trace_lock);
    for (int i = 0; i < k; i++) {
        struct trace_polled *p = &polls[npolls % TRACE_POLLS];
        p->n = ++npolls;
        p->after_post = nposts;
        p->qpn = wc[i].qp_num;
        p->cq = cq;
        p->wr_id = wc[i].wr_id;
        p->status = wc[i].status;
        p->tid = tid;
    }
    pthread_mutex_unlock(&trace_lock);
}

uint64_t emu_trace_polls(uint64_t since, uint64_t limit, trace_polled_fn fn, void *arg) {
    pthread_mutex_lock(&trace_lock);
    uint64_t first = npolls > TRACE_POLLS ? npolls - TRACE_POLLS + 1 : 1, shown = 0;
    if (since + 1 > first) first = since + 1;
    for (uint64_t n = first; n <= npolls && (!limit || shown < limit); n++, shown++)
        fn(&polls[(n - 1) % TRACE_POLLS], arg);
    uint64_t total = npolls;
    pthread_mutex_unlock(&trace_lock);
    return total;
}

int32_t emu_tid(void) {
    if (!my_tid) my_tid = (int32_t)syscall(SYS_gettid);
    return my_tid;
}

static struct trace_thread *thread_slot(int32_t tid) { /* trace_lock held */
    for (int i = 0; i < nthreads; i++)
        if (threads[i].tid == tid) return &threads[i];
    if (nthreads == TRACE_THREADS) return NULL; /* more threads than any worker pool has */
    struct trace_thread *t = &threads[nthreads++];
    memset(t, 0, sizeof *t);
    t->tid = tid;
    return t;
}

void emu_trace_post(const struct emu_qp *qp, const struct emu_wqe *w, int refused) {
    int32_t tid = emu_tid(), peer = emu_peer_pid(qp);
    pthread_mutex_lock(&trace_lock);
    struct trace_post *p = &posts[nposts % TRACE_POSTS];
    p->n = ++nposts;
    p->qpn = qp->qp.qp_num;
    p->dev = qp->dev;
    p->wr_id = w->wr_id;
    p->opcode = w->opcode;
    p->laddr = w->num_sge > 0 ? w->sge[0].addr : 0;
    p->length = 0;
    for (int i = 0; i < w->num_sge; i++) p->length += w->sge[i].length;
    p->raddr = w->remote_addr;
    p->rkey = w->rkey;
    p->tid = tid;
    p->peer = peer;
    p->qp_state = qp->state;
    p->refused = refused;
    p->ns = emu_now_ns();
    struct trace_thread *t = thread_slot(tid);
    if (t) {
        if (refused) t->refused++;
        else t->posted++;
    }
    pthread_mutex_unlock(&trace_lock);
}

void emu_trace_poll(uint32_t cq, int polled) {
    int32_t tid = emu_tid();
    pthread_mutex_lock(&trace_lock);
    struct trace_thread *t = thread_slot(tid);
    if (t) {
        t->polls++;
        if (polled > 0) t->polled += (uint64_t)polled;
        int seen = 0;
        for (int i = 0; i < t->ncqs && !seen; i++) seen = t->cqs[i] == cq;
        if (!seen && t->ncqs < TRACE_THREAD_CQS) t->cqs[t->ncqs++] = cq;
    }
    pthread_mutex_unlock(&trace_lock);
}

void emu_trace_destroy(const struct emu_qp *qp, uint64_t completed, uint64_t held,
                       int32_t peer) {
    pthread_mutex_lock(&trace_lock);
    struct trace_gone *d = &gone[ngone % TRACE_GONE];
    ngone++;
    d->qpn = qp->qp.qp_num;
    d->dev = qp->dev;
    d->peer = peer;
    d->state = qp->state;
    d->posted = qp->posted;
    d->completed = completed;
    d->outstanding = qp->tail - completed;
    d->held = held;
    d->posted_in_err = qp->posted_in_err;
    d->posted_after_retire = qp->posted_after_retire;
    d->app_err = qp->app_err;
    d->err_ns = qp->err_ns;
    d->destroy_ns = emu_now_ns();
    d->tid = emu_tid();
    pthread_mutex_unlock(&trace_lock);
}

uint64_t emu_trace_posts(uint64_t since, uint64_t limit, trace_post_fn fn, void *arg) {
    pthread_mutex_lock(&trace_lock);
    uint64_t first = nposts > TRACE_POSTS ? nposts - TRACE_POSTS + 1 : 1, shown = 0;
    if (since + 1 > first) first = since + 1;
    for (uint64_t n = first; n <= nposts && (!limit || shown < limit); n++, shown++)
        fn(&posts[(n - 1) % TRACE_POSTS], arg);
    uint64_t total = nposts;
    pthread_mutex_unlock(&trace_lock);
    return total;
}

void emu_trace_threads(trace_thread_fn fn, void *arg) {
    pthread_mutex_lock(&trace_lock);
    for (int i = 0; i < nthreads; i++) fn(&threads[i], arg);
    pthread_mutex_unlock(&trace_lock);
}

uint64_t emu_trace_gone(trace_gone_fn fn, void *arg) {
    pthread_mutex_lock(&trace_lock);
    uint64_t first = ngone > TRACE_GONE ? ngone - TRACE_GONE : 0;
    for (uint64_t n = first; n < ngone; n++) fn(&gone[n % TRACE_GONE], arg);
    uint64_t total = ngone;
    pthread_mutex_unlock(&trace_lock);
    return total;
}

void emu_trace_after_fork_child(void) {
    pthread_mutex_init(&trace_lock, NULL);
    nposts = 0;
    npolls = 0;
    nthreads = 0;
    ngone = 0;
    my_tid = 0;
}
