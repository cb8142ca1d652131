// bench/oneway/shim.c - an LD_PRELOAD timing shim for bench/oneway.sh (a benchmark tool, not
// part of urxe). It wraps the socket calls a ping-pong makes - libc's syscall() (urxe's raw
// system calls), sendmsg, sendto, send, recvmsg, recvmmsg, recvfrom, recv - and records, per
// thread, the TSC at entry and at return with the call's result. At exit it writes one file per thread,
// $ONEWAY_DIR/<pid>.<tid>.bin: a header (magic, TSC ticks per microsecond measured over the
// process's life against CLOCK_MONOTONIC, record count, the CPU of the thread's first call) and
// the records. bench/oneway/analyze.py
// reads them. Only calls on sockets are timed; nothing else is changed.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

enum { KIND_SEND = 1, KIND_RECV = 2 };
#define RING (1u << 21)

struct rec {
  uint64_t t0, t1;
  int32_t kind, ret;
};

struct ring {
  struct rec *r;
  uint32_t n;
  int tid;
  int cpu;
  struct ring *next;
};

static __thread struct ring *mine;
static struct ring *rings;
static pthread_mutex_t rings_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t tsc0, ns0;

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

__attribute__((constructor)) static void start(void) {
  ns0 = mono_ns();
  tsc0 = __rdtsc();
}

static void record(int kind, uint64_t t0, uint64_t t1, long ret) {
  if (!mine) {
    struct ring *g = calloc(1, sizeof *g);
    if (!g) return;
    g->r = malloc(sizeof(struct rec) * RING);
    if (!g->r) { free(g); return; }
    g->tid = gettid();
    g->cpu = sched_getcpu();
    pthread_mutex_lock(&rings_mu);
    g->next = rings;
    rings = g;
    pthread_mutex_unlock(&rings_mu);
    mine = g;
  }
  if (mine->n < RING) mine->r[mine->n++] = (struct rec){t0, t1, kind, (int32_t)ret};
}

static void *real(const char *name) {
  void *f = dlsym(RTLD_NEXT, name);
  if (!f) { fprintf(stderr, "oneway shim: %s not found\n", name); abort(); }
  return f;
}

// Times `call` (assigning its result to `r`) and records it; errno is the call's.
#define TIMED(kind, call)                      \
  do {                                         \
    uint64_t t0 = __rdtsc();                   \
    r = call;                                  \
    uint64_t t1 = __rdtsc();                   \
    int saved = errno;                         \
    record(kind, t0, t1, (long)r);             \
    errno = saved;                             \
  } while (0)

long syscall(long nr, ...) {
  static long (*f)(long, long, long, long, long, long, long);
  if (!f) f = (long (*)(long, long, long, long, long, long, long))real("syscall");
  va_list ap;
  va_start(ap, nr);
  long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
  long d = va_arg(ap, long), e = va_arg(ap, long), g = va_arg(ap, long);
  va_end(ap);
  int kind = (nr == SYS_sendmsg || nr == SYS_sendmmsg || nr == SYS_sendto) ? KIND_SEND
             : (nr == SYS_recvmsg || nr == SYS_recvmmsg || nr == SYS_recvfrom) ? KIND_RECV
                                                                                 : 0;
  long r;
  if (!kind) return f(nr, a, b, c, d, e, g);
  TIMED(kind, f(nr, a, b, c, d, e, g));
  return r;
}

ssize_t sendmsg(int fd, const struct msghdr *m, int fl) {
  static ssize_t (*f)(int, const struct msghdr *, int);
  if (!f) f = (ssize_t (*)(int, const struct msghdr *, int))real("sendmsg");
  ssize_t r;
  TIMED(KIND_SEND, f(fd, m, fl));
  return r;
}

ssize_t sendto(int fd, const void *p, size_t n, int fl, const struct sockaddr *a, socklen_t al) {
  static ssize_t (*f)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
  if (!f) f = (ssize_t (*)(int, const void *, size_t, int, const struct sockaddr *, socklen_t))real("sendto");
  ssize_t r;
  TIMED(KIND_SEND, f(fd, p, n, fl, a, al));
  return r;
}

ssize_t send(int fd, const void *p, size_t n, int fl) {
  static ssize_t (*f)(int, const void *, size_t, int);
  if (!f) f = (ssize_t (*)(int, const void *, size_t, int))real("send");
  ssize_t r;
  TIMED(KIND_SEND, f(fd, p, n, fl));
  return r;
}

ssize_t recvmsg(int fd, struct msghdr *m, int fl) {
  static ssize_t (*f)(int, struct msghdr *, int);
  if (!f) f = (ssize_t (*)(int, struct msghdr *, int))real("recvmsg");
  ssize_t r;
  TIMED(KIND_RECV, f(fd, m, fl));
  return r;
}

int recvmmsg(int fd, struct mmsghdr *v, unsigned int n, int fl, struct timespec *t) {
  static int (*f)(int, struct mmsghdr *, unsigned int, int, struct timespec *);
  if (!f) f = (int (*)(int, struct mmsghdr *, unsigned int, int, struct timespec *))real("recvmmsg");
  int r;
  TIMED(KIND_RECV, f(fd, v, n, fl, t));
  return r;
}

ssize_t recvfrom(int fd, void *p, size_t n, int fl, struct sockaddr *a, socklen_t *al) {
  static ssize_t (*f)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
  if (!f) f = (ssize_t (*)(int, void *, size_t, int, struct sockaddr *, socklen_t *))real("recvfrom");
  ssize_t r;
  TIMED(KIND_RECV, f(fd, p, n, fl, a, al));
  return r;
}

ssize_t recv(int fd, void *p, size_t n, int fl) {
  static ssize_t (*f)(int, void *, size_t, int);
  if (!f) f = (ssize_t (*)(int, void *, size_t, int))real("recv");
  ssize_t r;
  TIMED(KIND_RECV, f(fd, p, n, fl));
  return r;
}

__attribute__((destructor)) static void finish(void) {
  const char *dir = getenv("ONEWAY_DIR");
  if (!dir) return;
  uint64_t dns = mono_ns() - ns0, dtsc = __rdtsc() - tsc0;
  double ticks_per_us = dns ? (double)dtsc * 1000.0 / (double)dns : 0;
  pthread_mutex_lock(&rings_mu);
  for (struct ring *g = rings; g; g = g->next) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%d.%d.bin", dir, (int)getpid(), g->tid);
    FILE *out = fopen(path, "w");
    if (!out) continue;
    uint64_t magic = 0x5941574f454e4f31ull; // "1ONEWAY" tag
    uint64_t count = g->n;
    int64_t cpu = g->cpu;
    fwrite(&magic, sizeof magic, 1, out);
    fwrite(&ticks_per_us, sizeof ticks_per_us, 1, out);
    fwrite(&count, sizeof count, 1, out);
    fwrite(&cpu, sizeof cpu, 1, out);
    fwrite(g->r, sizeof(struct rec), g->n, out);
    fclose(out);
  }
  pthread_mutex_unlock(&rings_mu);
}
