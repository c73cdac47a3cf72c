/* The kernel's floor for one entry fanned out to many consumers over shared connections, on
 * this machine, with no Python on either side: how soon can the last of N deliveries reach
 * the client's socket (its kernel receive time), with both ends' kernel work on the same cores?
 *
 * A "broker" process writes, each round, COUNT frames of SIZE bytes to each of CONNS loopback
 * connections (one write per connection, non-blocking, what does not fit sent as the socket
 * drains: what uvloop does) and reads the acks. CLIENTS "worker" processes each drain their
 * share of the connections (epoll, recvmsg with SO_TIMESTAMPING as the harness does) and answer
 * every frame with a 24-byte ack, one write per read. A frame's latency is the kernel receive
 * time of the read that completes it minus the round's start. Rounds are INTERVAL_MS apart; the
 * first is a warm-up. Prints P50/P99/max and each side's CPU per delivery.
 *
 * Build: cc -O2 -o /tmp/fanout_floor benchmarks/fanout_floor.c
 * Run:   /tmp/fanout_floor CONNS COUNT SIZE ROUNDS [CLIENTS] [INTERVAL_MS]
 *        (broker-100k's shape: /tmp/fanout_floor 1000 100 10240 11 2 1000) */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/net_tstamp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BUCKET_US 100
#define BUCKETS 100000 /* 10 s */
#define ACK 24

static long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return t.tv_sec * 1000000000L + t.tv_nsec;
}

static double cpu_s(struct rusage *r) {
  return r->ru_utime.tv_sec + r->ru_utime.tv_usec * 1e-6 + r->ru_stime.tv_sec +
         r->ru_stime.tv_usec * 1e-6;
}

static void client(struct sockaddr_in *a, int conns, long per_round, int rounds, int size,
                   volatile long *t0, long *hist, int ready_fd) {
  int ep = epoll_create1(0), one = 1;
  int flags = SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE;
  int *fd = malloc(conns * sizeof(int));
  long *have = calloc(conns, sizeof(long)), left = (long)conns * per_round * rounds;
  for (int i = 0; i < conns; i++) {
    fd[i] = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd[i], (void *)a, sizeof *a)) { perror("connect"); exit(1); }
    setsockopt(fd[i], SOL_SOCKET, SO_TIMESTAMPING, &flags, sizeof flags);
    setsockopt(fd[i], IPPROTO_TCP, TCP_NODELAY, &one, 4);
    fcntl(fd[i], F_SETFL, O_NONBLOCK);
    struct epoll_event e = {.events = EPOLLIN, .data.u32 = i};
    epoll_ctl(ep, EPOLL_CTL_ADD, fd[i], &e);
  }
  write(ready_fd, "r", 1);
  char *buf = malloc(1 << 20), ctl[512], *acks = calloc(1 << 16, ACK);
  struct epoll_event ev[256];
  while (left > 0) {
    int k = epoll_wait(ep, ev, 256, 5000);
    if (k == 0) { fprintf(stderr, "client: 5 s without data, %ld bytes short\n", left); exit(1); }
    for (int j = 0; j < k; j++) {
      int i = ev[j].data.u32;
      struct iovec io = {buf, 1 << 20};
      struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = ctl,
                         .msg_controllen = sizeof ctl};
      ssize_t got = recvmsg(fd[i], &m, 0);
      if (got <= 0) continue;
      long kernel = 0;
      for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPING) {
          struct timespec *ts = (struct timespec *)CMSG_DATA(c);
          kernel = ts[0].tv_sec * 1000000000L + ts[0].tv_nsec;
        }
      long before = have[i], after = before + got, done = after / size - before / size;
      have[i] = after;
      left -= got;
      for (long f = before / size; f < after / size; f++) {
        long round = f * size / per_round;
        if (round == 0) continue; /* warm-up */
        long us = (kernel - t0[round]) / 1000;
        hist[us / BUCKET_US < BUCKETS ? (us < 0 ? 0 : us / BUCKET_US) : BUCKETS - 1]++;
      }
      if (done) send(fd[i], acks, done * ACK, 0);
    }
  }
  struct rusage r;
  getrusage(RUSAGE_SELF, &r);
  hist[BUCKETS] = (long)(cpu_s(&r) * 1e9);
}

