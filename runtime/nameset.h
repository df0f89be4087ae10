/* runtime/nameset.h: a small hash set of byte strings with one size_t value
 * each, so that the file readers and writers check names (tensor names, meta
 * keys) for duplicates in linear time instead of comparing each with every
 * earlier one. Open addressing with linear probing over a power-of-two table,
 * kept at most 3/4 full; the hash is SipHash-1-3 under a key drawn once per
 * process at random, so a crafted file cannot pick names that all collide.
 * The set borrows its keys: each stays valid and unchanged while it is in the
 * set. One owner at a time, no locks (the key is set up once, thread-safely). */
#ifndef MNEMO_RUNTIME_NAMESET_H
#define MNEMO_RUNTIME_NAMESET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The keys in insertion order (appended: cache-friendly), and a table of
 * 8-byte slots that index them, each with 32 more bits of the key's hash so
 * that a probe rarely touches an entry that is not the key's. */
typedef struct mn__nameset_entry_s {
  const char *key;
  size_t len;
  uint64_t hash;
  size_t value;
} mn__nameset_entry_t;

typedef struct mn__nameset_slot_s {
  uint32_t tag;   /* the hash's high 32 bits */
  uint32_t entry; /* 0: empty; else the entry's index + 1 */
} mn__nameset_slot_t;

typedef struct mn__nameset_s {
  mn__nameset_slot_t *slots; /* NULL until the first insert */
  mn__nameset_entry_t *entries;
  size_t cap, count, entries_cap, hint;
} mn__nameset_t;

typedef enum mn__nameset_result {
  MN__NAMESET_NEW,       /* added */
  MN__NAMESET_DUPLICATE, /* already there: nothing changed, *prev is its value */
  MN__NAMESET_NOMEM      /* a host allocation failed: nothing changed */
} mn__nameset_result;

/* An empty set sized for about `hint` keys (allocates nothing; the first
 * insert does). */
void mn__nameset_init(mn__nameset_t *s, size_t hint);
/* Adds key[0..len) (key not NULL, may hold any bytes) with `value` unless an equal key is in the set; then
 * *prev (when not NULL) receives that key's value. */
mn__nameset_result mn__nameset_insert(mn__nameset_t *s, const char *key, size_t len, size_t value, size_t *prev);
/* Looks key[0..len) up: true and *value (when not NULL) set when present. */
bool mn__nameset_find(const mn__nameset_t *s, const char *key, size_t len, size_t *value);
/* Frees the table (not the keys); the set is empty and usable again. */
void mn__nameset_free(mn__nameset_t *s);

#endif /* MNEMO_RUNTIME_NAMESET_H */
