/* tests/test_gpu_runtime.c: the CUDA runtime on device 0 through the public API:
 * devices, memory, streams, events, copies, kernels, VMM and error paths (label gpu). */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mn_test.h"
#include "mnemo/mnemo.h"
#include "runtime/cuda_device.h"

#define MB ((size_t)1 << 20)
#define GUARD 0x5A

static mn_device_t g_dev;

/* ---- helpers ------------------------------------------------------------------- */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static void fill_random(unsigned char *buf, size_t n) {
  for (size_t i = 0; i < n; i++) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    buf[i] = (unsigned char)(g_rng >> 24);
  }
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void *xmalloc(size_t n) {
  void *p = malloc(n);
  if (p == NULL) {
    fprintf(stderr, "out of host memory (%zu bytes)\n", n);
    exit(2);
  }
  return p;
}

/* Device -> host copy of n bytes on `s`, then a wait: true when both worked. */
static bool d2h(void *host, const void *dptr, size_t n, mn_stream_t *s) {
  mn_status st = mn_memcpy_async(mn_device_cpu(), host, g_dev, dptr, n, s);
  if (st == MN_OK) st = mn_stream_synchronize(s);
  if (st != MN_OK) fprintf(stderr, "d2h of %zu bytes: %s\n", n, mn_last_error());
  return st == MN_OK;
}

static bool h2d(void *dptr, const void *host, size_t n, mn_stream_t *s) {
  mn_status st = mn_memcpy_async(g_dev, dptr, mn_device_cpu(), host, n, s);
  if (st == MN_OK) st = mn_stream_synchronize(s);
  if (st != MN_OK) fprintf(stderr, "h2d of %zu bytes: %s\n", n, mn_last_error());
  return st == MN_OK;
}

/* Index of the first byte of buf[0, n) that differs from `want`, or n. */
static size_t first_not(const unsigned char *buf, size_t n, unsigned char want) {
  for (size_t i = 0; i < n; i++) {
    if (buf[i] != want) return i;
  }
  return n;
}

/* A host function that blocks its stream until the test opens the gate (20 s at most). */
typedef struct gate_s {
  atomic_int open;
  atomic_int ran;
} gate_t;

static void gate_fn(void *arg) {
  gate_t *g = arg;
  for (int i = 0; i < 20000 && !atomic_load(&g->open); i++) sleep_ms(1);
  atomic_store(&g->ran, 1);
}

/* ---- devices ----------------------------------------------------------------- */

MN_TEST(test_device_count_and_properties) {
  MN_CHECK(mn_build_has_cuda());
  int n = 0;
  MN_CHECK_OK(mn_device_count(MN_DEVICE_CUDA, &n));
  MN_CHECK(n >= 1);
  MN_CHECK_OK(mn_device_check(g_dev));
  MN_CHECK(mn_device_equal(mn_device_best(), g_dev));

  mn_device_props_t p;
  memset(&p, 0, sizeof p);
  MN_CHECK_OK(mn_device_get_properties(g_dev, &p));
  MN_CHECK(mn_device_equal(p.device, g_dev));
  MN_CHECK(p.name[0] != '\0');
  MN_CHECK(memchr(p.name, '\0', sizeof p.name) != NULL);
  MN_CHECK(p.total_memory > 0);
  MN_CHECK(p.cc_major >= 8);
  MN_CHECK(p.cc_minor >= 0);
  MN_CHECK(p.multiprocessors > 0);
  MN_CHECK(p.alloc_granularity > 0);
  MN_CHECK((p.alloc_granularity & (p.alloc_granularity - 1)) == 0);
  MN_CHECK(!p.is_host_accessible);
  printf("  cuda:0 = %s, cc %d.%d, %d SMs, %zu MiB, granularity %zu KiB, vmm %s\n", p.name,
         p.cc_major, p.cc_minor, p.multiprocessors, p.total_memory / MB,
         p.alloc_granularity >> 10, p.supports_vmm ? "yes" : "no");

  if (n > 1) { /* a second device answers too */
    mn_device_props_t q;
    MN_CHECK_OK(mn_device_get_properties(mn_device_cuda(1), &q));
    MN_CHECK(q.device.index == 1);
  }
}

MN_TEST(test_mem_info) {
  size_t free_b = 0, total_b = 0;
  MN_CHECK_OK(mn_device_mem_info(g_dev, &free_b, &total_b));
  MN_CHECK(total_b > 0);
  MN_CHECK(free_b > 0);
  MN_CHECK(free_b <= total_b);
  MN_CHECK_OK(mn_device_synchronize(g_dev));
}

