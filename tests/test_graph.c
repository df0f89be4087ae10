/* tests/test_graph.c: stream capture and graphs on SIM (label sim): capture
 * and replay, fork/join, unjoined ends, the calls a capture forbids and what
 * stays allowed, argument rules, markers and reaches, destroy hooks, host
 * allocation failures, the CPU's refusal; invariants and stats after each.
 * Single-threaded. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "graph_scenario.h"
#include "mn_test.h"
#include "runtime/hostmem.h"

#define N ((size_t)1 << 16)

static mn_device_t DEV;

static mn_sim_stats_t stats(void) {
  mn_sim_stats_t st;
  memset(&st, 0, sizeof st);
  MN_CHECK_OK(mn_sim_get_stats(DEV, &st));
  return st;
}

static mn_stream_t *mkstream(void) {
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_create(DEV, &s));
  return s;
}

static mn_event_t *mkevent(void) {
  mn_event_t *e = NULL;
  MN_CHECK_OK(mn_event_create(DEV, &e));
  return e;
}

static void *mkbuf(void) {
  void *p = NULL;
  MN_CHECK_OK(mn_device_raw_alloc(DEV, N, &p));
  return p;
}

static mn_capture_status status_of(mn_stream_t *s) {
  mn_capture_status cs = MN_CAPTURE_NONE;
  MN_CHECK_OK(mn_stream_capture_status(s, &cs, NULL));
  return cs;
}

/* The device is back where it was: no graphs, invariants hold. */
static void clean(void) {
  MN_CHECK_OK(mn_sim_check_invariants(DEV));
  MN_CHECK(stats().live_graphs == 0);
}

MN_TEST(core_scenario) {
  graph_scenario_capture_replay(DEV);
  graph_scenario_markers(DEV);
  graph_scenario_illegal_sync(DEV);
  clean();
}

/* Nothing runs while capturing; a launch queues the recorded operations,
 * which run in order as the stream advances, the same ones every launch. */
MN_TEST(replay_steps_in_order) {
  unsigned char *a = mkbuf(), *b = mkbuf();
  mn_stream_t *s = mkstream();
  memset(a, 0, N);
  memset(b, 0, N);
  mn_sim_stats_t before = stats();
  MN_CHECK_OK(mn_stream_begin_capture(s));
  MN_CHECK_OK(mn_memset_async(DEV, a, 0x11, N, s));
  MN_CHECK_OK(mn_memcpy_async(DEV, b, DEV, a, N, s));
  MN_CHECK_OK(mn_memset_async(DEV, a + N / 2, 0x22, N / 2, s));
  mn_sim_stats_t during = stats();
  MN_CHECK(during.ops_queued == before.ops_queued); /* recorded, not queued */
  size_t pending = 1;
  MN_CHECK_OK(mn_sim_stream_pending(s, &pending));
  MN_CHECK(pending == 0);
  mn_graph_t *g = NULL;
  MN_CHECK_OK(mn_stream_end_capture(s, &g));
  MN_CHECK(g && mn_graph_node_count(g) == 3);
  MN_CHECK(stats().live_graphs == 1);
  MN_CHECK(a[0] == 0 && b[0] == 0);
  for (int round = 0; round < 3; round++) {
    memset(a, 0, N);
    memset(b, 0, N);
    MN_CHECK_OK(mn_graph_launch(g, s));
    MN_CHECK_OK(mn_sim_stream_pending(s, &pending));
    MN_CHECK(pending == 3);
    size_t ran = 0;
    MN_CHECK_OK(mn_sim_stream_advance(s, 1, &ran));
    MN_CHECK(ran == 1 && graph_all_bytes(a, N, 0x11) && graph_all_bytes(b, N, 0));
    MN_CHECK_OK(mn_sim_stream_advance(s, 1, &ran));
    MN_CHECK(ran == 1 && graph_all_bytes(b, N, 0x11));
    MN_CHECK_OK(mn_stream_synchronize(s));
    MN_CHECK(graph_all_bytes(a, N / 2, 0x11) && graph_all_bytes(a + N / 2, N / 2, 0x22));
    MN_CHECK(graph_all_bytes(b, N, 0x11));
  }
  /* two launches queued back to back, drained by the device */
  MN_CHECK_OK(mn_graph_launch(g, s));
  MN_CHECK_OK(mn_graph_launch(g, s));
  MN_CHECK_OK(mn_sim_device_drain(DEV));
  MN_CHECK_OK(mn_sim_stream_pending(s, &pending));
  MN_CHECK(pending == 0);
  /* destroy with a launch still queued: the launch completes */
  memset(b, 0, N);
  MN_CHECK_OK(mn_graph_launch(g, s));
  MN_CHECK_OK(mn_graph_destroy(g));
  MN_CHECK(stats().live_graphs == 0);
  MN_CHECK_OK(mn_stream_synchronize(s));
  MN_CHECK(graph_all_bytes(b, N, 0x11));
  MN_CHECK_OK(mn_stream_destroy(s));
  MN_CHECK_OK(mn_device_raw_free(DEV, a));
  MN_CHECK_OK(mn_device_raw_free(DEV, b));
  clean();
}

