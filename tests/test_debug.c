/* tests/test_debug.c: the debug tiers (runtime/debug.h) of this build's
 * MNEMO_DEBUG. Tier 0: MN__ASSERT evaluates nothing and the invariant checker
 * is not run by dispatch. Tier 1: a broken precondition aborts with its file,
 * line and message (a child process), for a map slot, for the copy engine's
 * staged paths (storage/copy_staged.h) and for one broken precondition of
 * each other internal header that states some (the adaptor's map lock, the
 * caching allocator's lock, the planner's shapes). Tier 2: dispatch runs the allocator's
 * checker after alloc, free, record_stream and empty_cache, and a checker that
 * reports a broken invariant aborts the process. Single-threaded. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "allocators/adaptor.h"
#include "allocators/caching_internal.h"
#include "kernels/plan.h"
#include "mn_test.h"
#include "runtime/debug.h"
#include "runtime/error.h"
#include "runtime/ptrmap.h"
#include "storage/copy_staged.h"

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

static void staged_h2d_from_device(void) {
  /* a staged host -> device copy whose source is not host memory: copy.c
   * never sends one there, so the staged path's precondition fails */
  static char src[64], dst[64];
  mn_stream_t *s = NULL;
  if (mn_stream_default(mn_device_cpu(), &s) != MN_OK) _exit(3);
  mn__copy_t c;
  memset(&c, 0, sizeof c);
  c.func = "staged_h2d_from_device";
  c.dst.dev = (mn_device_t){MN_DEVICE_SIM, 0};
  c.src.dev = (mn_device_t){MN_DEVICE_SIM, 0};
  c.dst.t.data = dst;
  c.src.t.data = src;
  c.item = 1;
  c.numel = 64;
  c.stream = s;
  c.cfg = mn_copy_config_default();
  mn_status st = mn__copy_staged_h2d(&c); /* tier 1 aborts here */
  (void)st;
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

MN_TEST(copy_engine_preconditions) {
  if (MNEMO_DEBUG < 1) return;
  char err[1024];
  int sig = in_child(staged_h2d_from_device, err, sizeof err);
  MN_CHECK(sig == SIGABRT);
  MN_CHECK(strstr(err, "precondition failed") != NULL && strstr(err, "copy_staged.c") != NULL &&
           strstr(err, "staged host -> device") != NULL);
  if (sig != SIGABRT) fprintf(stderr, "  child: signal %d, stderr: %s\n", sig, err);
}

/* The preconditions the internal headers state, each broken once. */
static void adaptor_map_unlocked(void) { /* allocators/adaptor.h: callers of the map hold `lock` */
  mn_allocator_t *up = NULL, *a = NULL;
  if (mn_naive_allocator_create(mn_device_cpu(), &up) != MN_OK ||
      mn_statistics_adaptor_create(up, MN_ADAPTOR_OWNS_UPSTREAM, &a) != MN_OK)
    _exit(3);
  (void)mn__adaptor_map_find((mn__adaptor_t *)a, 0x1000); /* lock not held */
}

static void caching_unlocked(void) { /* allocators/caching_internal.h: mn__live_block, pre: lock held */
  mn_allocator_t *a = NULL;
  if (mn_caching_allocator_create(mn_device_sim(0), NULL, &a) != MN_OK) _exit(3);
  (void)mn__live_block((mn__caching_t *)a, 0x1000);
}

static void plan_sizes_differ(void) { /* kernels/plan.h: mn__plan_make, pre: same ndim and sizes */
  static char buf[64];
  mn__strided_t dst = {.data = buf, .ndim = 1, .sizes = {4}, .strides = {1}};
  mn__strided_t src = {.data = buf + 32, .ndim = 1, .sizes = {3}, .strides = {1}};
  mn__plan_t plan;
  mn__plan_make(&plan, &dst, MN_DTYPE_UINT8, &src, MN_DTYPE_UINT8);
}

MN_TEST(stated_preconditions) {
  if (MNEMO_DEBUG < 1) return;
  static const struct {
    void (*fn)(void);
    const char *file, *message;
  } cases[] = {
      {adaptor_map_unlocked, "adaptor.h", "the adaptor's live map used without its lock"},
      {caching_unlocked, "caching_internal.h", "called without the allocator lock"},
      {plan_sizes_differ, "plan.c", "sizes differ or a stride is negative"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char err[1024];
    int sig = in_child(cases[i].fn, err, sizeof err);
    MN_CHECK(sig == SIGABRT && strstr(err, "precondition failed") != NULL && strstr(err, cases[i].file) != NULL &&
             strstr(err, cases[i].message) != NULL);
    if (sig != SIGABRT) fprintf(stderr, "  %s: child: signal %d, stderr: %s\n", cases[i].message, sig, err);
  }
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
  MN_RUN(copy_engine_preconditions);
  MN_RUN(stated_preconditions);
  MN_RUN(checker_after_every_operation);
  return mn_test_finish();
}
