/* tests/graph_scenario.h: the stream capture scenario that test_graph (SIM)
 * and test_graph_gpu (cuda:0) both run: a fork/join capture of a set, two
 * copies and a host function, replayed three times; markers and reaches
 * across the fork and the join; destroy hooks. Single-threaded. */
#ifndef MNEMO_TESTS_GRAPH_SCENARIO_H
#define MNEMO_TESTS_GRAPH_SCENARIO_H

#include <stdatomic.h>
#include <string.h>

#include "mn_test.h"
#include "runtime/graph.h"

static atomic_int graph_host_calls;
static void graph_count_call(void *arg) {
  (void)arg;
  atomic_fetch_add(&graph_host_calls, 1);
}

static bool graph_all_bytes(const unsigned char *p, size_t n, unsigned char want) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != want) return false;
  return true;
}

static int graph_hook_order[8];
static int graph_hook_count;
static void graph_hook(void *arg) { graph_hook_order[graph_hook_count++] = (int)(intptr_t)arg; }

/* Fork on s2 from s, join back, record set -> copy -> copy to host -> host
 * function; launch three times on s and check the bytes and calls each time. */
static void graph_scenario_capture_replay(mn_device_t dev) {
  const size_t n = (size_t)1 << 16;
  void *a = NULL, *b = NULL;
  unsigned char *h = NULL;
  mn_stream_t *s = NULL, *s2 = NULL;
  mn_event_t *e1 = NULL, *e2 = NULL;
  MN_CHECK_OK(mn_device_raw_alloc(dev, n, &a));
  MN_CHECK_OK(mn_device_raw_alloc(dev, n, &b));
  MN_CHECK_OK(mn_device_host_alloc(dev, n, (void **)&h));
  MN_CHECK_OK(mn_stream_create(dev, &s));
  MN_CHECK_OK(mn_stream_create(dev, &s2));
  MN_CHECK_OK(mn_event_create(dev, &e1));
  MN_CHECK_OK(mn_event_create(dev, &e2));
  if (!a || !b || !h || !s || !s2 || !e1 || !e2) return;
  atomic_store(&graph_host_calls, 0);

  mn_capture_status cs = MN_CAPTURE_INVALIDATED;
  uint64_t id = 0, id2 = 0, fast = 0;
  MN_CHECK_OK(mn_stream_capture_status(s, &cs, &id));
  MN_CHECK(cs == MN_CAPTURE_NONE && id == 0);
  MN_CHECK_OK(mn_stream_begin_capture(s));
  MN_CHECK_OK(mn_stream_capture_status(s, &cs, &id));
  MN_CHECK(cs == MN_CAPTURE_ACTIVE && id != 0);
  MN_CHECK_OK(mn__stream_capture_id(s, &fast));
  MN_CHECK(fast == id);
  MN_CHECK_OK(mn_memset_async(dev, a, 0x5a, n, s));
  MN_CHECK_OK(mn_event_record(e1, s));
  MN_CHECK_OK(mn__stream_capture_id(s2, &fast));
  MN_CHECK(fast == 0);
  MN_CHECK_OK(mn_stream_wait_event(s2, e1)); /* s2 joins the capture */
  MN_CHECK_OK(mn_stream_capture_status(s2, &cs, &id2));
  MN_CHECK(cs == MN_CAPTURE_ACTIVE && id2 == id);
  MN_CHECK_OK(mn__stream_capture_id(s2, &fast));
  MN_CHECK(fast == id);
  MN_CHECK_OK(mn_memcpy_async(dev, b, dev, a, n, s2));
  MN_CHECK_OK(mn_event_record(e2, s2));
  MN_CHECK_OK(mn_stream_wait_event(s, e2)); /* and s2 rejoins s */
  MN_CHECK_OK(mn_memcpy_async(mn_device_cpu(), h, dev, b, n, s));
  MN_CHECK_OK(mn_stream_launch_host(s, graph_count_call, NULL));
  MN_CHECK(atomic_load(&graph_host_calls) == 0); /* recorded, not run */
  mn_graph_t *g = NULL;
  MN_CHECK_OK(mn_stream_end_capture(s, &g));
  MN_CHECK(g != NULL);
  if (!g) return;
  MN_CHECK(mn_graph_node_count(g) == 4);
  MN_CHECK(mn_device_equal(mn_graph_device(g), dev));
  MN_CHECK_OK(mn_stream_capture_status(s, &cs, &id2));
  MN_CHECK(cs == MN_CAPTURE_NONE && id2 == 0);
  MN_CHECK_OK(mn_stream_capture_status(s2, &cs, &id2));
  MN_CHECK(cs == MN_CAPTURE_NONE && id2 == 0);
  MN_CHECK_OK(mn__stream_capture_id(s2, &fast));
  MN_CHECK(fast == 0);

  for (int i = 0; i < 3; i++) {
    memset(h, 0, n);
    MN_CHECK_OK(mn_memset_async(dev, b, 0x77, n, s)); /* the replay must rewrite b */
    MN_CHECK_OK(mn_graph_launch(g, s));
    MN_CHECK_OK(mn_stream_synchronize(s));
    MN_CHECK(graph_all_bytes(h, n, 0x5a));
    MN_CHECK(atomic_load(&graph_host_calls) == i + 1);
  }
  /* a second capture gets another id */
  MN_CHECK_OK(mn_stream_begin_capture(s));
  MN_CHECK_OK(mn_stream_capture_status(s, &cs, &id2));
  MN_CHECK(cs == MN_CAPTURE_ACTIVE && id2 != 0 && id2 != id);
  mn_graph_t *g2 = NULL;
  MN_CHECK_OK(mn_stream_end_capture(s, &g2));
  MN_CHECK(g2 != NULL && mn_graph_node_count(g2) == 0);
  MN_CHECK_OK(mn_graph_destroy(g2));

  /* hooks: last added first, before the graph goes */
  graph_hook_count = 0;
  MN_CHECK_OK(mn__graph_on_destroy(g, graph_hook, (void *)(intptr_t)1));
  MN_CHECK_OK(mn__graph_on_destroy(g, graph_hook, (void *)(intptr_t)2));
  MN_CHECK_OK(mn__graph_on_destroy(g, graph_hook, (void *)(intptr_t)3));
  MN_CHECK_OK(mn_graph_destroy(g));
  MN_CHECK(graph_hook_count == 3 && graph_hook_order[0] == 3 && graph_hook_order[1] == 2 &&
           graph_hook_order[2] == 1);
  MN_CHECK_OK(mn_graph_destroy(NULL));

  MN_CHECK_OK(mn_event_destroy(e1));
  MN_CHECK_OK(mn_event_destroy(e2));
  MN_CHECK_OK(mn_stream_destroy(s));
  MN_CHECK_OK(mn_stream_destroy(s2));
  MN_CHECK_OK(mn_device_host_free(dev, h));
  MN_CHECK_OK(mn_device_raw_free(dev, a));
  MN_CHECK_OK(mn_device_raw_free(dev, b));
}

