/* tests/test_share_gpu.c: a caching-allocator block of cuda:0 shared with a
 * second process (mnemo/share.h): a plain segment's block (CUDA IPC), then an
 * expandable segment's (POSIX descriptors of its pages). The second process is this program exec'd again
 * (CUDA does not survive fork), talking over a socketpair on fd 3. Skipped
 * without a GPU. Single-threaded. */
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mn_test.h"

#define BLOCK ((size_t)1 << 20)

/* The first n bytes of storage s equal v (copied to the host). */
static bool storage_is(const mn_storage_t *s, int v) {
  mn_scalar_t items[64];
  size_t count = 0;
  if (mn_storage_tolist(s, MN_DTYPE_UINT8, items, 64, &count) != MN_OK || count != 64) return false;
  for (size_t i = 0; i < count; i++)
    if (items[i].v.i != v) return false;
  return true;
}

static int child_main(void) {
  int sock = 3;
  for (int round = 0; round < 2; round++) {
    mn_share_handle_t h;
    mn_storage_t *s = NULL;
    if (mn_share_handle_recv(sock, &h) != MN_OK) return 2;
    if (mn_storage_from_share_handle(mn_device_cuda(0), &h, &s) != MN_OK) {
      fprintf(stderr, "child: %s\n", mn_last_error());
      return 3;
    }
    mn_share_handle_close(&h);
    if (!storage_is(s, 0xA5)) return 4;
    if (mn_storage_fill(s, 0x5A, NULL) != MN_OK || mn_device_synchronize(mn_device_cuda(0)) != MN_OK) return 5;
    mn_storage_release(s);
    char c = 'd';
    if (write(sock, &c, 1) != 1) return 6;
  }
  return 0;
}

static void one_round(int sock, bool expandable) {
  mn_caching_config_t cfg = mn_caching_config_default();
  cfg.expandable_segments = expandable;
  mn_allocator_t *a = NULL;
  MN_CHECK_OK(mn_caching_allocator_create(mn_device_cuda(0), &cfg, &a));
  void *p = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, BLOCK, NULL, &p));
  mn_storage_t *view = NULL;
  MN_CHECK_OK(mn_storage_from_buffer(mn_device_cuda(0), p, BLOCK, NULL, NULL, &view));
  MN_CHECK_OK(mn_storage_fill(view, 0xA5, NULL));
  MN_CHECK_OK(mn_device_synchronize(mn_device_cuda(0)));
  mn_share_handle_t h;
  MN_CHECK_OK(mn_caching_share_export(a, p, &h));
  MN_CHECK_OK(mn_share_handle_send(sock, &h));
  mn_share_handle_close(&h);
  char c = 0;
  MN_CHECK(read(sock, &c, 1) == 1 && c == 'd');
  MN_CHECK(storage_is(view, 0x5A));
  mn_storage_release(view);
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  mn_alloc_stats_t st;
  memset(&st, 0, sizeof st);
  MN_CHECK_OK(mn_allocator_get_stats(a, &st));
  MN_CHECK(st.active[MN_POOL_ALL].current == 0); /* the child closed it: released */
  mn_allocator_destroy(a);
}

MN_TEST(share_across_processes) {
  int sv[2];
  MN_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) { /* before this process uses CUDA: exec a fresh one */
    dup2(sv[1], 3);
    execl("/proc/self/exe", "test_share_gpu", "child", (char *)NULL);
    _exit(127);
  }
  close(sv[1]);
  one_round(sv[0], false);
  one_round(sv[0], true);
  int status = 0;
  MN_CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  close(sv[0]);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "child") == 0) return child_main();
  mn_test_require_cuda();
  MN_RUN(share_across_processes);
  mn_test_release_cuda_caches();
  return mn_test_finish();
}
