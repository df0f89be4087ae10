/* runtime/nameset.c: the hash set of byte strings (runtime/nameset.h):
 * SipHash-1-3 under a per-process random key, linear probing over 8-byte
 * slots that index a dense entry array, doubling growth. A set has one owner at a time; the key is made once (pthread_once). */
#include "runtime/nameset.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/hostmem.h"
#include "runtime/random.h"

#define MIN_CAP 16u
#define MAX_HINT ((size_t)1 << 20) /* a hint from a file header sizes no more than this up front */

/* ---- SipHash-1-3 (Aumasson and Bernstein; the variant Rust's HashMap uses) ---- */

static uint64_t sip_k0, sip_k1;
static pthread_once_t sip_once = PTHREAD_ONCE_INIT;

static void sip_key_init(void) {
  sip_k0 = mn__random_u64();
  sip_k1 = mn__random_u64();
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND            \
  do {                      \
    v0 += v1;               \
    v1 = ROTL(v1, 13);      \
    v1 ^= v0;               \
    v0 = ROTL(v0, 32);      \
    v2 += v3;               \
    v3 = ROTL(v3, 16);      \
    v3 ^= v2;               \
    v0 += v3;               \
    v3 = ROTL(v3, 21);      \
    v3 ^= v0;               \
    v2 += v1;               \
    v1 = ROTL(v1, 17);      \
    v1 ^= v2;               \
    v2 = ROTL(v2, 32);      \
  } while (0)

static uint64_t load_le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static uint64_t siphash13(const void *data, size_t len) {
  pthread_once(&sip_once, sip_key_init);
  const unsigned char *in = data, *end = in + (len - len % 8);
  uint64_t v0 = 0x736f6d6570736575ull ^ sip_k0, v1 = 0x646f72616e646f6dull ^ sip_k1;
  uint64_t v2 = 0x6c7967656e657261ull ^ sip_k0, v3 = 0x7465646279746573ull ^ sip_k1;
  for (; in != end; in += 8) {
    uint64_t m = load_le64(in);
    v3 ^= m;
    SIPROUND;
    v0 ^= m;
  }
  uint64_t b = (uint64_t)len << 56;
  for (size_t i = 0; i < len % 8; i++) b |= (uint64_t)in[i] << (8 * i);
  v3 ^= b;
  SIPROUND;
  v0 ^= b;
  v2 ^= 0xff;
  SIPROUND;
  SIPROUND;
  SIPROUND;
  return v0 ^ v1 ^ v2 ^ v3;
}

/* ---- the table ------------------------------------------------------------------ */

void mn__nameset_init(mn__nameset_t *s, size_t hint) {
  memset(s, 0, sizeof *s);
  s->hint = hint < MAX_HINT ? hint : MAX_HINT;
}

void mn__nameset_free(mn__nameset_t *s) {
  free(s->slots);
  free(s->entries);
  s->slots = NULL;
  s->entries = NULL;
  s->cap = s->count = s->entries_cap = 0;
}

static uint32_t tag_of(uint64_t h) { return (uint32_t)(h >> 32); }

/* The slot of key (hash h): the one holding it, or the empty one it would go to. */
static size_t probe(const mn__nameset_t *s, const char *key, size_t len, uint64_t h) {
  size_t mask = s->cap - 1, i = (size_t)h & mask;
  uint32_t tag = tag_of(h);
  for (;;) {
    const mn__nameset_slot_t *e = &s->slots[i];
    if (!e->entry) return i;
    if (e->tag == tag) {
      const mn__nameset_entry_t *x = &s->entries[e->entry - 1];
      if (x->hash == h && x->len == len && memcmp(x->key, key, len) == 0) return i;
    }
    i = (i + 1) & mask;
  }
}

/* A table of `cap` slots (a power of two) indexing the current entries; false when out of memory. */
static bool rehash(mn__nameset_t *s, size_t cap) {
  mn__nameset_slot_t *slots = mn__calloc(cap, sizeof *slots);
  if (!slots) return false;
  for (size_t k = 0; k < s->count; k++) {
    uint64_t h = s->entries[k].hash;
    size_t j = (size_t)h & (cap - 1);
    while (slots[j].entry) j = (j + 1) & (cap - 1);
    slots[j] = (mn__nameset_slot_t){tag_of(h), (uint32_t)(k + 1)};
  }
  free(s->slots);
  s->slots = slots;
  s->cap = cap;
  return true;
}

mn__nameset_result mn__nameset_insert(mn__nameset_t *s, const char *key, size_t len, size_t value, size_t *prev) {
  uint64_t h = siphash13(key, len);
  size_t i = 0;
  if (s->slots) {
    i = probe(s, key, len, h);
    if (s->slots[i].entry) {
      if (prev) *prev = s->entries[s->slots[i].entry - 1].value;
      return MN__NAMESET_DUPLICATE;
    }
  }
  if (s->count >= UINT32_MAX - 1) return MN__NAMESET_NOMEM;
  size_t want = s->count + 1 > s->hint ? s->count + 1 : s->hint;
  if (s->count == s->entries_cap) { /* room for the entry */
    size_t nc = s->entries_cap ? s->entries_cap * 2 : want > MIN_CAP ? want : MIN_CAP;
    mn__nameset_entry_t *ne = nc <= SIZE_MAX / sizeof *ne ? mn__realloc(s->entries, nc * sizeof *ne) : NULL;
    if (!ne) return MN__NAMESET_NOMEM;
    s->entries = ne;
    s->entries_cap = nc;
  }
  if (!s->slots || s->count + 1 > s->cap / 4 * 3) { /* a load of at most 3/4 */
    size_t cap = s->cap ? s->cap * 2 : MIN_CAP;
    while (cap / 4 * 3 < want) {
      if (cap > SIZE_MAX / 2 / sizeof(mn__nameset_slot_t)) return MN__NAMESET_NOMEM;
      cap *= 2;
    }
    if (!rehash(s, cap)) return MN__NAMESET_NOMEM;
    i = probe(s, key, len, h);
  }
  s->entries[s->count] = (mn__nameset_entry_t){key, len, h, value};
  s->slots[i] = (mn__nameset_slot_t){tag_of(h), (uint32_t)(s->count + 1)};
  s->count++;
  return MN__NAMESET_NEW;
}

bool mn__nameset_find(const mn__nameset_t *s, const char *key, size_t len, size_t *value) {
  if (!s->slots) return false;
  size_t i = probe(s, key, len, siphash13(key, len));
  if (!s->slots[i].entry) return false;
  if (value) *value = s->entries[s->slots[i].entry - 1].value;
  return true;
}