/* Work queued before the capture began still runs in the stream; the
 * capture records only what follows. */
MN_TEST(work_queued_before_capture_runs) {
  unsigned char *a = mkbuf();
  mn_stream_t *s = mkstream();
  MN_CHECK_OK(mn_memset_async(DEV, a, 0x33, N, s));
  MN_CHECK_OK(mn_stream_begin_capture(s));
  MN_CHECK_OK(mn_memset_async(DEV, a, 0x44, N, s));
  size_t ran = 0;
  MN_CHECK_OK(mn_sim_stream_advance(s, 8, &ran)); /* advancing is the device's progress, allowed */
  MN_CHECK(ran == 1 && graph_all_bytes(a, N, 0x33));
  mn_graph_t *g = NULL;
  MN_CHECK_OK(mn_stream_end_capture(s, &g));
  MN_CHECK(graph_all_bytes(a, N, 0x33));
  MN_CHECK_OK(mn_graph_launch(g, s));
  MN_CHECK_OK(mn_stream_synchronize(s));
  MN_CHECK(graph_all_bytes(a, N, 0x44));
  MN_CHECK_OK(mn_graph_destroy(g));
  MN_CHECK_OK(mn_stream_destroy(s));
  MN_CHECK_OK(mn_device_raw_free(DEV, a));
  clean();
}

/* A forked stream that never joins back: the end fails (unjoined), no
 * graph, and neither stream captures afterwards. */
MN_TEST(unjoined_end_fails) {
  unsigned char *a = mkbuf();
  mn_stream_t *s = mkstream(), *s2 = mkstream();
  mn_event_t *e = mkevent();
  MN_CHECK_OK(mn_stream_begin_capture(s));
  MN_CHECK_OK(mn_memset_async(DEV, a, 1, N, s));
  MN_CHECK_OK(mn_event_record(e, s));
  MN_CHECK_OK(mn_stream_wait_event(s2, e));
  MN_CHECK_OK(mn_memset_async(DEV, a, 2, N, s2)); /* never joined back */
  MN_CHECK_OK(mn_sim_check_invariants(DEV));
  mn_graph_t *g = NULL;
  MN_CHECK_ERR(mn_stream_end_capture(s2, &g), MN_ERR_INVALID_STATE, "end it there");
  MN_CHECK(status_of(s2) == MN_CAPTURE_ACTIVE); /* a refused end changes nothing */
  MN_CHECK_ERR(mn_stream_end_capture(s, &g), MN_ERR_INVALID_STATE, "unjoined");
  MN_CHECK(g == NULL);
  MN_CHECK(status_of(s) == MN_CAPTURE_NONE && status_of(s2) == MN_CAPTURE_NONE);
  /* a fork whose stream did nothing needs no join */
  MN_CHECK_OK(mn_stream_begin_capture(s));
  MN_CHECK_OK(mn_memset_async(DEV, a, 1, N, s));
  MN_CHECK_OK(mn_event_record(e, s));
  MN_CHECK_OK(mn_stream_wait_event(s2, e));
  MN_CHECK_OK(mn_stream_end_capture(s, &g));
  MN_CHECK(g && mn_graph_node_count(g) == 1 && status_of(s2) == MN_CAPTURE_NONE);
  MN_CHECK_OK(mn_graph_destroy(g));
  /* both work normally again */
  MN_CHECK_OK(mn_memset_async(DEV, a, 3, N, s2));
  MN_CHECK_OK(mn_stream_synchronize(s2));
  MN_CHECK(a[0] == 3);
  MN_CHECK_OK(mn_event_destroy(e));
  MN_CHECK_OK(mn_stream_destroy(s));
  MN_CHECK_OK(mn_stream_destroy(s2));
  MN_CHECK_OK(mn_device_raw_free(DEV, a));
  clean();
}

