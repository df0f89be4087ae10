/* tests/fuzz_share.c: fuzzes the block-sharing handshake (mnemo/share.h): a
 * mutated handle message with a mutated list of descriptors (SCM_RIGHTS) goes
 * through a socketpair into mn_share_handle_recv, and what that accepts into
 * mn_storage_from_share_handle. A libFuzzer target (clang, MN_FUZZ_LIBFUZZER)
 * and a deterministic driver that mutates the seed corpus (any compiler).
 * Single-threaded: the exports, decoys and socket are globals. */
/*
 * At start-up the target exports two live SIM blocks of this process: a
 * 4096-byte block of a plain segment (another live block, never exported,
 * sits next to it) and one of an expandable segment, each filled with its
 * own byte. The descriptors an input may attach (by index):
 *   0 the plain export's reference file   1 its memory piece
 *   2 the expandable export's reference    3 its memory piece
 *   4 an unsealed copy of 0 (same name)    5 a copy of 1 sealed only against shrinking
 *   6 a sealed memfd named as a reference file but of another size
 *   7 a pipe   8 /dev/null   9 a directory   10 the other end of the socket
 * The input:
 *   byte 0: bit 0 picks the handle edited (0: the plain export, 1: the
 *           expandable one); bit 1: start from zeros instead;
 *   byte 1: how many descriptors to attach (% 20: up to 19, more than
 *           MN_SHARE_MAX_FDS + 1), then one byte each: the index (% 11);
 *   next byte: the message length: 0..127 sizeof(handle), 128..255 shorter
 *           by (b - 127), except 255: 16 bytes longer;
 *   the rest: edits, 3 bytes each: a byte position (16 bits, % length) and
 *           a value XORed into it.
 * Every call must either be refused, with a status, a non-empty message,
 * nothing kept, or be accepted; an accepted receive is opened, and an
 * accepted open must be the block exported (token, offset and size of one
 * of the two exports, the storage's size that size, its bytes the block's
 * byte). An unedited live handle with its own descriptors is accepted. The
 * descriptor count is the same after every input, and the memfd and
 * deleted-file mappings every 256 inputs (and at the end of the
 * deterministic driver, which also compares them with start-up).
 *
 * libFuzzer (the `fuzz` preset; CTest `fuzz_share` runs it for 20 s):
 *   cmake --preset fuzz && cmake --build build/fuzz --target fuzz_share
 *   build/fuzz/tests/fuzz_share -max_total_time=600 tests/corpus/share
 * Deterministic driver (every build; CTest `test_fuzz_share`):
 *   build/<dir>/tests/test_fuzz_share [CORPUS_DIR] [ITERATIONS] [SEED]
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fuzz_driver.h"
#include "test_bytes.h"
#include "mnemo/mnemo.h"

#define NTARGETS 11
#define MAX_ATTACH 19
static const unsigned char FILL[2] = {0xA5, 0x5C};

static struct {
  bool ready;
  mn_allocator_t *alloc[2]; /* plain, expandable */
  void *block[2], *neighbour;
  mn_share_handle_t export[2];
  int targets[NTARGETS];
  int sv[2]; /* sv[0] sends, sv[1] receives */
  int fds, maps_memfd, maps_del;
  unsigned long calls, recv_ok, open_ok, refused;
  int last_accepted;
} G;

static int copy_memfd(int fd, const char *name, int seals, off_t size) {
  int f = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  struct stat sb;
  if (f < 0 || fstat(fd, &sb) != 0) return f;
  if (size == 0) size = sb.st_size;
  if (ftruncate(f, size) != 0) return f;
  static char buf[1 << 16];
  for (off_t at = 0; at < sb.st_size && at < size;) {
    ssize_t n = pread(fd, buf, sizeof buf, at);
    if (n <= 0 || pwrite(f, buf, (size_t)n, at) != n) break;
    at += n;
  }
  if (seals) (void)fcntl(f, F_ADD_SEALS, seals);
  return f;
}

