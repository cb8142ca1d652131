// bench/oneway/wake_shim.c - an LD_PRELOAD timing shim for an event-driven ping-pong (a
// benchmark tool, not part of urxe): how long a thread takes from waking to its next send.
//
// A "wake" is a poll(2) (glibc's or a raw syscall(SYS_poll)) with a non-zero timeout, or a
// blocking recv()/recvfrom(), that returned ready after at least SLEPT_NS: the thread slept and
// the peer's message woke it (a poll that returns at once, its fd already ready, is no wake). The next send call of that thread (sendmsg/sendmmsg through
// syscall(), send, sendto) ends the window. Per window it records the time and the system
// calls made inside it (those through syscall(), and read(2)): how many and how long. At exit
// it prints, on stderr, one line per process:
//   WAKE pid P: windows N, wake->send p10/p50/p90 A/B/C us, system calls inside: K per window,
//   T us per window
// Build: gcc -O2 -shared -fPIC -o wake_shim.so wake_shim.c -ldl
// Use:   LD_PRELOAD=./wake_shim.so ib_send_lat -e ...   (both sides; compare with the ceiling
//        tool's pingpong_block, whose blocking recv() is its wake)
#define _GNU_SOURCE
#include <dlfcn.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAXW (1u << 20)
#define SLEPT_NS 5000
static uint64_t *win;                       // wake->send durations, ns
static volatile unsigned nwin;
static uint64_t calls_total, calls_ns_total; // system calls inside windows
static __thread uint64_t woke_at, calls, calls_ns;
static __thread int awake;

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}
static void *real(const char *name) { return dlsym(RTLD_NEXT, name); }
static void counted(uint64_t t0) { if (awake) { calls++; calls_ns += now_ns() - t0; } }
static void woke(uint64_t t0) {
  uint64_t t = now_ns();
  if (t - t0 < SLEPT_NS) {
    counted(t0);
    return;
  }
  woke_at = t;
  awake = 1;
  calls = calls_ns = 0;
}
static void sending(void) {
  if (!awake) return;
  awake = 0;
  unsigned i = __sync_fetch_and_add(&nwin, 1);
  if (i < MAXW) win[i] = now_ns() - woke_at;
  __sync_fetch_and_add(&calls_total, calls);
  __sync_fetch_and_add(&calls_ns_total, calls_ns);
}

__attribute__((constructor)) static void init(void) { win = calloc(MAXW, sizeof *win); }
static int cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}
__attribute__((destructor)) static void fini(void) {
  unsigned n = nwin < MAXW ? nwin : MAXW;
  if (!win || n == 0) return;
  qsort(win, n, sizeof *win, cmp);
  fprintf(stderr, "WAKE pid %d: windows %u, wake->send p10/p50/p90 %.2f/%.2f/%.2f us, system calls inside: %.2f per window, %.2f us per window\n",
          (int)getpid(), n, win[n / 10] / 1e3, win[n / 2] / 1e3, win[n * 9 / 10] / 1e3,
          (double)calls_total / nwin, calls_ns_total / 1e3 / nwin);
}

int poll(struct pollfd *f, nfds_t n, int t) {
  static int (*r)(struct pollfd *, nfds_t, int);
  if (!r) r = real("poll");
  uint64_t t0 = now_ns();
  int x = r(f, n, t);
  if (t != 0 && x > 0) woke(t0);
  return x;
}
ssize_t recv(int fd, void *b, size_t n, int fl) {
  static ssize_t (*r)(int, void *, size_t, int);
  if (!r) r = real("recv");
  uint64_t t0 = now_ns();
  ssize_t x = r(fd, b, n, fl);
  if (!(fl & MSG_DONTWAIT) && x > 0) woke(t0);
  return x;
}
ssize_t recvfrom(int fd, void *b, size_t n, int fl, struct sockaddr *a, socklen_t *al) {
  static ssize_t (*r)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
  if (!r) r = real("recvfrom");
  uint64_t t0 = now_ns();
  ssize_t x = r(fd, b, n, fl, a, al);
  if (!(fl & MSG_DONTWAIT) && x > 0) woke(t0);
  return x;
}
ssize_t send(int fd, const void *b, size_t n, int fl) {
  static ssize_t (*r)(int, const void *, size_t, int);
  if (!r) r = real("send");
  sending();
  return r(fd, b, n, fl);
}
ssize_t sendto(int fd, const void *b, size_t n, int fl, const struct sockaddr *a, socklen_t al) {
  static ssize_t (*r)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
  if (!r) r = real("sendto");
  sending();
  return r(fd, b, n, fl, a, al);
}
ssize_t read(int fd, void *b, size_t n) {
  static ssize_t (*r)(int, void *, size_t);
  if (!r) r = real("read");
  uint64_t t0 = now_ns();
  ssize_t x = r(fd, b, n);
  counted(t0);
  return x;
}
long syscall(long nr, ...) {
  static long (*r)(long, ...);
  if (!r) r = real("syscall");
  va_list ap;
  va_start(ap, nr);
  long a[6];
  for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);
  va_end(ap);
  if (nr == SYS_sendmsg || nr == SYS_sendmmsg) {
    sending();
    return r(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
  }
  uint64_t t0 = now_ns();
  long x = r(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
  if (nr == SYS_poll && a[2] != 0 && x > 0) woke(t0);
  else counted(t0);
  return x;
}
