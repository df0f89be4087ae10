/* tests/fuzz_handles.c: fuzzes the shared-memory handle strings of
 * mn_storage_from_shm_handle and the CUDA IPC handle bytes of
 * mn_storage_from_ipc_handle: a libFuzzer target (clang, MN_FUZZ_LIBFUZZER)
 * and a deterministic driver that mutates the seed corpus (any compiler).
 * Single-threaded: the live storages and decoys are globals. */
/*
 * At start-up the target makes three live shared-memory storages (4096, 24
 * and 0 bytes) and a row of decoy descriptors that a handle must never open:
 * an unlinked regular temporary file, a sealed memfd of another name, memfds
 * named mnemo-shm that are unsealed, sealed only against shrinking, or sealed
 * against writes, a pipe, a directory and /dev/null. The first input byte
 * picks what the rest is:
 *   % 3 == 0: a raw handle string (the rest, up to a NUL);
 *   % 3 == 1: a live handle of this process (storage (byte / 3) % 3) edited by
 *             the rest, read as operations: set the pid (own, 0, 1, parent,
 *             huge, ...), set the fd (a live storage's, a decoy's, or +-
 *             small), set nbytes (+- small, 0, huge), then edit characters
 *             (set, insert, delete, truncate);
 *   % 3 == 2: an IPC handle: the next byte picks the device (cpu, sim:0,
 *             sim:1, sim:7, cuda:0, a bad type) and, with its top bit,
 *             clears `reserved` and shrinks offset and nbytes so the call
 *             gets past the argument checks; the rest are the handle's bytes.
 * Every call must either be refused, with a status, a non-empty message and
 * *out untouched, or be accepted: a shared storage of the handle's exact
 * nbytes that is read whole; when the handle names this process, it must be
 * one of the three live storages (a write through it shows there) and is
 * filled and read back. A live handle, unedited, must be accepted. The
 * process's descriptor count is the same after every input, and its
 * memfd/deleted-file mappings the same every 256 inputs (and at the end of
 * the deterministic driver, which also compares descriptors with start-up).
 *
 * libFuzzer (clang builds; CTest `fuzz_handles` runs it for 20 s):
 *   CC=clang CXX=clang++ cmake -S . -B build/fuzz -G Ninja -DMNEMO_CUDA=OFF
 *   cmake --build build/fuzz --target fuzz_handles
 *   build/fuzz/tests/fuzz_handles -max_total_time=600 tests/corpus/handles
 * Deterministic driver (every build; CTest `test_fuzz_handles`):
 *   build/<dir>/tests/test_fuzz_handles [CORPUS_DIR] [ITERATIONS] [SEED]
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_driver.h"
#include "test_bytes.h"
#include "mnemo/mnemo.h"

#define NREAL 3
static const size_t REAL_SIZES[NREAL] = {4096, 24, 0};

static struct {
  bool ready;
  mn_storage_t *real[NREAL];
  int real_fd[NREAL];
  char real_handle[NREAL][MN_SHM_HANDLE_MAX];
  int targets[32]; /* the live storages' and the decoys' descriptors */
  int ntargets;
  int decoys[16]; /* descriptors the driver closes at the end */
  int ndecoys;
  int fds;         /* descriptors open after set-up */
  int maps_memfd;  /* mappings naming a memfd after set-up */
  int maps_del;    /* mappings of deleted files after set-up */
  unsigned long calls;
  int last_accepted;
  unsigned long shm_accepted, shm_refused, ipc_accepted, ipc_refused;
} G;

static void add_decoy(int fd) {
  if (fd < 0) return;
  if (G.ndecoys < (int)(sizeof G.decoys / sizeof G.decoys[0])) G.decoys[G.ndecoys++] = fd;
  if (G.ntargets < (int)(sizeof G.targets / sizeof G.targets[0])) G.targets[G.ntargets++] = fd;
}

#ifdef __linux__
static int decoy_memfd(const char *name, int seals) {
  int fd = memfd_create(name, MFD_CLOEXEC | (seals >= 0 ? MFD_ALLOW_SEALING : 0));
  if (fd < 0) return -1;
  if (ftruncate(fd, 4096) != 0 || (seals > 0 && fcntl(fd, F_ADD_SEALS, seals) != 0)) {
    close(fd);
    return -1;
  }
  return fd;
}
#endif

