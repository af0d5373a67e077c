/* The control socket of a process under test: one thread serving requests that hold, release
 * and fail completions (hold.c), inject async events, change port state and read counters.
 *
 * The socket speaks lines: a request is `command key=value ...`; a reply is `ok ...` or
 * `error <message>`, then data lines, then `end`. pytest_mooncake/verbs/control.py is the
 * client; its docstrings list the commands.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "hold.h"
#include "points.h"
#include "trace.h"

/* ----------------------------------------------------------------------------- the socket */

#define MAX_CLIENTS 16

struct client {
    int fd;
    char in[4096];
    size_t len;
    int waiting; /* a `wait` whose condition is not met yet */
    char wait_what[16];
    uint64_t wait_min, wait_deadline_ns;
    uint64_t wait_quiet_ns; /* `sched wait`: answered once nothing changed for this long */
};

static struct {
    int started, listen_fd, kick_fd;
    pid_t owner;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    struct client clients[MAX_CLIENTS];
} ctl = {.listen_fd = -1, .kick_fd = -1};
static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;
static int seeded;

void emu_control_kick(void) {
    uint64_t one = 1;
    if (ctl.kick_fd >= 0) (void)!write(ctl.kick_fd, &one, sizeof one);
}

struct out {
    char *buf;
    size_t len, cap;
};

static void say(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct out *o, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->buf ? o->buf + o->len : NULL, o->buf ? o->cap - o->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if (o->buf && o->len + n < o->cap) {
            o->len += n;
            return;
        }
        size_t cap = (o->cap ? o->cap : 1024) * 2 + n;
        char *b = realloc(o->buf, cap);
        if (!b) return;
        o->buf = b;
        o->cap = cap;
    }
}

struct request {
    char *cmd;
    int n;
    char *key[24], *val[24];
};

static const char *arg(const struct request *r, const char *key) {
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->key[i], key) == 0) return r->val[i];
    return NULL;
}

static int arg_u64(const struct request *r, const char *key, uint64_t *v, struct out *o) {
    const char *s = arg(r, key);
    if (!s) return 0;
    char *end;
    errno = 0;
    *v = strtoull(s, &end, 0);
    if (errno || *end || !*s) {
        say(o, "error %s=%s is not a number\n", key, s);
        return -1;
    }
    return 1;
}

static int arg_device(const struct request *r, struct out *o, int required) {
    const char *s = arg(r, "dev");
    if (!s) {
        if (required) say(o, "error dev= is required (one of the emulated device names)\n");
        return required ? -2 : -1;
    }
    int d = emu_device_index(s);
    if (d < 0) say(o, "error no emulated device %s\n", s);
    return d < 0 ? -2 : d;
}

static int arg_port(const struct request *r, struct out *o, int dev) {
    uint64_t p = 1;
    if (arg_u64(r, "port", &p, o) < 0) return -1;
    if (p < 1 || (int)p > g.shm->dev[dev].nports) {
        say(o, "error device %s has no port %llu\n", g.shm->dev[dev].name, (unsigned long long)p);
        return -1;
    }
    return (int)p;
}

static void describe_held(struct out *o, const struct held *h) {
    say(o, "held id=%u stage=%s rule=%u dev=%s qp=%u wr_id=%#llx opcode=%s seq=%llu laddr=%#llx",
        h->id, stage_names[h->stage], h->rule, g.shm->dev[h->dev].name, h->qpn,
        (unsigned long long)h->wr_id, emu_opcode_name(h->opcode), (unsigned long long)h->seq,
        (unsigned long long)h->laddr);
    if (h->stage == STAGE_COMPLETION)
        say(o, " status=%s cq=%s", emu_status_name(h->cqe.wc.status), h->cq ? "alive" : "destroyed");
    say(o, "%s\n", h->auto_due_ns ? " chaos=1" : "");
}

static void cmd_hello(struct out *o) {
    say(o, "ok pid=%d seed=%llu chaos=%s socket=%s devices=", (int)getpid(),
        (unsigned long long)chaos.seed, chaos.on ? "on" : "off", ctl.path);
    for (int i = 0; i < g.ndevs; i++) say(o, "%s%s", i ? "," : "", g.devs[i].dev.name);
    say(o, " version=1\n");
}

/* The filter and count of a rule: dev= qp= peer= opcode= wr_id= addr_lo= addr_hi= nth= count=.
 * Returns 0, or -1 after saying what was wrong. */
static int parse_rule(const struct request *r, struct out *o, struct rule *nr) {
    const char *s;
    uint64_t v;
    if ((nr->dev = arg_device(r, o, 0)) == -2) return -1;
    if ((s = arg(r, "opcode")) && (nr->opcode = emu_opcode_from_name(s)) < 0)
        return say(o, "error opcode=%s: use write or read\n", s), -1;
    int got;
    if ((got = arg_u64(r, "qp", &v, o)) < 0) return -1;
    if (got) nr->qpn = (uint32_t)v;
    if ((got = arg_u64(r, "peer", &v, o)) < 0) return -1;
    if (got) nr->peer = (int32_t)v;
    if ((got = arg_u64(r, "wr_id", &nr->wr_id, o)) < 0) return -1;
    nr->has_wr_id = got;
    if (arg_u64(r, "addr_lo", &nr->addr_lo, o) < 0 || arg_u64(r, "addr_hi", &nr->addr_hi, o) < 0)
        return -1;
    if (nr->addr_hi && nr->addr_hi <= nr->addr_lo)
        return say(o, "error addr_hi= must be above addr_lo= (a range [lo, hi) of local "
                      "addresses)\n"), -1;
    if (arg_u64(r, "nth", &nr->nth, o) < 0 || arg_u64(r, "count", &nr->count, o) < 0) return -1;
    if (nr->nth < 1) return say(o, "error nth= counts from 1\n"), -1;
    return 0;
}