MN_TEST(test_raw_alloc_free) {
  static const size_t sizes[] = {1, 255, 4096, 3 * MB + 7, 64 * MB};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    void *p = NULL;
    MN_CHECK_OK(mn_device_raw_alloc(g_dev, sizes[i], &p));
    MN_CHECK(p != NULL);
    MN_CHECK(((uintptr_t)p & 255) == 0); /* cudaMalloc aligns to at least 256 bytes */
    if (p != NULL) MN_CHECK_OK(mn_device_raw_free(g_dev, p));
  }
  /* Two live allocations do not overlap. */
  void *a = NULL, *b = NULL;
  MN_CHECK_OK(mn_device_raw_alloc(g_dev, MB, &a));
  MN_CHECK_OK(mn_device_raw_alloc(g_dev, MB, &b));
  MN_CHECK(a != NULL && b != NULL && a != b);
  MN_CHECK((uintptr_t)a + MB <= (uintptr_t)b || (uintptr_t)b + MB <= (uintptr_t)a);
  if (a) MN_CHECK_OK(mn_device_raw_free(g_dev, a));
  if (b) MN_CHECK_OK(mn_device_raw_free(g_dev, b));
}

/* ---- streams and events ------------------------------------------------------------ */

MN_TEST(test_streams) {
  mn_stream_t *s1 = NULL, *s2 = NULL, *def = NULL;
  MN_CHECK_OK(mn_stream_create(g_dev, &s1));
  MN_CHECK_OK(mn_stream_create(g_dev, &s2));
  MN_CHECK_OK(mn_stream_default(g_dev, &def));
  if (!s1 || !s2 || !def) return;
  MN_CHECK(mn_device_equal(mn_stream_device(s1), g_dev));
  MN_CHECK(mn_stream_native(s1) != NULL);
  MN_CHECK(mn_stream_native(s1) != mn_stream_native(s2));
  MN_CHECK(mn_stream_native(def) == NULL); /* the NULL stream */
  MN_CHECK(mn_stream_id(s1) != mn_stream_id(s2));
  MN_CHECK(mn_stream_id(s1) != mn_stream_id(def));

  bool done = false;
  MN_CHECK_OK(mn_stream_query(s1, &done));
  MN_CHECK(done); /* nothing queued */
  MN_CHECK_OK(mn_stream_synchronize(s1));
  MN_CHECK_OK(mn_stream_synchronize(def));
  done = false;
  MN_CHECK_OK(mn_stream_query(def, &done));
  MN_CHECK(done);

  /* Wrapping a native stream does not take it over. */
  mn_stream_t *w = NULL;
  MN_CHECK_OK(mn_stream_wrap(g_dev, mn_stream_native(s2), &w));
  if (w) {
    MN_CHECK(mn_stream_native(w) == mn_stream_native(s2));
    MN_CHECK_OK(mn_stream_synchronize(w));
    MN_CHECK_OK(mn_stream_destroy(w));
  }
  MN_CHECK_OK(mn_stream_synchronize(s2)); /* still alive after the wrapper went */

  MN_CHECK(mn_stream_destroy(def) != MN_OK); /* the default stream is refused */
  MN_CHECK_OK(mn_stream_destroy(s1));
  MN_CHECK_OK(mn_stream_destroy(s2));
}

MN_TEST(test_events) {
  mn_stream_t *s = NULL;
  mn_event_t *e = NULL;
  MN_CHECK_OK(mn_stream_create(g_dev, &s));
  MN_CHECK_OK(mn_event_create(g_dev, &e));
  if (!s || !e) return;
  MN_CHECK(mn_device_equal(mn_event_device(e), g_dev));
  bool done = false;
  MN_CHECK_OK(mn_event_query(e, &done));
  MN_CHECK(done); /* never recorded: complete */
  MN_CHECK_OK(mn_event_synchronize(e));

  MN_CHECK_OK(mn_event_record(e, s));
  MN_CHECK_OK(mn_event_synchronize(e));
  done = false;
  MN_CHECK_OK(mn_event_query(e, &done));
  MN_CHECK(done);

  /* Recorded on the default stream too. */
  mn_stream_t *def = NULL;
  MN_CHECK_OK(mn_stream_default(g_dev, &def));
  if (def) {
    MN_CHECK_OK(mn_event_record(e, def));
    MN_CHECK_OK(mn_event_synchronize(e));
  }
  MN_CHECK_OK(mn_event_destroy(e));
  MN_CHECK_OK(mn_stream_destroy(s));
}

/* While a host function holds the stream, queries answer "not done" (without
 * failing); once it is released, they answer "done". */
