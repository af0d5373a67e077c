/* Memory regions, completion queues, RC queue pairs and the data path.
 *
 * A posted WR enters the QP's send queue (a ring of max_send_wr slots; a full ring refuses the
 * post with ENOMEM and bad_wr, as hardware does) and is executed in order: at once on the posting
 * thread, or later when a chaos delay or a stalled hold (control.c) keeps it waiting. Executing a
 * WR checks the local SGEs against this process's MRs, the remote QP (alive, connected, port up)
 * and the remote MR (rkey, protection domain, bounds, access flags), then copies the bytes with
 * process_vm_writev/readv into or out of the target process. An error completes the WR with the
 * status hardware would give and moves the QP to ERR, which flushes every WR behind it with
 * IBV_WC_WR_FLUSH_ERR. A slot is retired when the application polls the completion of that WR or
 * of a later one (unsignaled WRs retire with the next signaled one).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "emu.h"
#include "hold.h"
#include "points.h"
#include "trace.h"

static int context_fatal(struct ibv_context *context) {
    return atomic_load(&((struct emu_context *)context)->fatal);
}

/* ------------------------------------------------------------------------- memory regions */

static struct ibv_mr *reg_mr(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                             unsigned access) {
    struct emu_context *c = (struct emu_context *)pd->context;
    if (atomic_load(&c->fatal)) {
        errno = EIO;
        return NULL;
    }
    /* remote write and atomics need local write (IB spec, and every provider checks it) */
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(access & IBV_ACCESS_LOCAL_WRITE)) {
        errno = EINVAL;
        return NULL;
    }
    struct emu_mr *mr = calloc(1, sizeof *mr);
    if (!mr) {
        errno = ENOMEM;
        return NULL;
    }
    uint32_t key = 0;
    mr->slot = shm_alloc_mr(c->dev, ((struct emu_pd *)pd)->id, (uintptr_t)addr, iova, length,
                            access, &key);
    if (mr->slot < 0) {
        free(mr);
        errno = ENOMEM;
        return NULL;
    }
    mr->mr.context = pd->context;
    mr->mr.pd = pd;
    mr->mr.addr = addr;
    mr->mr.length = length;
    mr->mr.handle = mr->slot;
    mr->mr.lkey = key;
    mr->mr.rkey = key;
    return &mr->mr;
}

#undef ibv_reg_mr
EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access) {
    return reg_mr(pd, addr, length, (uintptr_t)addr, (unsigned)access);
}

#undef ibv_reg_mr_iova
EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                      int access) {
    return reg_mr(pd, addr, length, iova, (unsigned)access);
}

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
                                       uint64_t iova, unsigned int access) {
    return reg_mr(pd, addr, length, iova, access);
}

EXPORT int ibv_dereg_mr(struct ibv_mr *ibmr) {
    struct emu_mr *mr = (struct emu_mr *)ibmr;
    shm_free_mr(mr->slot);
    free(mr);
    return 0;
}

/* ------------------------------------------------------------------------ completion queues */

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                                    struct ibv_comp_channel *channel, int comp_vector) {
    if (context_fatal(context)) {
        errno = EIO;
        return NULL;
    }
    if (cqe < 1 || cqe > 4194303 || comp_vector < 0 || comp_vector >= context->num_comp_vectors) {
        errno = EINVAL;
        return NULL;
    }
    struct emu_cq *cq = calloc(1, sizeof *cq);
    struct emu_cqe *ring = calloc(cqe, sizeof *ring);
    if (!cq || !ring) {
        free(cq);
        free(ring);
        errno = ENOMEM;
        return NULL;
    }
    cq->ring = ring;
    cq->cap = cqe;
    cq->dev = ((struct emu_context *)context)->dev;
    cq->cq.context = context;
    cq->cq.channel = channel;
    cq->cq.cq_context = cq_context;
    cq->cq.cqe = cqe;
    pthread_mutex_init(&cq->lock, NULL);
    pthread_mutex_init(&cq->cq.mutex, NULL);
    pthread_cond_init(&cq->cq.cond, NULL);
    pthread_mutex_lock(&g.objects);
    cq->id = ++g.next_cq_id;
    cq->cq.handle = cq->id;
    if (channel) channel->refcnt++;
    cq->next = g.cqs;
    g.cqs = cq;
    pthread_mutex_unlock(&g.objects);
    return &cq->cq;
}

/* Waits until the application acknowledged every event it was handed for `obj` (rdma-core blocks
 * the same way); says so on stderr every few seconds, since a missing ack hangs here forever, and
 * is listed by `sched state` meanwhile (points.c) so a controller sees the wedge at once. */
