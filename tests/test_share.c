/* tests/test_share.c: caching-allocator blocks shared across processes on SIM
 * (mnemo/share.h): fork-based; the children only import, check, write and
 * _exit. Single-threaded (fork). */
#include <dirent.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mn_test.h"
#include "caching_test_util.h"

#define BLOCK ((size_t)1 << 20)

static int count_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  if (!d) return -1;
  while (readdir(d)) n++;
  closedir(d);
  return n;
}

static mn_allocator_t *make_alloc(bool expandable) {
  mn_caching_config_t cfg = mn_caching_config_default();
  cfg.expandable_segments = expandable;
  mn_allocator_t *a = NULL;
  MN_CHECK_OK(mn_caching_allocator_create(mn_device_sim(0), &cfg, &a));
  return a;
}

static bool all_bytes(const void *p, int v, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++)
    if (c[i] != (unsigned char)v) return false;
  return true;
}

static char wait_byte(int sock) {
  char c = 0;
  return read(sock, &c, 1) == 1 ? c : 0;
}

static void send_byte(int sock, char c) { MN_CHECK(write(sock, &c, 1) == 1); }

/* The child: receives a handle, opens it, checks the parent's bytes (0xA5),
 * writes 0x5A, says 'o'; then on 'c' closes and says 'd' (or stays until killed). */
static void child(int sock) {
  mn_share_handle_t h;
  mn_storage_t *s = NULL;
  if (mn_share_handle_recv(sock, &h) != MN_OK) _exit(2);
  if (mn_storage_from_share_handle(mn_device_sim(0), &h, &s) != MN_OK) _exit(3);
  mn_share_handle_close(&h);
  if (mn_storage_nbytes(s) != BLOCK || !all_bytes(mn_storage_data(s), 0xA5, BLOCK)) _exit(4);
  memset(mn_storage_data(s), 0x5A, BLOCK);
  char c = 'o';
  if (write(sock, &c, 1) != 1) _exit(5);
  if (read(sock, &c, 1) != 1 || c != 'c') _exit(6);
  mn_storage_release(s);
  c = 'd';
  if (write(sock, &c, 1) != 1) _exit(7);
  _exit(0);
}

/* Parent side: allocates, exports, sends; the child holds the block. */
static pid_t start(mn_allocator_t *a, void **ptr, int *sock) {
  int sv[2];
  MN_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  MN_CHECK_OK(mn_allocator_alloc(a, BLOCK, NULL, ptr));
  memset(*ptr, 0xA5, BLOCK);
  mn_share_handle_t h;
  MN_CHECK_OK(mn_caching_share_export(a, *ptr, &h));
  fflush(stdout); /* the child must not print this process's buffered output again */
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    child(sv[1]);
  }
  close(sv[1]);
  MN_CHECK_OK(mn_share_handle_send(sv[0], &h));
  mn_share_handle_close(&h);
  MN_CHECK(wait_byte(sv[0]) == 'o');
  *sock = sv[0];
  return pid;
}

static int child_status(pid_t pid) {
  int status = 0;
  MN_CHECK(waitpid(pid, &status, 0) == pid);
  return status;
}

