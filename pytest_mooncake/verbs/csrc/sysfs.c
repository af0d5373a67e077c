/* Serves the sysfs and /dev facts Mooncake reads about RDMA devices, without a kernel driver.
 *
 * Mooncake 0.3.x reads, by path: stat() and access() of /dev/infiniband/<uverbsN> (a character
 * device it can read and write), realpath() of /sys/class/infiniband/<dev>/../.. (the PCI
 * function; its basename is the bus id, its numa_node file the NUMA node), and with std::ifstream
 * (fopen64 inside libstdc++) /sys/class/infiniband/<dev>/device/numa_node and
 * .../ports/<p>/gid_attrs/ndevs/<i>. Those calls, and the open()/opendir() family beside them,
 * are interposed here: a path under /sys/class/infiniband, /sys/class/infiniband_verbs or
 * /dev/infiniband is redirected into $MC_VERBS_RUN_DIR, where the Python side wrote a tree of
 * the same shape (the uverbs nodes are symlinks to /dev/null). Every other path passes through
 * untouched, so the library is inert in processes that never touch RDMA devices.
 *
 * Builds compiled with _FORTIFY_SOURCE (the 0.3.10 and 0.3.11 wheels) call the checked
 * variants instead: __realpath_chk for realpath() into a fixed buffer, __open_2 for an open()
 * without a mode, __readlink_chk. They are interposed too; missing one of them left those
 * releases with no HCA ("realpath ... failed", "Found 0 HCAs") and TCP in place of RDMA.
 *
 * Binaries that link libibverbs see these definitions before libc's. A process that loads
 * libibverbs later with dlopen (Python importing mooncake.engine) needs the library in
 * LD_PRELOAD for them to apply; the environment `python -m pytest_mooncake.verbs env` prints
 * sets both.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emu.h"

static const char *const redirected[] = {"/sys/class/infiniband", "/sys/class/infiniband_verbs",
                                         "/dev/infiniband"};

static const char *run_dir(void) {
    static const char *dir;
    static int looked;
    if (!__atomic_load_n(&looked, __ATOMIC_ACQUIRE)) {
        dir = emu_env("MC_VERBS_RUN_DIR");
        __atomic_store_n(&looked, 1, __ATOMIC_RELEASE);
    }
    return dir;
}

int emu_rewrite_path(const char *path, char *out, size_t outlen) {
    if (!path || path[0] != '/') return 0;
    const char *dir = run_dir();
    if (!dir) return 0;
    for (size_t i = 0; i < sizeof redirected / sizeof redirected[0]; i++) {
        size_t n = strlen(redirected[i]);
        if (strncmp(path, redirected[i], n) == 0 && (path[n] == 0 || path[n] == '/')) {
            int len = snprintf(out, outlen, "%s%s", dir, path);
            return len > 0 && (size_t)len < outlen;
        }
    }
    return 0;
}

#define REAL(name)                                                                         \
    static __typeof__(name) *real_##name;                                                  \
    if (!real_##name) real_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

#define REWRITE(path)                                                                      \
    char rewritten_[PATH_MAX];                                                             \
    if (emu_rewrite_path(path, rewritten_, sizeof rewritten_)) path = rewritten_

/* open() and open64() take a mode only with O_CREAT or O_TMPFILE. */
#define OPEN_LIKE(name)                                                                    \
    EXPORT int name(const char *path, int flags, ...) {                                    \
        REAL(name);                                                                        \
        mode_t mode = 0;                                                                   \
        if (flags & (O_CREAT | O_TMPFILE)) {                                               \
            va_list ap;                                                                    \
            va_start(ap, flags);                                                           \
            mode = va_arg(ap, mode_t);                                                     \
            va_end(ap);                                                                    \
        }                                                                                  \
        REWRITE(path);                                                                     \
        return real_##name(path, flags, mode);                                             \
    }

OPEN_LIKE(open)
OPEN_LIKE(open64)

EXPORT FILE *fopen(const char *path, const char *mode) {
    REAL(fopen);
    REWRITE(path);
    return real_fopen(path, mode);
}

EXPORT FILE *fopen64(const char *path, const char *mode) {
    REAL(fopen64);
    REWRITE(path);
    return real_fopen64(path, mode);
}

EXPORT DIR *opendir(const char *path) {
    REAL(opendir);
    REWRITE(path);
    return real_opendir(path);
}

EXPORT int access(const char *path, int mode) {
    REAL(access);
    REWRITE(path);
    return real_access(path, mode);
}

EXPORT char *realpath(const char *path, char *resolved) {
    REAL(realpath);
    REWRITE(path);
    return real_realpath(path, resolved);
}

/* The checked variants take the caller's buffer size; libc's own check still runs on the
 * rewritten path, since we call through to them. */
char *__realpath_chk(const char *path, char *resolved, size_t resolvedlen);
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
ssize_t __readlink_chk(const char *path, char *buf, size_t len, size_t buflen);

EXPORT char *__realpath_chk(const char *path, char *resolved, size_t resolvedlen) {
    REAL(__realpath_chk);
    REWRITE(path);
    return real___realpath_chk(path, resolved, resolvedlen);
}

EXPORT int __open_2(const char *path, int flags) {
    REAL(__open_2);
    REWRITE(path);
    return real___open_2(path, flags);
}

EXPORT int __open64_2(const char *path, int flags) {
    REAL(__open64_2);
    REWRITE(path);
    return real___open64_2(path, flags);
}

EXPORT ssize_t __readlink_chk(const char *path, char *buf, size_t len, size_t buflen) {
    REAL(__readlink_chk);
    REWRITE(path);
    return real___readlink_chk(path, buf, len, buflen);
}

EXPORT ssize_t readlink(const char *path, char *buf, size_t len) {
    REAL(readlink);
    REWRITE(path);
    return real_readlink(path, buf, len);
}

EXPORT int stat(const char *path, struct stat *st) {
    REAL(stat);
    REWRITE(path);
    return real_stat(path, st);
}

EXPORT int lstat(const char *path, struct stat *st) {
    REAL(lstat);
    REWRITE(path);
    return real_lstat(path, st);
}

EXPORT int stat64(const char *path, struct stat64 *st) {
    REAL(stat64);
    REWRITE(path);
    return real_stat64(path, st);
}

EXPORT int lstat64(const char *path, struct stat64 *st) {
    REAL(lstat64);
    REWRITE(path);
    return real_lstat64(path, st);
}

/* Binaries built against glibc < 2.33 (the manylinux wheels) call these instead of stat(). On
 * x86-64 every _STAT_VER has the kernel's struct stat layout, which is glibc's. */
int __xstat(int ver, const char *path, struct stat *st);
int __lxstat(int ver, const char *path, struct stat *st);
int __xstat64(int ver, const char *path, struct stat64 *st);
int __lxstat64(int ver, const char *path, struct stat64 *st);

EXPORT int __xstat(int ver, const char *path, struct stat *st) {
    (void)ver;
    return stat(path, st);
}

EXPORT int __lxstat(int ver, const char *path, struct stat *st) {
    (void)ver;
    return lstat(path, st);
}

EXPORT int __xstat64(int ver, const char *path, struct stat64 *st) {
    (void)ver;
    return stat64(path, st);
}

EXPORT int __lxstat64(int ver, const char *path, struct stat64 *st) {
    (void)ver;
    return lstat64(path, st);
}