/* Markers: s makes m1, s2 forks from s after it (reaches m1), s2 makes m2
 * (s does not reach it until it joins s2 back); a marker made on s after
 * the fork is not reached from s2. Markers are not operations. */
static void graph_scenario_markers(mn_device_t dev) {
  mn_stream_t *s = NULL, *s2 = NULL;
  mn_event_t *e1 = NULL, *e2 = NULL;
  MN_CHECK_OK(mn_stream_create(dev, &s));
  MN_CHECK_OK(mn_stream_create(dev, &s2));
  MN_CHECK_OK(mn_event_create(dev, &e1));
  MN_CHECK_OK(mn_event_create(dev, &e2));
  if (!s || !s2 || !e1 || !e2) return;
  uint64_t m1 = 0, m2 = 0, m3 = 0;
  bool r = false;
  MN_CHECK_ERR(mn__capture_marker(s, &m1), MN_ERR_INVALID_ARGUMENT, "not capturing");
  MN_CHECK_ERR(mn__capture_reaches(s, 1, &r), MN_ERR_INVALID_ARGUMENT, "not capturing");
  MN_CHECK_OK(mn_stream_begin_capture(s));
  MN_CHECK_OK(mn__capture_marker(s, &m1));
  MN_CHECK(m1 != 0);
  MN_CHECK_OK(mn__capture_reaches(s, m1, &r));
  MN_CHECK(r);
  MN_CHECK_OK(mn_event_record(e1, s));
  MN_CHECK_OK(mn_stream_wait_event(s2, e1));
  MN_CHECK_OK(mn__capture_reaches(s2, m1, &r));
  MN_CHECK(r); /* s2 joined after m1 */
  MN_CHECK_OK(mn__capture_marker(s2, &m2));
  MN_CHECK(m2 != 0 && m2 != m1);
  MN_CHECK_OK(mn__capture_reaches(s, m2, &r));
  MN_CHECK(!r); /* s has not joined s2 */
  MN_CHECK_OK(mn__capture_marker(s, &m3));
  MN_CHECK(m3 != 0 && m3 != m1 && m3 != m2);
  MN_CHECK_OK(mn__capture_reaches(s2, m3, &r));
  MN_CHECK(!r); /* made on s after the fork */
  MN_CHECK_OK(mn_event_record(e2, s2));
  MN_CHECK_OK(mn_stream_wait_event(s, e2));
  MN_CHECK_OK(mn__capture_reaches(s, m2, &r));
  MN_CHECK(r); /* joined */
  MN_CHECK_OK(mn__capture_reaches(s, m1, &r));
  MN_CHECK(r);
  MN_CHECK_ERR(mn__capture_reaches(s, 0, &r), MN_ERR_INVALID_ARGUMENT, "not a");
  mn_graph_t *g = NULL;
  MN_CHECK_OK(mn_stream_end_capture(s, &g));
  MN_CHECK(g != NULL && mn_graph_node_count(g) == 0); /* markers are not operations */
  MN_CHECK_ERR(mn__capture_reaches(s, m1, &r), MN_ERR_INVALID_ARGUMENT, "not capturing");
  MN_CHECK_OK(mn_graph_launch(g, s)); /* nothing to run */
  MN_CHECK_OK(mn_stream_synchronize(s));
  MN_CHECK_OK(mn_graph_destroy(g));
  MN_CHECK_OK(mn_event_destroy(e1));
  MN_CHECK_OK(mn_event_destroy(e2));
  MN_CHECK_OK(mn_stream_destroy(s));
  MN_CHECK_OK(mn_stream_destroy(s2));
}

