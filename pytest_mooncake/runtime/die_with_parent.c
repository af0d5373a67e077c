/* die_with_parent PARENT_PID PATH ARGV0 [ARG...]
 *
 * Asks the kernel to SIGKILL this process when the thread that forked it ends
 * (PR_SET_PDEATHSIG), exits 70 if that parent is already gone (the death came before the
 * request), then execs the program at PATH with ARGV0 [ARG...], which keeps the request. The test process starts every child
 * through this wrapper instead of running Python between fork and exec (preexec_fn), which is
 * unsafe when the parent has threads.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s PARENT_PID PATH ARGV0 [ARG...]\n", argv[0]);
        return 64;
    }
    char *end = NULL;
    long parent = strtol(argv[1], &end, 10);
    if (end == argv[1] || *end != '\0' || parent <= 0) {
        fprintf(stderr, "%s: PARENT_PID must be a process id, got '%s'\n", argv[0], argv[1]);
        return 64;
    }
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) {
        fprintf(stderr, "%s: prctl(PR_SET_PDEATHSIG): %s\n", argv[0], strerror(errno));
        return 71;
    }
    if ((long)getppid() != parent) {
        return 70;
    }
    execv(argv[2], &argv[3]);
    fprintf(stderr, "%s: cannot run %s: %s\n", argv[0], argv[2], strerror(errno));
    return 127;
}
