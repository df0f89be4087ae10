/* tools/mnemo.c: the top of the mnemo command-line tool: its command table and
 * main, and its small commands: `info` lists devices and build options, `demo`
 * runs the walking skeleton, replays a bundled trace and times copies,
 * `version`; the other commands (replay, report, snapshot, diff, import,
 * export, bench) live in their own files (commands.h), the option parser and
 * the dispatch below them all in tools/cli.c. Single-threaded. */
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "cli.h"
#include "commands.h"
#include "trace_input.h"
#include "runtime/env.h"
#include "runtime/error.h"

static void print_bytes(size_t n) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)n;
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    u++;
  }
  printf(u ? "%.2f %s" : "%.0f %s", v, units[u]);
}

static void print_device(mn_device_t dev) {
  mn_device_props_t p;
  char name[32];
  mn_device_format(dev, name, sizeof name);
  if (mn_device_get_properties(dev, &p) != MN_OK) {
    printf("  %-7s (properties unavailable: %s)\n", name, mn_last_error());
    return;
  }
  printf("  %-7s %s, ", name, p.name);
  print_bytes(p.total_memory);
  if (dev.type == MN_DEVICE_CUDA) printf(", compute capability %d.%d, %d SMs", p.cc_major, p.cc_minor, p.multiprocessors);
  if (dev.type == MN_DEVICE_CPU) printf(", %d cores", p.multiprocessors);
  printf(", granularity ");
  print_bytes(p.alloc_granularity);
  printf("%s\n", p.supports_vmm ? ", virtual memory management" : "");
}

const char cmd_info_about[] = "";
const mn__cli_opt_t cmd_info_opts[] = {{NULL, 0, NULL, 0, NULL}};
const char cmd_demo_about[] =
    "Runs the walking skeleton on the best device (and the SIM device), replays a\n"
    "bundled trace with its report (written to $TMPDIR/mnemo-demo-report.html), and\n"
    "times copies on the best device (host -> device on a GPU; CPU -> CPU when the\n"
    "CPU is the best device).\n";
const mn__cli_opt_t cmd_demo_opts[] = {{NULL, 0, NULL, 0, NULL}};
const char cmd_version_about[] = "";
const mn__cli_opt_t cmd_version_opts[] = {{NULL, 0, NULL, 0, NULL}};

/* The arguments of a command without options or arguments: -1 to go on, else
 * the exit status (0 after --help, 2 after a usage error). */
static int parse_none(int argc, char **argv) {
  mn__cli_t p;
  mn__cli_begin(&p, argc, argv);
  const char *v;
  if (mn__cli_next(&p, &v) < 0) return p.rc; /* --help, or an unknown option */
  return mn__cli_want_args(&p, 0, 0, "") ? 2 : -1;
}

int cmd_version(int argc, char **argv) {
  int rc = parse_none(argc, argv);
  if (rc >= 0) return rc;
  printf("mnemo %s\n", mn_version());
  return 0;
}

int cmd_info(int argc, char **argv) {
  int rc = parse_none(argc, argv);
  if (rc >= 0) return rc;
  printf("mnemo %s\n", mn_version());
  printf("build: CUDA %s, NVTX %s\n", mn_build_has_cuda() ? "on" : "off", mn_build_has_cuda() ? "on" : "off");
  printf("devices:\n");
  static const mn_device_type types[] = {MN_DEVICE_CPU, MN_DEVICE_CUDA, MN_DEVICE_SIM};
  for (size_t t = 0; t < 3; t++) {
    int n = 0;
    if (mn_device_count(types[t], &n) != MN_OK) {
      printf("  %s: error: %s\n", mn_device_type_name(types[t]), mn_last_error());
      continue;
    }
    if (n == 0) printf("  %-7s none found%s\n", mn_device_type_name(types[t]),
                       types[t] == MN_DEVICE_CUDA && !mn_build_has_cuda() ? " (built without CUDA)" : "");
    for (int i = 0; i < n; i++) print_device((mn_device_t){types[t], i});
  }
  char where[1024];
  bool found = mn__tools_find(MN__TOOLS_SCRIPT, "import_torch_snapshot.py", where, sizeof where);
  printf("PyTorch snapshot importer: %s%s\n", where, found ? "" : " (not found)");
  found = mn__tools_find(MN__TOOLS_DATA, "traces", where, sizeof where);
  printf("sample traces: %s%s\n", where, found ? "" : " (not found)");
  printf("environment:\n");
  for (int i = 0; i < mn_env_count(); i++) {
    mn_env_var_t var;
    if (mn_env_get(i, &var) != MN_OK) continue;
    if (var.value) printf("  %s=\"%s\"\n", var.name, var.value);
    else printf("  %s (unset)\n", var.name);
    printf("      %s; default: %s\n", var.meaning, var.default_value);
  }
  return 0;
}

