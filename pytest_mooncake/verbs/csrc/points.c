/* Scheduling points at the verbs boundary (issue #25).
 *
 * With the scheduler on (`sched on` on the control socket, or MC_VERBS_SCHED=1), every call of
 * ibv_post_send, ibv_poll_cq on a CQ holding completions, ibv_modify_qp with a state change,
 * ibv_destroy_qp and ibv_get_async_event (after the event is read) parks the calling thread,
 * and every completion is held (hold.c) instead of reaching its CQ. A controller outside the
 * process (pytest_mooncake/verbs/boundary_scheduler.py) waits until the set of parked threads
 * and held completions stops changing for a quiet window, then picks one: a thread to grant or
 * a completion to release. A thread blocked elsewhere (a mutex of the application, a sleep)
 * simply does not park within the window; a parked thread the controller never grants goes on
 * alone after the park timeout (counted), so a dead or slow controller never wedges the build.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "points.h"
#include "trace.h"

const char *const sched_point_names[] = {"post", "poll", "modify", "destroy", "event"};

static pthread_mutex_t sched_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sched_cv;
static pthread_once_t sched_once = PTHREAD_ONCE_INIT;
static int sched_on;                  /* atomic reads outside sched_lock */
static uint64_t sched_park_ns = 10ull * 1000000000ull;
static struct sched_parked *parked;   /* in parking order */
static uint32_t next_park_id;
static uint64_t points, timeouts, nparked;
static _Atomic uint64_t changed_ns;

static void init_cv(void) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&sched_cv, &a);
    pthread_condattr_destroy(&a);
}

void emu_sched_touch(void) { atomic_store(&changed_ns, emu_now_ns()); }

int emu_sched_holds_completions(void) { return __atomic_load_n(&sched_on, __ATOMIC_ACQUIRE); }

void emu_sched_point(int kind, uint32_t qpn, uint32_t cq, uint64_t wr_id, int arg) {
    if (!__atomic_load_n(&sched_on, __ATOMIC_ACQUIRE)) return;
    pthread_once(&sched_once, init_cv);
    struct sched_parked me = {.tid = emu_tid(), .kind = kind, .qpn = qpn, .cq = cq,
                              .wr_id = wr_id, .arg = arg};
    pthread_mutex_lock(&sched_lock);
    if (!sched_on) {
        pthread_mutex_unlock(&sched_lock);
        return;
    }
    me.id = ++next_park_id;
    me.since_ns = emu_now_ns();
    struct sched_parked **p = &parked;
    while (*p) p = &(*p)->next;
    *p = &me;
    points++;
    nparked++;
    emu_sched_touch();
    emu_control_kick();
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    uint64_t ns = (uint64_t)until.tv_nsec + sched_park_ns;
    until.tv_sec += (time_t)(ns / 1000000000ull);
    until.tv_nsec = (long)(ns % 1000000000ull);
    while (!me.go && sched_on)
        if (pthread_cond_timedwait(&sched_cv, &sched_lock, &until) == ETIMEDOUT) {
            if (!me.go && sched_on) {
                timeouts++;
                emu_log("scheduling point %s of thread %d not granted within %llu ms: it goes "
                        "on alone", sched_point_names[kind], (int)me.tid,
                        (unsigned long long)(sched_park_ns / 1000000));
            }
            break;
        }
    for (p = &parked; *p; p = &(*p)->next)
        if (*p == &me) {
            *p = me.next;
            break;
        }
    nparked--;
    pthread_mutex_unlock(&sched_lock);
}

void sched_set(int on, uint64_t park_ns) {
    pthread_once(&sched_once, init_cv);
    pthread_mutex_lock(&sched_lock);
    if (park_ns) sched_park_ns = park_ns;
    __atomic_store_n(&sched_on, on, __ATOMIC_RELEASE);
    if (!on) pthread_cond_broadcast(&sched_cv); /* every parked thread goes on */
    pthread_mutex_unlock(&sched_lock);
    emu_sched_touch();
}

int sched_grant(uint32_t id) {
    pthread_mutex_lock(&sched_lock);
    struct sched_parked *s = parked;
    while (s && (s->id != id || s->go)) s = s->next;
    if (s) {
        s->go = 1;
        pthread_cond_broadcast(&sched_cv);
    }
    pthread_mutex_unlock(&sched_lock);
    if (s) emu_sched_touch();
    return s ? 0 : -1;
}

void sched_list(sched_parked_fn fn, void *arg) {
    uint64_t now = emu_now_ns();
    pthread_mutex_lock(&sched_lock);
    for (struct sched_parked *s = parked; s; s = s->next)
        if (!s->go) fn(s, now, arg);
    pthread_mutex_unlock(&sched_lock);
}

void sched_counts(int *on, uint64_t *npoints, uint64_t *ntimeouts, uint64_t *changed,
                  uint64_t *n) {
    pthread_mutex_lock(&sched_lock);
    *on = sched_on;
    *npoints = points;
    *ntimeouts = timeouts;
    *n = 0;
    for (struct sched_parked *s = parked; s; s = s->next) *n += !s->go;
    pthread_mutex_unlock(&sched_lock);
    *changed = atomic_load(&changed_ns);
}

static pthread_mutex_t ack_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ack_wait *ack_waits;

void ack_wait_begin(struct ack_wait *w) {
    w->since_ns = emu_now_ns();
    pthread_mutex_lock(&ack_lock);
    w->next = ack_waits;
    ack_waits = w;
    pthread_mutex_unlock(&ack_lock);
    emu_sched_touch();
}

void ack_wait_end(struct ack_wait *w) {
    pthread_mutex_lock(&ack_lock);
    for (struct ack_wait **p = &ack_waits; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    pthread_mutex_unlock(&ack_lock);
    emu_sched_touch();
}

void ack_wait_list(ack_wait_fn fn, void *arg) {
    uint64_t now = emu_now_ns();
    pthread_mutex_lock(&ack_lock);
    for (struct ack_wait *w = ack_waits; w; w = w->next) {
        pthread_mutex_lock(w->mutex);
        uint32_t unacked = *w->reported - *w->done;
        pthread_mutex_unlock(w->mutex);
        fn(w, unacked, now, arg);
    }
    pthread_mutex_unlock(&ack_lock);
}

void sched_after_fork_child(void) { /* only the forking thread came along: nobody is parked */
    pthread_mutex_init(&ack_lock, NULL);
    ack_waits = NULL;
    pthread_mutex_init(&sched_lock, NULL);
    parked = NULL;
    nparked = 0;
    sched_on = 0;
}
