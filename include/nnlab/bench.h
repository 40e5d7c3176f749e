/* Measuring speed: the machine's OpenBLAS sgemm rate, the arithmetic a model's training costs per
 * sample, training throughput over a fixed number of steps, and resident memory. What `nnlab
 * bench` prints is computed here; app/ only formats it. */
#ifndef NNLAB_BENCH_H
#define NNLAB_BENCH_H

#include <stdint.h>

#include "nnlab/dataset.h"
#include "nnlab/error.h"
#include "nnlab/model.h"

struct nl_bench_sgemm {
    int size;          /* square matrices, size x size */
    int cores;         /* cores online */
    int threads;       /* for all_gflops */
    double one_gflops; /* one thread alone */
    double all_gflops; /* every thread at once, each on its own matrices, summed */
    /* The fastest round trip of a cache line between two of the pool's threads, in nanoseconds
     * (one writes it, the other answers; the least over blocks of rounds), or 0 with one thread.
     * Where the two cores share a cache it is about 100 to 200 ns; where a virtual machine's
     * cores lie on different dies, several times that, and every line that one thread writes
     * and another then reads or writes pays it: a team's weights, a sum of gradients. A virtual
     * machine's host may move its cores between dies while it runs. */
    double round_trip_ns;
};

/* Times single-threaded OpenBLAS sgemm on size x size matrices for about `seconds` seconds on one
 * thread, then on `threads` threads at once (0: one per core), and measures round_trip_ns on the
 * threads' pool. */
int nl_bench_sgemm(struct nl_bench_sgemm *out, int size, int threads, double seconds,
                   struct nl_error *err);

/* Floating-point operations of one training sample through m, forward and backward: 2 per
 * multiply-add of the conv, gconv and dense products (forward, weight gradient, and input gradient
 * except for layers that read the model's input, which get none); elementwise layers, pooling,
 * the loss and the optimizer are not counted. */
double nl_model_train_flops(const struct nl_model *m);

struct nl_bench_train {
    int batch, threads, steps;
    double seconds;           /* of the measured steps, warm-up excluded */
    double images_per_second; /* steps * batch / seconds */
    double gflops;            /* nl_model_train_flops * images_per_second / 1e9 */
    double peak_rss_mb;       /* while training (see nl_bench_train) */
    double allocs_per_step;   /* allocations during the measured steps, per step */
};

/* Trains m (re-initialised with seed 1) on d's train split with SGD (lr 0.05, momentum 0.9,
 * constant rate) for `warmup` steps and then `steps` measured steps, on `threads` threads (0: one
 * per core). The steps may cross epochs; the data order is the trainer's. Where Linux allows it,
 * the peak resident memory is reset before training, so peak_rss_mb is this run's peak (the
 * dataset in memory included); elsewhere it is the process's peak so far. */
int nl_bench_train(struct nl_bench_train *out, struct nl_model *m, const struct nl_dataset *d,
                   int batch, int threads, int warmup, int steps, struct nl_error *err);

/* Inference throughput: the batch cut into `threads` contiguous shards (0: one per core), each
 * thread normalising its samples from d's train split and running m forward without dropout
 * (batchnorm on its running statistics) on an executor of its own, a barrier after every step;
 * `warmup` untimed steps, then `steps` timed ones. gflops counts nl_model_infer_flops. */
int nl_bench_infer(struct nl_bench_train *out, const struct nl_model *m, const struct nl_dataset *d,
                   int batch, int threads, int warmup, int steps, struct nl_error *err);

/* Where a step's time goes (`nnlab bench --layers`): nl_bench_train or nl_bench_infer with the
 * same arguments, and then for each layer i of m, layers[i] (m->nlayers of them, the caller's):
 * thread 0's wall time in milliseconds per measured step in the layer's forward and backward
 * calls (nl_exec_time_layers of nnlab/model.h: thread 0 runs the same layers as the others, on
 * its own shard or its share), and the layer whose calls did its work (nl_exec_runs_in: itself,
 * or the batchnorm or add a ReLU is fused into in training, or the convolution a batchnorm and
 * its ReLU are folded into in inference; such a layer's own times are 0). The clock is read
 * around each layer's calls; the rest of the run is nl_bench_train's or nl_bench_infer's. */
struct nl_bench_layer {
    double forward_ms, backward_ms;
    int runs_in;
    /* a conv layer's: the lowering its forward calls ran (nl_conv_forward_lowering on a
     * thread's samples a call) */
    enum nl_lowering lower;
    int turned; /* and whether it multiplies turned (nl_conv_forward_turned) */
};
int nl_bench_layers(struct nl_bench_train *out, struct nl_bench_layer *layers, int infer,
                    struct nl_model *m, const struct nl_dataset *d, int batch, int threads,
                    int warmup, int steps, struct nl_error *err);

/* Floating-point operations of one sample's forward pass: 2 per multiply-add of the conv, gconv
 * and dense products. */
double nl_model_infer_flops(const struct nl_model *m);

/* A dataset of n samples of the given shape in memory: uniform random bytes (normalised with
 * mean 0.5 and std 0.29 per channel) and uniform random labels of nclasses classes, from seed;
 * train split only. For speed measurements, where what the pixels show does not matter. Freed
 * with nl_dataset_free. */
int nl_bench_synthetic(struct nl_dataset **out, struct nl_shape shape, int nclasses, uint32_t n,
                       uint64_t seed, struct nl_error *err);

/* A text dataset of n documents of len token ids (float32, as imported text is): each of len/4
 * to len words drawn from ids 2 .. vocab - 1 (smaller ids likelier), padding after; uniform
 * random labels. nvocab is vocab; there are no words behind the ids. */
int nl_bench_synthetic_text(struct nl_dataset **out, int len, int vocab, int nclasses, uint32_t n,
                            uint64_t seed, struct nl_error *err);

/* The process's peak resident memory so far, in MiB (getrusage). */
double nl_peak_rss_mb(void);

#endif