/* Makes the exports, decoys and socket; 1 on failure. */
static int setup(void) {
  if (G.ready) return 0;
  for (int k = 0; k < 2; k++) {
    mn_caching_config_t cfg = mn_caching_config_default();
    cfg.expandable_segments = k == 1;
    if (mn_caching_allocator_create(mn_device_sim(0), &cfg, &G.alloc[k]) != MN_OK ||
        mn_allocator_alloc(G.alloc[k], 4096, NULL, &G.block[k]) != MN_OK ||
        (k == 0 && mn_allocator_alloc(G.alloc[0], 4096, NULL, &G.neighbour) != MN_OK)) {
      fprintf(stderr, "set-up: %s\n", mn_last_error());
      return 1;
    }
    memset(G.block[k], FILL[k], 4096);
    if (k == 0) memset(G.neighbour, 0x77, 4096);
    if (mn_caching_share_export(G.alloc[k], G.block[k], &G.export[k]) != MN_OK) {
      fprintf(stderr, "set-up: export: %s\n", mn_last_error());
      return 1;
    }
  }
  G.targets[0] = G.export[0].ref_fd;
  G.targets[1] = G.export[0].fds[0];
  G.targets[2] = G.export[1].ref_fd;
  G.targets[3] = G.export[1].fds[0];
  G.targets[4] = copy_memfd(G.export[0].ref_fd, "mnemo-share-ref", 0, 0);
  G.targets[5] = copy_memfd(G.export[0].fds[0], "mnemo-sim-share", F_SEAL_SHRINK, 0);
  G.targets[6] = copy_memfd(G.export[0].ref_fd, "mnemo-share-ref",
                            F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL, 8192);
  int pp[2];
  if (pipe(pp) != 0) return 1;
  close(pp[1]);
  G.targets[7] = pp[0];
  G.targets[8] = open("/dev/null", O_RDWR | O_CLOEXEC);
  G.targets[9] = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, G.sv) != 0) return 1;
  G.targets[10] = G.sv[0];
  for (int i = 0; i < NTARGETS; i++)
    if (G.targets[i] < 0) {
      fprintf(stderr, "set-up: descriptor %d\n", i);
      return 1;
    }
  G.fds = mn_test_count_fds();
  G.maps_memfd = mn_test_count_maps("memfd:");
  G.maps_del = mn_test_count_maps("(deleted)");
  G.ready = true;
  return 0;
}

static bool all_bytes(const void *p, unsigned char v, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++)
    if (c[i] != v) return false;
  return true;
}

/* Opens a received handle; 1 when an invariant broke. */
static int check_open(const mn_share_handle_t *h) {
  mn_storage_t *s = NULL;
  mn_clear_error();
  mn_status st = mn_storage_from_share_handle(mn_device_sim(0), h, &s);
  if (st != MN_OK) {
    G.refused++;
    if (s != NULL || mn_last_error()[0] == '\0') {
      fprintf(stderr, "a refused open left *out set or no message (%s)\n", mn_status_name(st));
      return 1;
    }
    return 0;
  }
  G.open_ok++;
  G.last_accepted = 1;
  int k = h->token == G.export[0].token ? 0 : h->token == G.export[1].token ? 1 : -1;
  int bad = 0;
  if (k < 0 || h->offset != G.export[k].offset || h->nbytes != G.export[k].nbytes ||
      mn_storage_nbytes(s) != G.export[k].nbytes) {
    fprintf(stderr, "an open was accepted for what was not exported (token %016llx, offset %llu, nbytes %llu)\n",
            (unsigned long long)h->token, (unsigned long long)h->offset, (unsigned long long)h->nbytes);
    bad = 1;
  } else if (!all_bytes(mn_storage_data(s), FILL[k], mn_storage_nbytes(s))) {
    fprintf(stderr, "an accepted open maps other bytes than the exported block's\n");
    bad = 1;
  }
  mn_storage_release(s);
  return bad;
}