/* Ends a capture that must have been invalidated. */
static void end_invalidated(mn_stream_t *s, const char *cause) {
  MN_CHECK(status_of(s) == MN_CAPTURE_INVALIDATED);
  mn_graph_t *g = NULL;
  MN_CHECK_ERR(mn_stream_end_capture(s, &g), MN_ERR_INVALID_STATE, cause);
  MN_CHECK(g == NULL && status_of(s) == MN_CAPTURE_NONE);
}

/* Each call that would synchronize with captured work fails with
 * INVALID_STATE and invalidates the capture; the end names the cause. */
MN_TEST(illegal_calls_invalidate) {
  unsigned char *a = mkbuf(), *other = mkbuf();
  mn_stream_t *s = mkstream();
  mn_event_t *e = mkevent();
  bool done = false;
  uint64_t synced = stats().synchronizes;

  MN_CHECK_OK(mn_stream_begin_capture(s));
  MN_CHECK_ERR(mn_device_synchronize(DEV), MN_ERR_INVALID_STATE, "invalidated");
  MN_CHECK(stats().synchronizes == synced); /* refused, not run */
  MN_CHECK_ERR(mn_memset_async(DEV, a, 1, N, s), MN_ERR_INVALID_STATE, "invalidated");
  end_invalidated(s, "device synchronize");

  MN_CHECK_OK(mn_stream_begin_capture(s));
  MN_CHECK_ERR(mn_stream_synchronize(s), MN_ERR_INVALID_STATE, "capturing stream");
  end_invalidated(s, "synchronize of a capturing stream");

  MN_CHECK_OK(mn_stream_begin_capture(s));
  MN_CHECK_ERR(mn_stream_query(s, &done), MN_ERR_INVALID_STATE, "capturing stream");
  end_invalidated(s, "query of a capturing stream");

  MN_CHECK_OK(mn_stream_begin_capture(s));
  MN_CHECK_ERR(mn_device_raw_free(DEV, other), MN_ERR_INVALID_STATE, "raw free");
  end_invalidated(s, "raw free");
  MN_CHECK_OK(mn_sim_check_access(DEV, DEV, other, N)); /* still allocated */

  /* a bad free is only bad input: the capture goes on */
  MN_CHECK_OK(mn_stream_begin_capture(s));
  MN_CHECK_ERR(mn_device_raw_free(DEV, a + 1), MN_ERR_INVALID_ARGUMENT, "not a live raw allocation");
  MN_CHECK(status_of(s) == MN_CAPTURE_ACTIVE);
  mn_graph_t *g = NULL;
  MN_CHECK_OK(mn_stream_end_capture(s, &g));
  MN_CHECK_OK(mn_graph_destroy(g));

  MN_CHECK_OK(mn_stream_begin_capture(s));
  MN_CHECK_OK(mn_memset_async(DEV, a, 1, N, s));
  MN_CHECK_OK(mn_event_record(e, s));
  MN_CHECK_ERR(mn_event_query(e, &done), MN_ERR_INVALID_STATE, "event recorded in the capture");
  end_invalidated(s, "query of an event");
  MN_CHECK_OK(mn_event_query(e, &done)); /* its capture is over: complete */
  MN_CHECK(done);

  MN_CHECK_OK(mn_stream_begin_capture(s));
  MN_CHECK_OK(mn_event_record(e, s));
  MN_CHECK_ERR(mn_event_synchronize(e), MN_ERR_INVALID_STATE, "event recorded in the capture");
  end_invalidated(s, "synchronize of an event");

  /* waiting on an event recorded outside the capture */
  mn_stream_t *s2 = mkstream();
  MN_CHECK_OK(mn_event_record(e, s2));
  MN_CHECK_OK(mn_stream_begin_capture(s));
  MN_CHECK_ERR(mn_stream_wait_event(s, e), MN_ERR_INVALID_STATE, "outside the capture");
  end_invalidated(s, "outside the capture");

  /* the default stream cannot join */
  mn_stream_t *def = NULL;
  MN_CHECK_OK(mn_stream_default(DEV, &def));
  MN_CHECK_OK(mn_stream_begin_capture(s));
  MN_CHECK_OK(mn_event_record(e, s));
  MN_CHECK_ERR(mn_stream_wait_event(def, e), MN_ERR_INVALID_STATE, "default stream");
  end_invalidated(s, "default stream");

  /* two captures do not merge */
  mn_event_t *e2 = mkevent();
  MN_CHECK_OK(mn_stream_begin_capture(s));
  MN_CHECK_OK(mn_stream_begin_capture(s2));
  MN_CHECK_OK(mn_event_record(e, s));
  MN_CHECK_ERR(mn_stream_wait_event(s2, e), MN_ERR_INVALID_STATE, "do not merge");
  end_invalidated(s, "merge");
  end_invalidated(s2, "merge");
  MN_CHECK_OK(mn_event_destroy(e2));
  MN_CHECK_OK(mn_stream_destroy(s2));

  MN_CHECK_OK(mn_event_destroy(e));
  MN_CHECK_OK(mn_stream_destroy(s));
  MN_CHECK_OK(mn_device_raw_free(DEV, a));
  MN_CHECK_OK(mn_device_raw_free(DEV, other));
  clean();
}