/* A device synchronize during a capture fails and invalidates it; the end
 * then fails with no graph and the stream works again. */
static void graph_scenario_illegal_sync(mn_device_t dev) {
  const size_t n = 4096;
  void *a = NULL;
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_device_raw_alloc(dev, n, &a));
  MN_CHECK_OK(mn_stream_create(dev, &s));
  if (!a || !s) return;
  MN_CHECK_OK(mn_stream_begin_capture(s));
  MN_CHECK_OK(mn_memset_async(dev, a, 1, n, s));
  MN_CHECK_ERR(mn_device_synchronize(dev), MN_ERR_INVALID_STATE, "mn_device_synchronize");
  mn_capture_status cs = MN_CAPTURE_NONE;
  MN_CHECK_OK(mn_stream_capture_status(s, &cs, NULL));
  MN_CHECK(cs == MN_CAPTURE_INVALIDATED);
  mn_graph_t *g = NULL;
  MN_CHECK_ERR(mn_stream_end_capture(s, &g), MN_ERR_INVALID_STATE, "mn_stream_end_capture");
  MN_CHECK(g == NULL);
  MN_CHECK_OK(mn_stream_capture_status(s, &cs, NULL));
  MN_CHECK(cs == MN_CAPTURE_NONE);
  MN_CHECK_OK(mn_memset_async(dev, a, 2, n, s));
  MN_CHECK_OK(mn_stream_synchronize(s));
  MN_CHECK_OK(mn_stream_destroy(s));
  MN_CHECK_OK(mn_device_raw_free(dev, a));
}

#endif /* MNEMO_TESTS_GRAPH_SCENARIO_H */