MN_TEST(test_query_not_ready) {
  mn_stream_t *s = NULL;
  mn_event_t *e = NULL;
  MN_CHECK_OK(mn_stream_create(g_dev, &s));
  MN_CHECK_OK(mn_event_create(g_dev, &e));
  if (!s || !e) return;
  gate_t gate;
  atomic_init(&gate.open, 0);
  atomic_init(&gate.ran, 0);
  MN_CHECK_OK(mn_stream_launch_host(s, gate_fn, &gate));
  MN_CHECK_OK(mn_event_record(e, s));
  sleep_ms(20);

  bool done = true;
  MN_CHECK_OK(mn_stream_query(s, &done));
  MN_CHECK(!done);
  done = true;
  MN_CHECK_OK(mn_event_query(e, &done));
  MN_CHECK(!done);
  MN_CHECK(atomic_load(&gate.ran) == 0);

  atomic_store(&gate.open, 1);
  MN_CHECK_OK(mn_event_synchronize(e));
  MN_CHECK(atomic_load(&gate.ran) == 1);
  done = false;
  MN_CHECK_OK(mn_event_query(e, &done));
  MN_CHECK(done);
  MN_CHECK_OK(mn_stream_synchronize(s));
  done = false;
  MN_CHECK_OK(mn_stream_query(s, &done));
  MN_CHECK(done);
  MN_CHECK_OK(mn_event_destroy(e));
  MN_CHECK_OK(mn_stream_destroy(s));
}

typedef struct observe_s {
  gate_t *gate;
  atomic_int seen; /* gate->ran when the observer ran, +1 (0 = not run yet) */
} observe_t;

static void observe_fn(void *arg) {
  observe_t *o = arg;
  atomic_store(&o->seen, atomic_load(&o->gate->ran) + 1);
}

/* Work on s2 behind stream_wait_event(s2, e) runs only after s1 reaches e. */
MN_TEST(test_stream_wait_event) {
  mn_stream_t *s1 = NULL, *s2 = NULL;
  mn_event_t *e = NULL;
  MN_CHECK_OK(mn_stream_create(g_dev, &s1));
  MN_CHECK_OK(mn_stream_create(g_dev, &s2));
  MN_CHECK_OK(mn_event_create(g_dev, &e));
  if (!s1 || !s2 || !e) return;
  gate_t gate;
  atomic_init(&gate.open, 0);
  atomic_init(&gate.ran, 0);
  observe_t obs;
  obs.gate = &gate;
  atomic_init(&obs.seen, 0);

  MN_CHECK_OK(mn_stream_launch_host(s1, gate_fn, &gate));
  MN_CHECK_OK(mn_event_record(e, s1));
  MN_CHECK_OK(mn_stream_wait_event(s2, e));
  MN_CHECK_OK(mn_stream_launch_host(s2, observe_fn, &obs));
  sleep_ms(30);
  MN_CHECK(atomic_load(&obs.seen) == 0); /* s2 is held back by s1 */
  bool done = true;
  MN_CHECK_OK(mn_stream_query(s2, &done));
  MN_CHECK(!done);

  atomic_store(&gate.open, 1);
  MN_CHECK_OK(mn_stream_synchronize(s2));
  MN_CHECK(atomic_load(&obs.seen) == 2); /* ran, and after the gate function */
  MN_CHECK_OK(mn_stream_synchronize(s1));

  /* Data dependency: s1 writes, s2 copies after waiting. */
  void *a = NULL, *b = NULL;
  MN_CHECK_OK(mn_device_raw_alloc(g_dev, MB, &a));
  MN_CHECK_OK(mn_device_raw_alloc(g_dev, MB, &b));
  if (a && b) {
    unsigned char *src = xmalloc(MB), *dst = xmalloc(MB);
    fill_random(src, MB);
    MN_CHECK_OK(mn_memcpy_async(g_dev, a, mn_device_cpu(), src, MB, s1));
    MN_CHECK_OK(mn_event_record(e, s1));
    MN_CHECK_OK(mn_stream_wait_event(s2, e));
    MN_CHECK_OK(mn_kernel_copy(s2, b, a, MB));
    MN_CHECK(d2h(dst, b, MB, s2));
    MN_CHECK(memcmp(src, dst, MB) == 0);
    free(src);
    free(dst);
  }
  if (a) MN_CHECK_OK(mn_device_raw_free(g_dev, a));
  if (b) MN_CHECK_OK(mn_device_raw_free(g_dev, b));
  MN_CHECK_OK(mn_event_destroy(e));
  MN_CHECK_OK(mn_stream_destroy(s1));
  MN_CHECK_OK(mn_stream_destroy(s2));
}