static void wait_acked(pthread_mutex_t *m, pthread_cond_t *cv, const uint32_t *done,
                       const uint32_t *reported, const char *what, uint32_t qpn, int32_t reader,
                       int32_t ctx_reader) {
    struct ack_wait w = {.tid = emu_tid(), .reader = reader, .ctx_reader = ctx_reader,
                         .what = what, .qpn = qpn,
                         .done = done, .reported = reported, .mutex = m};
    int listed = 0;
    pthread_mutex_lock(m);
    while (*done != *reported) {
        if (!listed) { /* ack_wait_list takes ack_lock then m: never hold m while taking it */
            pthread_mutex_unlock(m);
            ack_wait_begin(&w);
            listed = 1;
            pthread_mutex_lock(m);
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 5;
        if (pthread_cond_timedwait(cv, m, &ts) == ETIMEDOUT)
            emu_log("destroying a %s waits for %u unacknowledged events", what,
                    *reported - *done);
    }
    pthread_mutex_unlock(m);
    if (listed) ack_wait_end(&w);
}

EXPORT int ibv_destroy_cq(struct ibv_cq *ibcq) {
    struct emu_cq *cq = (struct emu_cq *)ibcq;
    pthread_mutex_lock(&g.objects);
    int busy = cq->nqps > 0;
    pthread_mutex_unlock(&g.objects);
    if (busy) return EBUSY;
    wait_acked(&ibcq->mutex, &ibcq->cond, &ibcq->comp_events_completed, &cq->comp_reported,
               "CQ (completion)", 0, 0,
               atomic_load(&((struct emu_context *)ibcq->context)->event_reader));
    wait_acked(&ibcq->mutex, &ibcq->cond, &ibcq->async_events_completed, &cq->async_reported,
               "CQ (async)", 0, 0,
               atomic_load(&((struct emu_context *)ibcq->context)->event_reader));
    pthread_mutex_lock(&g.objects);
    for (struct emu_cq **p = &g.cqs; *p; p = &(*p)->next)
        if (*p == cq) {
            *p = cq->next;
            break;
        }
    if (ibcq->channel) ibcq->channel->refcnt--;
    pthread_mutex_unlock(&g.objects);
    emu_hold_forget_cq(cq);
    free(cq->ring);
    free(cq);
    return 0;
}

EXPORT int ibv_resize_cq(struct ibv_cq *ibcq, int cqe) {
    struct emu_cq *cq = (struct emu_cq *)ibcq;
    if (cqe < 1 || cqe > 4194303) return EINVAL;
    struct emu_cqe *ring = calloc(cqe, sizeof *ring);
    if (!ring) return ENOMEM;
    pthread_mutex_lock(&cq->lock);
    if (cqe < cq->count) {
        pthread_mutex_unlock(&cq->lock);
        free(ring);
        return EINVAL;
    }
    for (int i = 0; i < cq->count; i++) ring[i] = cq->ring[(cq->head + i) % cq->cap];
    free(cq->ring);
    cq->ring = ring;
    cq->cap = cqe;
    cq->head = 0;
    ibcq->cqe = cqe;
    pthread_mutex_unlock(&cq->lock);
    return 0;
}

/* Hands a completion to the CQ. A full CQ overruns, as on hardware: the completion is lost and the
 * application gets IBV_EVENT_CQ_ERR. */
void emu_cq_push(struct emu_cq *cq, const struct emu_cqe *e) {
    int overrun_now = 0;
    pthread_mutex_lock(&cq->lock);
    if (cq->count == cq->cap) {
        cq->overruns++;
        overrun_now = !cq->overrun;
        cq->overrun = 1;
    } else {
        cq->ring[(cq->head + cq->count) % cq->cap] = *e;
        cq->count++;
        cq->pushed++;
        if (cq->armed && cq->cq.channel) {
            cq->armed = 0;
            emu_channel_notify(cq);
        }
    }
    pthread_mutex_unlock(&cq->lock);
    if (overrun_now) {
        emu_log("CQ %u overrun (capacity %d): completion of wr_id %#llx lost", cq->id, cq->cap,
                (unsigned long long)e->wc.wr_id);
        emu_post_async((struct emu_context *)cq->cq.context, IBV_EVENT_CQ_ERR, cq, 0);
    }
}

static void retire(const struct emu_cqe *e) {
    if (e->qp_slot < 0 || atomic_load(&g.slot_gen[e->qp_slot]) != e->qp_gen) return;
    uint64_t want = e->seq + 1, cur = atomic_load(&g.sq_head[e->qp_slot]);
    while (cur < want && !atomic_compare_exchange_weak(&g.sq_head[e->qp_slot], &cur, want)) {
    }
}

/* An empty poll lends the core: the "NIC" is CPU here. A build's pollers spin on their CQs
 * (on hardware each has a core of its own); here the pollers of every engine of a run share
 * two, and a yield per empty poll kept them all running: suites/rdma spent more system time
 * in those yields than user time in all its work. The first EMPTY_SPINS empty polls of a run
 * yield; after that each naps EMPTY_NAP_NS, far below the schedulers' 5 ms quiet window, so a
 * completion waits at most that long for an idle poller. */
#define EMPTY_SPINS 64
#define EMPTY_NAP_NS 50000L
static __thread unsigned empty_polls;

static void lend_the_core(void) {
    if (empty_polls < EMPTY_SPINS) {
        empty_polls++;
        sched_yield();
        return;
    }
    struct timespec nap = {0, EMPTY_NAP_NS};
    nanosleep(&nap, NULL);
}

int emu_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc) {
    struct emu_cq *cq = (struct emu_cq *)ibcq;
    if (atomic_load(&g.pending)) emu_progress_all(); /* WRs whose chaos delay has run out */
    pthread_mutex_lock(&cq->lock);
    if (cq->count > 0 && emu_sched_holds_completions()) { /* which poller takes it: a choice */
        pthread_mutex_unlock(&cq->lock); /* decided under the lock: no completion slips past */
        emu_sched_point(SP_POLL, 0, cq->id, 0, n);
        pthread_mutex_lock(&cq->lock);
    }
    int k = 0;
    for (; k < n && cq->count > 0; k++) {
        const struct emu_cqe *e = &cq->ring[cq->head];
        wc[k] = e->wc;
        retire(e);
        cq->head = (cq->head + 1) % cq->cap;
        cq->count--;
        cq->polled++;
    }
    pthread_mutex_unlock(&cq->lock);
    emu_trace_poll(cq->id, k);
    emu_trace_polled(cq->id, wc, k);
    if (k == 0)
        lend_the_core();
    else
        empty_polls = 0;
    return k;
}

