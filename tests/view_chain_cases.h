/* tests/view_chain_cases.h: chains (docs/VIEW_CHAINS.md) that together use
 * every view operation, shared by the tests that run one chain on two devices
 * and compare: test_views (CPU against SIM) and test_meta (CPU against meta).
 * Data only. */
#ifndef MNEMO_TESTS_VIEW_CHAIN_CASES_H
#define MNEMO_TESTS_VIEW_CHAIN_CASES_H

/* Comma-separated string literals, to open an array initializer. */
#define MN_VIEW_CHAINS_EVERY_OP \
    "arange 12 int64 | view 3 4 | t | contiguous | to float16", \
    "arange 24 | view 2 3 4 | permute 2 0 1 | slice 0 1 none 2 | select 1 -1", \
    "arange 24 float32 | view 2 3 4 | transpose 0 2 | movedim 0,1 2,0 | clone", \
    "arange 6 | unsqueeze 0 | expand 4 -1 | slice 0 1 3 1 | t | contiguous", \
    "arange 6 | view 2 3 | unsqueeze -1 | expand 2 3 5 | narrow 2 1 2 | reshape 12", \
    "arange 24 | view 2 1 3 1 4 | squeeze | flatten 0 1 | unflatten 0 2,3", \
    "arange 24 | view 2 1 3 1 4 | squeeze 1 | squeeze -2 | flatten", \
    "arange 25 | view 5 5 | diagonal 1 0 1", \
    "arange 25 | view 5 5 | diagonal -2 1 0 | to float64", \
    "arange 10 | unfold 0 3 2 | t | clone", \
    "arange 10 | split 3 0 3 | to int8", \
    "arange 10 | chunk 4 0 1", \
    "arange 8 int32 | view_dtype int64", \
    "arange 8 int32 | view 2 4 | view_dtype int16 | view_dtype float32", \
    "arange 6 complex64 | real | contiguous", \
    "arange 6 complex128 | view 2 3 | imag", \
    "arange 12 | as_strided 3,3 3,1 2", \
    "arange 12 | view 3 4 | t | reshape 12", \
    "arange 12 | view 3 4 | slice 1 0 none 2 | fill 7 | base", \
    "arange 12 | view 3 4 | t | slice 0 1 3 1 | zero | base", \
    "arange 12 float32 | view 3 4 | copy 4 float64 | base", \
    "zeros 3 4 int32 | t | copy 3 int64 | base", \
    "full 2.5 2 3 float16 | to int64", \
    "ones 2 3 bfloat16 | unsqueeze 1 | expand 2 4 3 | clone", \
    "arange 4 | view 2 2 | copy_self", \
    "arange 4 | view 2 2 | t | copy_self", \
    "arange 6 | expand 2 6 | fill 1", \
    "arange 0 | view 0 3 | t | contiguous", \
    "arange 1 | view | unsqueeze 0 | squeeze", \
    "arange 12 | view 3 4 | view 1 12", \
    "arange 6 bool | to float32", \
    "arange 5 float32 | fill 2.5j"

#endif /* MNEMO_TESTS_VIEW_CHAIN_CASES_H */