typedef struct order_s {
  int log[8];
  atomic_int n;
} order_t;

typedef struct step_s {
  order_t *order;
  int id;
} step_t;

static void step_fn(void *arg) {
  step_t *st = arg;
  int i = atomic_fetch_add(&st->order->n, 1);
  if (i < 8) st->order->log[i] = st->id;
}

MN_TEST(test_launch_host) {
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_create(g_dev, &s));
  if (!s) return;
  order_t order;
  memset(order.log, 0, sizeof order.log);
  atomic_init(&order.n, 0);
  step_t steps[5];
  for (int i = 0; i < 5; i++) {
    steps[i].order = &order;
    steps[i].id = i + 1;
    MN_CHECK_OK(mn_stream_launch_host(s, step_fn, &steps[i]));
  }
  MN_CHECK_OK(mn_stream_synchronize(s));
  MN_CHECK(atomic_load(&order.n) == 5);
  for (int i = 0; i < 5; i++) MN_CHECK(order.log[i] == i + 1);

  /* And on the default stream. */
  mn_stream_t *def = NULL;
  MN_CHECK_OK(mn_stream_default(g_dev, &def));
  if (def) {
    MN_CHECK_OK(mn_stream_launch_host(def, step_fn, &steps[0]));
    MN_CHECK_OK(mn_stream_synchronize(def));
    MN_CHECK(atomic_load(&order.n) == 6);
  }
  MN_CHECK_OK(mn_stream_destroy(s));
}

/* ---- copies and sets ---------------------------------------------------------------- */

MN_TEST(test_memcpy_roundtrips) {
  mn_stream_t *s = NULL, *def = NULL;
  MN_CHECK_OK(mn_stream_create(g_dev, &s));
  MN_CHECK_OK(mn_stream_default(g_dev, &def));
  void *d1 = NULL, *d2 = NULL;
  const size_t cap = 4 * MB;
  MN_CHECK_OK(mn_device_raw_alloc(g_dev, cap, &d1));
  MN_CHECK_OK(mn_device_raw_alloc(g_dev, cap, &d2));
  if (!s || !def || !d1 || !d2) return;
  static const size_t sizes[] = {1, 7, 4096 + 3, MB + 13, 3 * MB};
  static const size_t offs[][2] = {{0, 0}, {3, 5}, {16, 1}, {255, 128}};
  unsigned char *src = xmalloc(cap), *dst = xmalloc(cap);
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    for (size_t j = 0; j < sizeof offs / sizeof offs[0]; j++) {
      const size_t n = sizes[i];
      unsigned char *a = (unsigned char *)d1 + offs[j][0];
      unsigned char *b = (unsigned char *)d2 + offs[j][1];
      mn_stream_t *st = (j % 2) ? def : s;
      fill_random(src, n);
      memset(dst, 0, n);
      MN_CHECK_OK(mn_memcpy_async(g_dev, a, mn_device_cpu(), src, n, st)); /* H2D */
      MN_CHECK_OK(mn_memcpy_async(g_dev, b, g_dev, a, n, st));             /* D2D */
      MN_CHECK_OK(mn_memcpy_async(mn_device_cpu(), dst, g_dev, b, n, st)); /* D2H */
      MN_CHECK_OK(mn_stream_synchronize(st));
      if (memcmp(src, dst, n) != 0) {
        MN_CHECK(!"round trip differs");
        fprintf(stderr, "  size %zu offsets %zu/%zu\n", n, offs[j][0], offs[j][1]);
      }
    }
  }
  /* Zero bytes: a no-op that succeeds. */
  MN_CHECK_OK(mn_memcpy_async(g_dev, d1, mn_device_cpu(), src, 0, s));
  MN_CHECK_OK(mn_stream_synchronize(s));
  free(src);
  free(dst);
  MN_CHECK_OK(mn_device_raw_free(g_dev, d1));
  MN_CHECK_OK(mn_device_raw_free(g_dev, d2));
  MN_CHECK_OK(mn_stream_destroy(s));
}