int emu_req_notify_cq(struct ibv_cq *ibcq, int solicited_only) {
    (void)solicited_only;
    struct emu_cq *cq = (struct emu_cq *)ibcq;
    pthread_mutex_lock(&cq->lock);
    cq->armed = 1; /* the next completion added raises one event */
    pthread_mutex_unlock(&cq->lock);
    return 0;
}

/* ------------------------------------------------------------------------------ queue pairs */

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a) {
    struct emu_context *c = (struct emu_context *)pd->context;
    if (atomic_load(&c->fatal)) {
        errno = EIO;
        return NULL;
    }
    if (a->qp_type != IBV_QPT_RC || a->srq) {
        errno = EOPNOTSUPP; /* only reliable connected QPs without SRQ are emulated */
        return NULL;
    }
    if (!a->send_cq || !a->recv_cq || a->cap.max_send_wr < 1 || a->cap.max_send_wr > 32768 ||
        a->cap.max_recv_wr > 32768 || a->cap.max_send_sge > 30 || a->cap.max_recv_sge > 30 ||
        a->cap.max_inline_data > 1024) {
        errno = EINVAL;
        return NULL;
    }
    struct emu_qp *qp = calloc(1, sizeof *qp);
    uint32_t cap = a->cap.max_send_wr, nsge = a->cap.max_send_sge ? a->cap.max_send_sge : 1;
    if (qp) {
        qp->ring = calloc(cap, sizeof *qp->ring);
        qp->recv_ring = calloc(a->cap.max_recv_wr + 1, sizeof *qp->recv_ring);
    }
    struct ibv_sge *sges = qp ? calloc((size_t)cap * nsge, sizeof *sges) : NULL;
    uint8_t *inl = qp && a->cap.max_inline_data ? calloc(cap, a->cap.max_inline_data) : NULL;
    if (!qp || !qp->ring || !qp->recv_ring || !sges || (a->cap.max_inline_data && !inl)) {
        if (qp) free(qp->ring), free(qp->recv_ring);
        free(qp), free(sges), free(inl);
        errno = ENOMEM;
        return NULL;
    }
    for (uint32_t i = 0; i < cap; i++) {
        qp->ring[i].sge = sges + (size_t)i * nsge;
        qp->ring[i].inline_data = inl ? inl + (size_t)i * a->cap.max_inline_data : NULL;
    }
    qp->pd = ((struct emu_pd *)pd)->id;
    qp->slot = shm_alloc_qp(c->dev, 1, qp->pd);
    if (qp->slot < 0) {
        free(qp->ring), free(qp->recv_ring), free(sges), free(inl), free(qp);
        errno = ENOMEM;
        return NULL;
    }
    qp->dev = c->dev;
    qp->port = 1;
    qp->cap = cap;
    qp->max_sge = a->cap.max_send_sge;
    qp->max_recv_wr = a->cap.max_recv_wr;
    qp->max_recv_sge = a->cap.max_recv_sge;
    qp->max_inline = a->cap.max_inline_data;
    qp->sq_sig_all = a->sq_sig_all;
    qp->scq = (struct emu_cq *)a->send_cq;
    qp->rcq = (struct emu_cq *)a->recv_cq;
    qp->state = IBV_QPS_RESET;
    pthread_mutex_init(&qp->lock, NULL);
    qp->qp.context = pd->context;
    qp->qp.qp_context = a->qp_context;
    qp->qp.pd = pd;
    qp->qp.send_cq = a->send_cq;
    qp->qp.recv_cq = a->recv_cq;
    qp->qp.handle = qp->slot;
    qp->qp.qp_num = EMU_QPN_BASE + qp->slot;
    qp->qp.state = IBV_QPS_RESET;
    qp->qp.qp_type = IBV_QPT_RC;
    pthread_mutex_init(&qp->qp.mutex, NULL);
    pthread_cond_init(&qp->qp.cond, NULL);
    qp->gen = atomic_fetch_add(&g.slot_gen[qp->slot], 1) + 1;
    atomic_store(&g.sq_head[qp->slot], 0);
    pthread_mutex_lock(&g.objects);
    qp->next = g.qps;
    g.qps = qp;
    g.qp_by_slot[qp->slot] = qp;
    qp->scq->nqps++;
    if (qp->rcq != qp->scq) qp->rcq->nqps++;
    pthread_mutex_unlock(&g.objects);
    return &qp->qp;
}