int main(int argc, char **argv) {
  if (argc < 5) { fprintf(stderr, "usage: %s CONNS COUNT SIZE ROUNDS [CLIENTS] [INTERVAL_MS]\n", argv[0]); return 2; }
  int conns = atoi(argv[1]), count = atoi(argv[2]), size = atoi(argv[3]), rounds = atoi(argv[4]);
  int clients = argc > 5 ? atoi(argv[5]) : 2, interval_ms = argc > 6 ? atoi(argv[6]) : 1000;
  long per_round = (long)count * size, one = 1;
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, 4);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  bind(ls, (void *)&a, sizeof a);
  socklen_t al = sizeof a;
  getsockname(ls, (void *)&a, &al);
  listen(ls, 4096);
  volatile long *t0 = mmap(0, rounds * sizeof(long), PROT_READ | PROT_WRITE,
                           MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  long *hists = mmap(0, clients * (BUCKETS + 1) * sizeof(long), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  int ready[2];
  pipe(ready);
  for (int c = 0; c < clients; c++)
    if (fork() == 0) {
      close(ls);
      int share = conns / clients + (c < conns % clients);
      client(&a, share, per_round, rounds, size, t0, hists + c * (BUCKETS + 1), ready[1]);
      return 0;
    }
  int *fd = malloc(conns * sizeof(int));
  long *sent = calloc(conns, sizeof(long));
  for (int i = 0; i < conns; i++) {
    fd[i] = accept(ls, 0, 0);
    setsockopt(fd[i], IPPROTO_TCP, TCP_NODELAY, &one, 4);
    fcntl(fd[i], F_SETFL, O_NONBLOCK);
  }
  for (int c = 0; c < clients; c++) { char r; read(ready[0], &r, 1); }
  char *frames = malloc(per_round), *sink = malloc(1 << 20);
  memset(frames, 7, per_round);
  int ep = epoll_create1(0);
  struct epoll_event ev[256];
  struct rusage r0, r1;
  getrusage(RUSAGE_SELF, &r0);
  for (int round = 0; round < rounds; round++) {
    long start = now_ns();
    t0[round] = start;
    int pending = 0;
    for (int i = 0; i < conns; i++) {
      ssize_t w = send(fd[i], frames, per_round, 0);
      sent[i] = w < 0 ? 0 : w;
      if (sent[i] < per_round) {
        struct epoll_event e = {.events = EPOLLOUT, .data.u32 = i};
        epoll_ctl(ep, EPOLL_CTL_ADD, fd[i], &e);
        pending++;
      }
    }
    while (pending) {
      int k = epoll_wait(ep, ev, 256, 5000);
      if (k == 0) { fprintf(stderr, "broker: 5 s without progress\n"); return 1; }
      for (int j = 0; j < k; j++) {
        int i = ev[j].data.u32;
        ssize_t w = send(fd[i], frames + sent[i], per_round - sent[i], 0);
        if (w > 0) sent[i] += w;
        if (sent[i] == per_round) { epoll_ctl(ep, EPOLL_CTL_DEL, fd[i], 0); pending--; }
      }
    }
    for (int i = 0; i < conns; i++) /* the acks, after the round (as the bundled broker) */
      while (recv(fd[i], sink, 1 << 20, MSG_DONTWAIT) > 0) {}
    long rest = start + interval_ms * 1000000L - now_ns();
    if (rest > 0 && round + 1 < rounds) {
      struct timespec t = {rest / 1000000000L, rest % 1000000000L};
      nanosleep(&t, 0);
    }
  }
  getrusage(RUSAGE_SELF, &r1);
  while (wait(0) > 0) {}
  long total = 0, seen = 0, client_ns = 0, *h = calloc(BUCKETS, sizeof(long));
  for (int c = 0; c < clients; c++) {
    for (int b = 0; b < BUCKETS; b++) h[b] += hists[c * (BUCKETS + 1) + b];
    client_ns += hists[c * (BUCKETS + 1) + BUCKETS];
  }
  for (int b = 0; b < BUCKETS; b++) total += h[b];
  double p50 = -1, p99 = -1, max = 0;
  for (int b = 0; b < BUCKETS; b++) {
    seen += h[b];
    if (p50 < 0 && seen * 2 >= total) p50 = (b + 1) * BUCKET_US / 1000.0;
    if (p99 < 0 && seen * 100 >= total * 99) p99 = (b + 1) * BUCKET_US / 1000.0;
    if (h[b]) max = (b + 1) * BUCKET_US / 1000.0;
  }
  long deliveries = (long)conns * count * rounds;
  printf("%d connections x %d frames of %d B, %d rounds (first not counted), %d client "
         "processes: kernel receive latency P50 %.1f ms, P99 %.1f ms, max %.1f ms; CPU per "
         "delivery: broker %.2f us, clients %.2f us\n",
         conns, count, size, rounds, clients, p50, p99, max,
         (cpu_s(&r1) - cpu_s(&r0)) * 1e6 / deliveries, client_ns / 1e3 / deliveries);
  return 0;
}
