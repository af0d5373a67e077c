/* Devices, contexts, ports, GIDs, protection domains, completion channels and async events. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu.h"
#include "points.h"

/* The application sees uverbs devices under these names; the kernel-side paths are redirected by
 * sysfs.c. */

int emu_device_index(const char *name) {
    for (int i = 0; i < g.ndevs; i++)
        if (strcmp(g.devs[i].dev.name, name) == 0) return i;
    return -1;
}

static int dev_of(struct ibv_device *device) {
    return ((struct emu_device *)device)->index;
}

EXPORT struct ibv_device **ibv_get_device_list(int *num_devices) {
    int n = emu_init() ? 0 : g.ndevs;
    struct ibv_device **list = calloc(n + 1, sizeof *list);
    if (!list) {
        errno = ENOMEM;
        return NULL;
    }
    for (int i = 0; i < n; i++) list[i] = &g.devs[i].dev;
    if (num_devices) *num_devices = n;
    return list;
}

EXPORT void ibv_free_device_list(struct ibv_device **list) { free(list); }

EXPORT const char *ibv_get_device_name(struct ibv_device *device) { return device->name; }

EXPORT __be64 ibv_get_device_guid(struct ibv_device *device) {
    return g.shm->dev[dev_of(device)].guid;
}

EXPORT int ibv_get_device_index(struct ibv_device *device) { return dev_of(device); }

int emu_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int emu_req_notify_cq(struct ibv_cq *cq, int solicited_only);
int emu_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int emu_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

static int no_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
    (void)srq;
    *bad = wr;
    return EOPNOTSUPP;
}

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device) {
    if (emu_init()) {
        errno = ENODEV;
        return NULL;
    }
    struct emu_context *c = calloc(1, sizeof *c);
    int fds[2];
    if (!c || pipe2(fds, O_CLOEXEC)) {
        free(c);
        errno = ENOMEM;
        return NULL;
    }
    fcntl(fds[1], F_SETFL, O_NONBLOCK); /* an event that does not fit is dropped, never blocks */
    c->dev = dev_of(device);
    c->async_wr = fds[1];
    c->ctx.device = device;
    c->ctx.async_fd = fds[0];
    c->ctx.cmd_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    c->ctx.num_comp_vectors = 4;
    c->ctx.ops.poll_cq = emu_poll_cq;
    c->ctx.ops.req_notify_cq = emu_req_notify_cq;
    c->ctx.ops.post_send = emu_post_send;
    c->ctx.ops.post_recv = emu_post_recv;
    c->ctx.ops.post_srq_recv = no_srq_recv;
    pthread_mutex_init(&c->ctx.mutex, NULL);
    for (int p = 0; p < EMU_MAX_PORTS; p++) c->seen_gen[p] = g.shm->dev[c->dev].port[p].gen;
    pthread_mutex_lock(&g.objects);
    c->next = g.contexts;
    g.contexts = c;
    pthread_mutex_unlock(&g.objects);
    return &c->ctx;
}

EXPORT int ibv_close_device(struct ibv_context *context) {
    struct emu_context *c = (struct emu_context *)context;
    pthread_mutex_lock(&g.objects);
    for (struct emu_context **p = &g.contexts; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    pthread_mutex_unlock(&g.objects);
    close(c->ctx.async_fd);
    close(c->async_wr);
    if (c->ctx.cmd_fd >= 0) close(c->ctx.cmd_fd);
    free(c);
    return 0;
}

EXPORT int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr) {
    struct emu_context *c = (struct emu_context *)context;
    if (atomic_load(&c->fatal)) return EIO;
    const struct emu_shm_dev *d = &g.shm->dev[c->dev];
    memset(attr, 0, sizeof *attr);
    snprintf(attr->fw_ver, sizeof attr->fw_ver, "1.0 (mc-verbs)");
    attr->node_guid = d->guid;
    attr->sys_image_guid = d->guid;
    attr->max_mr_size = UINT64_MAX;
    attr->page_size_cap = ~4095ull;
    attr->max_qp = EMU_MAX_QPS;
    attr->max_qp_wr = 32768;
    attr->device_cap_flags = IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_RC_RNR_NAK_GEN;
    attr->max_sge = 30;
    attr->max_sge_rd = 30;
    attr->max_cq = 65536;
    attr->max_cqe = 4194303;
    attr->max_mr = EMU_MAX_MRS;
    attr->max_pd = 1 << 24;
    attr->max_qp_rd_atom = 16;
    attr->max_qp_init_rd_atom = 16;
    attr->max_res_rd_atom = 16 * EMU_MAX_QPS;
    attr->atomic_cap = IBV_ATOMIC_NONE;
    attr->max_pkeys = 1;
    attr->local_ca_ack_delay = 16;
    attr->phys_port_cnt = d->nports;
    return 0;
}