static void add_rule(const struct rule *nr, struct out *o) {
    struct rule *rule = malloc(sizeof *rule);
    if (!rule) return say(o, "error out of memory\n");
    *rule = *nr;
    pthread_mutex_lock(&hold_lock);
    rule->id = ++next_rule_id;
    struct rule **p = &rules;
    while (*p) p = &(*p)->next;
    __atomic_store_n(p, rule, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&hold_lock);
    say(o, "ok rule=%u\n", rule->id);
}

static void cmd_hold(const struct request *r, struct out *o) {
    struct rule nr = {.dev = -1, .opcode = -1, .nth = 1, .count = 1};
    const char *s;
    if ((s = arg(r, "stage"))) {
        if (strcmp(s, "completion") == 0) nr.stage = STAGE_COMPLETION;
        else if (strcmp(s, "execution") == 0) nr.stage = STAGE_EXECUTION;
        else return say(o, "error stage=%s: use completion or execution\n", s);
    }
    if ((s = arg(r, "fail"))) { /* the WR completes at once with this error, unexecuted */
        if ((nr.fail = emu_status_from_name(s)) <= 0)
            return say(o, "error fail=%s is not an error ibv_wc_status name\n", s);
        nr.stage = STAGE_EXECUTION;
    }
    if (parse_rule(r, o, &nr) == 0) add_rule(&nr, o);
}

/* `refuse [filter] [nth=] [count=] [errno=ENOMEM|EINVAL|...number]`: ibv_post_send stops at the
 * matching WR and returns it as bad_wr (the WRs before it in the chain are posted). */
static void cmd_refuse(const struct request *r, struct out *o) {
    struct rule nr = {.dev = -1, .opcode = -1, .nth = 1, .count = 1, .stage = STAGE_POST};
    const char *s = arg(r, "errno");
    nr.error = ENOMEM;
    if (s) {
        if (!strcmp(s, "ENOMEM")) nr.error = ENOMEM;
        else if (!strcmp(s, "EINVAL")) nr.error = EINVAL;
        else if (!strcmp(s, "EAGAIN")) nr.error = EAGAIN;
        else if (!strcmp(s, "EIO")) nr.error = EIO;
        else {
            uint64_t v;
            if (arg_u64(r, "errno", &v, o) < 0) return;
            if (v == 0 || v > 4095) return say(o, "error errno=%s: a positive errno\n", s);
            nr.error = (int)v;
        }
    }
    if (parse_rule(r, o, &nr) == 0) add_rule(&nr, o);
}

static void cmd_unhold(const struct request *r, struct out *o) {
    const char *s = arg(r, "rule");
    uint64_t id = 0;
    int all = !s || strcmp(s, "all") == 0;
    if (!all && arg_u64(r, "rule", &id, o) < 0) return;
    int removed = 0;
    pthread_mutex_lock(&hold_lock);
    for (struct rule **p = &rules; *p;) {
        if (all || (*p)->id == id) {
            struct rule *dead = *p;
            *p = dead->next;
            free(dead);
            removed++;
        } else {
            p = &(*p)->next;
        }
    }
    pthread_mutex_unlock(&hold_lock);
    if (!all && !removed) return say(o, "error no rule %llu\n", (unsigned long long)id);
    say(o, "ok removed=%d\n", removed);
}

static void cmd_rules(struct out *o) {
    say(o, "ok\n");
    pthread_mutex_lock(&hold_lock);
    for (struct rule *r = rules; r; r = r->next) {
        say(o, "rule id=%u stage=%s dev=%s qp=%u peer=%d opcode=%s", r->id,
            stage_names[r->stage], r->dev >= 0 ? g.shm->dev[r->dev].name : "any", r->qpn,
            (int)r->peer, r->opcode >= 0 ? emu_opcode_name(r->opcode) : "any");
        if (r->has_wr_id) say(o, " wr_id=%#llx", (unsigned long long)r->wr_id);
        if (r->addr_hi)
            say(o, " addr_lo=%#llx addr_hi=%#llx", (unsigned long long)r->addr_lo,
                (unsigned long long)r->addr_hi);
        if (r->stage == STAGE_POST) say(o, " errno=%d", r->error);
        if (r->fail > 0) say(o, " fail=%s", emu_status_name(r->fail));
        say(o, " nth=%llu count=%llu matched=%llu taken=%llu\n", (unsigned long long)r->nth,
            (unsigned long long)r->count, (unsigned long long)r->matched,
            (unsigned long long)r->taken);
    }
    pthread_mutex_unlock(&hold_lock);
}

static void cmd_held(struct out *o) {
    say(o, "ok\n");
    pthread_mutex_lock(&hold_lock);
    for (struct held *h = held_list; h; h = h->next) describe_held(o, h);
    pthread_mutex_unlock(&hold_lock);
}

static void cmd_release(const struct request *r, struct out *o) {
    const char *ids = arg(r, "ids"), *st = arg(r, "status");
    int status = -1;
    uint64_t keep = 0;
    if (st && (status = emu_status_from_name(st)) < 0)
        return say(o, "error status=%s is not an ibv_wc_status name (success, rem_access_err, "
                      "retry_exc_err, wr_flush_err, ...)\n", st);
    if (arg_u64(r, "keep_qp", &keep, o) < 0) return;
    uint32_t want[256];
    int nwant = 0, all = !ids || strcmp(ids, "all") == 0;
    if (!all) {
        char copy[2048];
        snprintf(copy, sizeof copy, "%s", ids);
        for (char *save, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            char *end;
            unsigned long v = strtoul(t, &end, 0);
            if (*end || nwant == 256) return say(o, "error ids=%s: give up to 256 held ids, comma-separated\n", ids);
            want[nwant++] = (uint32_t)v;
        }
    }
    struct held *take = NULL, **tail = &take;
    pthread_mutex_lock(&hold_lock);
    for (int i = 0; i < nwant; i++) { /* all or nothing: every id must be held, once */
        struct held *h = held_list;
        while (h && h->id != want[i]) h = h->next;
        for (int j = 0; j < i && h; j++)
            if (want[j] == want[i]) h = NULL;
        if (!h) {
            pthread_mutex_unlock(&hold_lock);
            return say(o, "error no held completion %u (list them with `held`)\n", want[i]);
        }
    }
    for (int i = 0; all ? held_list != NULL : i < nwant; i++) {
        struct held **p = &held_list;
        if (!all)
            while ((*p)->id != want[i]) p = &(*p)->next;
        struct held *h = *p;
        *p = h->next;
        h->next = NULL;
        *tail = h;
        tail = &h->next;
        held_now--;
    }
    pthread_mutex_unlock(&hold_lock);
    int n = 0, failed = 0;
    struct out notes = {0};
    while (take) {
        struct held *next = take->next;
        uint32_t id = take->id;
        const char *problem = release_one(take, status, (int)keep);
        if (problem) failed++, say(&notes, "dropped id=%u reason=\"%s\"\n", id, problem);
        else n++;
        take = next;
    }
    say(o, "ok released=%d dropped=%d\n", n, failed);
    if (notes.buf) say(o, "%s", notes.buf);
    free(notes.buf);
}