static void set_pending(struct emu_qp *qp, int pending) {
    if (pending == qp->pending) return;
    qp->pending = pending;
    atomic_fetch_add(&g.pending, pending ? 1 : -1);
}

static void sync_shared(struct emu_qp *qp) {
    shm_lock();
    struct emu_shm_qp *s = &g.shm->qp[qp->slot];
    if (s->owner.pid == g.self.pid && s->owner.start == g.self.start) {
        s->state = qp->state;
        s->port = qp->port;
        s->access = qp->access;
        s->dest_qpn = qp->dest_qpn;
        s->dgid = qp->dgid;
    }
    shm_unlock();
}

static struct emu_cqe make_cqe(struct emu_qp *qp, const struct emu_wqe *w,
                               enum ibv_wc_status status, uint32_t len) {
    struct emu_cqe e;
    memset(&e, 0, sizeof e);
    e.wc.wr_id = w->wr_id;
    e.wc.status = status;
    e.wc.opcode = w->opcode == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE;
    e.wc.byte_len = len;
    e.wc.qp_num = qp->qp.qp_num;
    e.qp_slot = qp->slot;
    e.qp_gen = qp->gen;
    e.seq = w->seq;
    e.opcode = w->opcode;
    e.laddr = w->num_sge > 0 ? w->sge[0].addr : 0;
    return e;
}

static void deliver(struct emu_qp *qp, const struct emu_cqe *e) {
    qp->cqes++;
    if (emu_hold_completion(qp, e)) return;
    emu_cq_push(qp->scq, e);
}

/* Moves the QP to ERR: every WR not yet executed, and every posted receive, completes with
 * IBV_WC_WR_FLUSH_ERR (signaled or not, as error completions always are). */
void emu_qp_to_error(struct emu_qp *qp) {
    if (!qp->err_ns) qp->err_ns = emu_now_ns();
    qp->state = IBV_QPS_ERR;
    qp->qp.state = IBV_QPS_ERR;
    sync_shared(qp);
    emu_hold_forget_wqes(qp);
    for (; qp->exec < qp->tail; qp->exec++) {
        struct emu_wqe *w = &qp->ring[qp->exec % qp->cap];
        struct emu_cqe e = make_cqe(qp, w, IBV_WC_WR_FLUSH_ERR, 0);
        qp->flushed++;
        deliver(qp, &e);
    }
    for (; qp->recv_head < qp->recv_tail; qp->recv_head++) {
        struct emu_cqe e;
        memset(&e, 0, sizeof e);
        e.wc.wr_id = qp->recv_ring[qp->recv_head % (qp->max_recv_wr + 1)];
        e.wc.status = IBV_WC_WR_FLUSH_ERR;
        e.wc.opcode = IBV_WC_RECV;
        e.wc.qp_num = qp->qp.qp_num;
        e.qp_slot = -1;
        emu_cq_push(qp->rcq, &e);
    }
    set_pending(qp, 0);
}

static int mr_index(uint32_t key) {
    int i = (int)(key >> 8) - 1;
    return i >= 0 && i < EMU_MAX_MRS ? i : -1;
}

static int same_owner(const struct emu_owner *a, const struct emu_owner *b) {
    return a->pid == b->pid && a->start == b->start;
}

static enum ibv_wc_status copy_status(int err) {
    static int warned;
    switch (err) {
    case ESRCH:
        return IBV_WC_RETRY_EXC_ERR; /* the peer died: nobody acknowledges */
    case EFAULT:
        return IBV_WC_REM_ACCESS_ERR;
    case EPERM:
        if (!warned++)
            emu_log("process_vm_writev/readv: permission denied: run the processes as one user "
                    "(and without Yama ptrace_scope 2 or 3)");
        return IBV_WC_GENERAL_ERR;
    default:
        return IBV_WC_GENERAL_ERR;
    }
}