/* Makes the live storages and the decoys; 1 on failure. */
static int setup(void) {
  if (G.ready) return 0;
  mn_sim_config_t c = mn_sim_config_default();
  c.device_count = 2;
  c.capacity = (size_t)1 << 24;
  if (mn_sim_configure(&c) != MN_OK) fprintf(stderr, "mn_sim_configure: %s\n", mn_last_error());
  for (int i = 0; i < NREAL; i++) {
    if (mn_storage_create(mn_device_cpu(), REAL_SIZES[i], NULL, NULL, &G.real[i]) != MN_OK ||
        mn_storage_share_memory(G.real[i]) != MN_OK || mn_storage_shm_fd(G.real[i], &G.real_fd[i]) != MN_OK ||
        mn_storage_shm_handle(G.real[i], G.real_handle[i], MN_SHM_HANDLE_MAX) != MN_OK) {
      fprintf(stderr, "set-up of live storage %d failed: %s\n", i, mn_last_error());
      return 1;
    }
    G.targets[G.ntargets++] = G.real_fd[i];
  }
  char path[] = "/tmp/mnemo-fuzz-handles-XXXXXX";
  int t = mkstemp(path);
  if (t >= 0) {
    unlink(path);
    if (ftruncate(t, 4096) != 0 || pwrite(t, "secret", 6, 0) != 6) fprintf(stderr, "decoy file short\n");
  }
  add_decoy(t);
#ifdef __linux__
  add_decoy(decoy_memfd("other", F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
  add_decoy(decoy_memfd("mnemo-shm", 0));
  add_decoy(decoy_memfd("mnemo-shm", -1));
  add_decoy(decoy_memfd("mnemo-shm", F_SEAL_SHRINK));
  add_decoy(decoy_memfd("mnemo-shm", F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE));
#endif
  int pp[2];
  if (pipe(pp) == 0) {
    add_decoy(pp[0]);
    add_decoy(pp[1]);
  }
  add_decoy(open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  add_decoy(open("/dev/null", O_RDWR | O_CLOEXEC));
  G.fds = mn_test_count_fds();
  G.maps_memfd = mn_test_count_maps("memfd:");
  G.maps_del = mn_test_count_maps("(deleted)");
  G.ready = true;
  return 0;
}

/* ---- shared-memory handle strings ---- */

/* The grammar, mnemo-shm:<pid>:<fd>:<nbytes> with 1..19 decimal digits per
 * field, checked another way than the library does (character classes and
 * field lengths, then sscanf), so that the oracle does not share its bugs. */
static bool parse_handle(const char *h, unsigned long long *pid, unsigned long long *fd, unsigned long long *nb) {
  if (strncmp(h, "mnemo-shm:", 10) != 0) return false;
  const char *r = h + 10;
  size_t len = strlen(r), run = 0;
  int colons = 0;
  if (strspn(r, "0123456789:") != len) return false;
  for (size_t i = 0; i <= len; i++) {
    if (r[i] == ':' || r[i] == '\0') {
      if (run == 0 || run > 19) return false;
      colons += r[i] == ':';
      run = 0;
    } else {
      run++;
    }
  }
  return colons == 2 && sscanf(r, "%llu:%llu:%llu", pid, fd, nb) == 3;
}

static int check_shm(const char *h) {
  mn_storage_t *const sentinel = (mn_storage_t *)&G;
  mn_storage_t *out = sentinel;
  mn_clear_error();
  mn_status st = mn_storage_from_shm_handle(h, &out);
  int live = -1;
  for (int i = 0; i < NREAL; i++)
    if (strcmp(h, G.real_handle[i]) == 0) live = i;
  if (st != MN_OK) {
    G.shm_refused++;
    if (out != sentinel || mn_last_error()[0] == '\0' ||
        !(st == MN_ERR_INVALID_ARGUMENT || st == MN_ERR_NOT_FOUND || st == MN_ERR_IO ||
          st == MN_ERR_OUT_OF_MEMORY || st == MN_ERR_NOT_SUPPORTED)) {
      fprintf(stderr, "handle '%.200s' refused with %s, message \"%s\", out %s\n", h, mn_status_name(st),
              mn_last_error(), out == sentinel ? "untouched" : "SET");
      return 1;
    }
#ifdef __linux__
    if (live >= 0) {
      fprintf(stderr, "live handle '%s' refused: %s\n", h, mn_last_error());
      return 1;
    }
#endif
    return 0;
  }
  G.shm_accepted++;
  G.last_accepted = 1;
  unsigned long long pid = 0, fd = 0, nb = 0;
  int bad = 0;
  if (!out || out == sentinel || !parse_handle(h, &pid, &fd, &nb)) {
    fprintf(stderr, "handle '%.200s' accepted but %s\n", h, !out || out == sentinel ? "no storage" : "malformed");
    return 1;
  }
  size_t n = mn_storage_nbytes(out);
  unsigned char *p = mn_storage_data(out);
  if (n != nb || mn_storage_get_kind(out) != MN_STORAGE_SHARED || (n && !p) ||
      mn_storage_device(out).type != MN_DEVICE_CPU) {
    fprintf(stderr, "handle '%s' gave a storage of %zu bytes, kind %s\n", h, n,
            mn_storage_kind_name(mn_storage_get_kind(out)));
    bad = 1;
  }
  /* readable whole */
  unsigned sum = 0;
  for (size_t i = 0; !bad && i < n; i++) sum += p[i];
  (void)sum;
  if (!bad && pid == (unsigned long long)getpid()) {
    /* this process: one of the live storages, writable through the new mapping */
    int which = -1;
    for (int i = 0; i < NREAL; i++)
      if ((unsigned long long)G.real_fd[i] == fd) which = i;
    if (which < 0 || REAL_SIZES[which] != n) {
      fprintf(stderr, "handle '%s' opened something that is not a live storage of this process\n", h);
      bad = 1;
    } else {
      int v = (int)(G.calls & 0xff);
      if (mn_storage_fill(out, v, NULL) != MN_OK) {
        fprintf(stderr, "fill of an accepted storage failed: %s\n", mn_last_error());
        bad = 1;
      }
      const unsigned char *q = mn_storage_data(G.real[which]);
      for (size_t i = 0; !bad && i < n; i++)
        if (p[i] != (unsigned char)v || q[i] != (unsigned char)v) {
          fprintf(stderr, "handle '%s': byte %zu reads %d here and %d in the live storage, wrote %d\n", h, i,
                  p[i], q[i], v);
          bad = 1;
        }
    }
  }
  mn_storage_release(out);
  return bad;
}

/* Field values the edit operations choose from. */
static void pid_text(char *buf, size_t n, int v) {
  static const char *const fixed[] = {"0", "1", "2147483647", "2147483648", "18446744073709551615",
                                      "9999999999999999999", "99999999999999999999", "999999999", ""};
  int k = v % 12;
  if (k == 0) snprintf(buf, n, "%ld", (long)getpid());
  else if (k == 1) snprintf(buf, n, "%ld", (long)getppid());
  else if (k == 2) snprintf(buf, n, "%ld", (long)getpid() + 1 + (v >> 4));
  else snprintf(buf, n, "%s", fixed[k - 3]);
}

static void fd_text(char *buf, size_t n, int v, int cur) {
  if (v < 0x80) snprintf(buf, n, "%d", G.targets[v % G.ntargets]);
  else if (v < 0xf0) snprintf(buf, n, "%d", cur + (int)(int8_t)(uint8_t)(v << 1) / 2);
  else {
    static const char *const fixed[] = {"-1", "2147483647", "2147483648", "18446744073709551615", "00", "",
                                        "0", "1", "2", "3"};
    snprintf(buf, n, "%s", fixed[(v - 0xf0) % 10]);
  }
}

static void nbytes_text(char *buf, size_t n, int v, size_t cur) {
  static const char *const fixed[] = {"0", "18446744073709551615", "9223372036854775808", "9999999999999999999",
                                      "18446744073709551616", "4096", "24", "1", ""};
  if (v < 0x80) snprintf(buf, n, "%lld", (long long)cur + (int8_t)(uint8_t)(v << 1) / 2);
  else snprintf(buf, n, "%s", fixed[(v - 0x80) % 9]);
}

typedef struct {
  const uint8_t *p;
  size_t n, at;
} reader;

static int next(reader *r) { return r->at < r->n ? r->p[r->at++] : 0; }

#define HMAX 256

/* A live handle edited by the operations in data[0..size). */
static void edited_handle(int which, const uint8_t *data, size_t size, char *h) {
  char fpid[32], ffd[32], fnb[32];
  snprintf(fpid, sizeof fpid, "%ld", (long)getpid());
  snprintf(ffd, sizeof ffd, "%d", G.real_fd[which]);
  snprintf(fnb, sizeof fnb, "%zu", REAL_SIZES[which]);
  struct {
    int op, pos, c;
  } edits[32];
  int nedits = 0;
  reader r = {data, size, 0};
  while (r.at < r.n) {
    int b = next(&r);
    switch (b % 8) {
      case 0: pid_text(fpid, sizeof fpid, next(&r)); break;
      case 1: fd_text(ffd, sizeof ffd, next(&r), G.real_fd[which]); break;
      case 2: nbytes_text(fnb, sizeof fnb, next(&r), REAL_SIZES[which]); break;
      default:
        if (nedits < 32) {
          edits[nedits].op = b % 8;
          edits[nedits].pos = next(&r);
          edits[nedits].c = next(&r);
          nedits++;
        }
        break;
    }
  }
  snprintf(h, HMAX, "mnemo-shm:%s:%s:%s", fpid, ffd, fnb);
  for (int i = 0; i < nedits; i++) {
    size_t len = strlen(h), at = len ? (size_t)edits[i].pos % (len + 1) : 0;
    char c = (char)(edits[i].c ? edits[i].c : '0');
    switch (edits[i].op) {
      case 3: /* set a character */
        if (at < len) h[at] = c;
        break;
      case 4: /* insert one */
        if (len + 1 < HMAX) {
          memmove(h + at + 1, h + at, len - at + 1);
          h[at] = c;
        }
        break;
      case 5: /* delete one */
        if (at < len) memmove(h + at, h + at + 1, len - at);
        break;
      case 6: /* truncate */
        h[at] = '\0';
        break;
      default: /* insert a digit */
        if (len + 1 < HMAX) {
          memmove(h + at + 1, h + at, len - at + 1);
          h[at] = (char)('0' + (unsigned char)c % 10);
        }
        break;
    }
  }
}

/* ---- IPC handle bytes ---- */

static int check_ipc(const uint8_t *data, size_t size) {
  reader r = {data, size, 0};
  int sel = next(&r);
  mn_device_t devs[] = {mn_device_cpu(), mn_device_sim(0), mn_device_sim(1), mn_device_sim(7), mn_device_cuda(0),
                        mn_device_cpu()};
  mn_device_t dev = devs[(sel & 0x7f) % 6];
  if ((sel & 0x7f) % 6 == 5) dev.type = (mn_device_type)42;
  mn_ipc_handle_t h;
  memset(&h, 0, sizeof h);
  memcpy(&h, data + r.at, size - r.at < sizeof h ? size - r.at : sizeof h);
  if (sel & 0x80) {
    h.reserved = 0;
    h.offset %= 4096;
    h.nbytes %= 4096;
  }
  mn_storage_t *const sentinel = (mn_storage_t *)&G;
  mn_storage_t *out = sentinel;
  mn_clear_error();
  mn_status st = mn_storage_from_ipc_handle(dev, &h, &out);
  if (st != MN_OK) {
    G.ipc_refused++;
    if (out != sentinel || mn_last_error()[0] == '\0') {
      fprintf(stderr, "IPC handle refused with %s, message \"%s\", out %s\n", mn_status_name(st), mn_last_error(),
              out == sentinel ? "untouched" : "SET");
      return 1;
    }
    return 0;
  }
  /* only a CUDA build with a GPU gets here (another process's live handle) */
  G.ipc_accepted++;
  G.last_accepted = 1;
  int bad = 0;
  size_t n = mn_storage_nbytes(out);
  if (!out || out == sentinel || n != h.nbytes || !mn_device_equal(mn_storage_device(out), dev)) {
    fprintf(stderr, "IPC handle accepted with a wrong storage\n");
    return 1;
  }
  unsigned char *host = malloc(n ? n : 1);
  if (host && n) {
    bad |= mn_storage_fill(out, 0x5c, NULL) != MN_OK;
    bad |= mn_copy_bytes(mn_device_cpu(), host, dev, mn_storage_data(out), n, NULL, 0) != MN_OK;
    for (size_t i = 0; !bad && i < n; i++) bad = host[i] != 0x5c;
    if (bad) fprintf(stderr, "IPC storage not writable and readable back: %s\n", mn_last_error());
  }
  free(host);
  mn_storage_release(out);
  return bad;
}

/* ---- the driver ---- */

static int check_input(const uint8_t *data, size_t size) {
  if (setup()) return 1;
  G.last_accepted = 0;
  if (!size) return 0;
  G.calls++;
  int fds = mn_test_count_fds(), bad = 0;
  char h[HMAX];
  switch (data[0] % 3) {
    case 0: {
      size_t n = size - 1 < HMAX - 1 ? size - 1 : HMAX - 1;
      memcpy(h, data + 1, n);
      h[n] = '\0';
      bad = check_shm(h);
      break;
    }
    case 1:
      edited_handle((data[0] / 3) % NREAL, data + 1, size - 1, h);
      bad = check_shm(h);
      break;
    default: bad = check_ipc(data + 1, size - 1); break;
  }
  if (mn_test_count_fds() != fds) {
    fprintf(stderr, "descriptors: %d before the call, %d after\n", fds, mn_test_count_fds());
    bad = 1;
  }
  if (G.calls % 256 == 0 && (mn_test_count_maps("memfd:") != G.maps_memfd || mn_test_count_maps("(deleted)") != G.maps_del)) {
    fprintf(stderr, "a mapping was left behind\n");
    bad = 1;
  }
  return bad;
}

/* Whether the input check_input just ran was accepted (the driver asks right after). */
static int accepts(uint8_t *data, size_t size) {
  (void)data;
  (void)size;
  return G.last_accepted;
}

/* Structure-aware: turns the input into a live or decoy handle of this
 * process in the raw form, or appends one field operation to an edited one. */
static size_t mutate_handle(uint8_t *d, size_t n, size_t cap) {
  if (setup() || n == 0 || cap < HMAX + 4) return n;
  if (d[0] % 3 == 0) {
    int fd = G.targets[mn_fuzz_rng() % (uint64_t)G.ntargets];
    int which = (int)(mn_fuzz_rng() % NREAL);
    int len = snprintf((char *)d + 1, cap - 1, "mnemo-shm:%ld:%d:%zu", (long)getpid(), fd,
                       mn_fuzz_rng() & 1 ? REAL_SIZES[which] : (size_t)(mn_fuzz_rng() % 8192));
    return len > 0 ? (size_t)len + 1 : n;
  }
  if (d[0] % 3 == 1 && n + 2 <= cap) {
    d[n] = (uint8_t)(mn_fuzz_rng() % 3);
    d[n + 1] = (uint8_t)mn_fuzz_rng();
    return n + 2;
  }
  return n;
}

#ifndef MN_HANDLES_CORPUS_DIR
#define MN_HANDLES_CORPUS_DIR "tests/corpus/handles"
#endif

static const char *const TOKENS[] = {"mnemo-shm:", ":", "0", "1", "-1", "+", " ", "\0", "/",
                                     "18446744073709551615", "18446744073709551616", "2147483647", "2147483648",
                                     "9999999999999999999", "99999999999999999999", "4096", "24", "0x10", "\n"};
static const uint8_t SPECIAL[] = {0, 1, 2, 3, 4, 5, ':', '0', '9', 0x7f, 0x80, 0xff};

static const mn_fuzz_driver_t DRIVER = {
    .corpus_dir = MN_HANDLES_CORPUS_DIR,
    .check = check_input,
    .accepts = accepts,
    .tokens = TOKENS,
    .ntokens = sizeof TOKENS / sizeof TOKENS[0],
    .special = SPECIAL,
    .nspecial = sizeof SPECIAL,
    .mutate = mutate_handle,
};

#ifdef MN_FUZZ_LIBFUZZER
MN_FUZZ_ENTRY(DRIVER)
#else
int main(int argc, char **argv) {
  int fds0 = mn_test_count_fds(), memfd0 = mn_test_count_maps("memfd:"), del0 = mn_test_count_maps("(deleted)");
  if (setup()) return 1;
  int rc = mn_fuzz_main(&DRIVER, argc, argv);
  for (int i = 0; i < NREAL; i++) mn_storage_release(G.real[i]);
  for (int i = 0; i < G.ndecoys; i++) close(G.decoys[i]);
  printf("shm handles: %lu accepted, %lu refused; IPC handles: %lu accepted, %lu refused\n", G.shm_accepted,
         G.shm_refused, G.ipc_accepted, G.ipc_refused);
#ifdef __linux__
  if (G.shm_accepted == 0) {
    fprintf(stderr, "no handle was ever accepted: the fuzzer does not reach the open path\n");
    rc = 1;
  }
#endif
  if (mn_test_count_fds() != fds0 || mn_test_count_maps("memfd:") != memfd0 || mn_test_count_maps("(deleted)") != del0) {
    fprintf(stderr, "left behind: %d descriptors, %d memfd mappings, %d deleted-file mappings\n",
            mn_test_count_fds() - fds0, mn_test_count_maps("memfd:") - memfd0, mn_test_count_maps("(deleted)") - del0);
    rc = 1;
  }
  return rc;
}
#endif
