/*
 * rs_cancel.c - pthread_cancel and the rsockets calls, as an unmodified application meets them.
 * librdmacm's blocking rsockets calls wait in poll(2) or in the completion channel's read:
 * cancellation points, where a blocked thread can be cancelled. Each section connects a pair of
 * rsockets on ADDR in this process (a listener, a client and the accepted socket) unless it
 * says otherwise, then:
 *
 *   rs_cancel recv ADDR      a thread blocked in rrecv on the client is cancelled; data sent
 *                            afterwards arrives on the client, and back on the accepted socket
 *   rs_cancel poll ADDR      threads blocked in rpoll (no timeout) and in rselect (no timeout)
 *                            are cancelled; afterwards rpoll reports data sent to the client
 *   rs_cancel send ADDR      the client sends without blocking until the stream is full; then a
 *                            thread blocked in rsend of 256 KiB is cancelled; the accepted
 *                            socket then reads the stream up to a marker the client sends last
 *   rs_cancel accept ADDR    on a listener alone: a thread blocked in raccept is cancelled; the
 *                            listener then accepts a connection as usual
 *   rs_cancel connect ADDR   on a listener nobody accepts from: a thread blocked in rconnect
 *                            (waiting for the REP) is cancelled, and its socket closed
 *   rs_cancel close ADDR     not a cancellation: a thread blocked in rrecv on the client while
 *                            the main thread closes that socket and connects a new pair (whose
 *                            client likely gets the closed one's number); the blocked rrecv
 *                            returns, 0 (rclose shuts the connection down first, which ends
 *                            the stream for a reader, as shutdown(2) wakes a blocked recv) or
 *                            -1/EBADF (the socket was gone at its next step), and data for the
 *                            new client reaches the main thread's rrecv on it
 *   rs_cancel control ADDR   a thread with a cancellation already pending creates, binds and
 *                            listens on a socket, polls it (timeout 0) and closes it; the calls
 *                            complete, and the thread is cancelled at its own next cancellation
 *                            point
 *
 * Exit 0 and "all checks passed" only if every check passed. Built by tests/abi_cancel.rs with
 * -Wall -Wextra -Werror -fsanitize=address,undefined.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <unistd.h>
#include <rdma/rsocket.h>

#include "../c/cancel_util.h"
#include "../c/check.h"

static struct sockaddr_in sin_addr;
static int lfd = -1, cfd = -1, afd = -1;
static volatile int waiter_returned;
/* Static, not on the cancelled threads' stacks (see tests/c/cancel.c: ASan's redzones). */
static char waiter_buf[256 * 1024];
static struct pollfd waiter_pfd;
static fd_set waiter_set;

static int listener(void)
{
	int fd = rsocket(AF_INET, SOCK_STREAM, 0);
	REQUIRE(fd >= 0);
	REQUIRE(rbind(fd, (struct sockaddr *)&sin_addr, sizeof(sin_addr)) == 0);
	REQUIRE(rlisten(fd, 4) == 0);
	return fd;
}

static void *acceptor(void *arg)
{
	(void)arg;
	afd = raccept(lfd, NULL, NULL);
	return NULL;
}

/* A client connected to the listener lfd; afd is its accepted peer. */
static void connect_pair(void)
{
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, acceptor, NULL) == 0);
	cfd = rsocket(AF_INET, SOCK_STREAM, 0);
	REQUIRE(cfd >= 0);
	REQUIRE(rconnect(cfd, (struct sockaddr *)&sin_addr, sizeof(sin_addr)) == 0);
	REQUIRE(pthread_join(t, NULL) == 0);
	REQUIRE(afd >= 0);
}

static void close_all(void)
{
	if (cfd >= 0)
		CHECK(rclose(cfd) == 0);
	if (afd >= 0)
		CHECK(rclose(afd) == 0);
	if (lfd >= 0)
		CHECK(rclose(lfd) == 0);
	cfd = afd = lfd = -1;
}

/* A thread running fn is cancelled once it has had time to block; it must end cancelled,
 * not return. */