static void fail_local_qp(struct emu_qp *qp, int event) { /* g.objects held */
    pthread_mutex_lock(&qp->lock);
    if (qp->state != IBV_QPS_ERR) emu_qp_to_error(qp);
    pthread_mutex_unlock(&qp->lock);
    if (event >= 0) {
        struct emu_context *c = (struct emu_context *)qp->qp.context;
        emu_post_async(c, event, qp, 0);
    }
}

static struct emu_qp *arg_qp(const struct request *r, struct out *o) { /* g.objects held */
    uint64_t qpn;
    int got = arg_u64(r, "qp", &qpn, o);
    if (got <= 0) {
        if (!got) say(o, "error qp= is required\n");
        return NULL;
    }
    struct emu_qp *qp = local_qp((int)qpn - EMU_QPN_BASE, 0);
    if (!qp) say(o, "error qp=%llu is not a QP of process %d\n", (unsigned long long)qpn, (int)getpid());
    return qp;
}

static void cmd_qp_error(const struct request *r, struct out *o) {
    const char *ev = arg(r, "event");
    int event = IBV_EVENT_QP_FATAL;
    if (ev && strcmp(ev, "none") == 0) event = -1;
    else if (ev && ((event = emu_event_from_name(ev)) < 0 || event == IBV_EVENT_DEVICE_FATAL))
        return say(o, "error event=%s: a QP event name (qp_fatal, qp_req_err, qp_access_err) "
                      "or none\n", ev);
    pthread_mutex_lock(&g.objects);
    struct emu_qp *qp = arg_qp(r, o);
    if (qp) fail_local_qp(qp, event);
    pthread_mutex_unlock(&g.objects);
    if (qp) say(o, "ok qp=%u state=err\n", qp->qp.qp_num);
}

static void cmd_event(const struct request *r, struct out *o) {
    const char *name = arg(r, "type");
    int type = name ? emu_event_from_name(name) : -1;
    if (type < 0) return say(o, "error type=%s: an ibv_event_type name (qp_fatal, device_fatal, "
                                "gid_change, port_err, cq_err, ...)\n", name ? name : "");
    switch (type) {
    case IBV_EVENT_QP_FATAL: case IBV_EVENT_QP_REQ_ERR: case IBV_EVENT_QP_ACCESS_ERR: {
        pthread_mutex_lock(&g.objects); /* these events mean the QP is in error */
        struct emu_qp *qp = arg_qp(r, o);
        if (qp) fail_local_qp(qp, type);
        pthread_mutex_unlock(&g.objects);
        if (qp) say(o, "ok\n");
        return;
    }
    case IBV_EVENT_COMM_EST: case IBV_EVENT_SQ_DRAINED: case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR: case IBV_EVENT_QP_LAST_WQE_REACHED: {
        pthread_mutex_lock(&g.objects);
        struct emu_qp *qp = arg_qp(r, o);
        if (qp) emu_post_async((struct emu_context *)qp->qp.context, type, qp, 0);
        pthread_mutex_unlock(&g.objects);
        if (qp) say(o, "ok\n");
        return;
    }
    case IBV_EVENT_CQ_ERR: {
        uint64_t id;
        int got = arg_u64(r, "cq", &id, o);
        if (got <= 0) {
            if (!got) say(o, "error cq= is required (the id `counters` shows)\n");
            return;
        }
        pthread_mutex_lock(&g.objects);
        struct emu_cq *cq = g.cqs;
        while (cq && cq->id != id) cq = cq->next;
        if (cq) emu_post_async((struct emu_context *)cq->cq.context, type, cq, 0);
        pthread_mutex_unlock(&g.objects);
        if (cq) say(o, "ok\n");
        else say(o, "error no CQ %llu in process %d\n", (unsigned long long)id, (int)getpid());
        return;
    }
    case IBV_EVENT_DEVICE_FATAL: {
        int dev = arg_device(r, o, 1);
        if (dev < 0) return;
        int n = 0;
        pthread_mutex_lock(&g.objects); /* the device is gone for this process: QPs fail */
        for (struct emu_context *c = g.contexts; c; c = c->next)
            if (c->dev == dev) atomic_store(&c->fatal, 1);
        for (struct emu_qp *qp = g.qps; qp; qp = qp->next)
            if (qp->dev == dev) fail_local_qp(qp, -1);
        for (struct emu_context *c = g.contexts; c; c = c->next)
            if (c->dev == dev) emu_post_async(c, type, NULL, 0), n++;
        pthread_mutex_unlock(&g.objects);
        say(o, "ok contexts=%d\n", n);
        return;
    }
    case IBV_EVENT_GID_CHANGE: {
        int dev = arg_device(r, o, 1), port;
        if (dev < 0 || (port = arg_port(r, o, dev)) < 0) return;
        const char *gs = arg(r, "gid");
        uint64_t index = 0;
        if (arg_u64(r, "index", &index, o) < 0) return;
        union ibv_gid gid;
        if (gs && inet_pton(AF_INET6, gs, gid.raw) != 1)
            return say(o, "error gid=%s is not an IPv6-form GID\n", gs);
        if (gs && index >= EMU_MAX_GIDS)
            return say(o, "error index=%llu: the GID table has %d entries\n",
                       (unsigned long long)index, EMU_MAX_GIDS);
        emu_set_gid(dev, port, gs ? (int)index : -1, gs ? &gid : NULL);
        say(o, "ok\n");
        return;
    }
    case IBV_EVENT_SRQ_ERR: case IBV_EVENT_SRQ_LIMIT_REACHED: case IBV_EVENT_WQ_FATAL:
        return say(o, "error type=%s: SRQs and WQs are not emulated\n", name);
    default: { /* port events without a state change */
        int dev = arg_device(r, o, 1), port;
        if (dev < 0 || (port = arg_port(r, o, dev)) < 0) return;
        pthread_mutex_lock(&g.objects);
        for (struct emu_context *c = g.contexts; c; c = c->next)
            if (c->dev == dev) emu_post_async(c, type, NULL, port);
        pthread_mutex_unlock(&g.objects);
        say(o, "ok\n");
    }
    }
}