static void share_roundtrip(bool expandable) {
  int fds0 = count_fds();
  mn_allocator_t *a = make_alloc(expandable);
  void *p = NULL;
  int sock = -1;
  pid_t pid = start(a, &p, &sock);
  MN_CHECK(all_bytes(p, 0x5A, BLOCK)); /* the child's bytes */
  MN_CHECK_OK(mn_allocator_free(a, p));
  /* held by the child: active, pending free, not reused */
  MN_CHECK(stats_of(a).active[MN_POOL_ALL].current == 1 && stats_of(a).allocation[MN_POOL_ALL].current == 0);
  mn_snapshot_t *snap = NULL;
  MN_CHECK_OK(mn_allocator_snapshot(a, &snap));
  bool pending = false;
  for (size_t i = 0; snap && i < snap->nsegments; i++)
    for (size_t k = 0; k < snap->segments[i].nblocks; k++)
      if (snap->segments[i].blocks[k].address == (uintptr_t)p)
        pending = snap->segments[i].blocks[k].state == MN_BLOCK_ACTIVE_PENDING_FREE;
  mn_snapshot_free(snap);
  MN_CHECK(pending);
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  void *q = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, BLOCK, NULL, &q));
  MN_CHECK(q != p);
  MN_CHECK_OK(mn_allocator_free(a, q));
  MN_CHECK_OK(mn_allocator_empty_cache(a)); /* still held: stays */
  MN_CHECK(stats_of(a).active[MN_POOL_ALL].current == 1);
  send_byte(sock, 'c');
  MN_CHECK(wait_byte(sock) == 'd');
  int status = child_status(pid);
  MN_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  /* released at the next check (the allocation's pending-event pass) and reused */
  MN_CHECK_OK(mn_allocator_alloc(a, BLOCK, NULL, &q));
  MN_CHECK(q == p);
  MN_CHECK(stats_of(a).active[MN_POOL_ALL].current == 1);
  MN_CHECK_OK(mn_allocator_free(a, q));
  MN_CHECK(stats_of(a).active[MN_POOL_ALL].current == 0);
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  MN_CHECK(stats_of(a).reserved_bytes[MN_POOL_ALL].current == 0);
  close(sock);
  mn_allocator_destroy(a);
  MN_CHECK_OK(mn_sim_check_invariants(mn_device_sim(0)));
  MN_CHECK(count_fds() == fds0);
}

MN_TEST(test_share_raw) { share_roundtrip(false); }
MN_TEST(test_share_expandable) { share_roundtrip(true); }

MN_TEST(test_share_sigkill) {
  int fds0 = count_fds();
  mn_allocator_t *a = make_alloc(false);
  void *p = NULL;
  int sock = -1;
  pid_t pid = start(a, &p, &sock);
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  MN_CHECK(stats_of(a).active[MN_POOL_ALL].current == 1); /* held */
  kill(pid, SIGKILL);
  int status = child_status(pid);
  MN_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  /* its count stays in the slot, but its lock went with it */
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  MN_CHECK(stats_of(a).active[MN_POOL_ALL].current == 0);
  MN_CHECK(stats_of(a).reserved_bytes[MN_POOL_ALL].current == 0);
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  close(sock);
  mn_allocator_destroy(a);
  MN_CHECK(count_fds() == fds0);
}

/* Destroying the allocator with a parked block frees it (as live blocks). */
MN_TEST(test_share_destroy_parked) {
  int fds0 = count_fds();
  mn_allocator_t *a = make_alloc(true);
  void *p = NULL;
  int sock = -1;
  pid_t pid = start(a, &p, &sock);
  MN_CHECK_OK(mn_allocator_free(a, p));
  mn_allocator_destroy(a);
  send_byte(sock, 'c');
  MN_CHECK(wait_byte(sock) == 'd');
  int status = child_status(pid);
  MN_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  close(sock);
  MN_CHECK_OK(mn_sim_check_invariants(mn_device_sim(0)));
  MN_CHECK(count_fds() == fds0);
}