static void cancel_waiter(void *(*fn)(void *))
{
	waiter_returned = 0;
	cancel_blocked(fn, 50000);
	CHECK(!waiter_returned);
}

/* Reads exactly n bytes from fd (blocking, bounded by alarm()). */
static int recv_all(int fd, char *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = rrecv(fd, buf + got, n - got, 0);
		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

static void *recv_waiter(void *arg)
{
	(void)arg;
	rrecv(cfd, waiter_buf, 16, 0);
	waiter_returned = 1; /* nothing was sent */
	return NULL;
}

static void recv_section(void)
{
	lfd = listener();
	connect_pair();
	cancel_waiter(recv_waiter);
	char buf[8] = {0};
	CHECK(rsend(afd, "ping", 4, 0) == 4);
	CHECK(recv_all(cfd, buf, 4) == 0 && !memcmp(buf, "ping", 4));
	CHECK(rsend(cfd, "pong", 4, 0) == 4);
	CHECK(recv_all(afd, buf, 4) == 0 && !memcmp(buf, "pong", 4));
	close_all();
}

static void *poll_waiter(void *arg)
{
	(void)arg;
	waiter_pfd.fd = cfd;
	waiter_pfd.events = POLLIN;
	rpoll(&waiter_pfd, 1, -1);
	waiter_returned = 1;
	return NULL;
}

static void *select_waiter(void *arg)
{
	(void)arg;
	FD_ZERO(&waiter_set);
	FD_SET(cfd, &waiter_set);
	rselect(cfd + 1, &waiter_set, NULL, NULL, NULL);
	waiter_returned = 1;
	return NULL;
}

static void poll_section(void)
{
	lfd = listener();
	connect_pair();
	cancel_waiter(poll_waiter);
	cancel_waiter(select_waiter);
	CHECK(rsend(afd, "x", 1, 0) == 1);
	struct pollfd p = {.fd = cfd, .events = POLLIN};
	CHECK(rpoll(&p, 1, 5000) == 1 && (p.revents & POLLIN));
	char c = 0;
	CHECK(rrecv(cfd, &c, 1, 0) == 1 && c == 'x');
	close_all();
}

static void *send_waiter(void *arg)
{
	(void)arg;
	rsend(cfd, waiter_buf, sizeof(waiter_buf), 0);
	waiter_returned = 1; /* the peer reads nothing until after the cancel */
	return NULL;
}

static void *send_marker(void *arg)
{
	(void)arg;
	CHECK(rsend(cfd, "MARK", 4, 0) == 4);
	return NULL;
}

static void send_section(void)
{
	lfd = listener();
	connect_pair();
	/* Fill the stream: the peer does not read, so its buffer and the credits run out. */
	static char zeros[4096];
	size_t sent = 0;
	for (int i = 0; i < 100000; i++) {
		ssize_t r = rsend(cfd, zeros, sizeof(zeros), MSG_DONTWAIT);
		if (r < 0) {
			CHECK(errno == EWOULDBLOCK);
			break;
		}
		sent += (size_t)r;
	}
	CHECK(sent > 0);
	cancel_waiter(send_waiter);
	/* The stream goes on: zeros (what the cancelled rsend sent of its buffer is zeros too),
	 * then the marker, sent by a thread of its own while this one reads. */
	pthread_t t;
	CHECK(pthread_create(&t, NULL, send_marker, NULL) == 0);
	static char buf[65536];
	size_t total = 0;
	int matched = 0, bad = 0;
	uint64_t end = now_ms() + 20000;
	while (matched < 4 && !bad && now_ms() < end) {
		ssize_t r = rrecv(afd, buf, sizeof(buf), 0);
		if (r <= 0)
			break;
		for (ssize_t k = 0; k < r && matched < 4; k++) {
			if (matched == 0 && buf[k] == 0)
				continue;
			if (buf[k] != "MARK"[matched]) {
				bad = 1;
				break;
			}
			matched++;
		}
		total += (size_t)r;
	}
	CHECK(matched == 4 && !bad);
	CHECK(total >= sent + 4);
	CHECK(pthread_join(t, NULL) == 0);
	close_all();
}

static void *accept_waiter(void *arg)
{
	(void)arg;
	raccept(lfd, NULL, NULL);
	waiter_returned = 1; /* nobody connected yet */
	return NULL;
}

static void accept_section(void)
{
	lfd = listener();
	cancel_waiter(accept_waiter);
	connect_pair();
	char c = 0;
	CHECK(rsend(cfd, "y", 1, 0) == 1);
	CHECK(rrecv(afd, &c, 1, 0) == 1 && c == 'y');
	close_all();
}

static void *connect_waiter(void *arg)
{
	(void)arg;
	rconnect(cfd, (struct sockaddr *)&sin_addr, sizeof(sin_addr));
	waiter_returned = 1; /* nobody accepts: no REP comes */
	return NULL;
}

static void connect_section(void)
{
	lfd = listener();
	cfd = rsocket(AF_INET, SOCK_STREAM, 0);
	REQUIRE(cfd >= 0);
	cancel_waiter(connect_waiter);
	close_all();
}

static volatile ssize_t close_ret;
static volatile int close_errno;

static void *close_waiter(void *arg)
{
	(void)arg;
	close_ret = rrecv(cfd, waiter_buf, 16, 0);
	close_errno = errno;
	waiter_returned = 1;
	return NULL;
}

static void close_section(void)
{
	lfd = listener();
	connect_pair();
	int old_cfd = cfd, old_afd = afd;
	pthread_t t;
	waiter_returned = 0;
	REQUIRE(pthread_create(&t, NULL, close_waiter, NULL) == 0);
	usleep(50000);
	CHECK(rclose(old_cfd) == 0);
	CHECK(rclose(old_afd) == 0);
	cfd = afd = -1;
	connect_pair();
	printf("closed client %d, new client %d\n", old_cfd, cfd);
	char buf[8] = {0};
	CHECK(rsend(afd, "new!", 4, 0) == 4);
	CHECK(recv_all(cfd, buf, 4) == 0 && !memcmp(buf, "new!", 4));
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 3;
	CHECK(pthread_timedjoin_np(t, NULL, &until) == 0);
	printf("blocked rrecv: returned %d, %zd, errno %d\n", waiter_returned, (ssize_t)close_ret, close_errno);
	CHECK(waiter_returned && (close_ret == 0 || (close_ret == -1 && close_errno == EBADF)));
	close_all();
}

/* A socket created, bound, listening, polled (timeout 0) and closed. */
static int control_calls(void)
{
	int fd = rsocket(AF_INET, SOCK_STREAM, 0);
	int ok = fd >= 0 && rbind(fd, (struct sockaddr *)&sin_addr, sizeof(sin_addr)) == 0 &&
		 rlisten(fd, 4) == 0;
	struct pollfd p = {.fd = fd, .events = POLLIN};
	ok = ok && rpoll(&p, 1, 0) == 0;
	ok = ok && fd >= 0 && rclose(fd) == 0;
	return ok;
}

static void control_section(void)
{
	CHECK(cancel_pending(control_calls));
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: rs_cancel recv|poll|send|accept|connect|close|control ADDR\n");
		return 2;
	}
	alarm(120); /* a hang ends the process (SIGALRM) instead of the test run */
	ipv4_arg(&sin_addr, argv[2], 7481);
	if (!strcmp(argv[1], "recv"))
		recv_section();
	else if (!strcmp(argv[1], "poll"))
		poll_section();
	else if (!strcmp(argv[1], "send"))
		send_section();
	else if (!strcmp(argv[1], "accept"))
		accept_section();
	else if (!strcmp(argv[1], "connect"))
		connect_section();
	else if (!strcmp(argv[1], "close"))
		close_section();
	else if (!strcmp(argv[1], "control"))
		control_section();
	else
		return fprintf(stderr, "unknown section %s\n", argv[1]), 2;
	if (failures)
		return 1;
	printf("all checks passed\n");
	return 0;
}