static const struct emu_shm_port *port_of(struct ibv_context *context, unsigned port) {
    struct emu_context *c = (struct emu_context *)context;
    if (port < 1 || (int)port > g.shm->dev[c->dev].nports) return NULL;
    return &g.shm->dev[c->dev].port[port - 1];
}

/* The exported symbol takes the pre-1.4 port attribute layout (verbs.h zeroes the full struct
 * before calling it); fill it up to and including `flags`, which every layout has. */
#undef ibv_query_port
EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num,
                          struct _compat_ibv_port_attr *out) {
    struct emu_context *c = (struct emu_context *)context;
    if (atomic_load(&c->fatal)) return EIO;
    const struct emu_shm_port *p = port_of(context, port_num);
    if (!p) return EINVAL;
    struct ibv_port_attr a;
    memset(&a, 0, sizeof a);
    shm_lock();
    a.state = p->state;
    a.gid_tbl_len = p->ngids;
    a.lid = p->lid;
    a.link_layer = p->link_layer;
    shm_unlock();
    a.max_mtu = IBV_MTU_4096;
    a.active_mtu = IBV_MTU_4096;
    a.port_cap_flags = 0;
    a.max_msg_sz = 1u << 31;
    a.pkey_tbl_len = 1;
    a.max_vl_num = 1;
    a.active_width = 2;  /* 4x */
    a.active_speed = 32; /* 25 Gb/s per lane */
    a.phys_state = a.state == IBV_PORT_ACTIVE ? 5 /* LinkUp */ : 3 /* Disabled */;
    memcpy(out, &a, offsetof(struct ibv_port_attr, flags) + 1);
    return 0;
}

EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index,
                         union ibv_gid *gid) {
    const struct emu_shm_port *p = port_of(context, port_num);
    if (!p || index < 0 || index >= EMU_MAX_GIDS) {
        errno = EINVAL;
        return -1;
    }
    shm_lock();
    *gid = p->gid[index];
    shm_unlock();
    return 0;
}

/* rdma-core's private helper (IBVERBS_PRIVATE_34) that pyverbs calls for a GID's type:
 * 0 = IB/RoCE v1, 1 = RoCE v2, as its enum ibv_gid_type_sysfs. */
EXPORT int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
                              int *type) {
    const struct emu_shm_port *p = port_of(context, port_num);
    if (!p || index >= EMU_MAX_GIDS) {
        errno = EINVAL;
        return -1;
    }
    shm_lock();
    int t = p->gid_type[index];
    shm_unlock();
    *type = t == IBV_GID_TYPE_ROCE_V2 ? 1 : 0;
    return 0;
}

static int fill_gid_entry(struct ibv_context *context, uint32_t port_num, uint32_t index,
                          struct ibv_gid_entry *e) {
    const struct emu_shm_port *p = port_of(context, port_num);
    if (!p || index >= EMU_MAX_GIDS) return EINVAL;
    static const union ibv_gid zero;
    shm_lock();
    int ngids = p->ngids;
    e->gid = p->gid[index];
    e->gid_type = p->gid_type[index];
    int ether = p->link_layer == IBV_LINK_LAYER_ETHERNET;
    shm_unlock();
    if ((int)index >= ngids || memcmp(&e->gid, &zero, sizeof zero) == 0) return ENODATA;
    e->gid_index = index;
    e->port_num = port_num;
    e->ndev_ifindex = ether ? 1 /* lo */ : 0;
    return 0;
}

EXPORT int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
                             struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size) {
    if (flags || entry_size < sizeof *entry) return EINVAL;
    return fill_gid_entry(context, port_num, gid_index, entry);
}

EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries,
                                    size_t max_entries, uint32_t flags, size_t entry_size) {
    if (flags || entry_size < sizeof *entries) return -EINVAL;
    struct emu_context *c = (struct emu_context *)context;
    size_t n = 0;
    for (int port = 1; port <= g.shm->dev[c->dev].nports; port++)
        for (uint32_t i = 0; i < EMU_MAX_GIDS; i++) {
            struct ibv_gid_entry e;
            if (fill_gid_entry(context, port, i, &e)) continue;
            if (n == max_entries) return -EINVAL;
            entries[n++] = e;
        }
    return (ssize_t)n;
}