/* Sends the message the input describes and receives it; 1 when an invariant broke. */
static int check_input(const uint8_t *data, size_t size) {
  if (setup()) return 1;
  G.last_accepted = 0;
  if (size < 3) return 0;
  G.calls++;
  int fds = mn_test_count_fds(), bad = 0;
  size_t pos = 0;
  int which = data[pos] & 1;
  mn_share_handle_t h;
  if (data[pos++] & 2) memset(&h, 0, sizeof h);
  else h = G.export[which];
  int attach[MAX_ATTACH];
  size_t nattach = data[pos++] % (MAX_ATTACH + 1);
  for (size_t i = 0; i < nattach; i++) attach[i] = G.targets[pos < size ? data[pos++] % NTARGETS : 0];
  size_t len = sizeof h;
  if (pos < size) {
    uint8_t b = data[pos++];
    if (b == 255) len = sizeof h + 16;
    else if (b >= 128) len = sizeof h - (size_t)(b - 127);
  }
  uint8_t msgbuf[sizeof h + 16];
  memset(msgbuf, 0, sizeof msgbuf);
  memcpy(msgbuf, &h, sizeof h);
  for (; pos + 3 <= size; pos += 3) {
    size_t at = ((size_t)data[pos] | (size_t)data[pos + 1] << 8) % len;
    msgbuf[at] ^= data[pos + 2];
  }
  union {
    char buf[CMSG_SPACE(sizeof(int) * MAX_ATTACH)];
    struct cmsghdr align;
  } ctl;
  memset(&ctl, 0, sizeof ctl);
  struct iovec iov = {.iov_base = msgbuf, .iov_len = len};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
  if (nattach) {
    msg.msg_control = ctl.buf;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * nattach);
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nattach);
    memcpy(CMSG_DATA(c), attach, sizeof(int) * nattach);
  }
  if (sendmsg(G.sv[0], &msg, MSG_NOSIGNAL) != (ssize_t)len) {
    fprintf(stderr, "sendmsg failed\n");
    return 1;
  }
  mn_share_handle_t r;
  memset(&r, 0xEE, sizeof r);
  mn_clear_error();
  mn_status st = mn_share_handle_recv(G.sv[1], &r);
  if (st == MN_OK) {
    G.recv_ok++;
    bad |= check_open(&r);
    mn_share_handle_close(&r);
  } else {
    G.refused++;
    const uint8_t *rb = (const uint8_t *)&r;
    for (size_t i = 0; i < sizeof r && !bad; i++)
      if (rb[i] != 0xEE) {
        fprintf(stderr, "a refused receive wrote *out\n");
        bad = 1;
      }
    if (mn_last_error()[0] == '\0') {
      fprintf(stderr, "a refused receive has no message\n");
      bad = 1;
    }
  }
  if (mn_test_count_fds() != fds) {
    fprintf(stderr, "descriptors: %d before the call, %d after\n", fds, mn_test_count_fds());
    bad = 1;
  }
  if (G.calls % 256 == 0 &&
      (mn_test_count_maps("memfd:") != G.maps_memfd || mn_test_count_maps("(deleted)") != G.maps_del)) {
    fprintf(stderr, "a mapping was left behind\n");
    bad = 1;
  }
  if (!all_bytes(G.neighbour, 0x77, 4096)) {
    fprintf(stderr, "the block never exported was written\n");
    bad = 1;
  }
  return bad;
}

/* Whether the input check_input just ran was opened (the driver asks right after). */
static int accepts(uint8_t *data, size_t size) {
  (void)data;
  (void)size;
  return G.last_accepted;
}

/* Structure-aware: sets the descriptor list to an export's own (so edits of
 * the message reach the open path), or appends one edit of a handle field. */