MN_TEST(test_memset) {
  mn_stream_t *s = NULL;
  void *d = NULL;
  const size_t n = MB;
  MN_CHECK_OK(mn_stream_create(g_dev, &s));
  MN_CHECK_OK(mn_device_raw_alloc(g_dev, n, &d));
  if (!s || !d) return;
  unsigned char *h = xmalloc(n);
  MN_CHECK_OK(mn_memset_async(g_dev, d, 0x1A5, n, s)); /* low 8 bits: 0xA5 */
  MN_CHECK(d2h(h, d, n, s));
  MN_CHECK(first_not(h, n, 0xA5) == n);

  const size_t off = 13, len = 100003;
  MN_CHECK_OK(mn_memset_async(g_dev, (unsigned char *)d + off, 0x3C, len, s));
  MN_CHECK_OK(mn_memset_async(g_dev, d, 0x77, 0, s)); /* zero bytes: nothing */
  MN_CHECK(d2h(h, d, n, s));
  MN_CHECK(first_not(h, off, 0xA5) == off);
  MN_CHECK(first_not(h + off, len, 0x3C) == len);
  MN_CHECK(first_not(h + off + len, n - off - len, 0xA5) == n - off - len);
  free(h);
  MN_CHECK_OK(mn_device_raw_free(g_dev, d));
  MN_CHECK_OK(mn_stream_destroy(s));
}

/* ---- kernels -------------------------------------------------------------------- */

/* Fills count items at d + off with a pattern and checks every byte of
 * [0, span): the items, and GUARD everywhere else. */
static void check_fill(mn_stream_t *s, unsigned char *d, unsigned char *h, size_t span, size_t off,
                       size_t count, size_t itemsize, bool may_refuse) {
  unsigned char pat[16];
  for (size_t i = 0; i < 16; i++) pat[i] = (unsigned char)(0xC0 + 3 * i + itemsize);
  MN_CHECK_OK(mn_memset_async(g_dev, d, GUARD, span, s));
  mn_status st = mn_kernel_fill(s, d + off, count, itemsize, pat);
  if (st != MN_OK && may_refuse) { /* misaligned items may be refused, never half-done */
    MN_CHECK(st == MN_ERR_INVALID_ARGUMENT);
    MN_CHECK(d2h(h, d, span, s));
    MN_CHECK(first_not(h, span, GUARD) == span);
    return;
  }
  if (st != MN_OK) {
    MN_CHECK_OK(st);
    return;
  }
  if (!d2h(h, d, span, s)) {
    MN_CHECK(!"d2h");
    return;
  }
  const size_t end = off + count * itemsize;
  size_t bad = first_not(h, off, GUARD);
  if (bad == off) bad = first_not(h + end, span - end, GUARD) + end;
  if (bad == span) {
    for (size_t b = off; b < end; b++) {
      if (h[b] != pat[(b - off) % itemsize]) {
        bad = b;
        break;
      }
    }
  }
  mn_test_checks++;
  if (bad != span) {
    mn_test_failures++;
    fprintf(stderr, "  fill itemsize=%zu off=%zu count=%zu: byte %zu is 0x%02x\n", itemsize, off,
            count, bad, h[bad]);
  }
}