EXPORT int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index,
                          __be16 *pkey) {
    if (!port_of(context, port_num) || index != 0) return -1;
    *pkey = 0xffff;
    return 0;
}

EXPORT int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num, __be16 pkey) {
    if (!port_of(context, port_num)) return -EINVAL;
    return pkey == 0xffff ? 0 : -ENOENT;
}

/* ----------------------------------------------------------------------- protection domains */

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context) {
    struct emu_context *c = (struct emu_context *)context;
    if (atomic_load(&c->fatal)) {
        errno = EIO;
        return NULL;
    }
    struct emu_pd *pd = calloc(1, sizeof *pd);
    if (!pd) {
        errno = ENOMEM;
        return NULL;
    }
    shm_lock();
    pd->id = g.shm->next_pd++;
    shm_unlock();
    pd->pd.context = context;
    pd->pd.handle = pd->id;
    return &pd->pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd) {
    free((struct emu_pd *)pd);
    return 0;
}

/* ---------------------------------------------------------------------- completion channels */

EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context) {
    struct emu_channel *ch = calloc(1, sizeof *ch);
    int fds[2];
    if (!ch || pipe2(fds, O_CLOEXEC)) {
        free(ch);
        errno = ENOMEM;
        return NULL;
    }
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    ch->ch.context = context;
    ch->ch.fd = fds[0];
    ch->wr_fd = fds[1];
    return &ch->ch;
}

EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel) {
    struct emu_channel *ch = (struct emu_channel *)channel;
    if (ch->ch.refcnt) return EBUSY;
    close(ch->ch.fd);
    close(ch->wr_fd);
    free(ch);
    return 0;
}

/* A completion event names its CQ by id: an event of a CQ destroyed meanwhile is skipped. */
struct emu_cq_event {
    struct emu_cq *cq;
    uint32_t id;
};

void emu_channel_notify(struct emu_cq *cq) { /* cq->lock held */
    struct emu_channel *ch = (struct emu_channel *)cq->cq.channel;
    struct emu_cq_event ev = {cq, cq->id};
    if (write(ch->wr_fd, &ev, sizeof ev) != sizeof ev) emu_log("completion channel full");
}

EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
                            void **cq_context) {
    for (;;) {
        struct emu_cq_event ev;
        if (read(channel->fd, &ev, sizeof ev) != sizeof ev) return -1;
        pthread_mutex_lock(&g.objects);
        int live = 0;
        for (struct emu_cq *c = g.cqs; c; c = c->next)
            if (c == ev.cq && c->id == ev.id) live = 1;
        if (live) {
            *cq = &ev.cq->cq;
            *cq_context = ev.cq->cq.cq_context;
            pthread_mutex_lock(&ev.cq->cq.mutex);
            ev.cq->comp_reported++; /* destroying the CQ waits until these are acknowledged */
            pthread_mutex_unlock(&ev.cq->cq.mutex);
        }
        pthread_mutex_unlock(&g.objects);
        if (live) return 0;
    }
}

EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents) {
    pthread_mutex_lock(&cq->mutex);
    cq->comp_events_completed += nevents;
    pthread_cond_broadcast(&cq->cond);
    pthread_mutex_unlock(&cq->mutex);
}

/* ------------------------------------------------------------------------------ async events */

struct emu_async_record {
    int type;
    int port;
    void *element;
};

static int is_qp_event(int type) {
    switch (type) {
    case IBV_EVENT_QP_FATAL: case IBV_EVENT_QP_REQ_ERR: case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST: case IBV_EVENT_SQ_DRAINED: case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR: case IBV_EVENT_QP_LAST_WQE_REACHED:
        return 1;
    }
    return 0;
}

/* Queues an event on the context's async fd. A QP or CQ event counts against that object, and
 * destroying it waits until the application acknowledged every such event (as rdma-core does). */
_Atomic uint64_t emu_async_posted, emu_async_acked;

void emu_post_async(struct emu_context *c, enum ibv_event_type type, void *element, int port) {
    struct emu_async_record r = {type, port, element};
    uint32_t *reported = NULL;
    pthread_mutex_t *m = NULL;
    if (is_qp_event(type)) {
        reported = &((struct emu_qp *)element)->async_reported;
        m = &((struct ibv_qp *)element)->mutex;
    } else if (type == IBV_EVENT_CQ_ERR) {
        reported = &((struct emu_cq *)element)->async_reported;
        m = &((struct ibv_cq *)element)->mutex;
    }
    if (m) { /* count it before the application can see (and acknowledge) it */
        pthread_mutex_lock(m);
        (*reported)++;
        pthread_mutex_unlock(m);
    }
    if (write(c->async_wr, &r, sizeof r) == sizeof r) {
        atomic_fetch_add(&emu_async_posted, 1);
        return;
    }
    emu_log("async event queue of %s full: %s dropped", c->ctx.device->name,
            ibv_event_type_str(type));
    if (m) {
        pthread_mutex_lock(m);
        (*reported)--;
        pthread_mutex_unlock(m);
    }
}