static void cmd_port(const struct request *r, struct out *o) {
    int dev = arg_device(r, o, 1), port;
    if (dev < 0 || (port = arg_port(r, o, dev)) < 0) return;
    const char *s = arg(r, "state");
    if (!s || (strcmp(s, "down") && strcmp(s, "up")))
        return say(o, "error state= is required: down or up\n");
    emu_set_port_state(dev, port, strcmp(s, "up") == 0 ? IBV_PORT_ACTIVE : IBV_PORT_DOWN);
    say(o, "ok dev=%s port=%d state=%s\n", g.shm->dev[dev].name, port, s);
}

static const char *qp_state_name(int s) {
    static const char *const n[] = {"reset", "init", "rtr", "rts", "sqd", "sqe", "err"};
    return s >= 0 && s <= 6 ? n[s] : "unknown";
}

struct totals {
    uint64_t posted, completed, outstanding, held, cqes, polled;
};

static struct totals collect(struct out *o) {
    struct totals t = {0};
    pthread_mutex_lock(&g.objects);
    for (struct emu_qp *qp = g.qps; qp; qp = qp->next) {
        pthread_mutex_lock(&qp->lock);
        uint64_t head = atomic_load(&g.sq_head[qp->slot]);
        pthread_mutex_lock(&hold_lock);
        uint64_t held = held_for(qp->qp.qp_num, 0);
        pthread_mutex_unlock(&hold_lock);
        if (o)
            say(o, "qp qpn=%u dev=%s state=%s dest_qpn=%u peer=%d cq=%u posted=%llu "
                   "executed=%llu completed=%llu outstanding=%llu pending=%llu held=%llu "
                   "cqes=%llu flushed=%llu errors=%llu bytes=%llu posted_in_err=%llu "
                   "posted_after_retire=%llu app_err=%d\n",
                qp->qp.qp_num, g.shm->dev[qp->dev].name, qp_state_name(qp->state), qp->dest_qpn,
                (int)emu_peer_pid(qp), qp->scq->id, (unsigned long long)qp->posted,
                (unsigned long long)qp->executed, (unsigned long long)head,
                (unsigned long long)(qp->tail - head), (unsigned long long)(qp->tail - qp->exec),
                (unsigned long long)held, (unsigned long long)qp->cqes,
                (unsigned long long)qp->flushed, (unsigned long long)qp->errors,
                (unsigned long long)qp->bytes, (unsigned long long)qp->posted_in_err,
                (unsigned long long)qp->posted_after_retire, qp->app_err);
        t.posted += qp->posted;
        t.completed += head;
        t.outstanding += qp->tail - head;
        t.cqes += qp->cqes;
        pthread_mutex_unlock(&qp->lock);
    }
    for (struct emu_cq *cq = g.cqs; cq; cq = cq->next) {
        uint64_t posted = 0, completed = 0, outstanding = 0;
        for (struct emu_qp *qp = g.qps; qp; qp = qp->next)
            if (qp->scq == cq) {
                uint64_t head = atomic_load(&g.sq_head[qp->slot]);
                posted += qp->posted;
                completed += head;
                outstanding += qp->tail - head;
            }
        pthread_mutex_lock(&hold_lock);
        uint64_t held = held_for(0, cq->id);
        pthread_mutex_unlock(&hold_lock);
        pthread_mutex_lock(&cq->lock);
        if (o)
            say(o, "cq id=%u dev=%s capacity=%d queued=%d pushed=%llu polled=%llu overruns=%llu "
                   "held=%llu qps=%d posted=%llu completed=%llu outstanding=%llu\n",
                cq->id, g.shm->dev[cq->dev].name, cq->cap, cq->count,
                (unsigned long long)cq->pushed, (unsigned long long)cq->polled,
                (unsigned long long)cq->overruns, (unsigned long long)held, cq->nqps,
                (unsigned long long)posted, (unsigned long long)completed,
                (unsigned long long)outstanding);
        t.polled += cq->polled;
        pthread_mutex_unlock(&cq->lock);
    }
    pthread_mutex_unlock(&g.objects);
    pthread_mutex_lock(&hold_lock);
    t.held = held_now;
    pthread_mutex_unlock(&hold_lock);
    return t;
}

static void cmd_counters(struct out *o) {
    struct out body = {0};
    struct totals t = collect(&body);
    say(o, "ok\n");
    if (body.buf) say(o, "%s", body.buf);
    free(body.buf);
    say(o, "total posted=%llu completed=%llu outstanding=%llu held=%llu held_ever=%llu "
           "cqes=%llu polled=%llu events=%llu acked=%llu\n",
        (unsigned long long)t.posted, (unsigned long long)t.completed,
        (unsigned long long)t.outstanding, (unsigned long long)t.held,
        (unsigned long long)held_total, (unsigned long long)t.cqes, (unsigned long long)t.polled,
        (unsigned long long)atomic_load(&emu_async_posted),
        (unsigned long long)atomic_load(&emu_async_acked));
}