/* During a capture: other streams work as usual (query, synchronize, events),
 * raw allocation, reservation and mapping are allowed; an unmap is not. */
MN_TEST(allowed_during_capture) {
  unsigned char *a = mkbuf(), *b = mkbuf();
  mn_stream_t *s = mkstream(), *other = mkstream();
  mn_event_t *e = mkevent();
  MN_CHECK_OK(mn_stream_begin_capture(s));
  MN_CHECK_OK(mn_memset_async(DEV, a, 9, N, s));
  MN_CHECK_OK(mn_memset_async(DEV, b, 7, N, other));
  bool done = false;
  MN_CHECK_OK(mn_stream_query(other, &done));
  MN_CHECK_OK(mn_event_record(e, other));
  MN_CHECK_OK(mn_event_synchronize(e));
  MN_CHECK_OK(mn_stream_synchronize(other));
  MN_CHECK(graph_all_bytes(b, N, 7) && a[0] != 9);
  mn_stream_t *def = NULL;
  MN_CHECK_OK(mn_stream_default(DEV, &def));
  MN_CHECK_OK(mn_memset_async(DEV, b, 8, N, def));
  MN_CHECK_OK(mn_stream_synchronize(def));
  MN_CHECK(b[0] == 8);
  void *raw = NULL, *va = NULL;
  mn_device_props_t props;
  MN_CHECK_OK(mn_device_get_properties(DEV, &props));
  size_t gran = props.alloc_granularity;
  MN_CHECK_OK(mn_device_raw_alloc(DEV, N, &raw));
  MN_CHECK_OK(mn_device_va_reserve(DEV, 2 * gran, &va));
  MN_CHECK_OK(mn_device_mem_map(DEV, va, gran));
  MN_CHECK(status_of(s) == MN_CAPTURE_ACTIVE);
  MN_CHECK_ERR(mn_device_mem_unmap(DEV, va, gran), MN_ERR_INVALID_STATE, "unmap");
  end_invalidated(s, "unmap");
  MN_CHECK_OK(mn_device_mem_unmap(DEV, va, gran));
  MN_CHECK_OK(mn_device_va_release(DEV, va, 2 * gran));
  MN_CHECK_OK(mn_device_raw_free(DEV, raw));
  MN_CHECK_OK(mn_event_destroy(e));
  MN_CHECK_OK(mn_stream_destroy(s));
  MN_CHECK_OK(mn_stream_destroy(other));
  MN_CHECK_OK(mn_device_raw_free(DEV, a));
  MN_CHECK_OK(mn_device_raw_free(DEV, b));
  clean();
}