static size_t mutate_share(uint8_t *d, size_t n, size_t cap) {
  if (n < 3 || cap < 8) return n;
  uint64_t r = mn_fuzz_rng();
  if (r % 3 == 0) {
    int k = d[0] & 1;
    uint8_t head[5] = {(uint8_t)k, 2, (uint8_t)(k ? 2 : 0), (uint8_t)(k ? 3 : 1), 0};
    size_t old = 2 + (size_t)(d[1] % (MAX_ATTACH + 1)) + 1, keep = n > old ? n - old : 0;
    if (5 + keep > cap) keep = cap - 5;
    memmove(d + 5, d + (n - keep), keep);
    memcpy(d, head, 5);
    return 5 + keep;
  }
  static const size_t fields[] = {offsetof(mn_share_handle_t, version), offsetof(mn_share_handle_t, kind),
                                  offsetof(mn_share_handle_t, device_index), offsetof(mn_share_handle_t, token),
                                  offsetof(mn_share_handle_t, segment_size), offsetof(mn_share_handle_t, offset),
                                  offsetof(mn_share_handle_t, nbytes), offsetof(mn_share_handle_t, nfds),
                                  offsetof(mn_share_handle_t, piece_offset), offsetof(mn_share_handle_t, piece_length),
                                  offsetof(mn_share_handle_t, fds), offsetof(mn_share_handle_t, ref_fd)};
  if (n + 3 > cap) return n;
  size_t at = fields[(r >> 8) % (sizeof fields / sizeof fields[0])] + (size_t)((r >> 16) % 8);
  d[n] = (uint8_t)at;
  d[n + 1] = (uint8_t)(at >> 8);
  d[n + 2] = (uint8_t)(1u << ((r >> 24) % 8));
  return n + 3;
}

#ifndef MN_SHARE_CORPUS_DIR
#define MN_SHARE_CORPUS_DIR "tests/corpus/share"
#endif

static const uint8_t SPECIAL[] = {0, 1, 2, 3, 4, 10, 11, 16, 17, 18, 19, 0x7f, 0x80, 0xfe, 0xff};

static const mn_fuzz_driver_t DRIVER = {
    .corpus_dir = MN_SHARE_CORPUS_DIR,
    .check = check_input,
    .accepts = accepts,
    .special = SPECIAL,
    .nspecial = sizeof SPECIAL,
    .mutate = mutate_share,
};

#ifdef MN_FUZZ_LIBFUZZER
MN_FUZZ_ENTRY(DRIVER)
#else
int main(int argc, char **argv) {
  int fds0 = mn_test_count_fds(), memfd0 = mn_test_count_maps("memfd:"), del0 = mn_test_count_maps("(deleted)");
  if (setup()) return 1;
  /* the unedited exports, with their own descriptors, must open */
  static const uint8_t live[2][5] = {{0, 2, 0, 1, 0}, {1, 2, 2, 3, 0}};
  int rc = 0;
  for (int k = 0; k < 2; k++) {
    unsigned long before = G.open_ok;
    rc |= check_input(live[k], sizeof live[k]);
    if (G.open_ok != before + 1) {
      fprintf(stderr, "the live export %d was not opened: %s\n", k, mn_last_error());
      rc = 1;
    }
  }
  rc |= mn_fuzz_main(&DRIVER, argc, argv);
  printf("share handshake: %lu received, %lu opened, %lu refused\n", G.recv_ok, G.open_ok, G.refused);
  for (int i = 4; i < NTARGETS - 1; i++) close(G.targets[i]);
  close(G.sv[0]);
  close(G.sv[1]);
  for (int k = 0; k < 2; k++) {
    mn_share_handle_close(&G.export[k]);
    if (mn_allocator_free(G.alloc[k], G.block[k]) != MN_OK) rc = 1;
  }
  if (mn_allocator_free(G.alloc[0], G.neighbour) != MN_OK) rc = 1;
  for (int k = 0; k < 2; k++) mn_allocator_destroy(G.alloc[k]);
  if (mn_test_count_fds() != fds0 || mn_test_count_maps("memfd:") != memfd0 ||
      mn_test_count_maps("(deleted)") != del0) {
    fprintf(stderr, "left behind: %d descriptors, %d memfd mappings, %d deleted-file mappings\n",
            mn_test_count_fds() - fds0, mn_test_count_maps("memfd:") - memfd0, mn_test_count_maps("(deleted)") - del0);
    rc = 1;
  }
  return rc;
}
#endif