/* Executes one RDMA WRITE or READ; returns the completion status and the bytes moved. */
static enum ibv_wc_status execute(struct emu_qp *qp, struct emu_wqe *w, uint32_t *moved) {
    struct emu_shm_mr lmr[30], rmr;
    struct emu_shm_qp rq;
    int local_state, remote_state = 0, dgid_ok = 1;
    int ri = (int)qp->dest_qpn - EMU_QPN_BASE, mi = mr_index(w->rkey);
    int inl = (w->send_flags & IBV_SEND_INLINE) && w->opcode == IBV_WR_RDMA_WRITE;
    memset(&rq, 0, sizeof rq);
    memset(&rmr, 0, sizeof rmr);

    shm_lock();
    local_state = g.shm->dev[qp->dev].port[qp->port - 1].state;
    for (int i = 0; !inl && i < w->num_sge; i++) {
        int li = mr_index(w->sge[i].lkey);
        if (li >= 0) lmr[i] = g.shm->mr[li];
        else memset(&lmr[i], 0, sizeof lmr[i]);
    }
    if (ri >= 0 && ri < EMU_MAX_QPS) {
        rq = g.shm->qp[ri];
        if (rq.used && rq.dev >= 0 && rq.dev < g.ndevs) {
            remote_state = g.shm->dev[rq.dev].port[rq.port ? rq.port - 1 : 0].state;
            if (qp->attr.ah_attr.is_global) dgid_ok = emu_gid_on_device(rq.dev, &qp->dgid);
        }
    }
    if (mi >= 0) rmr = g.shm->mr[mi];
    shm_unlock();

    if (local_state != IBV_PORT_ACTIVE) return IBV_WC_RETRY_EXC_ERR;

    struct iovec liov[30], riov;
    uint64_t len = 0;
    if (inl) {
        liov[0].iov_base = w->inline_data;
        liov[0].iov_len = w->inline_len;
        len = w->inline_len;
    }
    for (int i = 0; !inl && i < w->num_sge; i++) {
        const struct ibv_sge *s = &w->sge[i];
        const struct emu_shm_mr *m = &lmr[i];
        if (!m->used || m->key != s->lkey || !same_owner(&m->owner, &g.self) || m->pd != qp->pd ||
            s->addr < m->iova || s->addr - m->iova > m->length ||
            s->length > m->length - (s->addr - m->iova))
            return IBV_WC_LOC_PROT_ERR;
        if (w->opcode == IBV_WR_RDMA_READ && !(m->access & IBV_ACCESS_LOCAL_WRITE))
            return IBV_WC_LOC_PROT_ERR;
        liov[i].iov_base = (void *)(uintptr_t)(m->addr + (s->addr - m->iova));
        liov[i].iov_len = s->length;
        len += s->length;
    }
    int niov = inl ? 1 : w->num_sge;
    if (len > (1ull << 31)) return IBV_WC_LOC_LEN_ERR;

    /* The responder: a QP in RTR/RTS connected back to us, on a live process with its port up.
     * Anything else means no acknowledgement ever comes: retries run out. */
    if (ri < 0 || ri >= EMU_MAX_QPS || !rq.used || rq.qpn != qp->dest_qpn || !dgid_ok ||
        (rq.state != IBV_QPS_RTR && rq.state != IBV_QPS_RTS) || rq.dest_qpn != qp->qp.qp_num ||
        remote_state != IBV_PORT_ACTIVE || !emu_owner_alive(&rq.owner))
        return IBV_WC_RETRY_EXC_ERR;
    if (len == 0) {
        *moved = 0;
        return IBV_WC_SUCCESS;
    }
    unsigned need = w->opcode == IBV_WR_RDMA_WRITE ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ;
    if (mi < 0 || !rmr.used || rmr.key != w->rkey || !same_owner(&rmr.owner, &rq.owner) ||
        rmr.pd != rq.pd || !(rmr.access & need) || !(rq.access & need) ||
        w->remote_addr < rmr.iova || w->remote_addr - rmr.iova > rmr.length ||
        len > rmr.length - (w->remote_addr - rmr.iova))
        return IBV_WC_REM_ACCESS_ERR;
    riov.iov_base = (void *)(uintptr_t)(rmr.addr + (w->remote_addr - rmr.iova));
    riov.iov_len = len;

