/* nccl/nccl_internal.h: the NCCL calls of the NCCL module as a table, so that
 * a test on the SIM device replaces them with fakes that record the calls
 * (NCCL itself needs a GPU). Threading: set the table while no registration
 * is in use. */
#ifndef MNEMO_NCCL_NCCL_INTERNAL_H
#define MNEMO_NCCL_NCCL_INTERNAL_H

#include "mnemo/nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mn__nccl_ops_s {
  ncclResult_t (*comm_register)(const ncclComm_t comm, void *buff, size_t size, void **handle);
  ncclResult_t (*comm_deregister)(const ncclComm_t comm, void *handle);
  const char *(*error_string)(ncclResult_t result);
} mn__nccl_ops_t;

/* Replaces the table (copied); NULL restores NCCL's own calls. */
void mn__nccl_set_ops(const mn__nccl_ops_t *ops);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_NCCL_NCCL_INTERNAL_H */