EXPORT int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event) {
    struct emu_async_record r;
    atomic_store(&((struct emu_context *)context)->event_reader, emu_tid());
    if (read(context->async_fd, &r, sizeof r) != sizeof r) return -1;
    emu_sched_point(SP_EVENT, is_qp_event(r.type) && r.element ? ((struct ibv_qp *)r.element)->qp_num : 0,
                    0, 0, r.type);
    event->event_type = r.type;
    if (is_qp_event(r.type) && r.element)
        atomic_store(&((struct emu_qp *)r.element)->event_reader, emu_tid());
    if (r.type == IBV_EVENT_CQ_ERR)
        event->element.cq = r.element;
    else if (is_qp_event(r.type))
        event->element.qp = r.element;
    else
        event->element.port_num = r.port;
    return 0;
}

EXPORT void ibv_ack_async_event(struct ibv_async_event *event) {
    atomic_fetch_add(&emu_async_acked, 1);
    if (is_qp_event(event->event_type)) {
        struct ibv_qp *qp = event->element.qp;
        pthread_mutex_lock(&qp->mutex);
        qp->events_completed++;
        pthread_cond_broadcast(&qp->cond);
        pthread_mutex_unlock(&qp->mutex);
    } else if (event->event_type == IBV_EVENT_CQ_ERR) {
        struct ibv_cq *cq = event->element.cq;
        pthread_mutex_lock(&cq->mutex);
        cq->async_events_completed++;
        pthread_cond_broadcast(&cq->cond);
        pthread_mutex_unlock(&cq->mutex);
    }
}

/* Port and GID changes are host-wide (in verbs.shm); each process turns a change it has not seen
 * into an async event on its own contexts of that device. */
void emu_device_events(void) {
    pthread_mutex_lock(&g.objects);
    for (struct emu_context *c = g.contexts; c; c = c->next) {
        const struct emu_shm_dev *d = &g.shm->dev[c->dev];
        for (int p = 0; p < d->nports; p++) {
            uint32_t gen = __atomic_load_n(&d->port[p].gen, __ATOMIC_ACQUIRE);
            if (gen == c->seen_gen[p]) continue;
            c->seen_gen[p] = gen;
            emu_post_async(c, d->port[p].last_event, NULL, p + 1);
        }
    }
    pthread_mutex_unlock(&g.objects);
}

void emu_set_port_state(int dev, int port, enum ibv_port_state state) {
    shm_lock();
    struct emu_shm_port *p = &g.shm->dev[dev].port[port - 1];
    p->state = state;
    p->last_event = state == IBV_PORT_ACTIVE ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR;
    __atomic_add_fetch(&p->gen, 1, __ATOMIC_RELEASE);
    shm_unlock();
    emu_device_events();
}

/* Sets GID `index` (or, with gid NULL, changes nothing) and announces IBV_EVENT_GID_CHANGE. */
int emu_set_gid(int dev, int port, int index, const union ibv_gid *gid) {
    if (gid && (index < 0 || index >= EMU_MAX_GIDS)) return -1;
    shm_lock();
    struct emu_shm_port *p = &g.shm->dev[dev].port[port - 1];
    if (gid) {
        p->gid[index] = *gid;
        if (index >= p->ngids) p->ngids = index + 1;
    }
    p->last_event = IBV_EVENT_GID_CHANGE;
    __atomic_add_fetch(&p->gen, 1, __ATOMIC_RELEASE);
    shm_unlock();
    emu_device_events();
    return 0;
}

/* ----------------------------------------------------------------------------------- fork */

EXPORT int ibv_fork_init(void) {
    g.fork_init = 1;
    return 0;
}

/* Copies of registered memory are never shared with a child here (the data path copies through
 * the owner's pid), like rdma-core on kernels with copy-on-fork for pinned pages. */
EXPORT enum ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }

EXPORT int ibv_dontfork_range(void *base, size_t size) {
    (void)base, (void)size;
    return 0;
}

EXPORT int ibv_dofork_range(void *base, size_t size) {
    (void)base, (void)size;
    return 0;
}