MN_TEST(test_kernel_fill) {
  mn_stream_t *s = NULL;
  void *dv = NULL;
  const size_t span = 2 * MB;
  MN_CHECK_OK(mn_stream_create(g_dev, &s));
  MN_CHECK_OK(mn_device_raw_alloc(g_dev, span, &dv));
  if (!s || !dv) return;
  unsigned char *d = dv, *h = xmalloc(span);
  static const size_t itemsizes[] = {1, 2, 4, 8, 16};
  static const size_t counts[] = {1, 3, 17, 1001, 65537};
  static const size_t k_off[] = {0, 1, 3, 5}; /* offsets in items past a 256-byte boundary */
  for (size_t i = 0; i < 5; i++) {
    for (size_t c = 0; c < 5; c++) {
      for (size_t k = 0; k < 4; k++) {
        check_fill(s, d, h, span, 256 + k_off[k] * itemsizes[i], counts[c], itemsizes[i], false);
      }
    }
  }
  /* Items not aligned to their size: filled right, or refused cleanly. */
  check_fill(s, d, h, span, 256 + 1, 1001, 4, true);
  check_fill(s, d, h, span, 256 + 3, 999, 8, true);
  check_fill(s, d, h, span, 256 + 7, 33, 16, true);
  /* A large fill through the grid-stride loop. */
  check_fill(s, d, h, span, 16, (span - 64) / 8, 8, false);
  /* Zero items: nothing is written. */
  MN_CHECK_OK(mn_memset_async(g_dev, d, GUARD, 4096, s));
  const unsigned char pat[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  MN_CHECK_OK(mn_kernel_fill(s, d + 64, 0, 4, pat));
  MN_CHECK(d2h(h, d, 4096, s));
  MN_CHECK(first_not(h, 4096, GUARD) == 4096);
  free(h);
  MN_CHECK_OK(mn_device_raw_free(g_dev, dv));
  MN_CHECK_OK(mn_stream_destroy(s));
}

MN_TEST(test_kernel_copy) {
  mn_stream_t *s = NULL;
  void *av = NULL, *bv = NULL;
  const size_t span = 2 * MB;
  MN_CHECK_OK(mn_stream_create(g_dev, &s));
  MN_CHECK_OK(mn_device_raw_alloc(g_dev, span, &av));
  MN_CHECK_OK(mn_device_raw_alloc(g_dev, span, &bv));
  if (!s || !av || !bv) return;
  unsigned char *a = av, *b = bv;
  unsigned char *src = xmalloc(span), *h = xmalloc(span);
  fill_random(src, span);
  MN_CHECK(h2d(a, src, span, s));
  static const size_t cases[][3] = {/* src off, dst off, nbytes */
                                    {0, 0, 1},        {0, 0, 4096},  {1, 0, 1000},
                                    {0, 3, 4097},     {5, 9, 65535}, {16, 32, MB},
                                    {7, 100, MB + 3}, {64, 64, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const size_t so = cases[i][0], dof = cases[i][1], n = cases[i][2];
    MN_CHECK_OK(mn_memset_async(g_dev, b, GUARD, span, s));
    MN_CHECK_OK(mn_kernel_copy(s, b + dof, a + so, n));
    if (!d2h(h, b, span, s)) {
      MN_CHECK(!"d2h");
      continue;
    }
    MN_CHECK(first_not(h, dof, GUARD) == dof);
    MN_CHECK(memcmp(h + dof, src + so, n) == 0);
    MN_CHECK(first_not(h + dof + n, span - dof - n, GUARD) == span - dof - n);
  }
  free(src);
  free(h);
  MN_CHECK_OK(mn_device_raw_free(g_dev, av));
  MN_CHECK_OK(mn_device_raw_free(g_dev, bv));
  MN_CHECK_OK(mn_stream_destroy(s));
}

/* ---- virtual memory ---------------------------------------------------------------- */

MN_TEST(test_vmm) {
  mn_device_props_t p;
  MN_CHECK_OK(mn_device_get_properties(g_dev, &p));
  if (!p.supports_vmm) {
    void *base = NULL;
    mn_clear_error();
    MN_CHECK(mn_device_va_reserve(g_dev, 4 * MB, &base) != MN_OK);
    MN_CHECK(mn_last_error()[0] != '\0');
    printf("  (no VMM on this device: reserve refused)\n");
    return;
  }
  const size_t g = p.alloc_granularity;
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_create(g_dev, &s));
  void *base = NULL;
  MN_CHECK_OK(mn_device_va_reserve(g_dev, 4 * g, &base));
  if (!s || !base) return;
  MN_CHECK((uintptr_t)base % g == 0);
  unsigned char *b = base;

  /* Map two granules, write random bytes, read them back. */
  MN_CHECK_OK(mn_device_mem_map(g_dev, b, 2 * g));
  unsigned char *src = xmalloc(2 * g), *h = xmalloc(2 * g);
  fill_random(src, 2 * g);
  MN_CHECK(h2d(b, src, 2 * g, s));
  MN_CHECK(d2h(h, b, 2 * g, s));
  MN_CHECK(memcmp(src, h, 2 * g) == 0);

  /* Kernels work on mapped memory; map a third granule right after. */
  MN_CHECK_OK(mn_device_mem_map(g_dev, b + 2 * g, g));
  const uint32_t pat = 0xDEADBEEFu;
  MN_CHECK_OK(mn_kernel_fill(s, b + 4, (3 * g - 8) / 4, 4, &pat));
  MN_CHECK(d2h(h, b + 2 * g, g, s)); /* the third granule */
  uint32_t first = 0, last = 0;
  memcpy(&first, h, 4);
  memcpy(&last, h + g - 8, 4);
  MN_CHECK(first == pat && last == pat);
  MN_CHECK_OK(mn_kernel_copy(s, b + 2 * g, b, g));
  MN_CHECK(d2h(h, b + 2 * g, g, s));
  uint32_t second = 0;
  memcpy(&second, h + 4, 4);
  MN_CHECK(memcmp(h, src, 4) == 0); /* bytes 0..3 were never filled */
  MN_CHECK(second == pat);

  /* Unmap in pieces, remap one piece, then give everything back. */
  MN_CHECK_OK(mn_device_mem_unmap(g_dev, b + 2 * g, g));
  MN_CHECK_OK(mn_device_mem_map(g_dev, b + 3 * g, g));
  MN_CHECK_OK(mn_memset_async(g_dev, b + 3 * g, 0x42, g, s));
  MN_CHECK(d2h(h, b + 3 * g, g, s));
  MN_CHECK(first_not(h, g, 0x42) == g);
  MN_CHECK_OK(mn_device_mem_unmap(g_dev, b + 3 * g, g));
  MN_CHECK_OK(mn_device_mem_unmap(g_dev, b, 2 * g));
  MN_CHECK_OK(mn_device_va_release(g_dev, base, 4 * g));

  /* Misaligned sizes are refused. */
  void *base2 = NULL;
  MN_CHECK_OK(mn_device_va_reserve(g_dev, 2 * g, &base2));
  if (base2) {
    mn_clear_error();
    MN_CHECK(mn_device_mem_map(g_dev, base2, g / 2) != MN_OK);
    MN_CHECK(mn_last_error()[0] != '\0');
    MN_CHECK_OK(mn_device_va_release(g_dev, base2, 2 * g));
  }
  free(src);
  free(h);
  MN_CHECK_OK(mn_stream_destroy(s));
}

/* ---- the caller's current device ----------------------------------------------------
 * Every mnemo call on a CUDA device leaves the calling thread's current device as
 * it found it (runtime/cuda_device.h): a PyTorch process using mnemo as its
 * allocator keeps its device. */

static int current_device(void) {
  int d = -1;
  MN_CHECK_OK(mn__cuda_get_current(&d));
  return d;
}

/* Runs `call` (a status) and checks the thread's current device is still `want`. */
#define KEEPS(want, call)                                                                        \
  do {                                                                                           \
    MN_CHECK_OK(call);                                                                           \
    int now_ = current_device();                                                                 \
    if (now_ != (want)) fprintf(stderr, "  %s left device %d current (was %d)\n", #call, now_, (want)); \
    MN_CHECK(now_ == (want));                                                                    \
  } while (0)

/* Memory, streams, events, copies, VMM and allocators on `dev` while `want` is current. */
static void work_keeps_device(mn_device_t dev, int want) {
  mn_device_props_t p;
  size_t fb = 0, tb = 0;
  KEEPS(want, mn_device_get_properties(dev, &p));
  KEEPS(want, mn_device_mem_info(dev, &fb, &tb));
  void *d = NULL;
  KEEPS(want, mn_device_raw_alloc(dev, 1 << 20, &d));
  mn_stream_t *s = NULL;
  mn_event_t *e = NULL;
  KEEPS(want, mn_stream_create(dev, &s));
  KEEPS(want, mn_event_create(dev, &e));
  if (!d || !s || !e) return;
  unsigned char h[4096];
  memset(h, 0x11, sizeof h);
  KEEPS(want, mn_memset_async(dev, d, 0x22, 1 << 20, s));
  KEEPS(want, mn_memcpy_async(dev, d, mn_device_cpu(), h, sizeof h, s));
  KEEPS(want, mn_memcpy_async(mn_device_cpu(), h, dev, (unsigned char *)d + 4096, sizeof h, s));
  KEEPS(want, mn_event_record(e, s));
  bool done = false;
  KEEPS(want, mn_event_query(e, &done));
  KEEPS(want, mn_event_synchronize(e));
  KEEPS(want, mn_stream_query(s, &done));
  KEEPS(want, mn_stream_synchronize(s));
  MN_CHECK(h[0] == 0x22 && h[sizeof h - 1] == 0x22);
  KEEPS(want, mn_device_synchronize(dev));
  if (p.supports_vmm) {
    void *base = NULL;
    KEEPS(want, mn_device_va_reserve(dev, 2 * p.alloc_granularity, &base));
    if (base) {
      KEEPS(want, mn_device_mem_map(dev, base, p.alloc_granularity));
      KEEPS(want, mn_device_mem_unmap(dev, base, p.alloc_granularity));
      KEEPS(want, mn_device_va_release(dev, base, 2 * p.alloc_granularity));
    }
  }
  mn_allocator_t *a = NULL;
  mn_caching_config_t cfg = mn_caching_config_default();
  cfg.expandable_segments = p.supports_vmm;
  KEEPS(want, mn_caching_allocator_create(dev, &cfg, &a));
  if (a) {
    void *x = NULL;
    KEEPS(want, mn_allocator_alloc(a, 3 << 20, s, &x));
    if (x) KEEPS(want, mn_allocator_free(a, x));
    KEEPS(want, mn_allocator_empty_cache(a));
    mn_allocator_destroy(a);
    MN_CHECK(current_device() == want);
  }
  void *y = NULL;
  mn_status st = mn_device_alloc_async(dev, 1 << 20, s, &y);
  MN_CHECK(current_device() == want);
  if (st == MN_OK) KEEPS(want, mn_device_free_async(dev, y, s));
  else mn_clear_error(); /* a device without stream-ordered pools */
  KEEPS(want, mn_stream_synchronize(s));
  KEEPS(want, mn_event_destroy(e));
  KEEPS(want, mn_stream_destroy(s));
  KEEPS(want, mn_device_raw_free(dev, d));
}

MN_TEST(test_current_device_kept) {
  int n = 0;
  MN_CHECK_OK(mn_device_count(MN_DEVICE_CUDA, &n));
  MN_CHECK_OK(mn__cuda_set_current(0));
  MN_CHECK(current_device() == 0);
  work_keeps_device(mn_device_cuda(0), 0);
  if (n < 2) {
    printf("  (one CUDA device: working on cuda:0 while cuda:1 is current is left out)\n");
    return;
  }
  MN_CHECK_OK(mn__cuda_set_current(1));
  work_keeps_device(mn_device_cuda(0), 1);
  MN_CHECK_OK(mn__cuda_set_current(0));
  work_keeps_device(mn_device_cuda(1), 0);
}

/* ---- errors ---------------------------------------------------------------------- */

MN_TEST(test_errors) {
  /* An absurd size: OUT_OF_MEMORY naming the size; nothing is poisoned after it. */
  const size_t absurd = (size_t)1 << 50; /* 1 PiB */
  void *p = NULL;
  if (!mn_test_under_sanitizer()) { /* a failing cudaMalloc on purpose */
    MN_CHECK_ERR(mn_device_raw_alloc(g_dev, absurd, &p), MN_ERR_OUT_OF_MEMORY, "1125899906842624");
    MN_CHECK(p == NULL);
    printf("  oom message: %s\n", mn_last_error());
  }

  mn_stream_t *s = NULL;
  void *d = NULL;
  MN_CHECK_OK(mn_stream_create(g_dev, &s));
  MN_CHECK_OK(mn_device_raw_alloc(g_dev, 4096, &d));
  if (s && d) { /* a launch right after the failure still reports success */
    const uint16_t pat = 0xBEEF;
    unsigned char h[4096];
    MN_CHECK_OK(mn_kernel_fill(s, d, 2048, 2, &pat));
    MN_CHECK(d2h(h, d, 4096, s));
    uint16_t v = 0;
    memcpy(&v, h + 4094, 2);
    MN_CHECK(v == pat);
  }
  if (d) MN_CHECK_OK(mn_device_raw_free(g_dev, d));
  if (s) MN_CHECK_OK(mn_stream_destroy(s));

  /* Devices that do not exist. */
  const mn_device_t bad = mn_device_cuda(99);
  mn_device_props_t props;
  size_t fb = 0, tb = 0;
  mn_stream_t *bs = NULL;
  mn_event_t *be = NULL;
  MN_CHECK_ERR(mn_device_check(bad), MN_ERR_NO_DEVICE, "99");
  MN_CHECK_ERR(mn_device_get_properties(bad, &props), MN_ERR_NO_DEVICE, "99");
  MN_CHECK_ERR(mn_device_mem_info(bad, &fb, &tb), MN_ERR_NO_DEVICE, "99");
  MN_CHECK_ERR(mn_device_raw_alloc(bad, 4096, &p), MN_ERR_NO_DEVICE, "99");
  MN_CHECK_ERR(mn_stream_create(bad, &bs), MN_ERR_NO_DEVICE, "99");
  MN_CHECK_ERR(mn_event_create(bad, &be), MN_ERR_NO_DEVICE, "99");
  MN_CHECK(bs == NULL && be == NULL);
  int n = 0;
  MN_CHECK_OK(mn_device_count(MN_DEVICE_CUDA, &n));
  MN_CHECK_ERR(mn_device_check(mn_device_cuda(n)), MN_ERR_NO_DEVICE, "");
  MN_CHECK_ERR(mn_device_check(mn_device_cuda(-1)), MN_ERR_NO_DEVICE, "");
}

int main(void) {
  mn_test_require_cuda();
  g_dev = mn_device_cuda(0);
  MN_RUN(test_device_count_and_properties);
  MN_RUN(test_mem_info);
  MN_RUN(test_raw_alloc_free);
  MN_RUN(test_streams);
  MN_RUN(test_events);
  MN_RUN(test_query_not_ready);
  MN_RUN(test_stream_wait_event);
  MN_RUN(test_launch_host);
  MN_RUN(test_memcpy_roundtrips);
  MN_RUN(test_memset);
  MN_RUN(test_errors);
  MN_RUN(test_kernel_fill);
  MN_RUN(test_kernel_copy);
  MN_RUN(test_vmm);
  MN_RUN(test_current_device_kept);
  mn_test_release_cuda_caches();
  return mn_test_finish();
}