/* Parses `seed= delay_us= reorder= fail= fail_status=` (from the socket or MC_VERBS_CHAOS). */
static int set_chaos(const struct request *r, struct out *o) {
    uint64_t seed = chaos.seed, delay_us = 0;
    double reorder = 0, fail = 0;
    int fail_status = IBV_WC_RETRY_EXC_ERR;
    const char *s;
    if (arg_u64(r, "seed", &seed, o) < 0 || arg_u64(r, "delay_us", &delay_us, o) < 0) return -1;
    if ((s = arg(r, "reorder"))) reorder = atof(s);
    if ((s = arg(r, "fail"))) fail = atof(s);
    if (reorder < 0 || reorder > 1 || fail < 0 || fail > 1) {
        say(o, "error reorder= and fail= are probabilities between 0 and 1\n");
        return -1;
    }
    if ((s = arg(r, "fail_status")) && (fail_status = emu_status_from_name(s)) <= 0) {
        say(o, "error fail_status=%s is not an error ibv_wc_status name\n", s);
        return -1;
    }
    set_chaos_mode(seed, delay_us * 1000, reorder, fail, fail_status);
    return 0;
}

static void cmd_chaos(const struct request *r, struct out *o) {
    if (r->n == 1 && strcmp(r->key[0], "off") == 0) {
        __atomic_store_n(&chaos.on, 0, __ATOMIC_RELEASE);
        emu_log("chaos off (seed was %llu)", (unsigned long long)chaos.seed);
        return say(o, "ok chaos=off seed=%llu\n", (unsigned long long)chaos.seed);
    }
    if (set_chaos(r, o) == 0)
        say(o, "ok chaos=on seed=%llu\n", (unsigned long long)chaos.seed);
}

static int wait_value(const char *what, uint64_t *v) {
    if (strcmp(what, "held") == 0) {
        pthread_mutex_lock(&hold_lock);
        *v = held_now;
        pthread_mutex_unlock(&hold_lock);
        return 0;
    }
    struct totals t = collect(NULL);
    if (strcmp(what, "posted") == 0) *v = t.posted;
    else if (strcmp(what, "completed") == 0) *v = t.completed;
    else if (strcmp(what, "cqes") == 0) *v = t.cqes;
    else if (strcmp(what, "polled") == 0) *v = t.polled;
    else if (strcmp(what, "events") == 0) *v = atomic_load(&emu_async_posted);
    else if (strcmp(what, "acked") == 0) *v = atomic_load(&emu_async_acked);
    else return -1;
    return 0;
}

/* `wait what=held min=N timeout_ms=T`: answered when the counter reaches N (or at the deadline)
 * by the loop below, so a client does not poll. */
static void cmd_wait(struct client *c, const struct request *r, struct out *o) {
    const char *what = arg(r, "what");
    uint64_t min = 1, timeout_ms = 10000, v;
    if (!what || wait_value(what, &v))
        return say(o, "error what= is one of held, posted, completed, cqes, polled, events, "
                      "acked\n");
    if (arg_u64(r, "min", &min, o) < 0 || arg_u64(r, "timeout_ms", &timeout_ms, o) < 0) return;
    c->waiting = 1;
    snprintf(c->wait_what, sizeof c->wait_what, "%s", what);
    c->wait_min = min;
    c->wait_deadline_ns = emu_now_ns() + timeout_ms * 1000000ull;
}

static void say_post(const struct trace_post *p, void *arg) {
    say(arg, "post n=%llu qp=%u dev=%s peer=%d wr_id=%#llx opcode=%s laddr=%#llx length=%llu "
             "raddr=%#llx rkey=%#x tid=%d qp_state=%s refused=%d\n",
        (unsigned long long)p->n, p->qpn, g.shm->dev[p->dev].name, (int)p->peer,
        (unsigned long long)p->wr_id, emu_opcode_name(p->opcode), (unsigned long long)p->laddr,
        (unsigned long long)p->length, (unsigned long long)p->raddr, p->rkey, (int)p->tid,
        qp_state_name(p->qp_state), p->refused);
}

static void say_polled(const struct trace_polled *p, void *arg) {
    say(arg, "polled n=%llu after_post=%llu qp=%u cq=%u wr_id=%#llx status=%s tid=%d\n",
        (unsigned long long)p->n, (unsigned long long)p->after_post, p->qpn, p->cq,
        (unsigned long long)p->wr_id, emu_status_name(p->status), (int)p->tid);
}

/* `posts|polls [since=N] [limit=M]`: the post or poll log after entry N (the last 8192 of each
 * are kept). */
static void cmd_log(const struct request *r, struct out *o, int polls) {
    uint64_t since = 0, limit = 0;
    if (arg_u64(r, "since", &since, o) < 0 || arg_u64(r, "limit", &limit, o) < 0) return;
    struct out body = {0};
    uint64_t total = polls ? emu_trace_polls(since, limit, say_polled, &body)
                           : emu_trace_posts(since, limit, say_post, &body);
    say(o, "ok total=%llu\n", (unsigned long long)total);
    if (body.buf) say(o, "%s", body.buf);
    free(body.buf);
}

static void say_thread(const struct trace_thread *t, void *arg) {
    char path[64], name[32] = "?";
    snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)t->tid);
    FILE *f = fopen(path, "re");
    if (f) {
        if (fgets(name, sizeof name, f)) name[strcspn(name, "\n ")] = 0;
        fclose(f);
    } else {
        snprintf(name, sizeof name, "(exited)");
    }
    char cqs[TRACE_THREAD_CQS * 11 + 1] = "";
    size_t used = 0;
    for (int i = 0; i < t->ncqs; i++)
        used += (size_t)snprintf(cqs + used, sizeof cqs - used, "%s%u", i ? "," : "", t->cqs[i]);
    say(arg, "thread tid=%d name=%s posted=%llu refused=%llu polls=%llu polled=%llu cqs=\"%s\"\n",
        (int)t->tid, name[0] ? name : "?", (unsigned long long)t->posted,
        (unsigned long long)t->refused, (unsigned long long)t->polls,
        (unsigned long long)t->polled, cqs);
}