static void noop(void *arg) { (void)arg; }

/* Argument and state rules. */
MN_TEST(argument_rules) {
  mn_stream_t *s = mkstream(), *s2 = mkstream(), *def = NULL;
  mn_event_t *e = mkevent();
  MN_CHECK_OK(mn_stream_default(DEV, &def));
  mn_graph_t *g = NULL;
  mn_capture_status cs = MN_CAPTURE_ACTIVE;
  MN_CHECK_ERR(mn_stream_begin_capture(NULL), MN_ERR_INVALID_ARGUMENT, "NULL");
  MN_CHECK_ERR(mn_stream_begin_capture(def), MN_ERR_INVALID_ARGUMENT, "default stream");
  MN_CHECK_ERR(mn_stream_end_capture(def, &g), MN_ERR_INVALID_STATE, "never captures");
  MN_CHECK_OK(mn_stream_capture_status(def, &cs, NULL));
  MN_CHECK(cs == MN_CAPTURE_NONE);
  MN_CHECK_ERR(mn_stream_capture_status(s, NULL, NULL), MN_ERR_INVALID_ARGUMENT, "NULL");
  MN_CHECK_ERR(mn_stream_end_capture(s, &g), MN_ERR_INVALID_STATE, "not capturing");
  MN_CHECK_ERR(mn_stream_end_capture(s, NULL), MN_ERR_INVALID_ARGUMENT, "NULL");
  MN_CHECK_OK(mn_stream_begin_capture(s));
  MN_CHECK_ERR(mn_stream_begin_capture(s), MN_ERR_INVALID_STATE, "already");
  MN_CHECK_OK(mn_stream_launch_host(s, noop, NULL));
  MN_CHECK_ERR(mn_stream_destroy(s), MN_ERR_INVALID_STATE, "end the capture first");
  MN_CHECK_ERR(mn_device_alloc_async(DEV, 1024, s, &(void *){NULL}), MN_ERR_NOT_SUPPORTED, "capturing");
  MN_CHECK(status_of(s) == MN_CAPTURE_ACTIVE); /* refused without breaking it */
  /* a joined stream cannot begin its own */
  MN_CHECK_OK(mn_event_record(e, s));
  MN_CHECK_OK(mn_stream_wait_event(s2, e));
  MN_CHECK_ERR(mn_stream_begin_capture(s2), MN_ERR_INVALID_STATE, "joined");
  MN_CHECK_OK(mn_stream_end_capture(s, &g));
  MN_CHECK(g && mn_graph_node_count(g) == 1);
  /* launches */
  MN_CHECK_ERR(mn_graph_launch(NULL, s), MN_ERR_INVALID_ARGUMENT, "NULL");
  MN_CHECK_ERR(mn_graph_launch(g, NULL), MN_ERR_INVALID_ARGUMENT, "NULL");
  MN_CHECK_OK(mn_stream_begin_capture(s2));
  MN_CHECK_ERR(mn_graph_launch(g, s2), MN_ERR_INVALID_STATE, "captures");
  mn_graph_t *g2 = NULL;
  MN_CHECK_OK(mn_stream_end_capture(s2, &g2));
  MN_CHECK_OK(mn_graph_destroy(g2));
  mn_stream_t *far = NULL;
  MN_CHECK_OK(mn_stream_create(mn_device_sim(1), &far));
  MN_CHECK_ERR(mn_graph_launch(g, far), MN_ERR_INVALID_ARGUMENT, "sim:1");
  MN_CHECK_OK(mn_stream_destroy(far));
  MN_CHECK_OK(mn_graph_launch(g, def)); /* the default stream may launch */
  MN_CHECK_OK(mn_stream_synchronize(def));
  MN_CHECK(mn_graph_node_count(NULL) == 0);
  MN_CHECK_OK(mn_graph_destroy(g));
  MN_CHECK_OK(mn_event_destroy(e));
  MN_CHECK_OK(mn_stream_destroy(s));
  MN_CHECK_OK(mn_stream_destroy(s2));
  clean();
}

/* An event recorded twice in a capture, a stream waiting on its own event,
 * a join that adds several nodes to the frontier. */