MN_TEST(test_share_bad_input) {
  int fds0 = count_fds();
  mn_allocator_t *a = make_alloc(false);
  void *p = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, BLOCK, NULL, &p));
  mn_share_handle_t h, g;
  MN_CHECK_ERR(mn_caching_share_export(a, (char *)p + 512, &h), MN_ERR_INVALID_ARGUMENT, "live block");
  mn_allocator_t *naive = NULL;
  MN_CHECK_OK(mn_allocator_get_default(mn_device_cpu(), &naive));
  MN_CHECK_ERR(mn_caching_share_export(naive, p, &h), MN_ERR_INVALID_ARGUMENT, "not a caching allocator");
  MN_CHECK_OK(mn_caching_share_export(a, p, &h));
  MN_CHECK_OK(mn_caching_share_export(a, p, &g)); /* the same export again */
  MN_CHECK(g.token == h.token && g.slot == h.slot);
  mn_share_handle_close(&g);
  mn_storage_t *s = NULL, *t = NULL;
  int pfd[2];
  MN_CHECK(pipe(pfd) == 0);
  g = h;
  g.fds[0] = pfd[1]; /* a memory descriptor that is not SIM's shared memory: nothing kept */
  MN_CHECK_ERR(mn_storage_from_share_handle(mn_device_sim(0), &g, &t), MN_ERR_INVALID_ARGUMENT, "SIM shared memory");
  /* opened in the exporting process itself, then twice */
  MN_CHECK_OK(mn_storage_from_share_handle(mn_device_sim(0), &h, &s));
  MN_CHECK(mn_storage_get_kind(s) == MN_STORAGE_IPC && mn_storage_data(s) != p);
  MN_CHECK_ERR(mn_storage_from_share_handle(mn_device_sim(0), &h, &t), MN_ERR_INVALID_STATE, "already open");
  g = h;
  g.token ^= 1;
  MN_CHECK_ERR(mn_storage_from_share_handle(mn_device_sim(0), &g, &t), MN_ERR_INVALID_ARGUMENT, "token");
  g = h;
  g.device_index = 1;
  MN_CHECK_ERR(mn_storage_from_share_handle(mn_device_sim(0), &g, &t), MN_ERR_INVALID_ARGUMENT, "not sim:0");
  MN_CHECK_ERR(mn_storage_from_share_handle(mn_device_cpu(), &h, &t), MN_ERR_INVALID_ARGUMENT, "not cpu");
  g = h;
  g.nbytes = g.segment_size + 1;
  MN_CHECK_ERR(mn_storage_from_share_handle(mn_device_sim(0), &g, &t), MN_ERR_INVALID_ARGUMENT, "not inside");
  g = h;
  g.ref_fd = pfd[0];
  MN_CHECK_ERR(mn_storage_from_share_handle(mn_device_sim(0), &g, &t), MN_ERR_INVALID_ARGUMENT, "reference");
  close(pfd[0]);
  close(pfd[1]);
  /* a handle whose descriptors did not all come */
  int sv[2];
  MN_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  g = h;
  g.nfds = 0; /* a handle with the reference descriptor only goes through */
  MN_CHECK_OK(mn_share_handle_send(sv[0], &g));
  mn_share_handle_t r;
  MN_CHECK_OK(mn_share_handle_recv(sv[1], &r));
  MN_CHECK(r.nfds == 0 && r.ref_fd >= 0);
  mn_share_handle_close(&r);
  { /* one memory descriptor announced, none sent */
    mn_share_handle_t f = h;
    f.nfds = 1;
    struct iovec v = {&f, sizeof f};
    union {
      char buf[CMSG_SPACE(sizeof(int))];
      struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr msg = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &h.ref_fd, sizeof(int));
    MN_CHECK(sendmsg(sv[0], &msg, 0) == (ssize_t)sizeof f);
    MN_CHECK_ERR(mn_share_handle_recv(sv[1], &r), MN_ERR_INVALID_ARGUMENT, "descriptor count");
  }
  close(sv[0]);
  close(sv[1]);
  /* held by this process's own import: freeing parks it */
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK(stats_of(a).active[MN_POOL_ALL].current == 1);
  mn_storage_release(s);
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  MN_CHECK(stats_of(a).active[MN_POOL_ALL].current == 0);
  /* released: the handle is stale */
  MN_CHECK_ERR(mn_storage_from_share_handle(mn_device_sim(0), &h, &t), MN_ERR_INVALID_ARGUMENT, "stale");
  mn_share_handle_close(&h);
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  mn_allocator_destroy(a);
  MN_CHECK_OK(mn_sim_check_invariants(mn_device_sim(0)));
  MN_CHECK(count_fds() == fds0);
}

int main(void) {
  MN_RUN(test_share_bad_input);
  MN_RUN(test_share_raw);
  MN_RUN(test_share_expandable);
  MN_RUN(test_share_sigkill);
  MN_RUN(test_share_destroy_parked);
  return mn_test_finish();
}