/* `threads`: per thread of this process, the WRs it posted, the completions it polled and the
 * CQs it polled (ids, comma-separated). */
static void cmd_threads(struct out *o) {
    say(o, "ok\n");
    emu_trace_threads(say_thread, o);
}

static void say_gone(const struct trace_gone *d, void *arg) {
    uint64_t now = emu_now_ns();
    say(arg, "retired qpn=%u dev=%s peer=%d state=%s posted=%llu completed=%llu "
             "outstanding=%llu held=%llu posted_in_err=%llu posted_after_retire=%llu app_err=%d "
             "err_ms_before=%lld destroyed_ms_ago=%llu tid=%d\n",
        d->qpn, g.shm->dev[d->dev].name, (int)d->peer, qp_state_name(d->state),
        (unsigned long long)d->posted, (unsigned long long)d->completed,
        (unsigned long long)d->outstanding, (unsigned long long)d->held,
        (unsigned long long)d->posted_in_err, (unsigned long long)d->posted_after_retire,
        d->app_err,
        d->err_ns ? (long long)((d->destroy_ns - d->err_ns) / 1000000) : -1LL,
        (unsigned long long)((now - d->destroy_ns) / 1000000), (int)d->tid);
}

/* `retired`: the QPs this process destroyed (the last 1024), with what was outstanding then. */
static void cmd_retired(struct out *o) {
    struct out body = {0};
    uint64_t total = emu_trace_gone(say_gone, &body);
    say(o, "ok total=%llu\n", (unsigned long long)total);
    if (body.buf) say(o, "%s", body.buf);
    free(body.buf);
}

static void say_parked(const struct sched_parked *s, uint64_t now, void *arg) {
    say(arg, "parked id=%u tid=%d point=%s qp=%u cq=%u wr_id=%#llx arg=%d waited_us=%llu\n",
        s->id, (int)s->tid, sched_point_names[s->kind], s->qpn, s->cq,
        (unsigned long long)s->wr_id, s->arg, (unsigned long long)((now - s->since_ns) / 1000));
}

static void say_ack_wait(const struct ack_wait *w, uint32_t unacked, uint64_t now, void *arg) {
    say(arg, "waiting tid=%d call=destroy what=%s qp=%u unacked=%u reader=%d ctx_reader=%d "
        "waited_us=%llu\n", (int)w->tid, w->what[0] == 'Q' ? "qp" : "cq", w->qpn, unacked,
        (int)w->reader, (int)w->ctx_reader, (unsigned long long)((now - w->since_ns) / 1000));
}

/* The scheduler's state: a header line, the parked threads, the threads whose destroy waits
 * for an acknowledgement, then the held completions. */
static void say_sched(struct out *o, int timed_out) {
    int on;
    uint64_t points, timeouts, changed, n;
    sched_counts(&on, &points, &timeouts, &changed, &n);
    uint64_t now = emu_now_ns();
    say(o, "ok sched=%s points=%llu timeouts=%llu parked=%llu quiet_us=%llu timed_out=%d\n",
        on ? "on" : "off", (unsigned long long)points, (unsigned long long)timeouts,
        (unsigned long long)n, (unsigned long long)(now > changed ? (now - changed) / 1000 : 0),
        timed_out);
    sched_list(say_parked, o);
    ack_wait_list(say_ack_wait, o);
    pthread_mutex_lock(&hold_lock);
    for (struct held *h = held_list; h; h = h->next) describe_held(o, h);
    pthread_mutex_unlock(&hold_lock);
}

static int held_by_points(const struct held *h, const void *unused) {
    (void)unused;
    return h->rule == 0 && !h->auto_due_ns && h->stage == STAGE_COMPLETION;
}

/* `sched on [park_ms=]` | `sched off` | `sched state` | `sched grant id=N` |
 * `sched wait quiet_us=Q [timeout_ms=T]`: see points.c. `sched off` lets every parked thread
 * go and delivers every completion the scheduler held. */
static void cmd_sched(struct client *c, const struct request *r, struct out *o) {
    const char *what = r->n > 0 ? r->key[0] : "state";
    uint64_t v = 0;
    if (!strcmp(what, "on")) {
        if (arg_u64(r, "park_ms", &v, o) < 0) return;
        sched_set(1, v * 1000000ull);
        return say(o, "ok sched=on\n");
    }
    if (!strcmp(what, "off")) {
        sched_set(0, 0);
        return say(o, "ok sched=off released=%d\n", release_where(held_by_points, NULL, 0));
    }
    if (!strcmp(what, "state")) return say_sched(o, 0);
    if (!strcmp(what, "grant")) {
        int got = arg_u64(r, "id", &v, o);
        if (got < 0) return;
        if (!got) return say(o, "error sched grant needs id= (a parked thread's id)\n");
        if (sched_grant((uint32_t)v)) return say(o, "error no parked thread %llu\n", (unsigned long long)v);
        return say(o, "ok granted=%llu\n", (unsigned long long)v);
    }
    if (!strcmp(what, "wait")) {
        uint64_t quiet = 2000, timeout_ms = 10000;
        if (arg_u64(r, "quiet_us", &quiet, o) < 0 || arg_u64(r, "timeout_ms", &timeout_ms, o) < 0)
            return;
        c->waiting = 1;
        snprintf(c->wait_what, sizeof c->wait_what, "sched");
        c->wait_quiet_ns = quiet * 1000;
        c->wait_deadline_ns = emu_now_ns() + timeout_ms * 1000000ull;
        return;
    }
    say(o, "error sched %s: use on, off, state, grant id=N or wait quiet_us=Q timeout_ms=T\n", what);
}