MN_TEST(dependency_sets) {
  unsigned char *a = mkbuf(), *b = mkbuf(), *c = mkbuf();
  mn_stream_t *s = mkstream(), *s2 = mkstream(), *s3 = mkstream();
  mn_event_t *e = mkevent(), *e2 = mkevent(), *e3 = mkevent();
  MN_CHECK_OK(mn_stream_begin_capture(s));
  MN_CHECK_OK(mn_event_record(e, s)); /* an empty point: s2 and s3 start from nothing */
  MN_CHECK_OK(mn_stream_wait_event(s2, e));
  MN_CHECK_OK(mn_stream_wait_event(s3, e));
  MN_CHECK_OK(mn_stream_wait_event(s, e)); /* its own event: nothing changes */
  MN_CHECK_OK(mn_memset_async(DEV, a, 1, N, s2));
  MN_CHECK_OK(mn_memset_async(DEV, b, 2, N, s3));
  MN_CHECK_OK(mn_event_record(e2, s2));
  MN_CHECK_OK(mn_event_record(e3, s3));
  MN_CHECK_OK(mn_stream_wait_event(s, e2));
  MN_CHECK_OK(mn_stream_wait_event(s, e3));
  MN_CHECK_OK(mn_memcpy_async(DEV, c, DEV, a, N / 2, s));
  MN_CHECK_OK(mn_memcpy_async(DEV, c + N / 2, DEV, b, N / 2, s));
  mn_graph_t *g = NULL;
  MN_CHECK_OK(mn_stream_end_capture(s, &g));
  MN_CHECK(g && mn_graph_node_count(g) == 4);
  MN_CHECK_OK(mn_graph_launch(g, s3)); /* a stream that joined before may launch it */
  MN_CHECK_OK(mn_stream_synchronize(s3));
  MN_CHECK(graph_all_bytes(c, N / 2, 1) && graph_all_bytes(c + N / 2, N / 2, 2));
  MN_CHECK_OK(mn_graph_destroy(g));
  mn_event_t *evs[] = {e, e2, e3};
  for (int i = 0; i < 3; i++) MN_CHECK_OK(mn_event_destroy(evs[i]));
  mn_stream_t *ss[] = {s, s2, s3};
  for (int i = 0; i < 3; i++) MN_CHECK_OK(mn_stream_destroy(ss[i]));
  void *bufs[] = {a, b, c};
  for (int i = 0; i < 3; i++) MN_CHECK_OK(mn_device_raw_free(DEV, bufs[i]));
  clean();
}

static int hook_calls;
static void count_hook(void *arg) {
  (void)arg;
  hook_calls++;
}

/* Every host allocation of a capture's life failed in turn: each failure is
 * a clean OUT_OF_MEMORY that loses nothing, and the capture either goes on
 * or (for the end) can be retried. */