#define DEMO_CHECK(call)                                                              \
  do {                                                                                \
    mn_status st_ = (call);                                                           \
    if (st_ != MN_OK) {                                                               \
      fprintf(stderr, "mnemo demo: %s failed: %s (%s)\n", #call, mn_last_error(),     \
              mn_status_name(st_));                                                   \
      rc = 1;                                                                         \
      goto done;                                                                      \
    }                                                                                 \
  } while (0)

/* Storage -> view -> fill -> copy to CPU -> read back, on one device. */
static int demo_on(mn_device_t dev) {
  int rc = 0;
  char name[32];
  mn_device_format(dev, name, sizeof name);
  const int64_t sizes[2] = {4, 8};
  mn_view_t *v = NULL, *host = NULL;
  mn_stream_t *stream = NULL;
  printf("on %s:\n", name);
  DEMO_CHECK(mn_view_empty(dev, MN_DTYPE_FLOAT32, 2, sizes, &v));
  printf("  created a 4x8 float32 view over a %zu-byte storage\n", mn_storage_nbytes(mn_view_storage(v)));
  DEMO_CHECK(mn_stream_default(dev, &stream));
  DEMO_CHECK(mn_view_fill(v, mn_scalar_float(2.5), stream));
  printf("  filled it with 2.5 on the default stream\n");
  DEMO_CHECK(mn_view_empty(mn_device_cpu(), MN_DTYPE_FLOAT32, 2, sizes, &host));
  DEMO_CHECK(mn_view_copy(host, v, stream));
  DEMO_CHECK(mn_stream_synchronize(stream));
  const float *vals = mn_view_data(host);
  int bad = 0;
  for (int i = 0; i < 32; i++) bad += vals[i] != 2.5f;
  printf("  copied it to the CPU and read back: %g %g ... %g (%s)\n", vals[0], vals[1], vals[31],
         bad ? "WRONG" : "all 32 values correct");
  if (bad) rc = 1;
done:
  mn_view_destroy(host);
  mn_view_destroy(v);
  /* Hand back what the device keeps for later (the default allocator's cached
   * blocks, the copy engine's helper streams, events and pinned pools): the
   * trace step sizes the SIM device as recorded, which needs it idle. */
  mn_allocator_t *a = NULL;
  if (stream) mn__ignore(mn_stream_synchronize(stream));
  if (mn_allocator_get_default(dev, &a) == MN_OK && a) mn__ignore(mn_allocator_empty_cache(a));
  mn__ignore(mn_copy_engine_reset());
  return rc;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Host -> device copies of 64 MiB through mn_copy_bytes (pinned source where
 * the device has pinned memory), timed; on the CPU (no GPU present) they are
 * CPU -> CPU copies, and the line says so. GB/s as `mnemo bench`: bytes read
 * + bytes written per second, 1 GB = 1e9 bytes. */
static int demo_copy(mn_device_t dev) {
  int rc = 0;
  const size_t n = (size_t)64 << 20;
  const int reps = 8;
  char name[32];
  mn_device_format(dev, name, sizeof name);
  void *host = NULL, *d = NULL;
  bool pinned = dev.type != MN_DEVICE_CPU;
  mn_stream_t *stream = NULL;
  DEMO_CHECK(pinned ? mn_device_host_alloc(dev, n, &host) : mn_device_raw_alloc(dev, n, &host));
  DEMO_CHECK(mn_device_raw_alloc(dev, n, &d));
  memset(host, 1, n);
  DEMO_CHECK(mn_stream_default(dev, &stream));
  unsigned flags = pinned ? MN_COPY_SRC_PINNED : 0;
  DEMO_CHECK(mn_copy_bytes(dev, d, mn_device_cpu(), host, n, stream, flags)); /* warm up */
  DEMO_CHECK(mn_stream_synchronize(stream));
  double t0 = now_s();
  for (int i = 0; i < reps; i++) DEMO_CHECK(mn_copy_bytes(dev, d, mn_device_cpu(), host, n, stream, flags));
  DEMO_CHECK(mn_stream_synchronize(stream));
  double dt = now_s() - t0;
  if (dev.type == MN_DEVICE_CPU)
    printf("  copy throughput on %s (no GPU here: a CPU -> CPU copy of host memory): %d x 64 MiB in %.1f ms\n",
           name, reps, dt * 1e3);
  else
    printf("  copy throughput on %s: %d x 64 MiB host -> device (%s source) in %.1f ms\n", name, reps,
           pinned ? "pinned" : "pageable", dt * 1e3);
  printf("    %.2f GB/s (bytes read + bytes written per second, 1 GB = 1e9 bytes; `mnemo bench` for every case)\n",
         2.0 * (double)n * reps / dt / 1e9);
done:
  /* the demo's cleanup; its first failure was printed */
  if (d) mn__ignore(mn_device_raw_free(dev, d));
  if (host) {
    if (pinned) mn__ignore(mn_device_host_free(dev, host));
    else mn__ignore(mn_device_raw_free(dev, host));
  }
  return rc;
}

/* Replays a bundled trace with two allocator settings and writes the report. */
static int demo_trace(void) {
  char trace[1024], report[1024];
  if (!mn__tools_find(MN__TOOLS_DATA, "traces/ctx128_forward_mixed.trace", trace, sizeof trace)) {
    printf("  (no bundled trace at %s; set MNEMO_DATA_DIR to the folder that holds traces/)\n", trace);
    return 0;
  }
  const char *tmp = mn__env(MN__ENV_TMPDIR);
  snprintf(report, sizeof report, "%s/mnemo-demo-report.html", tmp && *tmp ? tmp : "/tmp");
  printf("replaying the bundled PyTorch trace %s on the SIM device:\n", trace);
  char *args[] = {"report", trace, "-o", report, "--title", "demo: ctx128_forward_mixed", "--config", "",
                  "--config", "expandable_segments:True"};
  fflush(stdout);
  int rc = cmd_report((int)(sizeof args / sizeof args[0]), args);
  if (rc == 0) printf("  open %s in a browser for the timeline and the segment map\n", report);
  return rc;
}

int cmd_demo(int argc, char **argv) {
  int rc = parse_none(argc, argv);
  if (rc >= 0) return rc;
  mn_device_t best = mn_device_best();
  rc = demo_on(best);
  if (best.type != MN_DEVICE_SIM) rc |= demo_on(mn_device_sim(0));
  rc |= demo_trace();
  printf("copies:\n");
  rc |= demo_copy(best);
  printf("%s\n", rc ? "demo FAILED" : "demo ok");
  return rc ? 1 : 0;
}

/* The command table, in the order `mnemo --help` lists them (tools/cli.h). */
static const mn__cli_cmd_t commands[] = {
    {"info", cmd_info, "", "devices found, build options, where the helper scripts are, environment",
     cmd_info_about, cmd_info_opts},
    {"demo", cmd_demo, "", "the walking skeleton, a bundled trace's report and copy timings", cmd_demo_about,
     cmd_demo_opts},
    {"replay", cmd_replay, "TRACE", "replay a trace or a PyTorch snapshot and compare peaks with the recording",
     cmd_replay_about, cmd_replay_opts},
    {"report", cmd_report, "TRACE -o REPORT.html", "write a self-contained HTML report of a trace's memory", cmd_report_about,
     cmd_report_opts},
    {"snapshot", cmd_snapshot, "FILE", "segments, blocks and who holds the memory at a moment of a trace",
     cmd_snapshot_about, cmd_snapshot_opts},
    {"diff", cmd_diff, "A B", "compare two traces or snapshots: peaks, stack groups, segments",
     cmd_diff_about, cmd_diff_opts},
    {"import", cmd_import, "--from rmm|torch INPUT -o TRACE", "convert an RMM log or a PyTorch snapshot into a mnemo trace", cmd_import_about,
     cmd_import_opts},
    {"export", cmd_export, "--to torch TRACE -o SNAPSHOT.pickle", "write a trace as a PyTorch memory snapshot (memory_viz opens it)",
     cmd_export_about, cmd_export_opts},
    {"bench", cmd_bench, "", "copy, cast and fill throughput through the public API", cmd_bench_about,
     cmd_bench_opts},
    {"version", cmd_version, "", "print the version", cmd_version_about, cmd_version_opts},
    {NULL, NULL, NULL, NULL, NULL, NULL},
};

int main(int argc, char **argv) {
  int rc = mn__cli_main(commands, argc, argv);
  /* Output that could not be written (a full disk, /dev/full) is a failure. */
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "mnemo: writing the output failed\n");
    return rc ? rc : 1;
  }
  return rc;
}