static void dispatch(struct client *c, char *line, struct out *o) {
    struct request r = {0};
    char *save;
    r.cmd = strtok_r(line, " \t\r", &save);
    if (!r.cmd) return say(o, "error empty request\n");
    for (char *t; (t = strtok_r(NULL, " \t\r", &save)) && r.n < 24; r.n++) {
        char *eq = strchr(t, '=');
        r.key[r.n] = t;
        r.val[r.n] = eq ? (*eq = 0, eq + 1) : "";
    }
    if (!strcmp(r.cmd, "hello")) cmd_hello(o);
    else if (!strcmp(r.cmd, "hold")) cmd_hold(&r, o);
    else if (!strcmp(r.cmd, "refuse")) cmd_refuse(&r, o);
    else if (!strcmp(r.cmd, "posts")) cmd_log(&r, o, 0);
    else if (!strcmp(r.cmd, "polls")) cmd_log(&r, o, 1);
    else if (!strcmp(r.cmd, "threads")) cmd_threads(o);
    else if (!strcmp(r.cmd, "retired")) cmd_retired(o);
    else if (!strcmp(r.cmd, "unhold")) cmd_unhold(&r, o);
    else if (!strcmp(r.cmd, "rules")) cmd_rules(o);
    else if (!strcmp(r.cmd, "held")) cmd_held(o);
    else if (!strcmp(r.cmd, "release")) cmd_release(&r, o);
    else if (!strcmp(r.cmd, "qp_error")) cmd_qp_error(&r, o);
    else if (!strcmp(r.cmd, "event")) cmd_event(&r, o);
    else if (!strcmp(r.cmd, "port")) cmd_port(&r, o);
    else if (!strcmp(r.cmd, "counters")) cmd_counters(o);
    else if (!strcmp(r.cmd, "chaos")) cmd_chaos(&r, o);
    else if (!strcmp(r.cmd, "wait")) cmd_wait(c, &r, o);
    else if (!strcmp(r.cmd, "sched")) cmd_sched(c, &r, o);
    else say(o, "error unknown command %s (hello, hold, refuse, unhold, rules, held, release, "
                "qp_error, event, port, counters, posts, polls, threads, retired, chaos, wait, sched)\n", r.cmd);
}

static void reply(struct client *c, struct out *o) {
    say(o, "end\n");
    size_t off = 0;
    while (o->buf && off < o->len) {
        ssize_t n = send(c->fd, o->buf + off, o->len - off, MSG_NOSIGNAL);
        if (n <= 0) break;
        off += n;
    }
    free(o->buf);
    o->buf = NULL;
    o->len = o->cap = 0;
}

static void drop_client(struct client *c) {
    close(c->fd);
    c->fd = -1;
    c->len = 0;
    c->waiting = 0;
}

static void serve_client(struct client *c) {
    ssize_t n = recv(c->fd, c->in + c->len, sizeof c->in - 1 - c->len, 0);
    if (n <= 0) return drop_client(c);
    c->len += n;
    char *nl;
    while (!c->waiting && (nl = memchr(c->in, '\n', c->len))) {
        *nl = 0;
        struct out o = {0};
        dispatch(c, c->in, &o);
        size_t used = nl + 1 - c->in;
        memmove(c->in, nl + 1, c->len - used);
        c->len -= used;
        if (c->waiting) free(o.buf); /* answered later, by check_waits */
        else reply(c, &o);
    }
    if (c->len == sizeof c->in - 1) drop_client(c); /* a line longer than any request */
}

static void check_waits(void) {
    uint64_t now = emu_now_ns();
    for (int i = 0; i < MAX_CLIENTS; i++) {
        struct client *c = &ctl.clients[i];
        uint64_t v = 0;
        if (c->fd < 0 || !c->waiting) continue;
        struct out o = {0};
        if (!strcmp(c->wait_what, "sched")) {
            int on;
            uint64_t points, timeouts, changed, n;
            sched_counts(&on, &points, &timeouts, &changed, &n);
            int timed_out = now >= c->wait_deadline_ns;
            if (now < changed + c->wait_quiet_ns && !timed_out) continue;
            say_sched(&o, timed_out);
            c->waiting = 0;
            reply(c, &o);
            continue;
        }
        wait_value(c->wait_what, &v);
        if (v >= c->wait_min) say(&o, "ok value=%llu\n", (unsigned long long)v);
        else if (now >= c->wait_deadline_ns)
            say(&o, "error timeout: %s=%llu, waited for %llu\n", c->wait_what,
                (unsigned long long)v, (unsigned long long)c->wait_min);
        else continue;
        c->waiting = 0;
        reply(c, &o);
    }
}

static void *control_main(void *unused) {
    (void)unused;
    for (;;) {
        struct pollfd p[MAX_CLIENTS + 2];
        int n = 0, waits = 0;
        p[n++] = (struct pollfd){.fd = ctl.listen_fd, .events = POLLIN};
        p[n++] = (struct pollfd){.fd = ctl.kick_fd, .events = POLLIN};
        for (int i = 0; i < MAX_CLIENTS; i++) {
            waits |= ctl.clients[i].fd >= 0 && ctl.clients[i].waiting;
            p[n++] = (struct pollfd){.fd = ctl.clients[i].fd, .events = POLLIN};
        }
        int busy = atomic_load(&g.pending) || chaos_held_waiting() || waits;
        poll(p, n, busy ? 1 : 50);
        if (p[1].revents & POLLIN) {
            uint64_t drained;
            (void)!read(ctl.kick_fd, &drained, sizeof drained);
        }
        if (p[0].revents & POLLIN) {
            int fd = accept4(ctl.listen_fd, NULL, NULL, SOCK_CLOEXEC);
            int placed = 0;
            for (int i = 0; fd >= 0 && i < MAX_CLIENTS && !placed; i++)
                if (ctl.clients[i].fd < 0) ctl.clients[i].fd = fd, placed = 1;
            if (fd >= 0 && !placed) {
                static const char busy_msg[] = "error too many control clients\nend\n";
                (void)!send(fd, busy_msg, sizeof busy_msg - 1, MSG_NOSIGNAL);
                close(fd);
            }
        }
        for (int i = 0; i < MAX_CLIENTS; i++)
            if (ctl.clients[i].fd >= 0 && (p[i + 2].revents & (POLLIN | POLLHUP | POLLERR)))
                serve_client(&ctl.clients[i]);
        emu_device_events();
        if (atomic_load(&g.pending)) emu_progress_all();
        release_due_chaos();
        check_waits();
    }
    return NULL;
}

