/* tests/test_debug.c: the debug tiers (runtime/debug.h) of this build's
 * MNEMO_DEBUG. Tier 0: MN__ASSERT evaluates nothing and the invariant checker
 * is not run by dispatch. Tier 1: a broken precondition aborts with its file,
 * line and message (a child process). Tier 2: dispatch runs the allocator's
 * checker after alloc, free, record_stream and empty_cache, and a checker that
 * reports a broken invariant aborts the process. Single-threaded. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mn_test.h"
#include "runtime/debug.h"
#include "runtime/error.h"
#include "runtime/ptrmap.h"

static int g_checks;    /* checker calls */
static bool g_broken;   /* the checker reports a broken invariant */

static mn_status toy_alloc(mn_allocator_t *self, size_t n, mn_stream_t *s, void **out) {
  if (n == 13) return mn__error(MN_ERR_OUT_OF_MEMORY, "toy_alloc", "toy refuses 13 bytes");
  *out = malloc(n);
  return *out ? MN_OK : MN_ERR_OUT_OF_MEMORY;
}
static mn_status toy_free(mn_allocator_t *self, void *p) {
  free(p);
  return MN_OK;
}
static mn_status toy_check(mn_allocator_t *self) {
  g_checks++;
  return g_broken ? MN_ERR_INTERNAL : MN_OK;
}
static mn_status toy_empty(mn_allocator_t *self) { return MN_OK; }
static mn_status toy_record(mn_allocator_t *self, void *p, mn_stream_t *s) { return MN_OK; }

static const mn_allocator_vtable_t toy_vtable = {MN_ALLOCATOR_VTABLE_HEADER, .name = "toy", .alloc = toy_alloc,
                                                 .free = toy_free, .check_invariants = toy_check,
                                                 .empty_cache = toy_empty, .record_stream = toy_record};

/* Runs fn in a child; returns its termination signal (0: exited). stderr of
 * the child goes to `err` (a temp file). */
static int in_child(void (*fn)(void), char *err, size_t errsize) {
  char path[] = "/tmp/mnemo_debug_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return -1;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd, 2);
    fn();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ssize_t n = pread(fd, err, errsize - 1, 0);
  err[n > 0 ? n : 0] = 0;
  close(fd);
  unlink(path);
  return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

static void put_unreserved(void) {
  mn__addrmap_t m;
  mn__addrmap_init(&m);
  mn__addrmap_put(&m, 0x1000, 8, NULL); /* no slot reserved: a broken precondition */
}

static void break_invariant(void) {
  mn_allocator_t a;
  if (mn_allocator_init(&a, &toy_vtable, mn_device_cpu()) != MN_OK) _exit(3);
  g_broken = true;
  void *p = NULL;
  mn_status st = mn_allocator_alloc(&a, 16, NULL, &p); /* tier 2 aborts here */
  (void)st;
}

MN_TEST(assert_tier) {
  int evaluated = 0;
  MN__ASSERT(++evaluated > 0, "never fails");
  MN_CHECK(evaluated == (MNEMO_DEBUG >= 1 ? 1 : 0));
  if (MNEMO_DEBUG < 1) return;
  char err[1024];
  int sig = in_child(put_unreserved, err, sizeof err);
  MN_CHECK(sig == SIGABRT);
  MN_CHECK(strstr(err, "precondition failed") != NULL && strstr(err, "ptrmap.h") != NULL &&
           strstr(err, "without a reserved slot") != NULL);
  if (sig != SIGABRT) fprintf(stderr, "  child: signal %d, stderr: %s\n", sig, err);
}

MN_TEST(checker_after_every_operation) {
  mn_allocator_t a;
  MN_CHECK_OK(mn_allocator_init(&a, &toy_vtable, mn_device_cpu()));
  g_checks = 0;
  void *p = NULL;
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_default(mn_device_cpu(), &s));
  MN_CHECK_OK(mn_allocator_alloc(&a, 64, NULL, &p));
  MN_CHECK_OK(mn_allocator_record_stream(&a, p, s));
  MN_CHECK_OK(mn_allocator_free(&a, p));
  MN_CHECK_OK(mn_allocator_empty_cache(&a));
  MN_CHECK(g_checks == (MNEMO_DEBUG >= 2 ? 4 : 0));
  /* the operation's own error survives the check that follows it */
  MN_CHECK_ERR(mn_allocator_alloc(&a, 13, NULL, &p), MN_ERR_OUT_OF_MEMORY, "mn_allocator_alloc: toy refuses 13 bytes");
  MN_CHECK(g_checks == (MNEMO_DEBUG >= 2 ? 5 : 0));
  if (MNEMO_DEBUG < 2) return;
  char err[1024];
  int sig = in_child(break_invariant, err, sizeof err);
  MN_CHECK(sig == SIGABRT && strstr(err, "after alloc on the toy allocator") != NULL);
  if (sig != SIGABRT) fprintf(stderr, "  child: signal %d, stderr: %s\n", sig, err);
}

int main(void) {
  printf("MNEMO_DEBUG=%d\n", MNEMO_DEBUG);
  MN_RUN(assert_tier);
  MN_RUN(checker_after_every_operation);
  return mn_test_finish();
}