    if (same_owner(&rq.owner, &g.self)) { /* loopback inside one process */
        uint8_t *r = riov.iov_base;
        for (int i = 0; i < niov; r += liov[i].iov_len, i++) {
            if (w->opcode == IBV_WR_RDMA_WRITE) memmove(r, liov[i].iov_base, liov[i].iov_len);
            else memmove(liov[i].iov_base, r, liov[i].iov_len);
        }
    } else {
        ssize_t n = w->opcode == IBV_WR_RDMA_WRITE
                        ? process_vm_writev(rq.owner.pid, liov, niov, &riov, 1, 0)
                        : process_vm_readv(rq.owner.pid, liov, niov, &riov, 1, 0);
        if (n < 0) return copy_status(errno);
        if ((uint64_t)n != len) return IBV_WC_REM_ACCESS_ERR;
    }
    *moved = (uint32_t)len;
    return IBV_WC_SUCCESS;
}

static void execute_and_complete(struct emu_qp *qp, struct emu_wqe *w) {
    enum ibv_wc_status st;
    uint32_t len = 0;
    if (w->hold == WQE_RELEASED && w->forced)
        st = w->forced_status;
    else if (!emu_chaos_fail(&st))
        st = execute(qp, w, &len);
    qp->executed++;
    qp->bytes += len;
    if (st != IBV_WC_SUCCESS || (w->send_flags & IBV_SEND_SIGNALED)) {
        struct emu_cqe e = make_cqe(qp, w, st, len);
        deliver(qp, &e);
    }
    if (st != IBV_WC_SUCCESS) {
        qp->errors++;
        emu_qp_to_error(qp);
    }
}

/* Executes the WRs at the head of the send queue that may run now (qp->lock held). */
void emu_qp_progress(struct emu_qp *qp) {
    if (qp->state == IBV_QPS_ERR) {
        emu_qp_to_error(qp);
        return;
    }
    uint64_t now = 0;
    while (qp->state == IBV_QPS_RTS && qp->exec < qp->tail) {
        struct emu_wqe *w = &qp->ring[qp->exec % qp->cap];
        if (w->hold == WQE_STALLED) break; /* in order: everything behind it waits too */
        if (w->due_ns) {
            if (!now) now = emu_now_ns();
            if (now < w->due_ns) break;
        }
        qp->exec++;
        execute_and_complete(qp, w);
    }
    set_pending(qp, qp->exec < qp->tail);
}

void emu_progress_all(void) {
    pthread_mutex_lock(&g.objects);
    for (struct emu_qp *qp = g.qps; qp; qp = qp->next) {
        if (!qp->pending) continue;
        pthread_mutex_lock(&qp->lock);
        emu_qp_progress(qp);
        pthread_mutex_unlock(&qp->lock);
    }
    pthread_mutex_unlock(&g.objects);
}

int emu_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
    struct emu_qp *qp = (struct emu_qp *)ibqp;
    int rc = 0;
    uint64_t delay;
    if (wr) {
        int chain = 0;
        for (struct ibv_send_wr *x = wr; x; x = x->next) chain++;
        emu_sched_point(SP_POST, ibqp->qp_num, 0, wr->wr_id, chain);
    }
    pthread_mutex_lock(&qp->lock);
    for (; wr; wr = wr->next) {
        if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_ERR && qp->state != IBV_QPS_SQD) {
            rc = EINVAL; /* not ready to send */
            break;
        }
        if ((wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_READ) ||
            wr->num_sge < 0 || wr->num_sge > (int)qp->max_sge) {
            rc = EINVAL; /* SEND, immediates and atomics are not emulated */
            break;
        }
        uint32_t inline_len = 0;
        if (wr->send_flags & IBV_SEND_INLINE) {
            for (int i = 0; i < wr->num_sge; i++) inline_len += wr->sg_list[i].length;
            if (inline_len > qp->max_inline || wr->opcode != IBV_WR_RDMA_WRITE) {
                rc = EINVAL;
                break;
            }
        }
        if (qp->tail - atomic_load(&g.sq_head[qp->slot]) >= qp->cap) {
            rc = ENOMEM; /* send queue full */
            break;
        }
        struct emu_wqe *w = &qp->ring[qp->tail % qp->cap];
        if ((rc = emu_refuse_post(qp, wr))) { /* a refuse rule: as if the queue were full */
            struct emu_wqe seen = {.wr_id = wr->wr_id, .opcode = wr->opcode,
                                   .num_sge = wr->num_sge, .sge = wr->sg_list,
                                   .remote_addr = wr->wr.rdma.remote_addr,
                                   .rkey = wr->wr.rdma.rkey};
            emu_trace_post(qp, &seen, 1);
            break;
        }
        w->seq = qp->tail;
        w->wr_id = wr->wr_id;
        w->opcode = wr->opcode;
        w->send_flags = wr->send_flags | (qp->sq_sig_all ? IBV_SEND_SIGNALED : 0);
        w->num_sge = wr->num_sge;
        memcpy(w->sge, wr->sg_list, sizeof *w->sge * wr->num_sge);
        w->remote_addr = wr->wr.rdma.remote_addr;
        w->rkey = wr->wr.rdma.rkey;
        w->hold = WQE_FREE_RUN;
        w->forced = 0;
        w->inline_len = inline_len;
        for (uint32_t i = 0, off = 0; inline_len && i < (uint32_t)wr->num_sge; i++) {
            memcpy(w->inline_data + off, (void *)(uintptr_t)wr->sg_list[i].addr,
                   wr->sg_list[i].length);
            off += wr->sg_list[i].length;
        }
        delay = emu_chaos_delay_ns();
        w->due_ns = delay ? emu_now_ns() + delay : 0;
        qp->tail++;
        qp->posted++;
        if (qp->state == IBV_QPS_ERR) {
            qp->posted_in_err++;
            if (qp->app_err) qp->posted_after_retire++;
        }
        emu_trace_post(qp, w, 0);
        emu_hold_execution(qp, w);
    }
    if (rc) *bad = wr;
    emu_qp_progress(qp);
    pthread_mutex_unlock(&qp->lock);
    return rc;
}

