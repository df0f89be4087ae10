/* tests/view_driver.c: reads view chains (docs/VIEW_CHAINS.md) on stdin, one
 * per line, and prints one JSON line per chain. Usage: view_driver [DEVICE] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "view_chain.h"

int main(int argc, char **argv) {
  mn_device_t dev = mn_device_cpu();
  if (argc > 1 && mn_device_parse(argv[1], &dev) != MN_OK) {
    fprintf(stderr, "view_driver: %s\n", mn_last_error());
    return 2;
  }
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  int internal = 0;
  while ((n = getline(&line, &cap, stdin)) >= 0) {
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
    if (n == 0 || line[0] == '#') continue;
    char *json = NULL;
    if (mn_chain_run(line, dev, &json) == MN_ERR_INTERNAL) internal++;
    printf("%s\n", json);
    fflush(stdout);
    free(json);
  }
  free(line);
  if (internal) fprintf(stderr, "view_driver: %d chains broke an invariant\n", internal);
  return internal ? 1 : 0;
}
