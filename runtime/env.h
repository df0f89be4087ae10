/* runtime/env.h: the one table of the environment variables that the library
 * and the mnemo CLI read (name, meaning, default), and the one reader.
 * mn__env calls getenv on every call (no cache): thread-safe as getenv is,
 * i.e. as long as no thread changes the environment meanwhile. */
#ifndef MNEMO_RUNTIME_ENV_H
#define MNEMO_RUNTIME_ENV_H

/* X(ID, NAME, MEANING, DEFAULT): one row per variable; MN__ENV_##ID names it.
 * A new variable is a row here (mn_env_get, `mnemo info` and the README's
 * table follow; tests/test_cli_profiling.sh checks the last two). */
/* clang-format off */
#define MN__ENV_TABLE(X)                                                                                          \
  X(ALLOC_CONF, "MNEMO_ALLOC_CONF",                                                                               \
    "settings of the default caching allocator on SIM and CUDA, PyTorch's PYTORCH_CUDA_ALLOC_CONF syntax "        \
    "(docs/ALLOCATOR.md); a bad value fails its creation",                                                         \
    "PyTorch's defaults")                                                                                   \
  X(NVTX, "MNEMO_NVTX", "1: NVTX ranges on from the start (docs/PROFILING.md)", "off")                            \
  X(TRACE, "MNEMO_TRACE",                                                                                         \
    "a path: record every caching allocator's events in a ring, written there as a trace at exit",                \
    "no recording")                                                                                         \
  X(TRACE_CAPACITY, "MNEMO_TRACE_CAPACITY", "events the MNEMO_TRACE ring holds", "1000000")                       \
  X(TRACE_STACKS, "MNEMO_TRACE_STACKS",                                                                           \
    "1 (16 frames) or a frame count up to 64: the MNEMO_TRACE ring keeps each event's C call stack", "off")          \
  X(KERNEL_THREADS, "MNEMO_KERNEL_THREADS", "threads of the CPU kernels' pool (also large loads' reads and checksums)", \
    "online CPUs, at most 16")                                                                                    \
  X(CPU_HUGEPAGES, "MNEMO_CPU_HUGEPAGES",                                                                         \
    "0: no transparent-huge-page advice on CPU allocations of 4 MiB or more", "on")                               \
  X(SIM_CAPACITY, "MNEMO_SIM_CAPACITY",                                                                           \
    "memory of each SIM device (a byte count: 16G, 512M) when mn_sim_configure was not called", "80G")            \
  X(SIM_EAGER, "MNEMO_SIM_EAGER",                                                                                 \
    "1: SIM streams run work at once (eager) when mn_sim_configure was not called", "off (work waits until the stream is advanced)") \
  X(DATA_DIR, "MNEMO_DATA_DIR", "the folder where `mnemo demo` finds the bundled traces (traces/)",               \
    "the source tree's data/")                                                                                     \
  X(TOOLS_DIR, "MNEMO_TOOLS_DIR",                                                                                 \
    "the folder where `mnemo snapshot` and `mnemo import` find import_torch_snapshot.py",                          \
    "the source tree's tools/")                                                                                    \
  X(CACHE, "MNEMO_CACHE",                                                                                         \
    "0: no import cache (the CLI imports a PyTorch snapshot on every command); a folder: the cache's place "     \
    "(docs/PROFILING.md, Scale)", "$XDG_CACHE_HOME/mnemo, else ~/.cache/mnemo")                                  \
  X(XDG_CACHE_HOME, "XDG_CACHE_HOME", "the user's cache folder (the import cache is its mnemo/)", "~/.cache")    \
  X(HOME, "HOME", "the user's home folder (~/.cache/mnemo when XDG_CACHE_HOME is unset)", "none")              \
  X(TMPDIR, "TMPDIR", "the folder where `mnemo demo` writes its HTML report", "/tmp")
/* clang-format on */

typedef enum mn__env_id {
#define MN__ENV_ENUM(id, name, meaning, def) MN__ENV_##id,
  MN__ENV_TABLE(MN__ENV_ENUM)
#undef MN__ENV_ENUM
  MN__ENV_COUNT
} mn__env_id;

/* The variable's value, or NULL when it is unset (or id is out of range).
 * The only getenv of the library and the CLI; the string is the
 * environment's, valid until the variable changes. */
const char *mn__env(mn__env_id id);
/* Its name ("MNEMO_NVTX"), or NULL for an id out of range. */
const char *mn__env_name(mn__env_id id);

#endif /* MNEMO_RUNTIME_ENV_H */