MN_TEST(host_allocation_failures) {
  unsigned char *a = mkbuf();
  mn_stream_t *s = mkstream(), *s2 = mkstream();
  mn_event_t *e = mkevent();
  bool swept = false; /* reached a run in which no allocation failed */
  for (int64_t nth = 1; nth < 64 && !swept; nth++) {
    mn__hostmem_fail_nth(nth);
    mn_status st = mn_stream_begin_capture(s);
    int steps = 0;
    if (st == MN_OK) {
      mn_status r[8];
      r[0] = mn_memset_async(DEV, a, 5, N, s);
      r[1] = mn_event_record(e, s);
      r[2] = mn_stream_wait_event(s2, e);
      r[3] = mn_memset_async(DEV, a, 6, N, s2);
      uint64_t m = 0;
      r[4] = mn__capture_marker(s2, &m);
      r[5] = mn_event_record(e, s2);
      r[6] = mn_stream_wait_event(s, e);
      r[7] = MN_OK;
      for (int i = 0; i < 7; i++) {
        MN_CHECK(r[i] == MN_OK || r[i] == MN_ERR_OUT_OF_MEMORY || r[i] == MN_ERR_INVALID_STATE ||
                 r[i] == MN_ERR_INVALID_ARGUMENT); /* a marker on a stream whose join failed */
        steps += r[i] == MN_OK;
      }
      mn_graph_t *g = NULL;
      mn_status end = mn_stream_end_capture(s, &g);
      if (end == MN_ERR_OUT_OF_MEMORY) { /* the capture goes on: retry */
        MN_CHECK(status_of(s) != MN_CAPTURE_NONE);
        end = mn_stream_end_capture(s, &g);
      }
      MN_CHECK((end == MN_OK) == (g != NULL));
      if (g) {
        hook_calls = 0;
        mn_status h = mn__graph_on_destroy(g, count_hook, NULL);
        while (h == MN_ERR_OUT_OF_MEMORY) h = mn__graph_on_destroy(g, count_hook, NULL);
        MN_CHECK_OK(h);
        mn_status l = mn_graph_launch(g, s);
        if (l == MN_ERR_OUT_OF_MEMORY) l = mn_graph_launch(g, s); /* the one failure was this launch */
        MN_CHECK_OK(l);
        MN_CHECK_OK(mn_stream_synchronize(s));
        MN_CHECK_OK(mn_graph_destroy(g));
        MN_CHECK(hook_calls == 1);
      }
    } else {
      MN_CHECK(st == MN_ERR_OUT_OF_MEMORY);
    }
    bool fired = mn__hostmem_fault_fired();
    mn__hostmem_fail_nth(0);
    MN_CHECK(status_of(s) == MN_CAPTURE_NONE && status_of(s2) == MN_CAPTURE_NONE);
    MN_CHECK_OK(mn_sim_check_invariants(DEV));
    MN_CHECK(stats().live_graphs == 0);
    if (!fired) {
      MN_CHECK(steps == 7 && nth > 8);
      swept = true;
    }
  }
  MN_CHECK(swept);
  MN_CHECK_OK(mn_event_destroy(e));
  MN_CHECK_OK(mn_stream_destroy(s));
  MN_CHECK_OK(mn_stream_destroy(s2));
  MN_CHECK_OK(mn_device_raw_free(DEV, a));
  clean();
}

/* The CPU has no capture: begin and end say so, status and id say "none". */
MN_TEST(cpu_not_supported) {
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_create(mn_device_cpu(), &s));
  if (!s) return;
  MN_CHECK_ERR(mn_stream_begin_capture(s), MN_ERR_NOT_SUPPORTED, "cpu");
  mn_graph_t *g = NULL;
  MN_CHECK_ERR(mn_stream_end_capture(s, &g), MN_ERR_NOT_SUPPORTED, "no stream capture");
  mn_capture_status cs = MN_CAPTURE_ACTIVE;
  uint64_t id = 7;
  MN_CHECK_OK(mn_stream_capture_status(s, &cs, &id));
  MN_CHECK(cs == MN_CAPTURE_NONE && id == 0);
  id = 7;
  MN_CHECK_OK(mn__stream_capture_id(s, &id));
  MN_CHECK(id == 0);
  uint64_t m = 0;
  MN_CHECK_ERR(mn__capture_marker(s, &m), MN_ERR_NOT_SUPPORTED, "cpu");
  mn_stream_t *def = NULL;
  MN_CHECK_OK(mn_stream_default(mn_device_cpu(), &def));
  id = 7;
  MN_CHECK_OK(mn__stream_capture_id(def, &id));
  MN_CHECK(id == 0);
  MN_CHECK_OK(mn_stream_destroy(s));
}

int main(void) {
  mn_test_configure_sim(2, (size_t)256 << 20);
  DEV = mn_device_sim(0);
  MN_RUN(core_scenario);
  MN_RUN(replay_steps_in_order);
  MN_RUN(work_queued_before_capture_runs);
  MN_RUN(unjoined_end_fails);
  MN_RUN(illegal_calls_invalidate);
  MN_RUN(allowed_during_capture);
  MN_RUN(argument_rules);
  MN_RUN(dependency_sets);
  MN_RUN(host_allocation_failures);
  MN_RUN(cpu_not_supported);
  mn_sim_stats_t st = stats();
  MN_CHECK(st.live_streams == 0 && st.live_events == 0 && st.mapped_bytes == 0 && st.live_graphs == 0);
  return mn_test_finish();
}