int emu_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
    struct emu_qp *qp = (struct emu_qp *)ibqp;
    int rc = 0;
    pthread_mutex_lock(&qp->lock);
    for (; wr; wr = wr->next) {
        if (qp->state == IBV_QPS_RESET || wr->num_sge > (int)qp->max_recv_sge) {
            rc = EINVAL;
            break;
        }
        if (qp->recv_tail - qp->recv_head >= qp->max_recv_wr) {
            rc = ENOMEM;
            break;
        }
        qp->recv_ring[qp->recv_tail++ % (qp->max_recv_wr + 1)] = wr->wr_id;
    }
    if (rc) *bad = wr;
    if (qp->state == IBV_QPS_ERR) emu_qp_to_error(qp);
    pthread_mutex_unlock(&qp->lock);
    return rc;
}

/* State transitions and the attributes each one needs (IB spec, table of QP state transitions
 * for RC); anything else is EINVAL. */
static int transition_ok(enum ibv_qp_state cur, enum ibv_qp_state next, int mask) {
    const int init = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    const int rtr = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    const int rts = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                    IBV_QP_MAX_QP_RD_ATOMIC;
    if (next == IBV_QPS_RESET || next == IBV_QPS_ERR) return 1;
    if (cur == IBV_QPS_RESET && next == IBV_QPS_INIT) return (mask & init) == init;
    if (cur == IBV_QPS_INIT && next == IBV_QPS_INIT) return 1;
    if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) return (mask & rtr) == rtr;
    if (cur == IBV_QPS_RTR && next == IBV_QPS_RTS) return (mask & rts) == rts;
    if ((cur == IBV_QPS_RTS || cur == IBV_QPS_SQD || cur == IBV_QPS_SQE) && next == IBV_QPS_RTS)
        return 1;
    if (cur == IBV_QPS_RTS && next == IBV_QPS_SQD) return 1;
    return 0;
}

/* A device in the fatal state still takes teardown: mlx5 firmware answers 2RST_QP and 2ERR_QP
 * (like every destroy command) with success in its internal-error state, and every other QP
 * command, creation and RST2INIT..RTR2RTS included, with EIO. Builds that reset their QPs on
 * IBV_EVENT_DEVICE_FATAL (0.3.10, 0.3.11) rely on the reset discarding outstanding work. */
static int fatal_refuses(enum ibv_qp_state next, int mask) {
    return !(mask & IBV_QP_STATE) || (next != IBV_QPS_RESET && next != IBV_QPS_ERR);
}