static void seed_once(void) {
    if (seeded) return;
    seeded = 1;
    const char *s = emu_env("MC_VERBS_SEED");
    uint64_t seed = 0;
    if (s) seed = strtoull(s, NULL, 0);
    else if (getrandom(&seed, sizeof seed, 0) != sizeof seed) seed = emu_now_ns();
    chaos.seed = chaos.state = seed;
    const char *sched = emu_env("MC_VERBS_SCHED"); /* scheduling points from the start */
    if (sched && strcmp(sched, "0") != 0) sched_set(1, 0);
    const char *spec = emu_env("MC_VERBS_CHAOS"); /* e.g. "delay_us=200,reorder=0.1" */
    if (!spec) return;
    char copy[512];
    snprintf(copy, sizeof copy, "%s", spec);
    struct request r = {0};
    for (char *save, *t = strtok_r(copy, ", ", &save); t && r.n < 24;
         t = strtok_r(NULL, ", ", &save), r.n++) {
        char *eq = strchr(t, '=');
        r.key[r.n] = t;
        r.val[r.n] = eq ? (*eq = 0, eq + 1) : "";
    }
    struct out o = {0};
    if (set_chaos(&r, &o)) emu_log("MC_VERBS_CHAOS=%s ignored: %s", spec, o.buf ? o.buf : "");
    free(o.buf);
}

static int control_path(char *out, size_t len) {
    const char *spec = emu_env("MC_VERBS_CONTROL");
    char pid[16];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    if (!spec) {
        char dir[600];
        snprintf(dir, sizeof dir, "%s/ctl", g.run_dir);
        mkdir(dir, 0700);
        return snprintf(out, len, "%s/%s.sock", dir, pid) >= (int)len ? -1 : 0;
    }
    if (strcmp(spec, "off") == 0) return 1;
    size_t o = 0; /* %p is the pid, so every process of a run gets its own socket */
    for (const char *s = spec; *s && o + 1 < len; s++) {
        if (s[0] == '%' && s[1] == 'p') {
            o += snprintf(out + o, len - o, "%s", pid);
            s++;
        } else {
            out[o++] = *s;
        }
    }
    out[o < len ? o : len - 1] = 0;
    return o + 1 >= len ? -1 : 0;
}

static int socket_in_use(const struct sockaddr_un *addr) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int used = fd >= 0 && connect(fd, (const struct sockaddr *)addr, sizeof *addr) == 0;
    if (fd >= 0) close(fd);
    return used;
}

void emu_control_start(void) {
    if (__atomic_load_n(&ctl.started, __ATOMIC_ACQUIRE)) return;
    pthread_mutex_lock(&ctl_lock);
    if (ctl.started) {
        pthread_mutex_unlock(&ctl_lock);
        return;
    }
    seed_once();
    ctl.owner = getpid();
    for (int i = 0; i < MAX_CLIENTS; i++) ctl.clients[i].fd = -1;
    int rc = control_path(ctl.path, sizeof ctl.path);
    if (rc < 0) {
        emu_log("control socket path too long (a unix socket path has at most %zu bytes): no "
                "completion control in this process", sizeof ctl.path - 1);
    } else if (rc == 0) {
        struct sockaddr_un addr = {.sun_family = AF_UNIX};
        snprintf(addr.sun_path, sizeof addr.sun_path, "%s", ctl.path);
        if (socket_in_use(&addr)) {
            emu_log("control socket %s is in use by another live process: give every process "
                    "its own path (MC_VERBS_CONTROL with %%p); no completion control here",
                    ctl.path);
        } else {
            unlink(ctl.path); /* a socket left by a dead process */
            int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) || listen(fd, 16)) {
                emu_log("control socket %s: %s: no completion control in this process",
                        ctl.path, strerror(errno));
                if (fd >= 0) close(fd);
            } else {
                chmod(ctl.path, 0600);
                ctl.listen_fd = fd;
            }
        }
    }
    if (ctl.listen_fd >= 0) {
        ctl.kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old); /* signals stay with the application's threads */
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &a, control_main, NULL)) emu_log("cannot start the control thread");
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&a);
        emu_log("control socket %s, seed %llu, chaos %s", ctl.path, (unsigned long long)chaos.seed,
                chaos.on ? "on" : "off");
    } else {
        emu_log("%sno control socket; seed %llu", rc == 1 ? "MC_VERBS_CONTROL=off: " : "",
                (unsigned long long)chaos.seed);
    }
    log_chaos();
    __atomic_store_n(&ctl.started, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&ctl_lock);
}

__attribute__((destructor)) static void control_stop(void) {
    if (ctl.started && ctl.listen_fd >= 0 && ctl.owner == getpid()) unlink(ctl.path);
}

void emu_control_fork_lock(int which) { pthread_mutex_lock(which ? &hold_lock : &ctl_lock); }

void emu_control_fork_unlock(void) {
    pthread_mutex_unlock(&hold_lock);
    pthread_mutex_unlock(&ctl_lock);
}

void emu_control_after_fork_child(void) {
    /* the control thread did not come along: the child starts its own when it opens a device */
    if (ctl.listen_fd >= 0) close(ctl.listen_fd);
    if (ctl.kick_fd >= 0) close(ctl.kick_fd);
    for (int i = 0; i < MAX_CLIENTS; i++)
        if (ctl.clients[i].fd >= 0) close(ctl.clients[i].fd), ctl.clients[i].fd = -1;
    ctl.listen_fd = ctl.kick_fd = -1;
    ctl.started = 0;
    forget_all_holds();
}