EXPORT int ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask) {
    struct emu_qp *qp = (struct emu_qp *)ibqp;
    if (mask & IBV_QP_STATE) emu_sched_point(SP_MODIFY, ibqp->qp_num, 0, 0, attr->qp_state);
    if (context_fatal(ibqp->context) && fatal_refuses(attr->qp_state, mask)) return EIO;
    pthread_mutex_lock(&qp->lock);
    enum ibv_qp_state cur = qp->state;
    enum ibv_qp_state next = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
    if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur) {
        pthread_mutex_unlock(&qp->lock);
        return EINVAL;
    }
    if (!transition_ok(cur, next, mask) ||
        ((mask & IBV_QP_PORT) &&
         (attr->port_num < 1 || attr->port_num > g.shm->dev[qp->dev].nports))) {
        pthread_mutex_unlock(&qp->lock);
        return EINVAL;
    }
    if (mask & IBV_QP_PORT) qp->port = attr->port_num, qp->attr.port_num = attr->port_num;
    if (mask & IBV_QP_ACCESS_FLAGS) qp->access = attr->qp_access_flags;
    if (mask & IBV_QP_DEST_QPN) qp->dest_qpn = attr->dest_qp_num;
    if (mask & IBV_QP_AV) {
        qp->attr.ah_attr = attr->ah_attr;
        qp->dgid = attr->ah_attr.grh.dgid;
    }
    if (mask & IBV_QP_PKEY_INDEX) qp->attr.pkey_index = attr->pkey_index;
    if (mask & IBV_QP_PATH_MTU) qp->attr.path_mtu = attr->path_mtu;
    if (mask & IBV_QP_TIMEOUT) qp->attr.timeout = attr->timeout;
    if (mask & IBV_QP_RETRY_CNT) qp->attr.retry_cnt = attr->retry_cnt;
    if (mask & IBV_QP_RNR_RETRY) qp->attr.rnr_retry = attr->rnr_retry;
    if (mask & IBV_QP_RQ_PSN) qp->attr.rq_psn = attr->rq_psn;
    if (mask & IBV_QP_SQ_PSN) qp->attr.sq_psn = attr->sq_psn;
    if (mask & IBV_QP_MAX_QP_RD_ATOMIC) qp->attr.max_rd_atomic = attr->max_rd_atomic;
    if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) qp->attr.max_dest_rd_atomic = attr->max_dest_rd_atomic;
    if (mask & IBV_QP_MIN_RNR_TIMER) qp->attr.min_rnr_timer = attr->min_rnr_timer;
    if (next == IBV_QPS_ERR) {
        if (qp->state != IBV_QPS_ERR) qp->app_err = 1;
        emu_qp_to_error(qp);
    } else if (next == IBV_QPS_RESET) { /* outstanding work is discarded without completions */
        emu_hold_forget_wqes(qp);
        qp->exec = qp->tail;
        atomic_store(&g.sq_head[qp->slot], qp->tail);
        qp->recv_head = qp->recv_tail;
        set_pending(qp, 0);
        qp->state = qp->qp.state = IBV_QPS_RESET;
        sync_shared(qp);
    } else {
        qp->state = qp->qp.state = next;
        sync_shared(qp);
        emu_qp_progress(qp);
    }
    pthread_mutex_unlock(&qp->lock);
    return 0;
}

EXPORT int ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask,
                        struct ibv_qp_init_attr *init) {
    (void)mask;
    struct emu_qp *qp = (struct emu_qp *)ibqp;
    pthread_mutex_lock(&qp->lock);
    *attr = qp->attr;
    attr->qp_state = attr->cur_qp_state = qp->state;
    attr->qp_access_flags = qp->access;
    attr->dest_qp_num = qp->dest_qpn;
    attr->port_num = qp->port;
    attr->cap.max_send_wr = qp->cap;
    attr->cap.max_recv_wr = qp->max_recv_wr;
    attr->cap.max_send_sge = qp->max_sge;
    attr->cap.max_recv_sge = qp->max_recv_sge;
    attr->cap.max_inline_data = qp->max_inline;
    if (init) {
        memset(init, 0, sizeof *init);
        init->qp_context = ibqp->qp_context;
        init->send_cq = ibqp->send_cq;
        init->recv_cq = ibqp->recv_cq;
        init->cap = attr->cap;
        init->qp_type = IBV_QPT_RC;
        init->sq_sig_all = qp->sq_sig_all;
    }
    pthread_mutex_unlock(&qp->lock);
    return 0;
}

EXPORT int ibv_destroy_qp(struct ibv_qp *ibqp) {
    struct emu_qp *qp = (struct emu_qp *)ibqp;
    emu_sched_point(SP_DESTROY, ibqp->qp_num, 0, 0, 0);
    wait_acked(&ibqp->mutex, &ibqp->cond, &ibqp->events_completed, &qp->async_reported, "QP",
               ibqp->qp_num, atomic_load(&qp->event_reader),
               atomic_load(&((struct emu_context *)ibqp->context)->event_reader));
    pthread_mutex_lock(&g.objects);
    for (struct emu_qp **p = &g.qps; *p; p = &(*p)->next)
        if (*p == qp) {
            *p = qp->next;
            break;
        }
    g.qp_by_slot[qp->slot] = NULL;
    qp->scq->nqps--;
    if (qp->rcq != qp->scq) qp->rcq->nqps--;
    pthread_mutex_lock(&qp->lock);
    uint64_t completed = atomic_load(&g.sq_head[qp->slot]);
    pthread_mutex_lock(&hold_lock);
    uint64_t held = held_for(qp->qp.qp_num, 0);
    pthread_mutex_unlock(&hold_lock);
    emu_trace_destroy(qp, completed, held, emu_peer_pid(qp));
    emu_hold_forget_wqes(qp); /* stalled WRs vanish with the QP, without completions */
    set_pending(qp, 0);
    atomic_fetch_add(&g.slot_gen[qp->slot], 1); /* its completions no longer retire anything */
    pthread_mutex_unlock(&qp->lock);
    pthread_mutex_unlock(&g.objects);
    shm_free_qp(qp->slot);
    free(qp->ring[0].sge);
    free(qp->ring[0].inline_data);
    free(qp->ring);
    free(qp->recv_ring);
    free(qp);
    return 0;
}
