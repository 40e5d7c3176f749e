/* The training loop. See include/nnlab/trainer.h for the scheme.
 *
 * Everything a step touches is allocated before the first step: per thread an executor, an input
 * and label buffer for its shard, the logits' gradient and either a gradient ring (streamed
 * gradients, below) or, with a synchroniser, clipping or embedding tables, a full-size gradient
 * buffer; for the run the optimizer state and the sample order. A step allocates nothing.
 *
 * A team (team_step, nl_train_opts.parallel): a model of dense and element-wise layers only, on
 * two threads or more, without a synchroniser or clipping, trains batches of up to TEAM_BATCH
 * samples with ONE executor (thread 0's) on the whole batch instead of one per shard: the threads
 * split each layer between them (dense by units, and its input gradient by input features, in
 * core/engine/layers/dense.c; element-wise layers by samples), with the pool's barrier after each,
 * backward writes the one gradient buffer (thread 0's; each thread computes its units' weight
 * gradient whole, so nothing is reduced), and each thread steps the weight rows its forward read.
 * Every float is the one thread's, whatever the thread count (test_train). Why: mlp at batch 64
 * took 17% more CPU time on two sample-parallel threads than on one (see update_shared); as a
 * team, thread CPU time per step, 2026-11-27, load average 6 (so indicative), 779 and 794 us on
 * its two threads (forward 321 and 320, backward 309 and 318, the batch and loss 34 and 27, the
 * update 115 and 129) against about 1,590 on one thread: the same work, halved. At batch 256,
 * 2,623 and 2,581 us. Where two threads' time goes, per thread per step, 2026-11-27 at load
 * average 9 to 12 with the process at real-time priority (so that the waits are its own), three
 * rounds: at batch 256, 2,630 to 2,740 us of CPU time against 4,760 to 4,860 on one thread (9%
 * more than half): the forward products take 7 to 8% (fc1) and 14% (fc2) more than half of one
 * thread's, the backward ones 3 to 10% (each share packs all of the shared operand, half of which
 * the other core wrote, so that its lines move between the cores: the first reader pays); the
 * update and the batch take less than half; the waits at the barriers 60 to 110 us, the largest
 * the last layer's forward (39 us, on thread 0 alone). At batch 64, 845 to 865 us against 1,560
 * to 1,575, waits 20 to 35. The ReLUs now run inside the dense layers' shares and mlp's fc2 takes
 * its weight gradient by input features (core/engine/layers/dense.c): fc2's backward 506 to 518
 * us per thread at batch 256 against 524 to 530, none measurable at batch 64; within the spread
 * of the whole step. The products alone split well: in a small program running both shares at
 * once (best of 40, 2026-11-27 at load average 4 to 5, real-time priority) fc1's forward share
 * takes 685 to 705 us at batch 256 against 1,315 to 1,355 for the whole on one thread, fc2's 247
 * to 261 against 461 to 474, and at batch 64 the shares take 49 to 51% of one thread's products
 * (fc2's forward 55%); in the step (thread CPU time per layer, the same day, load average 5 to 7)
 * fc1's forward takes 792 to 850 per thread against 1,460 to 1,475 on one thread, fc2's 303 to
 * 315 against 494 to 505. What a share loses there is its first reading of the operand that the
 * other core wrote (the batch, the other units' outputs) or updated (its weight rows): OpenBLAS
 * packs all of it (its copy routines take 10% of sgemm's time at batch 256, 14% at batch 64, in
 * perf). nnlab's packed GEMM (nl_pgemm, core/engine/conv_gemm.c), which reads the right matrix
 * in place, does not pay on these shapes: both shares at once, at batch 64, fc1's forward as
 * out^T = weight in^T (the input transposed by halves, each share packing its weight rows) 259
 * us per thread against OpenBLAS's 191, the weight gradient (the share's columns of dout packed,
 * the input read in place) 163 against 159, the input gradient by samples (the share's rows of
 * dout packed, the weights read in place) 202 against 194; at batch 256 1,150 against 690, 733
 * against 662 and 730 against 686. Its 6 x 64 tile, made for LeNet's narrow products, runs these
 * wide ones at 90 (the forward, its packing included) to 150 GFLOP/s on one thread. Nor does
 * OpenBLAS's own threading (openblas_set_num_threads(2), one call from one thread, which shares
 * the packed operand between its threads): fc1's forward then gave other floats than on one of
 * its threads, at batch 64 and 256, and took 254 us of wall time at batch 64 against the team's
 * 191 per share, at batch 256 1,363 against 1,317 on one thread (2026-11-27, load average 5 to 6).
 * Per phase, mlp at batch 64 (`nnlab bench`, thread CPU time and waits per thread per step,
 * 2026-11-27, load average 1.5 to 4, real-time priority, runs where another real-time process
 * took a core left out): one thread 1,591 us (the batch 55, fc1's forward 464, fc2's 164, fc3's
 * 7, the loss 6; backward fc3 8, ReLU 4, fc2 256, ReLU 7, fc1 357; the update 264); two threads
 * 845 to 894 each (the batch 27 to 29; fc1's forward 244 to 249 on thread 0, 258 to 265 on thread
 * 1; fc2's 93 to 100; fc2's backward 151 to 161, fc1's 186 to 197; the update 117 to 124 and 125
 * to 138), waiting 20 to 57. Where another process held one core, so that the two threads ran
 * by turns on the other, each took 789 to 819: half of one thread's; the excess is the cost of
 * running on two cores at once. Thread 1 is the slower in fc1's forward and the update in every
 * run, whichever core it is on (one thread on either core: the same speed). The ReLU between fc1
 * and fc2 now runs inside fc2's backward share (model.c's team_relu_back, the same floats), so
 * that fc1's share reads only the gradient columns its thread wrote, and two barriers go: median
 * of nine rounds alternating at batch 256, 2,724 and 2,751 us against 2,775 and 2,808; at batch
 * 64, of six, 849 and 865 against 855 and 869. Tried the same day, not kept (batch 64, rounds
 * alternating): each thread converting the whole batch into its own buffer, read by fc1's
 * forward and weight gradient: the batch took 46 us against 27, fc1's forward 10 us less on
 * thread 1 alone, its backward 0 to 5: 885 to 917 per thread against 865 to 898; each layer's
 * rows stepped right after that layer's backward, by the thread that wrote their gradient (still
 * in its cache): fc2's, by input features, 256 runs of 256 floats, 90 to 115 us per thread, fc1's
 * 82 to 117, against 117 to 135 for the whole update; fc2 stepped by the forward's units instead,
 * 67 to 89; fc1's forward shares of 272 and 240 units instead of 256 each: the share of 240 took
 * 222 to 238 us, that of 272 260 to 271, so that the barrier after them came no sooner.
 * The other threads' executors serve evaluation only, and hold no gradient.
 * TEAM_LOSS: the threads take the classification loss by rows, as the sample-parallel path does:
 * each row's gradient is computed alone (the floats of one thread); the reported loss is the
 * threads' sums added in thread order, which may differ from one thread's in a double's last
 * bits. Taken by thread 0 alone, it kept the others waiting at the barrier after it for the
 * whole of it: mlp at batch 256 on two threads, 2026-11-27 at load average 3.3, 10.4 and 8.4 us
 * per step (about 19 on one), at batch 64 3.2 and 2.0. A small gain; the last dense layer's
 * forward (mlp's 256 x 10, 35 us at batch 256), also on one thread, cannot be cut by samples
 * either: OpenBLAS's sums of a product cut by rows differ from the whole one's in the last bits
 * for 90 of 216 shapes tried (batches 16 to 256, 6 to 24 units, K 24 to 512; 2 and 3 shares;
 * both forward products), with no rule to tell which: 128 x 10 x 256 in two halves among them,
 * 256 x 10 x 256 not.
 *
 * A hybrid step (hybrid_step, hybrid_split): a model whose last layers are of a team's kinds
 * and hold most of its weights (lenet: fc1 and fc2, 405K of 431K floats, behind two
 * convolutions) runs its head, the layers before them, by samples, each thread on its shard with
 * its own executor, and that tail as a team on the whole batch with one executor. Why: by
 * samples, each thread packs fc1's weights for its own products, computes fc1's whole weight
 * gradient from half the samples (a product of K 32 at batch 64), and the update sums 430K
 * floats over the threads. Thread CPU time per step, lenet at batch 64 (`nnlab bench`,
 * 2026-11-27 at load average 10 to 12, so indicative; three rounds alternating): by samples
 * 9,510 to 10,436 us on the two threads together, 4.4 to 8.7% more than one thread's 8,752 to
 * 9,789 in the same round (forward 1,497 and 1,480, backward 2,971 and 2,978, the update 74 and
 * 384 around its barrier: thread 0 reached it first); hybrid 9,252 to 9,286, 3.1 to 4.0% more
 * than one thread's (the head's forward 1,198 and 1,195, the tail's with the loss and the
 * waits at its barriers 361 and 329, backward 2,901 and 2,891, the update 156 and 160). Not at
 * larger batches (HYBRID_BATCH), where each thread's products by samples are larger and the
 * team's threads each pack the whole batch's activations for theirs: at batch 128, hybrid
 * 17,935 and 19,569 against 17,413 and 18,940 by samples (two rounds, load average 7 to 8); at
 * 256, 38,096 and 37,740 against 37,848 and 36,474 (load average 10 to 13), and 32 MB more
 * resident (the head's executors beside the whole model's, which evaluation uses). The
 * floats: the head's forward is the sample-parallel one's, the tail's forward and gradients
 * those of one thread on the whole batch; the head's weight gradient the sum over shards, as by
 * samples (test_train). Lenet, 3 epochs of Fashion-MNIST, --seed 1 --threads 2: test accuracy
 * 0.9066 by samples, 0.9024 hybrid, 0.9028 on one thread. A tail of few weights (resnet8's or
 * ResNet-18's classifier) gains nothing and is not taken; nor a whole model of a team's kinds
 * (team_step).
 *
 * Overlap with a synchroniser (include/nnlab/trainer.h): layer i's completion finishes the
 * gradient ranges [t_lo[i], t_lo[i + 1]) of the trainable part and [s_lo[i], s_lo[i + 1]) of the
 * statistics, where t_lo[i] is where the trainable blocks of layers i and above begin (0 at and
 * below the lowest trainable layer, so that the ranges cover [0, ntrainable) exactly once) and
 * s_lo likewise over [ntrainable, nreduce). Each thread counts down pending[i] as its backward
 * passes layer i; the thread that brings it to 0 sums layer i's ranges over the threads in thread
 * order into thread 0's buffer, exactly the sums the reduction without overlap forms. Once layers
 * i and above are reduced, grad[t_lo[i], ntrainable) and grad[s_lo[i], nreduce) are final, and
 * the synchroniser hears so.
 *
 * Embedding tables (sparse rows): each thread's executor marks the rows of a trainable
 * embedding's weight gradient that its backward added to (nl_exec_track_rows). Without a
 * synchroniser or clipping, the reduction sums, and clears, only rows some thread marked: the
 * others are zero in every thread's buffer, so the sums it skips are of zeros. The optimizer
 * skips such rows too where a zero gradient leaves a weight exactly as it is (SGD without
 * momentum or weight decay); momentum, weight decay and the adaptive optimizers still move an
 * untouched row, so they step over it with thread 0's zero gradient as before (SGD with momentum
 * without reading it: nl_optim_step_zero). The results are
 * the floats of the dense path (opts.dense_tables), which test_train compares.
 *
 * Streamed gradients (the default for a gradient of STREAM_MIN_BYTES or more, without a
 * synchroniser, clipping or embedding tables): no thread holds a full-size gradient. Each thread's
 * backward puts layer i's weight gradient in a block taken from its own ring
 * (nl_exec_backward_blocks; the layer's tensors one after another, the statistics' sums after the
 * trainable ones), in the order backward runs. Once every thread is past place k, the job of the
 * layer that ran there opens: in chunks of JOB_CHUNK floats, the blocks summed over the threads
 * in thread order into thread 0's and the layer's parameters updated from it, as the full-buffer
 * path does after the whole backward (the same sums and steps, element by element: the same floats,
 * which test_train compares with opts.gradients). The thread that opened it takes chunks first; a
 * thread whose ring is full, or whose backward is over, takes the chunks left, so that the update
 * is shared as before. Whoever finishes a job's last chunk copies the statistics' sums into stats;
 * the blocks go back in the order taken, so each ring is a queue. A ring holds the largest block
 * once for one thread, twice for more (one block being summed while the next is filled), except
 * where that block is of RING_ONCE floats or more (4 MiB: ResNet-18's 512-channel convolutions):
 * there the ring holds it once: a thread about to fill the next large block waits until the others
 * are past the last one's place, then sums and updates that one with them (work it would otherwise
 * do later in the step; waiting costs time, not CPU, as the threads sleep). Such a ring holds
 * RING_SLACK floats more (256 KiB), so that the small blocks beside a large one (batchnorm's, the
 * classifier's) do not wait for it nor it for them: each wait is a point where the threads meet,
 * and a thread delayed since the last one (another process on its core) delays the other there.
 * ResNet-18 at 3x64x64, batch 32, 2 threads: 5.5 to 6.5 waits a step for thread 0 and 4.0 to 4.9
 * for thread 1 without it, 2.9 to 3.5 and 2.6 to 3.3 with it (3 runs of 30 steps each, load
 * average 3 to 3.7); 160K floats, 2.7 to 2.9 and 2.0 to 2.6 (2 runs). The thread furthest
 * behind never waits for long: every block it holds is of a place all threads have passed. Any ring
 * at least as large as the largest block cannot stall: the highest place whose job is not finished
 * is one every thread is past or computing, since a thread waiting for room at that place holds
 * only the finished blocks of the places above it, given back.
 *
 * Split weight gradients: a layer whose weight gradient is large against its product's depth
 * (SPLIT_MIN floats or more, no statistics, and a kind whose backward takes it split: conv's
 * shard lowerings, ResNet-18's layer4 at 3x64x64 with its 2.36M-float 3x3 convolutions, PLANE2,
 * and its 1.18M-float stride-2 one, S2LANES) had each thread write the whole of it (9.4 MB) from
 * a product of only its shard's columns (depth 16 x 4 = 64), at the speed of memory, and the job
 * then read every thread's block, summed them and cleared all but one. Instead, in a step where
 * every thread has 2 samples or more and none a product deeper than SPLIT_DEPTH columns, the
 * threads meet there (struct nl_wsplit, include/nnlab/layer.h): each posts its gathered output
 * gradient (F, n*P) and columns (K, n*P; PLANE2 its images turned channel-minor, which its
 * weight gradient kernel reads instead), which stay in its scratch until every thread has left,
 * and computes rows [F*t/T, F*(t+1)/T) of the gradient over every thread's matrices, thread 0's
 * product and then each next one's added (beta = 1), into ONE block, taken from the rings in turn
 * (one owner thread per split layer, in backward's order, so that a ring holding its largest block
 * once does not make the next split layer wait for this one's update). Within one block of
 * OpenBLAS's K loop each row is 0 + p_0 + p_1 + ...: the floats of the separate blocks summed in
 * thread order (test_train holds the two against each other on 2 and 3 threads, depths 40 to
 * 64). Nothing is summed or cleared in the job; where every thread reads the layer's weights no
 * more once it has waited at the meeting (PLANE2 and S2LANES: their input gradient runs after
 * posting, while the others arrive), each thread updates its own rows there and then, and the job
 * only gives the block back. The lanes kernels go further (nl_conv_lanes_dweight_rows): they sum
 * every thread's terms of two rows in registers and hand the rows to the optimizer (split_update)
 * as they are made, so that the gradient is never written: per 3x3 convolution of layer4, 9.4 MB
 * each of the weights and the momentum read and written once, where the rows' products (adding
 * into the zeroed block, once per thread), the update and its clearing moved the gradient through
 * memory six times besides; and the rows are turned from the kernels' registers (nine gathers per
 * filter and 16 channels, as dear as some 16 images' multiply-adds) once rather than once per
 * thread. One thread, layer4's rows of one of two threads (256 filters, 2 x 16 images), the
 * gradient, the weights and the momentum in the L3 cache: 2.18 to 2.38 ms against 2.63 to 3.10
 * for the kernel per thread and the update. Each thread's matrices are read by the others from its
 * scratch: the liveness plan gives a place's scratch to nothing else while that place runs, and the
 * meeting is inside it. Measured (thread CPU time per step, ms, both threads together, six rounds
 * of 36 steps alternating with the split off, 2026-11-27 at load average 4.5 to 6.2, real-time
 * priority, so indicative): 183.5 to 189.6, one of 200.7 (median 188.7) against 187.7 to 202.6
 * (median 193.2); one thread 166 to 177 in the same runs; the jobs 1.3 to 3.9 per thread
 * against 7.8 to 12.4, backward otherwise 3 to 5 more (the in-place updates, the waits' spinning
 * 0.5 to 1.5, each thread reading the others' columns).
 *
 * Where two threads spend more than one on ResNet-18 at 3x64x64, batch 32 (thread CPU time per
 * step, ms, means of 24 steps, three runs, 2026-11-27, load average 10 to 12, so indicative): one
 * thread 185 to 190 (forward 56 to 57, backward 119 to 123, the jobs 10); two threads 99 to 105
 * each (forward 29 to 31, backward 63 to 66, the jobs 6.4 to 8.6, waiting 0.1 to 0.6 of CPU),
 * 7 to 10% more CPU in all: the jobs 5 more (summing the second thread's blocks: 45 MB read and
 * cleared), backward 4 to 8 (among it the Winograd filter transforms, made by every thread, and
 * the weight gradients' products over half the columns each), forward 2 to 5. Two threads at
 * 1.85 times one thread's speed would need each at most 1/1.85 of one thread's time, waits
 * included: about 100 ms of wall clock a step against 99 to 105 of CPU alone. Tried and measured
 * (alternating old and new binaries), not kept: (1) blocks left as they are when given back,
 * each layer writing its block (beta = 0) instead of adding to zeros: on two threads the jobs
 * lost 1 to 5 ms, backward gained 6 to 8 (3 to 5 on one thread; load average 6), since
 * OpenBLAS's product with beta = 0 zeroes its output in a pass of its own before adding into it,
 * over a block colder than the one the update cleared; (2) the Winograd filter transforms made
 * once per step for all threads, at the end of each layer's job, and read by every executor:
 * the transforms' perf samples halved (1.9% to 0.95% on one thread), but OpenBLAS's packing of
 * them grew more (sgemm_oncopy and otcopy +495 samples against -211, one thread, 24 steps),
 * reading them from where they had been pushed out to instead of from the L2 the transform had
 * just written them to; 20 MB more resident too. (3) layer3's three WINOGRAD2 weight gradients
 * split as layer4's (each thread posting dmm, v and dout, folding rows of du over every thread's
 * matrices, one thread's at a time, into one block: the same floats; test_train held it against
 * full-size gradients): per step, thread CPU time (ms, both threads together, 2026-11-27, load
 * average 1 to 3, real-time priority, alternating), 196.6, 196.4, 197.6, 193.5 and 191.8 against
 * 189.8, 189.8, 191.3, 193.6 and 190.7; the jobs 1.3 ms less, but each of the three convolutions
 * 0.5 more per thread (its rows' update, some 0.2, now among it): du's rows are written and folded
 * once per thread's matrices, so that each thread still moves as many floats of du as before, and
 * packs every thread's v besides, read from the other core. (4) shard_split in column blocks of
 * 512 KiB (every thread's product into a block while it is in the L2 cache): layer4's backward
 * 23.0 to 23.6 per thread against 22.6 to 23.2. (5) layer4's updates left to the jobs instead of
 * made in place: 4.3 ms less in backward per thread, 4.5 more in the jobs. (6) the Winograd filter
 * transforms loading their taps by permutes instead of gathers: no change in perf's samples of
 * them, which stream u at the speed of memory. Where the rest goes (perf, task-clock samples, the
 * two-thread row against twice the one-thread row, per step over both threads, three runs): the
 * optimizer's update 5.4 and 7.2 ms more (15.0 and 16.2 on two threads against 9.6 and 9.1 on
 * one: the in-place updates of layer4's rows run on both threads at once after the meetings, and
 * this machine's memory bandwidth is not much more than one core takes), the Winograd filter
 * transforms and their adjoints about 6 more (every thread makes them all; about 7 on one
 * thread), the sums of the jobs 1.6 to 2.0, OpenBLAS's packing 1 to 2; the products 2.7 to 5.2
 * less. Since, on a shard of one chunk, Winograd's filter transforms go by blocks that the
 * products read from the L2 cache (forward_winograd and backward_winograd, core/engine/layers/
 * conv.c; the same floats): 183.7, 184.3 and 186.5 against 195.9, 191.1 and 196.2 (three rounds
 * alternating, load average 2.6 to 4.2, real-time priority), one thread 171.8 to 177.1 against
 * 172.9 to 178.7; each thread's wall time per step (its waits included) 98.6 to 102.2 against
 * 104.0 to 106.3.
 *
 * Where a ResNet-18 run at 3x64x64, batch 32, 2 threads (`nnlab train`, SGD with momentum) keeps
 * its memory at its peak, the steady state of its steps (/proc's smaps, MiB; resident set 190.4,
 * 214 before the last six changes named, 426 before the others): weights 42.7 and momentum
 * 42.7; per thread one block of 31.0 for the activations, the activation gradients and the
 * layers' scratch, planned together by liveness over the step (core/engine/model.c; the
 * activations apart, 25.8, and 11.5 of gradients and scratch before, 27.0 and 10.5 before their
 * first planning, and Winograd's filter transform and its gradient in the same floats, core/
 * engine/layers/conv.c), the gradient ring 9.3 (the largest block once and RING_SLACK: twice before
 * RING_ONCE; a full-size gradient, 42.7, before streaming), the layers' aux and the thread's
 * inputs 1.4 (batchnorm's aux, sized per sample and written once, resident only where written since
 * it lies on pages of its own); the statistics' sums a few KB of stats; the dataset 9.4 (uint8
 * pixels, converted per batch); the heap 2.8, SQLite's pages there 256 KiB (nl_store_lean_cache:
 * 2 MiB before; a checkpoint's row built in memory, 89.5, before core/store/runs.c wrote it in
 * place); OpenBLAS's buffers 1.4; the libraries' code 8.6 (GTK 4's 8.3 and Open MPI's 1.1 more
 * before the window and the MPI mode became modules that only they load, app/meson.build). */
#include "nnlab/trainer.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "feature_cache.h"
#include "nnlab/alloc.h"
#include "nnlab/clock.h"
#include "nnlab/kernels.h"
#include "nnlab/rng.h"
#include "thread_pool.h"

#define EVAL_SHARD       128         /* samples per thread per forward pass when evaluating */
#define EVAL_BYTES       (64u << 20) /* ... unless the training executors would then exceed this */
#define REDUCE_CHUNK     2048        /* floats reduced and updated at a time, a multiple of 16 */
#define JOB_CHUNK        8192        /* the same for a job of streamed gradients (see below) */
#define MAX_TABLES       8           /* embedding tables whose rows are tracked; more go dense */
#define STREAM_MIN_BYTES (16u << 20) /* streamed gradients by default from this size */
#define RING_ONCE        (1u << 20)  /* floats of a largest block from which a ring holds it once */
#define RING_SLACK       (1u << 16)  /* floats such a ring holds beyond it, for the small blocks */
#define SPLIT_MIN        (1u << 20)  /* floats of a weight gradient split by channels from ... */
#define SPLIT_DEPTH      128         /* ... where no thread's product is deeper (see the top) */
#define TEAM_BATCH       256         /* a team trains batches of up to this many samples */
#define HYBRID_BATCH     64          /* a hybrid step trains batches of up to this many samples */

/* A trainable embedding's weight: floats [lo, lo + rows * width) of the flat buffer. */
struct table {
    size_t lo;
    int rows, width, layer;
};

struct ctx;

/* Streamed gradients: the sum and update of the blocks of place k's layer, in chunks of
 * JOB_CHUNK floats that any thread may take (see the top of the file). Each chunk has a cost of
 * its own (two atomic adds on counters the threads share, the optimizer's call): ResNet-18 at
 * 3x64x64, batch 32, takes 5,476 chunks a step in 2,048 floats, 1,387 in 8,192; the jobs' thread
 * CPU time a step (ms, both threads together; 4 runs of 24 steps, alternating, 2026-11-27, load
 * average 5.5 to 9, so indicative): two threads 13.1 to 15.7 (median 14.1) against 15.0 to 16.4
 * (15.6), one thread 8.7 to 9.1 against 9.3 to 10.5; 4,096 floats, 14.1 and 15.3 on two. The sums
 * and steps are element by element: the chunks' size changes no float. */
struct job {
    int layer; /* -1: no block at this place */
    int owner; /* this step: -1, or the thread whose block every thread wrote (split): no sum */
    size_t floats, trainable, chunks;
    int open;           /* every thread is past the place; under ring_lock */
    int finished;       /* every chunk is done; under ring_lock */
    atomic_size_t next; /* the next chunk to take */
    atomic_size_t done; /* chunks finished */
};

/* Streamed gradients split by output channels (see the top of the file): the meeting of the
 * threads at layer i, where each posts its matrices (struct nl_wsplit) and the thread whose ring
 * holds it the block they all write; counts reset at every step. */
struct meet {
    struct ctx *c;
    const float **dy, **cols; /* (threads) */
    int *ld;
    float *dw;
    int layer;
    atomic_int arrived, left;
    atomic_int w_done; /* threads that read the weights no more: at the count, each updates its
                        * rows (or has, fused), and the job only gives the block back */
    atomic_int fused;  /* threads whose rows went to the optimizer as they were made */
};

struct worker {
    struct ctx *c;
    struct nl_exec *exec;
    float *x;               /* (max_n, input) */
    int32_t *y;             /* (max_n) */
    float *t;               /* (max_n) regression targets */
    struct nl_reg_sums reg; /* regression: this thread's sums in the current call */
    uint32_t *idx;          /* (max_n) sample indices when evaluating */
    float *dlogits;         /* (max_n, nclasses) */
    float *grad;            /* (nreduce); NULL when only evaluating */
    float *feat; /* (max_n, features) rows read from the feature cache; NULL without one */
    struct nl_exec *hexec;           /* a hybrid step's: the head's layers on this thread's shard */
    unsigned char *rows[MAX_TABLES]; /* (table rows) 1 where this step's backward added */
    double sumsq; /* clipping: the squared norm of this thread's slice of the gradient */
    double loss;  /* sum over the samples this thread saw in the current call */
    long correct;
    struct nl_metrics *metrics; /* evaluation with metrics: this thread's counts, else NULL */
    struct nl_rng rng;
    /* Streamed gradients (see the top of the file): the ring of ring_size floats, where layer i's
     * block starts (at), and the queue of the layers holding blocks, in the order taken. */
    float *ring;
    size_t ring_size, head, tail;
    size_t *at;
    int *queue, q_first, q_count;
    struct nl_wsplit *ws; /* (nlayers) this thread's part of each layer's split */
    /* Full-size buffers: the next chunk of this thread's slice of the reduction to take, by it
     * and then by the threads done with theirs; alone on its cache line. */
    char pad0[64];
    atomic_size_t slice_next;
    char pad1[64];
};

struct ctx {
    const struct nl_model *m;
    float *params;
    const struct nl_dataset *d;
    const struct nl_augment *augment; /* training batches only */
    struct nl_pool *pool;
    int threads, max_n;
    struct worker *w;
    /* Prepared weights (nl_prep), every thread's: evaluation alone (nl_evaluate*) every layer's,
     * a training run its frozen layers' (train_setup), or NULL. */
    struct nl_prep *prep;

    /* The frozen-feature cache (core/engine/feature_cache.h) and what the current epoch does with
     * it. */
    struct nl_features feat;
    enum { FEAT_OFF, FEAT_FILL, FEAT_USE } feat_mode;

    /* The current step or evaluation. */
    enum nl_split split;
    const uint32_t *idx; /* training: the batch's sample indices */
    int batch;
    float scale;       /* of the loss: 1 / the global batch */
    long first, count; /* evaluation: the range of the split */
    uint64_t seed;     /* the run's, for nl_rng_step_seed */
    enum nl_loss loss; /* resolved: never NL_LOSS_DEFAULT */
    float *values;     /* evaluation of a regression model: its outputs by split index, or NULL */

    /* The optimizer. */
    const struct nl_optim *optim;
    float clip_value, clip_norm;
    float *state_block;
    float *state[NL_OPTIM_MAX_STATE];
    long step;
    float lr; /* of the current step */
    const struct nl_sync *sync;
    size_t keep_from; /* thread 0's gradient from here on is left for readers after a step */
    int global;       /* the step's global batch: for the statistics */
    struct table tables[MAX_TABLES]; /* by offset; see the top of the file */
    int ntables;
    int skip_rows; /* 1: the optimizer leaves a row with zero gradient unchanged */

    /* Overlap: per layer (nlayers + 1 bounds), see the top of the file. can_overlap: the
     * synchroniser has begin and ready (the bounds exist); overlap: the step under way uses them
     * (the synchroniser's overlaps() may say no for a step). */
    int can_overlap, overlap;
    size_t *t_lo, *s_lo;
    atomic_int *pending;
    char *reduced;
    int next; /* layers [next, nlayers) are reduced and announced; under lock */
    pthread_mutex_t lock;

    /* Streamed gradients (see the top of the file). stats: (nreduce) floats, of which only the
     * statistics' sums [ntrainable, nreduce) are ever written (the rest is never touched, so
     * never resident), for nl_model_update_stats. */
    int stream;
    float *stats;

    /* A team (see team_step): the threads run thread 0's executor on the whole batch. */
    int team;
    /* A hybrid step (see hybrid_step), where tail_at > 0: the head, layers [0, tail_at) (head_m, a
     * view), run by each thread on its shard (its worker's hexec), and the tail, layers
     * [tail_at, nlayers) (tail_m), run as a team by one executor on the whole batch: its input tin
     * and the input's gradient dtin, (max batch, tail_in) each, by rows, and the logits' gradient
     * tdl (max batch, nclasses). The tail's weights are the trainable floats [tail_lo,
     * ntrainable), whose gradient the team computes whole into thread 0's buffer. */
    int tail_at;
    struct nl_model *head_m, *tail_m;
    struct nl_exec *tail;
    size_t tail_in, tail_lo;
    float *tin, *dtin, *tdl;
    int dtin_zero; /* 1: backward adds into dtin (nl_exec_input_grad), zeroed by rows first */
    pthread_mutex_t ring_lock;
    pthread_cond_t ring_free; /* a job opened or finished: ring space, chunks, or the step's end */
    atomic_uint ring_events;  /* advanced, under ring_lock, with each broadcast of ring_free */
    struct job *jobs;         /* (nlayers) by place */
    int njobs;                /* places with a block: the jobs of a step */
    int jobs_done;            /* this step's; under ring_lock */
    long fused_now; /* this step's split layers whose every thread fused its update; thread 0's */
    int unreleased; /* places [0, unreleased] keep their blocks; under ring_lock */
    /* Split weight gradients (see the top of the file): per layer, splits[i] 1 where the rule
     * allows it, split_now[i] where this step takes it the thread whose ring holds the block (else
     * -1); meets[i] its meeting. */
    char *splits;
    int *split_now;
    struct meet *meets;
    const float **mdy, **mcols; /* (nlayers, threads): the meetings' arrays */
    int *mld;
};

void nl_train_defaults(struct nl_train_opts *o)
{
    memset(o, 0, sizeof *o);
    o->epochs = 10;
    o->batch = 64;
    o->threads = 0;
    o->seed = 1;
    nl_optim_defaults(&o->optim, NL_OPTIM_SGD);
    o->schedule.kind = NL_SCHEDULE_COSINE;
    o->feature_cache = 1;
    o->feature_cache_limit = (size_t)1 << 30;
}

static void ctx_release(struct ctx *c)
{
    nl_pool_free(c->pool);
    nl_prep_free(c->prep);
    nl_exec_free(c->tail);
    nl_free(c->tin);
    nl_free(c->dtin);
    nl_free(c->tdl);
    for (int t = 0; c->w && t < c->threads; t++) {
        nl_exec_free(c->w[t].exec);
        nl_exec_free(c->w[t].hexec);
        nl_free(c->w[t].x);
        nl_free(c->w[t].y);
        nl_free(c->w[t].t);
        nl_free(c->w[t].idx);
        nl_free(c->w[t].dlogits);
        nl_free(c->w[t].grad);
        nl_free(c->w[t].ring);
        nl_free(c->w[t].at);
        nl_free(c->w[t].queue);
        nl_free(c->w[t].ws);
        for (int k = 0; k < MAX_TABLES; k++)
            nl_free(c->w[t].rows[k]);
        nl_free(c->w[t].feat);
    }
    if (c->w)
        nl_features_close(&c->feat);
    nl_free(c->w);
    nl_free(c->state_block);
    if (c->can_overlap)
        pthread_mutex_destroy(&c->lock);
    if (c->stream) {
        pthread_mutex_destroy(&c->ring_lock);
        pthread_cond_destroy(&c->ring_free);
    }
    nl_free(c->stats);
    nl_free(c->jobs);
    nl_free(c->splits);
    nl_free(c->split_now);
    nl_free(c->meets);
    nl_free(c->mdy);
    nl_free(c->mcols);
    nl_free(c->mld);
    nl_free(c->t_lo);
    nl_free(c->s_lo);
    nl_free(c->pending);
    nl_free(c->reduced);
    nl_model_view_free(c->head_m); /* after the executors that read them */
    nl_model_view_free(c->tail_m);
    memset(c, 0, sizeof *c); /* released twice is released once */
}

/* The ranges each layer's completion finishes; see the top of the file. */
static int overlap_init(struct ctx *c, struct nl_error *err)
{
    const struct nl_model *m = c->m;
    const int nl = m->nlayers;
    int lowest_t = nl, lowest_s = nl;

    c->t_lo = nl_calloc((size_t)nl + 1, sizeof *c->t_lo);
    c->s_lo = nl_calloc((size_t)nl + 1, sizeof *c->s_lo);
    c->pending = nl_calloc((size_t)nl + 1, sizeof *c->pending);
    c->reduced = nl_calloc((size_t)nl + 1, 1);
    if (!c->t_lo || !c->s_lo || !c->pending || !c->reduced)
        return nl_error_set(err, NL_ENOMEM, "out of memory for the overlap of %d layers", nl);
    pthread_mutex_init(&c->lock, NULL);
    c->can_overlap = c->overlap = 1;
    c->t_lo[nl] = m->ntrainable;
    c->s_lo[nl] = m->nreduce;
    for (int i = nl - 1; i >= 0; i--) {
        const struct nl_layer *l = &m->layers[i];
        size_t t = c->t_lo[i + 1], st = c->s_lo[i + 1];
        for (int k = 0; !l->frozen && k < l->nparams; k++) {
            const size_t off = l->param_offset + l->params[k].offset;
            if (l->params[k].count == 0)
                continue;
            if (l->params[k].stat) {
                st = off < st ? off : st;
                lowest_s = i;
            } else {
                t = off < t ? off : t;
                lowest_t = i;
            }
        }
        c->t_lo[i] = t;
        c->s_lo[i] = st;
    }
    for (int i = 0; i < nl; i++) {
        if (i <= lowest_t)
            c->t_lo[i] = 0;
        if (i <= lowest_s)
            c->s_lo[i] = m->ntrainable;
    }
    return 0;
}

/* Sums g[a, b) of every thread into thread 0's buffer in thread order, clearing the others. */
static void reduce_range(struct ctx *c, size_t a, size_t b, int count)
{
    if (a >= b)
        return;
    for (int k = 1; k < count; k++)
        nl_add_clear(c->w[0].grad + a, c->w[k].grad + a, b - a);
}

/* A thread's backward is past layer i (nl_exec_backward_hook). */
static void layer_done(void *ud, int i)
{
    struct ctx *c = ud;
    const int count = c->threads;

    if (atomic_fetch_sub(&c->pending[i], 1) != 1)
        return;
    reduce_range(c, c->t_lo[i], c->t_lo[i + 1], count);
    reduce_range(c, c->s_lo[i], c->s_lo[i + 1], count);
    int top = -1;
    pthread_mutex_lock(&c->lock);
    c->reduced[i] = 1;
    while (c->next > 0 && c->reduced[c->next - 1])
        top = --c->next;
    pthread_mutex_unlock(&c->lock);
    if (top >= 0)
        c->sync->ready(c->sync->ud, c->t_lo[top], c->s_lo[top]);
}

static int stream_init(struct ctx *c);

/* training: 1 for a training run's context, 2 for one that streams its gradients, 3 for a team's
 * (thread 0 alone holds a gradient). */
static int ctx_init(struct ctx *c, const struct nl_model *m, const struct nl_dataset *d,
                    int threads, int max_n, int training, struct nl_error *err)
{
    const size_t in_size = nl_shape_size(m->input);
    int rc;

    memset(c, 0, sizeof *c);
    c->feat.fd = -1;
    c->m = m;
    c->params = m->params;
    c->d = d;
    c->threads = threads > 0 ? threads : nl_cpu_count();
    c->max_n = max_n;
    c->loss = d->regression ? NL_LOSS_MSE : NL_LOSS_XENT;
    if (nl_shape_size(d->shape) != in_size || d->nclasses != m->nclasses)
        return nl_error_set(err, NL_EINVAL,
                            "dataset '%s' (%dx%dx%d, %d classes) does not fit the model "
                            "(%dx%dx%d, %d classes)",
                            d->name, d->shape.c, d->shape.h, d->shape.w, d->nclasses, m->input.c,
                            m->input.h, m->input.w, m->nclasses);
    rc = nl_pool_new(&c->pool, c->threads, err);
    if (rc < 0)
        return rc;
    /* Evaluation alone prepares the weights once for its threads; a training run evaluates with
     * its training executors between epochs, whose weights then change, without. */
    if (!training && (rc = nl_prep_new(&c->prep, m, c->params, 0, err)) < 0) {
        ctx_release(c);
        return rc;
    }
    c->w = nl_calloc((size_t)c->threads, sizeof *c->w);
    if (!c->w)
        goto oom;
    for (int t = 0; t < c->threads; t++) {
        struct worker *w = &c->w[t];
        w->c = c;
        rc = training ? nl_exec_new(&w->exec, m, max_n, err)
                      : nl_exec_new_forward(&w->exec, m, max_n, err);
        if (rc < 0) {
            ctx_release(c);
            return rc;
        }
        nl_exec_use_prep(w->exec, c->prep);
        w->x = nl_alloc_floats((size_t)max_n * in_size);
        w->y = nl_calloc((size_t)max_n, sizeof *w->y);
        w->idx = nl_calloc((size_t)max_n, sizeof *w->idx);
        w->t = nl_alloc_floats((size_t)max_n);
        w->dlogits = nl_alloc_floats((size_t)max_n * (size_t)m->nclasses);
        if (!w->x || !w->y || !w->idx || !w->dlogits || !w->t)
            goto oom;
        if (training == 1 || (training == 3 && t == 0)) {
            w->grad = nl_alloc_floats(m->nreduce ? m->nreduce : 1);
            if (!w->grad)
                goto oom;
        }
    }
    if (training == 2 && stream_init(c) < 0)
        goto oom;
    return 0;
oom:
    ctx_release(c);
    return nl_error_set(err, NL_ENOMEM, "out of memory for %d training threads", threads);
}

/* The [lo, hi) share of n items that thread t of count takes. */
static void share(long n, int t, int count, long *lo, long *hi)
{
    size_t a, b;

    nl_block_range((size_t)n, 1, t, count, &a, &b);
    *lo = (long)a;
    *hi = (long)b;
}

/* Gradient clipping of the reduced slice g[a, b) of thread w, as PyTorch's clip_grad_value_ and
 * clip_grad_norm_ (scale max_norm / (norm + 1e-6) when the norm exceeds max_norm). The global norm
 * needs every slice: each thread's partial sum, a barrier, then the same sum in thread order on
 * every thread. Every thread must call it, with an empty slice too. */
static void clip_slice(struct ctx *c, struct worker *w, float *g, size_t a, size_t b, int count)
{
    const float v = c->clip_value;

    if (v > 0.0f)
        for (size_t i = a; i < b; i++)
            g[i] = g[i] > v ? v : g[i] < -v ? -v : g[i];
    if (c->clip_norm <= 0.0f)
        return;
    double sumsq = 0.0;
    for (size_t i = a; i < b; i++)
        sumsq += (double)g[i] * g[i];
    w->sumsq = sumsq;
    nl_pool_barrier(c->pool);
    sumsq = 0.0;
    for (int k = 0; k < count; k++)
        sumsq += c->w[k].sumsq;
    double norm = sqrt(sumsq);
    if (norm > c->clip_norm) {
        float scale = (float)(c->clip_norm / (norm + 1e-6));
        for (size_t i = a; i < b; i++)
            g[i] *= scale;
    }
}

/* The forward pass of samples idx[0, n) of the train split from their cached features. */
static const float *cached_forward(struct ctx *c, struct worker *w, const uint32_t *idx, int n)
{
    const size_t floats = c->feat.floats;
    for (int i = 0; i < n; i++) {
        memcpy(w->feat + (size_t)i * floats, c->feat.rows + (size_t)idx[i] * floats,
               floats * sizeof(float));
        w->y[i] = c->d->split[NL_TRAIN].y[idx[i]];
    }
    return nl_exec_forward_head(w->exec, c->params, w->feat, n, 1, &w->rng);
}

/* Sums [lo, hi) of every thread into thread 0's buffer, clearing the others', updates the
 * parameters there and clears thread 0's: REDUCE_CHUNK floats at a time, while in cache. */
static void update_dense(struct ctx *c, size_t lo, size_t hi, int count)
{
    float *g = c->w[0].grad;
    for (size_t lo_i = lo; lo_i < hi; lo_i += REDUCE_CHUNK) {
        size_t hi_i = lo_i + REDUCE_CHUNK < hi ? lo_i + REDUCE_CHUNK : hi;
        for (int k = 1; k < count; k++)
            nl_add_clear(g + lo_i, c->w[k].grad + lo_i, hi_i - lo_i);
        float *state[NL_OPTIM_MAX_STATE];
        for (int k = 0; k < NL_OPTIM_MAX_STATE; k++)
            state[k] = c->state[k] ? c->state[k] + lo_i : NULL;
        nl_optim_step_clear(c->optim, c->params + lo_i, g + lo_i, state, hi_i - lo_i, c->step,
                            c->lr);
    }
}

/* A team's update (team_step; hybrid_step's tail): thread t steps, of each layer of x's model
 * xm, the rows of its parameters that its share read in forward (nl_exec_team_rows: a dense
 * layer's output units), whose gradient rows it computed too where the weight gradient is taken
 * by units. Each float is stepped as update_dense steps it, whoever takes it. Why: a weight that
 * one core read and the other then writes costs the writer a trip to the reader's cache; where
 * the cores lie on different dies (a round trip of 400 to 500 ns in `nnlab bench`), an update of
 * half of mlp's weights took 200 to 300 us a step on each thread, against 40 to 80 us for the
 * same update of lines that only the writer had read (a small program, 2026-11-29, Zen 5 EPYC
 * under KVM). Cut into equal slices of all the parameters instead, the thread whose slice ended
 * in fc1's rows that the other's forward read paid for them. mlp at batch 64, two threads, ten
 * rounds alternating with the equal slices (same day): 70,960 to 114,670 images/s against 64,437
 * to 113,546, faster in nine rounds; by 3 to 11% in the rounds where both ran at a round trip
 * of 380 to 500 ns, by 1 to 2% at 90 to 160 ns. fc2's weights stay shared: its input gradient
 * by input features reads every row. */
static void team_update(struct ctx *c, const struct nl_exec *x, const struct nl_model *xm, int t,
                        int count)
{
    for (int i = 0; i < xm->nlayers; i++) {
        const struct nl_layer *l = &xm->layers[i];
        if (l->frozen || l->param_count == 0)
            continue;
        int lo, hi;
        const size_t rows = (size_t)nl_exec_team_rows(x, i, t, count, &lo, &hi);
        for (int k = 0; k < l->nparams && lo < hi; k++) {
            const struct nl_param *p = &l->params[k];
            if (p->stat)
                continue;
            const size_t at = l->param_offset + p->offset, each = p->count / rows;
            update_dense(c, at + (size_t)lo * each, at + (size_t)hi * each, 1);
        }
    }
}

/* The update of [lo, hi), whose gradient is zero in every thread's buffer: none where a zero
 * gradient changes nothing, else the optimizer's step over thread 0's zeros. */
static void update_zero(struct ctx *c, size_t lo, size_t hi)
{
    if (c->skip_rows || lo >= hi)
        return;
    float *state[NL_OPTIM_MAX_STATE];
    for (int k = 0; k < NL_OPTIM_MAX_STATE; k++)
        state[k] = c->state[k] ? c->state[k] + lo : NULL;
    nl_optim_step_zero(c->optim, c->params + lo, c->w[0].grad + lo, state, hi - lo, c->step, c->lr);
}

static int row_marked(const struct ctx *c, int k, int r, int count)
{
    for (int t = 0; t < count; t++)
        if (c->w[t].rows[k][r])
            return 1;
    return 0;
}

/* update_dense over [a, b), except on the tables' rows that no thread marked (update_zero). */
static void update_range(struct ctx *c, size_t a, size_t b, int count)
{
    size_t at = a;

    for (int k = 0; k < c->ntables && at < b; k++) {
        const struct table *tb = &c->tables[k];
        const size_t end = tb->lo + (size_t)tb->rows * (size_t)tb->width;
        if (end <= at)
            continue;
        if (tb->lo >= b)
            break;
        if (tb->lo > at) {
            update_dense(c, at, tb->lo, count);
            at = tb->lo;
        }
        /* Runs of rows that are all marked or all unmarked, cut at the end of the range. */
        const size_t stop = end < b ? end : b;
        int r = (int)((at - tb->lo) / (size_t)tb->width);
        while (at < stop) {
            const int marked = row_marked(c, k, r, count);
            int r2 = r + 1;
            while (r2 < tb->rows && tb->lo + (size_t)r2 * (size_t)tb->width < stop &&
                   row_marked(c, k, r2, count) == marked)
                r2++;
            size_t hi = tb->lo + (size_t)r2 * (size_t)tb->width;
            if (hi > stop)
                hi = stop;
            if (marked)
                update_dense(c, at, hi, count);
            else
                update_zero(c, at, hi);
            at = hi;
            r = r2;
        }
    }
    if (at < b)
        update_dense(c, at, b, count);
}

/* The trainable embedding tables whose rows a step tracks (see the top of the file): none with
 * a synchroniser or clipping, which read the whole gradient, nor when asked for the dense path. */
static int tables_init(struct ctx *c, const struct nl_train_opts *o, struct nl_error *err)
{
    const struct nl_model *m = c->m;

    c->ntables = 0;
    if (o->dense_tables || o->sync || o->clip_value > 0.0f || o->clip_norm > 0.0f)
        return 0;
    for (int i = 0; i < m->nlayers && c->ntables < MAX_TABLES; i++) {
        const struct nl_layer *l = &m->layers[i];
        if (l->frozen || strcmp(l->ops->kind, "embedding") != 0 || l->nparams != 1)
            continue;
        struct table tb = {
            .lo = l->param_offset + l->params[0].offset,
            .rows = l->params[0].dims[0],
            .width = l->params[0].dims[1],
            .layer = i,
        };
        if (tb.rows != l->vocab || tb.lo + (size_t)tb.rows * (size_t)tb.width > m->ntrainable)
            continue;
        int k = c->ntables;
        while (k > 0 && c->tables[k - 1].lo > tb.lo) { /* kept in offset order */
            c->tables[k] = c->tables[k - 1];
            for (int t = 0; t < c->threads; t++)
                c->w[t].rows[k] = c->w[t].rows[k - 1];
            k--;
        }
        c->tables[k] = tb;
        for (int t = 0; t < c->threads; t++)
            c->w[t].rows[k] = NULL;
        c->ntables++;
        for (int t = 0; t < c->threads; t++) {
            c->w[t].rows[k] = nl_calloc((size_t)tb.rows, 1);
            if (!c->w[t].rows[k])
                return nl_error_set(err, NL_ENOMEM, "out of memory for the row marks of layer '%s'",
                                    l->name);
        }
    }
    for (int k = 0; k < c->ntables; k++)
        for (int t = 0; t < c->threads; t++)
            nl_exec_track_rows(c->w[t].exec, c->tables[k].layer, c->w[t].rows[k]);
    c->skip_rows =
        o->optim.kind == NL_OPTIM_SGD && o->optim.momentum == 0.0f && o->optim.weight_decay == 0.0f;
    return 0;
}

static void split_post(struct nl_wsplit *s, const float *dy, const float *cols, int ld);
static void split_wait(struct nl_wsplit *s);
static void split_leave(struct nl_wsplit *s);
static void split_update(struct nl_wsplit *s, int p, size_t lo, size_t hi, const float *g);

/* Which layers may split their weight gradients by channels (see the top of the file), their
 * meetings and each thread's part of them. */
static int split_init(struct ctx *c)
{
    const struct nl_model *m = c->m;
    const size_t nl = (size_t)m->nlayers, T = (size_t)c->threads;

    c->splits = nl_calloc(nl, 1);
    c->split_now = nl_calloc(nl, sizeof *c->split_now);
    c->meets = nl_calloc(nl, sizeof *c->meets);
    c->mdy = nl_calloc(nl * T, sizeof *c->mdy);
    c->mcols = nl_calloc(nl * T, sizeof *c->mcols);
    c->mld = nl_calloc(nl * T, sizeof *c->mld);
    if (!c->splits || !c->split_now || !c->meets || !c->mdy || !c->mcols || !c->mld)
        return -1;
    for (int i = 0; i < m->nlayers; i++) {
        size_t trainable;
        const size_t floats = nl_exec_block_floats(m, i, &trainable);
        c->splits[i] = c->threads > 1 && nl_exec_split_columns(m, i) > 0 && floats == trainable &&
                       floats >= SPLIT_MIN;
        struct meet *me = &c->meets[i];
        me->c = c;
        me->layer = i;
        me->dy = c->mdy + (size_t)i * T;
        me->cols = c->mcols + (size_t)i * T;
        me->ld = c->mld + (size_t)i * T;
        atomic_init(&me->arrived, 0);
        atomic_init(&me->left, 0);
        atomic_init(&me->w_done, 0);
        atomic_init(&me->fused, 0);
    }
    for (int t = 0; t < c->threads; t++) {
        struct worker *w = &c->w[t];
        w->ws = nl_calloc(nl, sizeof *w->ws);
        if (!w->ws)
            return -1;
        for (int i = 0; i < m->nlayers; i++)
            w->ws[i] = (struct nl_wsplit){
                .part = t,
                .parts = c->threads,
                .dy = c->meets[i].dy,
                .cols = c->meets[i].cols,
                .ld = c->meets[i].ld,
                .post = split_post,
                .wait = split_wait,
                .leave = split_leave,
                .update = split_update,
                .ud = &c->meets[i],
            };
    }
    return 0;
}

/* This step's splits: each layer the rule allows, where every thread's shard has 2 samples or
 * more (the shard lowerings) and no thread's product is deeper than SPLIT_DEPTH columns, their
 * blocks in the threads' rings in turn, in the order backward takes them. Returns how many
 * layers split. */
static int split_step(struct ctx *c)
{
    int count = 0;
    long lo, hi, fewest = c->batch, most = 0;
    for (int t = 0; t < c->threads; t++) {
        share(c->batch, t, c->threads, &lo, &hi);
        fewest = hi - lo < fewest ? hi - lo : fewest;
        most = hi - lo > most ? hi - lo : most;
    }
    for (int i = c->m->nlayers - 1; i >= 0; i--) {
        const int now =
            c->splits[i] && fewest >= 2 && most * nl_exec_split_columns(c->m, i) <= SPLIT_DEPTH;
        c->split_now[i] = now ? count++ % c->threads : -1;
        atomic_store(&c->meets[i].arrived, 0);
        atomic_store(&c->meets[i].left, 0);
        atomic_store(&c->meets[i].w_done, 0);
        atomic_store(&c->meets[i].fused, 0);
    }
    return count;
}

/* The rings, the pending counts and the statistics' sums of streamed gradients. */
static int stream_init(struct ctx *c)
{
    const struct nl_model *m = c->m;
    size_t most = 16;

    for (int i = 0; i < m->nlayers; i++) {
        size_t floats = (nl_exec_block_floats(m, i, NULL) + 15) & ~(size_t)15;
        most = floats > most ? floats : most;
    }
    c->stream = 1;
    pthread_mutex_init(&c->ring_lock, NULL);
    pthread_cond_init(&c->ring_free, NULL);
    atomic_init(&c->ring_events, 0);
    /* calloc: only the statistics' part is ever written (see struct ctx). */
    c->stats = nl_calloc(m->nreduce ? m->nreduce : 1, sizeof *c->stats);
    c->pending = nl_calloc((size_t)m->nlayers + 1, sizeof *c->pending);
    c->jobs = nl_calloc((size_t)m->nlayers, sizeof *c->jobs);
    if (!c->stats || !c->pending || !c->jobs)
        return -1;
    c->njobs = 0;
    for (int k = 0; k < m->nlayers; k++) {
        struct job *j = &c->jobs[k];
        j->layer = nl_exec_block_at(c->w[0].exec, k);
        if (j->layer < 0)
            continue;
        j->floats = nl_exec_block_floats(m, j->layer, &j->trainable);
        j->chunks = (j->floats + JOB_CHUNK - 1) / JOB_CHUNK;
        c->njobs++;
    }
    for (int t = 0; t < c->threads; t++) {
        struct worker *w = &c->w[t];
        w->ring_size = c->threads == 1 ? most : most < RING_ONCE ? 2 * most : most + RING_SLACK;
        w->ring = nl_alloc_floats(w->ring_size);
        w->at = nl_calloc((size_t)m->nlayers, sizeof *w->at);
        w->queue = nl_calloc((size_t)m->nlayers, sizeof *w->queue);
        if (!w->ring || !w->at || !w->queue)
            return -1;
    }
    return split_init(c);
}

static void wait_or_help(struct ctx *c);

/* nl_exec_backward_blocks's block: layer i's block in this thread's ring, zeroed (every block
 * is left zeroed when given back), once there is room. */
static float *stream_block(void *ud, int i)
{
    struct worker *w = ud;
    struct ctx *c = w->c;
    const size_t floats = (nl_exec_block_floats(c->m, i, NULL) + 15) & ~(size_t)15;
    size_t at;

    pthread_mutex_lock(&c->ring_lock);
    for (;;) {
        if (w->q_count == 0) {
            at = 0;
            break;
        }
        if (w->head > w->tail && w->head + floats <= w->ring_size) {
            at = w->head;
            break;
        }
        if (w->head > w->tail && floats <= w->tail) {
            at = 0; /* wraps around */
            break;
        }
        if (w->head < w->tail && w->head + floats <= w->tail) {
            at = w->head;
            break;
        }
        wait_or_help(c);
    }
    if (w->q_count == 0)
        w->tail = 0;
    w->at[i] = at;
    w->head = at + floats;
    w->queue[(w->q_first + w->q_count++) % c->m->nlayers] = i;
    pthread_mutex_unlock(&c->ring_lock);
    return w->ring + at;
}

/* Chunk q of place k's job: the blocks' floats summed in thread order into thread 0's, and the
 * optimizer's step on those of them that are trainable. The thread that finishes the job's last
 * chunk moves the statistics' sums into stats and gives every thread's block back. */
static void job_chunk(struct ctx *c, int k, size_t q)
{
    struct job *j = &c->jobs[k];
    const int i = j->layer;
    const struct nl_layer *l = &c->m->layers[i];
    const struct worker *o = &c->w[j->owner >= 0 ? j->owner : 0];
    float *g = o->ring + o->at[i];
    const size_t lo = q * JOB_CHUNK, hi = lo + JOB_CHUNK < j->floats ? lo + JOB_CHUNK : j->floats;

    for (int t = 1; t < c->threads && j->owner < 0; t++)
        nl_add_clear(g + lo, c->w[t].ring + c->w[t].at[i] + lo, hi - lo);
    if (lo < j->trainable && (j->owner < 0 || atomic_load(&c->meets[i].w_done) != c->threads)) {
        const size_t end = hi < j->trainable ? hi : j->trainable, off = l->param_offset + lo;
        float *state[NL_OPTIM_MAX_STATE];
        for (int s = 0; s < NL_OPTIM_MAX_STATE; s++)
            state[s] = c->state[s] ? c->state[s] + off : NULL;
        nl_optim_step_clear(c->optim, c->params + off, g + lo, state, end - lo, c->step, c->lr);
    }
    if (atomic_fetch_add(&j->done, 1) + 1 != j->chunks)
        return;
    /* The statistics' sums, from the block's layout to the flat one. */
    size_t at = j->trainable;
    for (int p = 0; p < l->nparams; p++) {
        if (!l->params[p].stat)
            continue;
        const size_t count = l->params[p].count;
        memcpy(c->stats + l->param_offset + l->params[p].offset, g + at, count * sizeof(float));
        memset(g + at, 0, count * sizeof(float));
        at += count;
    }
    /* The blocks go back in the order taken (the rings are queues): this job's once the jobs of
     * the places above it are finished too. */
    pthread_mutex_lock(&c->ring_lock);
    j->finished = 1;
    for (; c->unreleased >= 0; c->unreleased--) {
        const struct job *r = &c->jobs[c->unreleased];
        if (r->layer < 0)
            continue;
        if (!r->finished)
            break;
        for (int t = 0; t < c->threads; t++) {
            struct worker *w = &c->w[t];
            if (r->owner >= 0 && r->owner != t)
                continue;
            w->q_first = (w->q_first + 1) % c->m->nlayers;
            w->q_count--;
            w->tail = w->q_count ? w->at[w->queue[w->q_first]] : w->head;
        }
    }
    c->jobs_done++;
    atomic_fetch_add(&c->ring_events, 1);
    pthread_cond_broadcast(&c->ring_free);
    pthread_mutex_unlock(&c->ring_lock);
}

/* Takes and runs chunks of place k's job until none is left to take. */
static void job_run(struct ctx *c, int k)
{
    struct job *j = &c->jobs[k];
    for (size_t q = atomic_fetch_add(&j->next, 1); q < j->chunks; q = atomic_fetch_add(&j->next, 1))
        job_chunk(c, k, q);
}

/* Under ring_lock: runs the chunks of an open job if there are any (unlocked meanwhile), else
 * waits until a job opens or finishes: watching ring_events first as the pool's waits do, then
 * asleep on ring_free. A thread that slept at once here, as at the end of every step while the
 * other thread finished the last jobs, had to be woken through the kernel before the step could
 * end (or, being the calling thread, return). */
static void wait_or_help(struct ctx *c)
{
    for (int k = c->m->nlayers - 1; k >= 0; k--) {
        struct job *j = &c->jobs[k];
        if (j->open && atomic_load(&j->next) < j->chunks) {
            pthread_mutex_unlock(&c->ring_lock);
            job_run(c, k);
            pthread_mutex_lock(&c->ring_lock);
            return;
        }
    }
    const unsigned seen = atomic_load(&c->ring_events);
    pthread_mutex_unlock(&c->ring_lock);
    const int changed = nl_pool_spin(&c->ring_events, seen);
    pthread_mutex_lock(&c->ring_lock);
    if (!changed && atomic_load(&c->ring_events) == seen)
        pthread_cond_wait(&c->ring_free, &c->ring_lock);
}

/* Every thread is past place k: its job opens, and this thread starts on it. */
static void stream_reduce(struct ctx *c, int k)
{
    if (c->jobs[k].layer < 0)
        return;
    pthread_mutex_lock(&c->ring_lock);
    c->jobs[k].open = 1;
    atomic_fetch_add(&c->ring_events, 1);
    pthread_cond_broadcast(&c->ring_free);
    pthread_mutex_unlock(&c->ring_lock);
    job_run(c, k);
}

/* nl_exec_backward_blocks's done: this thread is past place k. */
static void stream_done(void *ud, int k)
{
    struct worker *w = ud;
    if (atomic_fetch_sub(&w->c->pending[k], 1) == 1)
        stream_reduce(w->c, k);
}

/* nl_exec_backward_split's split: this thread's part of layer i's, where this step splits it;
 * the thread whose ring holds it takes the block they all write. */
static struct nl_wsplit *stream_split(void *ud, int i)
{
    struct worker *w = ud;
    struct ctx *c = w->c;
    if (c->split_now[i] < 0)
        return NULL;
    if (w == &c->w[c->split_now[i]])
        c->meets[i].dw = stream_block(w, i);
    return &w->ws[i];
}

/* Under ring_lock: tells the waiting threads that count has moved. */
static void split_signal(struct ctx *c)
{
    pthread_mutex_lock(&c->ring_lock);
    atomic_fetch_add(&c->ring_events, 1);
    pthread_cond_broadcast(&c->ring_free);
    pthread_mutex_unlock(&c->ring_lock);
}

/* Until count reaches the thread count, helping with the open jobs meanwhile. */
static void split_until(struct ctx *c, atomic_int *count)
{
    if (atomic_load(count) == c->threads)
        return;
    pthread_mutex_lock(&c->ring_lock);
    while (atomic_load(count) < c->threads)
        wait_or_help(c);
    pthread_mutex_unlock(&c->ring_lock);
}

/* The matrices stay where they are until every thread has left; the count in split_wait
 * publishes them. */
static void split_post(struct nl_wsplit *s, const float *dy, const float *cols, int ld)
{
    struct meet *me = s->ud;
    me->dy[s->part] = dy;
    me->cols[s->part] = cols;
    me->ld[s->part] = ld;
}

/* This thread counted in count, then until every thread is. */
static void split_meet(struct ctx *c, atomic_int *count)
{
    atomic_fetch_add(count, 1);
    split_signal(c);
    split_until(c, count);
}

static void split_wait(struct nl_wsplit *s)
{
    struct meet *me = s->ud;
    struct ctx *c = me->c;
    if (s->w_done)
        atomic_fetch_add(&me->w_done, 1);
    split_meet(c, &me->arrived);
    s->dw = me->dw;
    s->fuse = atomic_load(&me->w_done) == c->threads;
    s->fused = 0;
}

/* Rows [lo, hi) of tensor p of the meeting's layer (F rows), stepped from their gradient g. */
static void split_update(struct nl_wsplit *s, int p, size_t lo, size_t hi, const float *g)
{
    const struct meet *me = s->ud;
    const struct ctx *c = me->c;
    const struct nl_layer *l = &c->m->layers[me->layer];
    const size_t per = l->params[p].count / (size_t)l->params[0].dims[0];
    const size_t off = l->param_offset + l->params[p].offset + lo * per;
    float *state[NL_OPTIM_MAX_STATE];

    for (int q = 0; q < NL_OPTIM_MAX_STATE; q++)
        state[q] = c->state[q] ? c->state[q] + off : NULL;
    nl_optim_step(c->optim, c->params + off, g, state, (hi - lo) * per, c->step, c->lr);
}

static void split_leave(struct nl_wsplit *s)
{
    struct meet *me = s->ud;
    struct ctx *c = me->c;
    if (s->fused)
        atomic_fetch_add(&me->fused, 1);
    split_meet(c, &me->left);
    if (s->part == 0 && atomic_load(&me->fused) == c->threads)
        c->fused_now++;
    if (atomic_load(&me->w_done) != c->threads || s->fused)
        return;
    /* every thread is past its last read of the weights: this thread's rows of each tensor
     * (F of them, its first dimension), updated */
    const struct nl_layer *l = &c->m->layers[me->layer];
    const size_t rows = (size_t)l->params[0].dims[0];
    size_t lo, hi;
    nl_block_range(rows, 1, s->part, s->parts, &lo, &hi);
    for (int p = 0; p < l->nparams; p++) {
        const size_t per = l->params[p].count / rows, a = l->params[p].offset + lo * per;
        const size_t off = l->param_offset + a;
        float *state[NL_OPTIM_MAX_STATE];
        for (int q = 0; q < NL_OPTIM_MAX_STATE; q++)
            state[q] = c->state[q] ? c->state[q] + off : NULL;
        nl_optim_step_clear(c->optim, c->params + off, me->dw + a, state, (hi - lo) * per, c->step,
                            c->lr);
    }
}

/* The reduction and update of full-size buffers without tables, clipping or synchroniser: the
 * chunks of REDUCE_CHUNK floats of slice t of [0, nreduce) first, then those left in the other
 * threads' slices, so that a thread whose slice goes slower (its gradient further away in the
 * caches, its core shared with another process) is helped rather than waited for. Every float
 * gets update_dense's sum and step (the statistics the sum only), whoever takes its chunk.
 *
 * Where two threads lose against one (thread CPU time per step, mlp at batch 64, 2026-11-27, load
 * average 3 to 6, so indicative): one thread spends 630 us forward, 620 backward and 270 in the
 * update; two threads 360 to 380 and 325 to 350 each on their 32 samples (each packs every
 * weight matrix for its own products and accumulates a full-size weight gradient), and 320 to
 * 370 in the update together: reading the other core's gradient, clearing it there, and writing
 * weights that both cores hold. Together about 17% more CPU time than one thread, so that two
 * threads cannot reach 1.85 times one thread's speed there while each runs the whole model on
 * its shard. Before the chunks were shared, the thread that took the second slice finished its
 * update 115 us after the first (mean of 300 steps, load average 4); at load average 5, the
 * other thread took half the chunks. */
static void update_shared(struct ctx *c, int t, int count)
{
    const size_t nt = c->m->ntrainable;
    float *g = c->w[0].grad;

    for (int i = 0; i < count; i++) {
        const int s = (t + i) % count;
        size_t a, b;
        nl_block_range(c->m->nreduce, 16, s, count, &a, &b);
        atomic_size_t *next = &c->w[s].slice_next;
        for (size_t lo = a + atomic_fetch_add(next, 1) * REDUCE_CHUNK; lo < b;
             lo = a + atomic_fetch_add(next, 1) * REDUCE_CHUNK) {
            const size_t hi = lo + REDUCE_CHUNK < b ? lo + REDUCE_CHUNK : b;
            const size_t th = hi < nt ? hi : lo > nt ? lo : nt; /* [lo, th) is trainable */
            update_dense(c, lo, th, count);
            for (int k = 1; k < count && th < hi; k++)
                nl_add_clear(g + th, c->w[k].grad + th, hi - th);
        }
    }
}

static void step_thread(void *arg, int t, int count)
{
    struct ctx *c = arg;
    struct worker *w = &c->w[t];
    const struct nl_model *m = c->m;
    long lo, hi;

    share(c->batch, t, count, &lo, &hi);
    const int n = (int)(hi - lo);
    /* The other threads' buffers are all zeros here: allocated so, and cleared by the reduction
     * of every step. Thread 0's keeps what its readers after the step needed (the statistics,
     * and with a synchroniser the whole reduced gradient): clear that now. */
    if (t == 0 && !c->stream && c->keep_from < m->nreduce)
        memset(w->grad + c->keep_from, 0, (m->nreduce - c->keep_from) * sizeof(float));
    /* Every thread read the marks in the last step's reduction, which ended before this step. */
    for (int k = 0; k < c->ntables; k++)
        memset(w->rows[k], 0, (size_t)c->tables[k].rows);
    atomic_store(&w->slice_next, 0); /* no thread takes from it before the barrier */
    w->loss = 0.0;
    w->correct = 0;
    memset(&w->reg, 0, sizeof w->reg);
    if (n > 0) {
        int correct = 0;
        const float *logits;
        nl_rng_seed(&w->rng, nl_rng_step_seed(c->seed, c->step, t, count));
        if (c->feat_mode == FEAT_USE) {
            logits = cached_forward(c, w, c->idx + lo, n);
        } else {
            nl_dataset_batch(c->d, NL_TRAIN, c->idx + lo, n, w->x, w->y);
            nl_augment_batch(c->augment, c->d->shape, c->d->mean, c->d->std, w->x, n, &w->rng);
            logits = nl_exec_forward(w->exec, c->params, w->x, n, 1, &w->rng);
            for (int i = 0; c->feat_mode == FEAT_FILL && i < n; i++)
                nl_exec_features(w->exec, i,
                                 c->feat.rows + (size_t)c->idx[lo + i] * c->feat.floats);
        }
        if (c->d->regression) {
            nl_dataset_targets(c->d, NL_TRAIN, c->idx + lo, n, w->t);
            nl_reg_add(&w->reg, logits, w->t, n);
            w->loss = nl_regression_loss(w->dlogits, logits, w->t, n, c->loss, c->scale);
        } else {
            w->loss = nl_softmax_xent(w->dlogits, logits, w->y, n, m->nclasses, c->scale, &correct);
        }
        w->correct = correct;
        if (c->stream)
            nl_exec_backward_split(w->exec, c->params, w->dlogits, stream_block, stream_split,
                                   stream_done, w);
        else if (c->overlap)
            nl_exec_backward_hook(w->exec, c->params, w->dlogits, w->grad, layer_done, c);
        else
            nl_exec_backward(w->exec, c->params, w->dlogits, w->grad);
    } else if (c->stream) { /* no samples: zero blocks, taken as the others take theirs */
        for (int k = m->nlayers - 1; k >= 0; k--) {
            const int i = nl_exec_block_at(w->exec, k);
            if (i >= 0)
                stream_block(w, i);
            stream_done(w, k);
        }
    } else if (c->overlap) {
        for (int i = m->nlayers - 1; i >= 0; i--)
            layer_done(c, i);
    }
    if (c->stream) { /* the jobs left: the step ends when every one is done */
        pthread_mutex_lock(&c->ring_lock);
        while (c->jobs_done < c->njobs)
            wait_or_help(c);
        pthread_mutex_unlock(&c->ring_lock);
        return;
    }
    if (c->overlap)
        return; /* every range was reduced as the threads passed it */
    nl_pool_barrier(c->pool);

    /* Reduce and update slice t of the gradient range [0, nreduce), in thread order. Slices are
     * multiples of 16 floats so that no two threads write the same cache line. The optimizer
     * takes the trainable part [0, ntrainable); the statistics after it are updated by
     * nl_model_update_stats once every slice is reduced. */
    size_t a, b;
    nl_block_range(m->nreduce, 16, t, count, &a, &b);
    float *g = c->w[0].grad;
    const size_t tb = b < m->ntrainable ? b : m->ntrainable; /* the trainable part of the slice */

    if (!c->sync && c->clip_value <= 0.0f && c->clip_norm <= 0.0f && c->ntables == 0) {
        update_shared(c, t, count);
        return;
    }
    if (!c->sync && c->clip_value <= 0.0f && c->clip_norm <= 0.0f) {
        /* Chunk by chunk, while it is in cache: sum into thread 0's buffer, update, and clear
         * every thread's buffer for the next step; only the marked rows of the tables. */
        update_range(c, a, tb, count);
        /* Statistics: summed into thread 0's buffer for nl_model_update_stats. */
        const size_t sa = a > tb ? a : tb;
        for (int k = 1; k < count && sa < b; k++)
            nl_add_clear(g + sa, c->w[k].grad + sa, b - sa);
        return;
    }
    /* Clipping needs the whole reduced slice (and, for the norm, every slice); a synchroniser
     * reads the reduced gradient after the step. */
    for (int k = 1; k < count && a < b; k++)
        nl_add_clear(g + a, c->w[k].grad + a, b - a);
    if (!c->sync && (c->clip_value > 0.0f || c->clip_norm > 0.0f))
        clip_slice(c, w, g, a, tb, count); /* a synchroniser clips the global gradient */
    if (c->sync || a >= tb)
        return; /* a synchroniser updates the parameters itself */
    float *state[NL_OPTIM_MAX_STATE];
    for (int k = 0; k < NL_OPTIM_MAX_STATE; k++)
        state[k] = c->state[k] ? c->state[k] + a : NULL;
    nl_optim_step_clear(c->optim, c->params + a, g + a, state, tb - a, c->step, c->lr);
}

/* A team's step (nl_train_opts.parallel): the threads read the batch by rows (thread 0 alone,
 * with one thread's generator, where it is augmented); every thread then runs its share of each
 * layer of thread 0's executor on the whole batch (nl_exec_forward_team: dense layers by units,
 * with the ReLU that alone reads one inside each share, other element-wise ones by samples, a
 * barrier after each), each thread the loss of its rows (thread 0
 * all of a regression's), every thread its
 * share of each layer's backward into thread 0's gradient (its units' weight gradient whole:
 * nothing to reduce), and then steps the rows of the weights that its forward share read
 * (team_update, which says why). Every float is computed as one thread computes it, whatever
 * the thread count (core/engine/layers/dense.c). On the host of 2026-11-27, stepping the weight
 * rows whose gradient the thread computed (still in its cache), rather than equal slices, gained
 * nothing: the
 * update's thread CPU time per step, mlp, 2026-11-27 at load average 2.9 to 3.5, medians of three
 * rounds, 118 and 131 us against 121 and 132 at batch 64, 132 and 136 against 129 and 131 at 256;
 * it streams the weights and the momentum, which neither core holds. Nor did it even out the
 * forwards: thread 1's fc1 forward takes 15 to 25 us more than thread 0's at batch 256 either
 * way, and its update took 139 to 142 us against 118 to 122 for thread 0 (2026-11-27, load
 * average 7, real-time priority, two rounds). Nor did stepping the slice's chunks from the last
 * to the first, so that the first rows the next forward reads are the last written (the same
 * floats): fc1's forward 793 to 808 us per thread at batch 256 against 765 to 841, 242 to 253
 * against 247 to 261 at batch 64, while the update took 125 to 137 against 118 to 124
 * (2026-11-27, load average 3.7 to 4, real-time priority, three rounds alternating). */
static void team_step(void *arg, int t, int count)
{
    struct ctx *c = arg;
    struct worker *w = &c->w[0];
    const struct nl_model *m = c->m;
    const int n = c->batch;

    c->w[t].loss = 0.0;
    c->w[t].correct = 0;
    memset(&c->w[t].reg, 0, sizeof c->w[t].reg);
    if (t == 0)
        nl_rng_seed(&w->rng, nl_rng_step_seed(c->seed, c->step, 0, 1));
    if (!nl_augment_active(c->augment)) { /* a sample's floats depend on it alone: by rows */
        long lo, hi;
        share(n, t, count, &lo, &hi);
        if (hi > lo)
            nl_dataset_batch(c->d, NL_TRAIN, c->idx + lo, (int)(hi - lo),
                             w->x + (size_t)lo * nl_shape_size(m->input), w->y + lo);
    } else if (t == 0) { /* the generator's draws in sample order, as on one thread */
        nl_dataset_batch(c->d, NL_TRAIN, c->idx, n, w->x, w->y);
        nl_augment_batch(c->augment, c->d->shape, c->d->mean, c->d->std, w->x, n, &w->rng);
    }
    /* every row read before the first layer runs: nl_exec_forward_team's first barrier */
    const float *logits =
        nl_exec_forward_team(w->exec, c->params, w->x, n, 1, &w->rng, c->pool, t, count);
    if (c->d->regression && t == 0) {
        nl_dataset_targets(c->d, NL_TRAIN, c->idx, n, w->t);
        nl_reg_add(&w->reg, logits, w->t, n);
        w->loss = nl_regression_loss(w->dlogits, logits, w->t, n, c->loss, c->scale);
    } else if (!c->d->regression) { /* by rows: see TEAM_LOSS at the top of the file */
        long lo, hi;
        int correct = 0;
        const size_t k = (size_t)m->nclasses;
        share(n, t, count, &lo, &hi);
        if (hi > lo)
            c->w[t].loss =
                nl_softmax_xent(w->dlogits + (size_t)lo * k, logits + (size_t)lo * k, w->y + lo,
                                (int)(hi - lo), m->nclasses, c->scale, &correct);
        c->w[t].correct = correct;
    }
    nl_pool_barrier(c->pool);
    nl_exec_backward_team(w->exec, c->params, w->dlogits, w->grad, c->pool, t, count);
    team_update(c, w->exec, m, t, count);
}

/* A hybrid step (tail_at > 0; see hybrid_split for when): each thread reads its shard and runs
 * the head's layers on it with its own executor, as step_thread does, and copies their output
 * into its rows of the tail's input; the threads then run the tail as a team on the whole batch
 * (nl_exec_forward_team, whose first barrier makes every row seen), each the loss of its rows
 * (its shard: share() cuts the batch the same way), and the tail's backward as a team, which
 * writes the tail's weight gradient whole into thread 0's buffer and the gradient of its input
 * into dtin (complete after its last barrier); each thread then runs the head's backward on its
 * rows of dtin into its own buffer. After a barrier the head's gradient [0, tail_lo) is summed
 * over the threads and stepped as update_dense does, by slices; the tail's [tail_lo, ntrainable)
 * is stepped from thread 0's alone, by the rows each thread's share read (team_update); the
 * statistics' sums are summed for nl_model_update_stats.
 * The floats: the head's forward is the sample-parallel one's; the tail's forward, its weight
 * gradient and its input's gradient are those of one thread on the whole batch (a team's); the
 * head's weight gradient is summed over the shards as by samples. */
static void hybrid_step(void *arg, int t, int count)
{
    struct ctx *c = arg;
    struct worker *w = &c->w[t];
    const struct nl_model *m = c->m;
    const size_t f = c->tail_in, k = (size_t)m->nclasses;
    long lo, hi;

    share(c->batch, t, count, &lo, &hi);
    const int n = (int)(hi - lo);
    if (t == 0 && c->keep_from < m->nreduce)
        memset(w->grad + c->keep_from, 0, (m->nreduce - c->keep_from) * sizeof(float));
    w->loss = 0.0;
    w->correct = 0;
    memset(&w->reg, 0, sizeof w->reg);
    if (n > 0) {
        nl_rng_seed(&w->rng, nl_rng_step_seed(c->seed, c->step, t, count));
        nl_dataset_batch(c->d, NL_TRAIN, c->idx + lo, n, w->x, w->y);
        nl_augment_batch(c->augment, c->d->shape, c->d->mean, c->d->std, w->x, n, &w->rng);
        const float *out = nl_exec_forward(w->hexec, c->params, w->x, n, 1, &w->rng);
        memcpy(c->tin + (size_t)lo * f, out, (size_t)n * f * sizeof(float));
        if (c->dtin_zero)
            memset(c->dtin + (size_t)lo * f, 0, (size_t)n * f * sizeof(float));
    }
    const float *logits =
        nl_exec_forward_team(c->tail, c->params, c->tin, c->batch, 1, NULL, c->pool, t, count);
    if (n > 0 && c->d->regression) {
        nl_dataset_targets(c->d, NL_TRAIN, c->idx + lo, n, w->t);
        nl_reg_add(&w->reg, logits + (size_t)lo * k, w->t, n);
        w->loss = nl_regression_loss(c->tdl + (size_t)lo * k, logits + (size_t)lo * k, w->t, n,
                                     c->loss, c->scale);
    } else if (n > 0) {
        int correct = 0;
        w->loss = nl_softmax_xent(c->tdl + (size_t)lo * k, logits + (size_t)lo * k, w->y, n,
                                  m->nclasses, c->scale, &correct);
        w->correct = correct;
    }
    nl_pool_barrier(c->pool);
    nl_exec_backward_team(c->tail, c->params, c->tdl, c->w[0].grad, c->pool, t, count);
    if (n > 0)
        nl_exec_backward(w->hexec, c->params, c->dtin + (size_t)lo * f, w->grad);
    nl_pool_barrier(c->pool);

    size_t a, b;
    float *g = c->w[0].grad;
    nl_block_range(c->tail_lo, 16, t, count, &a, &b);
    update_dense(c, a, b, count);
    team_update(c, c->tail, c->tail_m, t, count);
    nl_block_range(m->nreduce - m->ntrainable, 16, t, count, &a, &b);
    for (int j = 1; j < count && a < b; j++)
        nl_add_clear(g + m->ntrainable + a, c->w[j].grad + m->ntrainable + a, b - a);
}

static void eval_thread(void *arg, int t, int count)
{
    struct ctx *c = arg;
    struct worker *w = &c->w[t];
    const struct nl_model *m = c->m;
    long lo, hi;

    share(c->count, t, count, &lo, &hi);
    w->loss = 0.0;
    w->correct = 0;
    memset(&w->reg, 0, sizeof w->reg);
    for (long s = lo; s < hi; s += c->max_n) {
        int n = (int)(hi - s < c->max_n ? hi - s : c->max_n), correct = 0;
        for (int i = 0; i < n; i++)
            w->idx[i] = (uint32_t)(c->first + s + i);
        nl_dataset_batch(c->d, c->split, w->idx, n, w->x, w->y);
        const float *logits = nl_exec_forward(w->exec, c->params, w->x, n, 0, &w->rng);
        if (c->d->regression) {
            nl_dataset_targets(c->d, c->split, w->idx, n, w->t);
            nl_reg_add(&w->reg, logits, w->t, n);
            w->loss += nl_regression_loss(NULL, logits, w->t, n, c->loss, 1.0f);
            for (int i = 0; c->values && i < n; i++)
                c->values[w->idx[i]] = logits[i];
            continue;
        }
        w->loss += nl_softmax_xent(NULL, logits, w->y, n, m->nclasses, 1.0f, &correct);
        w->correct += correct;
        if (w->metrics)
            nl_metrics_add(w->metrics, logits, w->y, n);
    }
}

/* The mean loss and the accuracy (R^2 for regression, with the sums in *reg when not NULL). */
static void evaluate(struct ctx *c, enum nl_split split, double *loss, double *accuracy,
                     struct nl_reg_sums *reg)
{
    const long n = (long)c->d->split[split].n;
    struct nl_reg_sums sums = {0};
    double sum = 0.0, mae, rmse;
    long correct = 0;

    if (reg)
        memset(reg, 0, sizeof *reg);
    if (n == 0) {
        *loss = *accuracy = NAN;
        return;
    }
    c->split = split;
    c->first = 0;
    c->count = n;
    nl_pool_run(c->pool, eval_thread, c);
    for (int t = 0; t < c->threads; t++) {
        sum += c->w[t].loss;
        correct += c->w[t].correct;
        nl_reg_merge(&sums, &c->w[t].reg);
    }
    *loss = sum / (double)n;
    *accuracy = (double)correct / (double)n;
    if (c->d->regression)
        nl_reg_finish(&sums, 1.0, &mae, &rmse, accuracy);
    if (reg)
        *reg = sums;
}

int nl_evaluate_reg(const struct nl_model *m, const struct nl_dataset *d, enum nl_split split,
                    int threads, enum nl_loss loss, double *loss_out, double *accuracy,
                    struct nl_reg_sums *reg, struct nl_error *err)
{
    struct ctx c;
    int rc = ctx_init(&c, m, d, threads, EVAL_SHARD, 0, err);

    if (rc < 0)
        return rc;
    if (loss != NL_LOSS_DEFAULT && (loss == NL_LOSS_XENT) == !d->regression)
        c.loss = loss;
    evaluate(&c, split, loss_out, accuracy, reg);
    ctx_release(&c);
    return 0;
}

int nl_evaluate_values(const struct nl_model *m, const struct nl_dataset *d, enum nl_split split,
                       int threads, float *pred, float *actual, struct nl_error *err)
{
    struct ctx c;
    double loss, r2;

    if (!d->regression)
        return nl_error_set(err, NL_EINVAL, "dataset '%s' is not a regression dataset", d->name);
    int rc = ctx_init(&c, m, d, threads, EVAL_SHARD, 0, err);
    if (rc < 0)
        return rc;
    c.values = pred;
    evaluate(&c, split, &loss, &r2, NULL);
    ctx_release(&c);
    for (uint32_t i = 0; i < d->split[split].n; i++) {
        pred[i] = (float)(pred[i] * d->target_std + d->target_mean);
        actual[i] = (float)(d->split[split].t[i] * d->target_std + d->target_mean);
    }
    return 0;
}

int nl_evaluate(const struct nl_model *m, const struct nl_dataset *d, enum nl_split split,
                int threads, double *loss, double *accuracy, struct nl_error *err)
{
    return nl_evaluate_reg(m, d, split, threads, NL_LOSS_DEFAULT, loss, accuracy, NULL, err);
}

int nl_evaluate_metrics(const struct nl_model *m, const struct nl_dataset *d, enum nl_split split,
                        int threads, double *loss, struct nl_metrics *out, struct nl_error *err)
{
    struct nl_metrics *per = NULL;
    struct ctx c;
    double accuracy;
    int rc = nl_metrics_init(out, m->nclasses, err);

    if (rc == 0)
        rc = ctx_init(&c, m, d, threads, EVAL_SHARD, 0, err);
    if (rc < 0) {
        nl_metrics_release(out);
        return rc;
    }
    per = nl_calloc((size_t)c.threads, sizeof *per);
    if (!per)
        rc = nl_error_set(err, NL_ENOMEM, "out of memory for the metrics");
    for (int t = 0; rc == 0 && t < c.threads; t++) {
        rc = nl_metrics_init(&per[t], m->nclasses, err);
        c.w[t].metrics = &per[t];
    }
    if (rc == 0) {
        evaluate(&c, split, loss, &accuracy, NULL);
        for (int t = 0; t < c.threads; t++)
            nl_metrics_merge(out, &per[t]);
        nl_metrics_finish(out);
    }
    for (int t = 0; per && t < c.threads; t++)
        nl_metrics_release(&per[t]);
    nl_free(per);
    ctx_release(&c);
    if (rc < 0)
        nl_metrics_release(out);
    return rc;
}

/* Samples per thread the training executors hold: the training shard, or EVAL_SHARD when that is
 * larger and its activations and gradients stay under EVAL_BYTES, so that evaluating a small
 * model between epochs runs in large forward passes while a large one (ResNet-18 at 64x64: 2.6
 * MiB a sample) is not held at 128 samples per thread, most of them only for evaluation.
 * Evaluation goes through the same executors, max_n samples at a time. */
static int train_exec_samples(const struct nl_model *m, int shard)
{
    size_t floats = 0;

    if (shard >= EVAL_SHARD)
        return shard;
    for (int i = 0; i < m->nlayers; i++)
        floats += nl_shape_size(m->layers[i].out);
    return (double)EVAL_SHARD * (double)floats * 2.0 * sizeof(float) <= (double)EVAL_BYTES
               ? EVAL_SHARD
               : shard;
}

/* Whether none of p[0, n) is NaN or infinite. */
static int all_finite(const float *p, size_t n)
{
    float acc = 0.0f;
    for (size_t i = 0; i < n; i++)
        acc *= p[i]; /* NaN stays NaN; an infinity times 0 is NaN */
    return acc == 0.0f;
}

static int validate_opts(const struct nl_train_opts *o, const struct nl_dataset *d,
                         struct nl_error *err)
{
    if (o->epochs < 1)
        return nl_error_set(err, NL_EINVAL, "epochs %d must be at least 1", o->epochs);
    if (o->batch < 1)
        return nl_error_set(err, NL_EINVAL, "batch size %d must be at least 1", o->batch);
    if (o->threads < 0)
        return nl_error_set(err, NL_EINVAL, "thread count %d must be at least 1", o->threads);
    if (!(o->target_accuracy >= 0.0 && o->target_accuracy <= 1.0) || o->patience < 0)
        return nl_error_set(err, NL_EINVAL,
                            "early stopping wants a target accuracy in [0, 1] and a patience of "
                            "0 or more epochs");
    if (!(o->clip_value >= 0.0f) || !(o->clip_norm >= 0.0f))
        return nl_error_set(err, NL_EINVAL,
                            "gradient clipping wants a value and a norm of 0 (off) "
                            "or more");
    if (d->split[NL_TRAIN].n == 0)
        return nl_error_set(err, NL_EINVAL, "dataset '%s' has no training samples", d->name);
    if (o->on_nan != NL_ON_NAN_STOP && o->on_nan != NL_ON_NAN_SKIP_BATCH)
        return nl_error_set(err, NL_EINVAL, "on-nan %d is neither stop nor skip-batch",
                            (int)o->on_nan);
    if (o->checkpoint_every < 0)
        return nl_error_set(err, NL_EINVAL, "checkpoint-every %ld must be 0 (off) or more",
                            o->checkpoint_every);
    if (o->loss < NL_LOSS_DEFAULT || o->loss > NL_LOSS_HUBER)
        return nl_error_set(err, NL_EINVAL, "loss %d is unknown", (int)o->loss);
    if (d->regression && o->loss == NL_LOSS_XENT)
        return nl_error_set(err, NL_EINVAL,
                            "dataset '%s' is a regression dataset; its losses are mse, mae and "
                            "huber, not %s",
                            d->name, nl_loss_names[o->loss]);
    if (!d->regression && o->loss >= NL_LOSS_MSE)
        return nl_error_set(err, NL_EINVAL,
                            "loss %s needs a regression dataset (nnlab import --task regression); "
                            "'%s' is a classification dataset",
                            nl_loss_names[o->loss], d->name);
    if (o->sync && o->on_nan == NL_ON_NAN_SKIP_BATCH)
        return nl_error_set(err, NL_EINVAL,
                            "skipping batches (on-nan skip-batch) runs on one "
                            "machine only");
    return nl_optim_validate(&o->optim, err);
}

int nl_train_judges(const struct nl_train_opts *o)
{
    return o->schedule.kind == NL_SCHEDULE_PLATEAU || o->target_accuracy > 0.0 || o->patience > 0;
}

void nl_judge_init(struct nl_judge *j)
{
    nl_plateau_init(&j->plateau);
    j->best = -1.0;
    j->since_best = 0;
}

int nl_judge_epoch(struct nl_judge *j, const struct nl_train_opts *o, int epoch, double watched)
{
    nl_plateau_update(&j->plateau, &o->schedule, watched);
    if (watched > j->best + 1e-4) {
        j->best = watched;
        j->since_best = 0;
    } else {
        j->since_best++;
    }
    return epoch < o->epochs && ((o->target_accuracy > 0.0 && watched >= o->target_accuracy) ||
                                 (o->patience > 0 && j->since_best >= o->patience));
}

int nl_resume_check(const struct nl_resume *r, int epochs, long iters, struct nl_error *err)
{
    if (r->epoch < 0 || r->epoch > epochs || r->iteration < (long)r->epoch * iters ||
        r->iteration >= (long)(r->epoch + 1) * iters ||
        (r->epoch == epochs && r->iteration != (long)r->epoch * iters))
        return nl_error_set(err, NL_EFORMAT,
                            "the checkpoint (epoch %d, step %ld) does not fit a run of %d epochs "
                            "of %ld steps",
                            r->epoch, r->iteration, epochs, iters);
    return 0;
}

void nl_epoch_event(const struct nl_epoch_sums *e, const struct nl_train_opts *o,
                    struct nl_train_result *res, struct nl_event *ev)
{
    res->epochs = e->epoch;
    res->train_loss = e->samples > 0 ? e->loss / (double)e->samples : NAN;
    res->train_accuracy = e->samples > 0 ? (double)e->correct / (double)e->samples : NAN;
    res->val_accuracy = e->val_accuracy;
    double mae = NAN, rmse = NAN;
    if (e->regression) {
        nl_reg_finish(&e->reg, e->target_std, &mae, &rmse, &res->train_accuracy);
        res->regression = 1;
        res->train_mae = mae;
        res->train_rmse = rmse;
        res->val_mae = e->val_mae;
        res->val_rmse = e->val_rmse;
    }
    *ev = (struct nl_event){
        .kind = NL_EVENT_EPOCH,
        .regression = e->regression,
        .mae = mae,
        .rmse = rmse,
        .val_mae = e->val_mae,
        .val_rmse = e->val_rmse,
        .test_mae = NAN,
        .test_rmse = NAN,
        .epoch = e->epoch,
        .epochs = o->epochs,
        .iter = e->iters,
        .iters = e->iters,
        .loss = res->train_loss,
        .accuracy = res->train_accuracy,
        .val_loss = e->val_loss,
        .val_accuracy = e->val_accuracy,
        .test_accuracy = NAN,
        .test_loss = NAN,
        .seconds = e->seconds,
        .images_per_second = (double)e->samples / (e->seconds > 0 ? e->seconds : 1e-9),
        .samples = e->samples,
        .skipped_batches = e->skipped,
        .lr = e->lr,
        .nworkers = e->nworkers,
        .workers = e->workers,
    };
}

int nl_epoch_report(const struct nl_train_hooks *hooks, struct nl_checkpoint *cp,
                    const struct nl_event *ev, struct nl_error *err)
{
    if (cp && hooks && hooks->checkpoint) {
        cp->metrics = ev;
        int rc = hooks->checkpoint(hooks->ud, cp, err);
        if (rc < 0)
            return rc;
    }
    if (hooks && hooks->event && hooks->event(hooks->ud, ev))
        return nl_error_set(err, NL_ECANCELED, "training stopped after epoch %d", ev->epoch);
    return 0;
}

double nl_epoch_watched(const struct nl_event *ev)
{
    return isfinite(ev->val_accuracy) ? ev->val_accuracy : ev->accuracy;
}

void nl_done_event(const struct nl_train_result *res, const struct nl_train_opts *o,
                   struct nl_event *ev)
{
    *ev = (struct nl_event){
        .kind = NL_EVENT_DONE,
        .regression = res->regression,
        .mae = res->train_mae,
        .rmse = res->train_rmse,
        .val_mae = res->val_mae,
        .val_rmse = res->val_rmse,
        .test_mae = res->test_mae,
        .test_rmse = res->test_rmse,
        .epoch = res->epochs,
        .epochs = o->epochs,
        .loss = res->train_loss,
        .accuracy = res->train_accuracy,
        .val_loss = NAN,
        .val_accuracy = res->val_accuracy,
        .test_accuracy = res->test_accuracy,
        .test_loss = res->test_loss,
        .seconds = res->seconds,
        .images_per_second = res->images_per_second,
        .skipped_batches = res->skipped_batches,
    };
}

/* One nl_train: what its steps share, and the epoch in progress. */
struct loop {
    struct nl_model *m;
    const struct nl_dataset *d;
    const struct nl_train_opts *o;
    const struct nl_train_hooks *hooks;
    struct nl_train_result *res;
    struct nl_error *err;
    struct ctx c;
    int threads, nstate, judges, mid_checkpoints;
    long ntrain, iters;
    size_t state_floats;
    uint32_t *order;
    float *undo; /* skip-batch: the parameters and optimizer state before the step */
    struct nl_rng order_rng;
    struct nl_judge judge;
    int first_epoch;
    long first_it, first_step;
    double train_seconds;
    long train_samples;
    /* The epoch in progress. */
    int epoch;
    double t0, loss_sum, batch_loss;
    long correct, seen, skipped;
    struct nl_reg_sums reg, batch_reg; /* regression: the epoch's and the step's */
};

/* Picks up where r left off: the optimizer state and step count into L's context, the plateau
 * and early stopping state replayed over the completed epochs. */
static int resume_state(struct loop *L, const struct nl_resume *r)
{
    const struct nl_train_opts *o = L->o;
    int rc = nl_resume_check(r, o->epochs, L->iters, L->err);
    if (rc < 0)
        return rc;
    /* A cluster member's optimizer state lives in its synchroniser, not here. */
    const size_t state_floats = o->sync ? 0 : L->state_floats;
    if (r->optim_floats != (r->optim_state ? state_floats : 0) ||
        (state_floats > 0 && !r->optim_state))
        return nl_error_set(L->err, NL_EFORMAT,
                            "the checkpoint holds %zu floats of optimizer state, %s wants %zu",
                            r->optim_floats, nl_optim_kind_name(o->optim.kind), state_floats);
    if (state_floats > 0)
        memcpy(L->c.state_block, r->optim_state, state_floats * sizeof(float));
    L->c.step = r->iteration;
    for (int e = 0; r->watched && e < r->epoch; e++)
        nl_judge_epoch(&L->judge, o, e + 1, r->watched[e]);
    L->first_epoch = r->epoch + 1;
    L->first_it = r->iteration - (long)r->epoch * L->iters;
    L->res->epochs = r->epoch;
    return 0;
}

static void say(const struct loop *L, const char *text)
{
    if (text[0] && L->o->note)
        L->o->note(L->o->note_ud, text);
}

/* The frozen-feature cache, where the model has a frozen prefix and the options allow it; what
 * it holds and where, or why there is none, said once. */
static int features_setup(struct loop *L)
{
    const struct nl_train_opts *o = L->o;
    struct ctx *c = &L->c;
    char text[1024];

    if (!o->feature_cache || nl_exec_prefix(c->w[0].exec) == 0)
        return 0;
    if (o->sync) {
        say(L, "frozen features not cached: a cluster member runs the whole model every step");
        return 0;
    }
    if (nl_augment_active(&o->augment)) {
        say(L, "frozen features not cached: augmentation changes the input every epoch, so every "
               "step runs the frozen layers");
        return 0;
    }
    nl_features_open(&c->feat, c->w[0].exec, L->m, L->d, o->feature_cache_limit,
                     o->feature_cache_dir, text, sizeof text);
    say(L, text);
    if (c->feat.where == NL_FEATURES_NONE)
        return 0;
    for (int t = 0; t < c->threads; t++) {
        c->w[t].feat = nl_alloc_floats((size_t)c->max_n * c->feat.floats);
        if (!c->w[t].feat)
            return nl_error_set(L->err, NL_ENOMEM, "out of memory for the cached features");
    }
    L->res->feature_cache = (int)c->feat.where;
    L->res->feature_cache_bytes = c->feat.n * c->feat.floats * sizeof(float);
    return 0;
}

/* Whether a run streams its gradients (see the top of the file): not with a synchroniser or
 * clipping, which read the whole gradient, nor with embedding tables whose rows are tracked; by
 * default only where the gradient is at least STREAM_MIN_BYTES. Below that the full-size buffers
 * cost little memory, and the hand-offs of streaming cost time in short steps: lenet, batch 32,
 * two threads, one epoch of Fashion-MNIST trained at 8,281 to 8,313 images/s streamed against
 * 8,947 to 9,737 with full-size buffers, three runs each alternating (2026-11-27, load average
 * 1.7 to 1.9); resnet8 the same within the noise (3,222 to 3,464 against 2,914 to 3,443). */
static int streams(const struct nl_model *m, const struct nl_train_opts *o)
{
    if (o->gradients == NL_GRADIENTS_FULL || o->sync || o->clip_value > 0.0f || o->clip_norm > 0.0f)
        return 0;
    for (int i = 0; i < m->nlayers && !o->dense_tables; i++)
        if (!m->layers[i].frozen && strcmp(m->layers[i].ops->kind, "embedding") == 0)
            return 0;
    return o->gradients == NL_GRADIENTS_STREAMED ||
           (size_t)m->nreduce * sizeof(float) >= STREAM_MIN_BYTES;
}

/* Whether the threads train as a team (team_step): for a model of dense and element-wise layers
 * (nl_exec_team's kinds), none frozen, without a synchroniser or clipping, on two threads or
 * more, on request or for batches of up to TEAM_BATCH samples. Sample-parallel, each thread running
 * the whole model on its shard packs every weight matrix for its own products and accumulates a
 * full-size weight gradient that the update then sums: mlp at batch 64 took 17% more CPU time on
 * two threads than on one (see update_shared). At batch 256 (shards of 128), thread CPU time per
 * step with the waits, mlp on two threads, 2026-11-27 at load average 3.2 to 3.5, three rounds:
 * 2.65 to 2.82 ms per thread as a team, 2.58 to 2.85 by samples; no gain to choose by, so the
 * team keeps batches up to 256. */
static int team_fits(const struct nl_model *m, const struct nl_train_opts *o, int threads)
{
    if (threads < 2 || o->parallel == NL_PARALLEL_SAMPLES || o->sync || o->clip_value > 0.0f ||
        o->clip_norm > 0.0f)
        return 0;
    for (int i = 0; i < m->nlayers; i++) {
        const struct nl_layer *l = &m->layers[i];
        if (l->frozen || !(l->ops->rows || l->ops->parts))
            return 0;
    }
    return o->parallel == NL_PARALLEL_UNITS || o->batch <= TEAM_BATCH;
}

/* Where a step is hybrid (hybrid_step): the tail is the longest run of last layers that a team
 * can run (dense and element-wise kinds, none stochastic, none with statistics), less the
 * layers without parameters at its start, which stay with the head, on the samples of each
 * thread; reading no layer of the head but the one before it. Taken on two threads or more
 * without a synchroniser, clipping, frozen layers, embedding tables or streamed gradients,
 * where a team does not take the whole model, for batches of up to HYBRID_BATCH samples (any
 * on request, NL_PARALLEL_UNITS; see the top of the file for why not more), and where the tail
 * holds at least half of the trainable parameters: the weights that sample-parallel threads each
 * pack for their own products and whose full-size gradient each accumulates, on its half of the
 * samples, and the update sums. Returns the first layer of the tail, or 0 for none. */
static int hybrid_split(const struct nl_model *m, const struct nl_train_opts *o, int threads)
{
    int split = m->nlayers;
    size_t tail = 0;

    if (threads < 2 || o->parallel == NL_PARALLEL_SAMPLES || o->sync || o->clip_value > 0.0f ||
        o->clip_norm > 0.0f || (o->parallel != NL_PARALLEL_UNITS && o->batch > HYBRID_BATCH) ||
        streams(m, o))
        return 0;
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].frozen || strcmp(m->layers[i].ops->kind, "embedding") == 0)
            return 0;
    for (; split > 0; split--) {
        const struct nl_layer *l = &m->layers[split - 1];
        int stat = 0;
        for (int k = 0; k < l->nparams; k++)
            stat |= l->params[k].stat;
        if (!(l->ops->rows || l->ops->parts) || (l->ops->stochastic && l->p > 0.0f) || stat)
            break;
    }
    while (split < m->nlayers && m->layers[split].param_count == 0)
        split++;
    if (split == 0 || split == m->nlayers)
        return 0;
    for (int i = split; i < m->nlayers; i++) {
        for (int j = 0; j < m->layers[i].ninputs; j++)
            if (m->layers[i].inputs[j] < split - 1)
                return 0;
        tail += m->layers[i].param_count;
    }
    return 2 * tail >= m->ntrainable ? split : 0;
}

/* The hybrid step's views, executors and buffers for batches of up to batch samples; leaves
 * tail_at 0 where the tail's executor cannot run as a team. */
static int hybrid_init(struct ctx *c, int split, int batch, struct nl_error *err)
{
    const struct nl_model *m = c->m;
    const int shard = (batch + c->threads - 1) / c->threads;
    int rc;

    if ((rc = nl_model_view(&c->head_m, m, 0, split, err)) < 0 ||
        (rc = nl_model_view(&c->tail_m, m, split, m->nlayers - split, err)) < 0 ||
        (rc = nl_exec_new(&c->tail, c->tail_m, batch, err)) < 0)
        return rc;
    if (!nl_exec_team(c->tail))
        return 0;
    for (int t = 0; t < c->threads; t++)
        if ((rc = nl_exec_new(&c->w[t].hexec, c->head_m, shard, err)) < 0)
            return rc;
    c->tail_in = nl_shape_size(c->tail_m->input);
    c->tin = nl_alloc_floats((size_t)batch * c->tail_in);
    c->dtin = nl_alloc_floats((size_t)batch * c->tail_in);
    c->tdl = nl_alloc_floats((size_t)batch * (size_t)m->nclasses);
    if (!c->tin || !c->dtin || !c->tdl)
        return nl_error_set(err, NL_ENOMEM, "out of memory for the tail of %d samples", batch);
    c->dtin_zero = nl_exec_input_grad(c->tail, c->dtin);
    c->tail_lo = m->layers[split].param_offset;
    c->tail_at = split;
    return 0;
}

/* Checks the options, builds the threads' context and the run's buffers, and resumes. */
static int train_setup(struct loop *L)
{
    const struct nl_train_opts *o = L->o;
    struct nl_model *m = L->m;
    struct ctx *c = &L->c;
    int rc = validate_opts(o, L->d, L->err);
    if (rc < 0)
        return rc;
    /* A member's own accuracy is not the run's: it is told the watched one (judge). */
    L->judges = nl_train_judges(o);
    if (o->sync && L->judges && !o->sync->judge)
        return nl_error_set(L->err, NL_EINVAL,
                            "a cluster member cannot follow validation accuracy (plateau "
                            "schedule, early stopping) without being told it");
    L->ntrain = (long)L->d->split[NL_TRAIN].n;
    L->iters = o->sync ? o->sync->iters : (L->ntrain + o->batch - 1) / o->batch;
    nl_judge_init(&L->judge);
    L->threads = o->threads > 0 ? o->threads : nl_cpu_count();
    /* More threads than samples in a batch would leave some idle. */
    if (L->threads > o->batch)
        L->threads = o->batch;
    const int team = team_fits(m, o, L->threads);
    const int split = team ? 0 : hybrid_split(m, o, L->threads);
    int shard = team ? o->batch : (o->batch + L->threads - 1) / L->threads;
    rc = ctx_init(c, m, L->d, L->threads, train_exec_samples(m, shard),
                  team            ? 3
                  : streams(m, o) ? 2
                                  : 1,
                  L->err);
    if (rc < 0)
        return rc;
    if (team && !nl_exec_team(c->w[0].exec)) /* team_fits admits only what nl_exec_team does */
        return nl_error_set(L->err, NL_EINVAL, "the model's layers cannot train as a team");
    c->team = team;
    if (split && (rc = hybrid_init(c, split, o->batch, L->err)) < 0)
        return rc;
    L->res->team_from = team ? 0 : c->tail_at > 0 ? c->tail_at : m->nlayers;
    c->optim = &o->optim;
    c->sync = o->sync;
    c->keep_from = o->sync ? 0 : m->ntrainable;
    c->augment = &o->augment;
    c->clip_value = o->clip_value;
    c->clip_norm = o->clip_norm;
    c->seed = o->seed;
    if (o->loss != NL_LOSS_DEFAULT)
        c->loss = o->loss;
    if ((rc = tables_init(c, o, L->err)) < 0)
        return rc;
    if (o->sync && o->sync->begin && o->sync->ready && (rc = overlap_init(c, L->err)) < 0)
        return rc;
    L->nstate = nl_optim_state_arrays(&o->optim);
    /* A cluster member keeps only its share's indices there. */
    L->order = nl_calloc((size_t)(o->sync ? o->batch : L->ntrain), sizeof *L->order);
    c->state_block = nl_alloc_floats(m->ntrainable * (size_t)(L->nstate > 0 ? L->nstate : 1) + 1);
    if (!L->order || !c->state_block)
        return nl_error_set(L->err, NL_ENOMEM, "out of memory for the optimizer state");
    for (int k = 0; k < L->nstate; k++)
        c->state[k] = c->state_block + (size_t)k * m->ntrainable;
    L->state_floats = (size_t)L->nstate * m->ntrainable;
    if (o->on_nan == NL_ON_NAN_SKIP_BATCH &&
        !(L->undo = nl_alloc_floats(m->nparams + L->state_floats + 1)))
        return nl_error_set(L->err, NL_ENOMEM, "out of memory for --on-nan skip-batch");
    L->first_epoch = 1;
    if (o->resume && (rc = resume_state(L, o->resume)) < 0)
        return rc;
    L->first_step = c->step;
    /* Within an epoch a checkpoint cannot hold the epoch's training accuracy so far: a run that
     * judges its epochs by training accuracy (no validation split) for a plateau schedule or
     * early stopping checkpoints at epoch ends only, so that a resumed run decides the same. */
    L->mid_checkpoints = o->checkpoint_every > 0 && (L->d->split[NL_VAL].n > 0 || !L->judges);
    /* The frozen layers' prepared weights (nl_prep), made once since no step changes them; not
     * for a cluster member, whose synchroniser writes the parameters it is sent. */
    if (!o->sync && m->nreduce < m->nparams) {
        if ((rc = nl_prep_new(&c->prep, m, c->params, 1, L->err)) < 0)
            return rc;
        L->res->prep_floats = nl_prep_floats(c->prep, NULL);
        for (int t = 0; t < c->threads; t++)
            nl_exec_use_prep(c->w[t].exec, c->prep);
    }
    return features_setup(L);
}

/* The epoch's data order, which depends only on the seed and the epoch number; and whether it
 * reads the feature cache, fills it (an epoch that runs whole), or neither. */
static void epoch_begin(struct loop *L, int epoch, long first_it)
{
    struct ctx *c = &L->c;
    if (c->feat.where == NL_FEATURES_NONE)
        c->feat_mode = FEAT_OFF;
    else if (c->feat.complete)
        c->feat_mode = FEAT_USE;
    else
        c->feat_mode = first_it == 0 ? FEAT_FILL : FEAT_OFF;
    L->epoch = epoch;
    L->t0 = nl_now();
    L->loss_sum = 0.0;
    L->correct = L->seen = L->skipped = 0;
    memset(&L->reg, 0, sizeof L->reg);
    nl_rng_seed(&L->order_rng, nl_rng_epoch_seed(L->o->seed, epoch));
    if (!L->o->sync) {
        for (long i = 0; i < L->ntrain; i++)
            L->order[i] = (uint32_t)i;
        nl_rng_shuffle(&L->order_rng, L->order, (size_t)L->ntrain);
    }
}

/* Step it of the epoch: its batch, forward and backward on every thread, the reduction and
 * update (or the synchroniser's), and the non-finite loss rule. */
/* Thread 0's executors keep their layers' times in seconds (nl_train_opts.layer_seconds): the
 * hybrid step's head and tail are views of the model's layers [0, tail_at) and [tail_at, end). */
static void time_layers(struct ctx *c, double *seconds)
{
    if (c->tail_at > 0) {
        nl_exec_time_layers(c->w[0].hexec, seconds);
        nl_exec_time_layers(c->tail, seconds + 2 * (size_t)c->tail_at);
    } else {
        nl_exec_time_layers(c->w[0].exec, seconds);
    }
}

static int train_step(struct loop *L, long it)
{
    const struct nl_train_opts *o = L->o;
    struct nl_model *m = L->m;
    struct ctx *c = &L->c;
    long batch_correct = 0;

    if (o->sync) {
        int global = 1;
        c->idx = L->order;
        c->batch = o->sync->share(o->sync->ud, L->epoch, it, L->order, &global);
        c->global = global;
    } else {
        c->idx = L->order + it * o->batch;
        c->batch = (int)(it == L->iters - 1 ? L->ntrain - it * o->batch : o->batch);
        c->global = c->batch;
    }
    c->scale = 1.0f / (float)c->global;
    c->step++;
    c->lr = nl_schedule_lr(&o->schedule, o->optim.lr, c->step, L->iters, (long)o->epochs * L->iters,
                           L->judge.plateau.factor);
    if (L->undo) {
        memcpy(L->undo, c->params, m->nparams * sizeof(float));
        memcpy(L->undo + m->nparams, c->state_block, L->state_floats * sizeof(float));
    }
    if (c->can_overlap)
        c->overlap = !o->sync->overlaps || o->sync->overlaps(o->sync->ud, c->step);
    if (c->stream && split_step(c))
        L->res->split_steps++;
    for (int i = 0; c->stream && i < m->nlayers; i++) {
        atomic_store(&c->pending[i], c->threads);
        c->jobs[i].owner = c->jobs[i].layer >= 0 ? c->split_now[c->jobs[i].layer] : -1;
        c->jobs[i].open = c->jobs[i].finished = 0;
        atomic_store(&c->jobs[i].next, 0);
        atomic_store(&c->jobs[i].done, 0);
    }
    c->jobs_done = 0;
    c->unreleased = m->nlayers - 1;
    if (c->overlap) {
        for (int i = 0; i < m->nlayers; i++) {
            atomic_store(&c->pending[i], c->threads);
            c->reduced[i] = 0;
        }
        c->next = m->nlayers;
        int rc = o->sync->begin(o->sync->ud, c->params, c->w[0].grad, c->step, c->lr);
        if (rc < 0)
            return nl_error_set(L->err, rc, "the synchroniser cannot begin step %ld", c->step);
    }
    c->fused_now = 0;
    if (o->layer_seconds && c->step == o->layer_from + 1)
        time_layers(c, o->layer_seconds);
    if (o->layer_seconds && c->step > o->layer_from)
        L->res->layer_steps++;
    nl_pool_run(c->pool, c->team ? team_step : c->tail_at ? hybrid_step : step_thread, c);
    L->res->split_fused += c->fused_now;
    if (o->sync) {
        int rc = o->sync->step(o->sync->ud, c->params, c->w[0].grad, c->step, c->lr, L->err);
        if (rc < 0)
            return rc;
    }
    L->batch_loss = 0.0;
    memset(&L->batch_reg, 0, sizeof L->batch_reg);
    for (int t = 0; t < L->threads; t++) {
        L->batch_loss += c->w[t].loss;
        batch_correct += c->w[t].correct;
        nl_reg_merge(&L->batch_reg, &c->w[t].reg);
    }
    if (L->undo && (!isfinite(L->batch_loss) || !all_finite(c->params, m->nparams))) {
        memcpy(c->params, L->undo, m->nparams * sizeof(float));
        memcpy(c->state_block, L->undo + m->nparams, L->state_floats * sizeof(float));
        L->skipped++;
        L->res->skipped_batches++;
    } else if (!isfinite(L->batch_loss)) {
        return nl_error_set(L->err, NL_ENAN,
                            "epoch %d, step %ld: the loss is %s; the run keeps its last "
                            "checkpoint; lower the learning rate (now %g), or skip such batches "
                            "(on-nan skip-batch)",
                            L->epoch, it + 1, isnan(L->batch_loss) ? "NaN" : "infinite",
                            o->optim.lr);
    } else {
        nl_model_update_stats(m, c->params, c->stream ? c->stats : c->w[0].grad, c->global);
        L->loss_sum += L->batch_loss;
        L->correct += batch_correct;
        nl_reg_merge(&L->reg, &L->batch_reg);
        L->seen += c->batch;
    }
    return 0;
}

/* The ITER event of step it. */
static int step_event(struct loop *L, long it)
{
    const struct ctx *c = &L->c;
    if (!L->hooks || !L->hooks->event)
        return 0;
    const double elapsed = nl_now() - L->t0;
    const double per_step = (L->train_seconds + elapsed) / (double)(c->step - L->first_step);
    double mae = NAN, rmse = NAN, r2 = NAN;
    if (L->d->regression)
        nl_reg_finish(&L->reg, L->d->target_std, &mae, &rmse, &r2);
    struct nl_event ev = {
        .kind = NL_EVENT_ITER,
        .regression = L->d->regression,
        .mae = mae,
        .rmse = rmse,
        .val_mae = NAN,
        .val_rmse = NAN,
        .test_mae = NAN,
        .test_rmse = NAN,
        .epoch = L->epoch,
        .epochs = L->o->epochs,
        .iter = it + 1,
        .iters = L->iters,
        .loss = c->batch > 0 ? L->batch_loss / c->batch : 0.0, /* not finite: skipped */
        .accuracy = L->d->regression ? r2
                    : L->seen > 0    ? (double)L->correct / (double)L->seen
                                     : 0.0,
        .val_loss = NAN,
        .val_accuracy = NAN,
        .test_accuracy = NAN,
        .test_loss = NAN,
        .seconds = elapsed,
        .images_per_second = (double)L->seen / (elapsed > 0 ? elapsed : 1e-9),
        .eta_seconds = per_step * (double)((long)L->o->epochs * L->iters - c->step),
        .lr = c->lr,
        .samples = L->seen,
    };
    if (L->hooks->event(L->hooks->ud, &ev))
        return nl_error_set(L->err, NL_ECANCELED, "training stopped at epoch %d", L->epoch);
    return 0;
}

/* The checkpoint after the current step, epochs_done whole epochs into the run. */
static struct nl_checkpoint checkpoint_now(const struct loop *L, int epochs_done)
{
    const int local_state = L->nstate > 0 && !L->o->sync;
    return (struct nl_checkpoint){
        .epoch = epochs_done,
        .iteration = L->c.step,
        .params = L->c.params,
        .nparams = L->m->nparams,
        .optim_state = local_state ? L->c.state_block : NULL,
        .optim_floats = L->o->sync ? 0 : L->state_floats,
        .rng = &L->order_rng,
    };
}

/* A checkpoint within the epoch every checkpoint_every steps; its last step's is the epoch's. */
static int step_checkpoint(struct loop *L, long it)
{
    if (!L->mid_checkpoints || L->c.step % L->o->checkpoint_every != 0 || it + 1 >= L->iters ||
        !L->hooks || !L->hooks->checkpoint)
        return 0;
    struct nl_checkpoint cp = checkpoint_now(L, L->epoch - 1);
    return L->hooks->checkpoint(L->hooks->ud, &cp, L->err);
}

/* The epoch's end: validation, its checkpoint and event, and the judging (a cluster member is told
 * the run's watched accuracy). 1 when early stopping ends the run. */
static int epoch_end(struct loop *L)
{
    const struct nl_train_opts *o = L->o;
    const double seconds = nl_now() - L->t0;
    struct nl_epoch_sums e = {
        .epoch = L->epoch,
        .iters = L->iters,
        .loss = L->loss_sum,
        .correct = L->correct,
        .samples = L->seen,
        .skipped = L->skipped,
        .seconds = seconds,
        .lr = L->c.lr,
    };
    struct nl_event ev;

    L->train_seconds += seconds;
    L->train_samples += L->seen;
    if (L->c.feat_mode == FEAT_FILL) {
        char text[1024];
        nl_features_finish(&L->c.feat, text, sizeof text);
        say(L, text);
    } else if (L->c.feat_mode == FEAT_USE) {
        L->res->cached_epochs++;
    }
    struct nl_reg_sums val;
    double r2;
    evaluate(&L->c, NL_VAL, &e.val_loss, &e.val_accuracy, &val);
    e.regression = L->d->regression;
    e.reg = L->reg;
    e.target_std = L->d->target_std;
    nl_reg_finish(&val, L->d->target_std, &e.val_mae, &e.val_rmse, &r2);
    nl_epoch_event(&e, o, L->res, &ev);
    struct nl_checkpoint cp = checkpoint_now(L, L->epoch);
    int rc = nl_epoch_report(L->hooks, &cp, &ev, L->err);
    if (rc < 0)
        return rc;
    /* After the last epoch nothing is left to decide. */
    double watched = nl_epoch_watched(&ev);
    if (o->sync && L->judges && L->epoch < o->epochs &&
        (rc = o->sync->judge(o->sync->ud, L->epoch, &watched, L->err)) < 0)
        return rc;
    if (nl_judge_epoch(&L->judge, o, L->epoch, watched)) {
        L->res->stopped_early = 1;
        return 1;
    }
    return 0;
}

/* The test split, the run's totals and the DONE event. */
static void train_done(struct loop *L)
{
    struct nl_train_result *res = L->res;
    struct nl_reg_sums test;
    double r2;
    evaluate(&L->c, NL_TEST, &res->test_loss, &res->test_accuracy, &test);
    nl_reg_finish(&test, L->d->target_std, &res->test_mae, &res->test_rmse, &r2);
    res->seconds = L->train_seconds;
    res->images_per_second =
        (double)L->train_samples / (L->train_seconds > 0 ? L->train_seconds : 1e-9);
    if (!L->hooks || !L->hooks->event)
        return;
    struct nl_event ev;
    nl_done_event(res, L->o, &ev);
    L->hooks->event(L->hooks->ud, &ev);
}

int nl_train(struct nl_model *m, const struct nl_dataset *d, const struct nl_train_opts *o,
             const struct nl_train_hooks *hooks, struct nl_train_result *res, struct nl_error *err)
{
    struct loop L = {.m = m, .d = d, .o = o, .hooks = hooks, .res = res, .err = err};

    memset(res, 0, sizeof *res);
    res->val_accuracy = res->test_accuracy = res->test_loss = NAN;
    res->regression = d->regression;
    res->train_mae = res->train_rmse = res->val_mae = res->val_rmse = NAN;
    res->test_mae = res->test_rmse = NAN;
    int rc = train_setup(&L);
    for (int epoch = L.first_epoch; rc == 0 && epoch <= o->epochs; epoch++) {
        const long first_it = epoch == L.first_epoch ? L.first_it : 0;
        epoch_begin(&L, epoch, first_it);
        for (long it = first_it; rc == 0 && it < L.iters; it++) {
            rc = train_step(&L, it);
            if (rc == 0)
                rc = step_event(&L, it);
            if (rc == 0)
                rc = step_checkpoint(&L, it);
        }
        if (rc == 0)
            rc = epoch_end(&L);
    }
    if (rc >= 0) {
        train_done(&L);
        rc = 0;
    }
    nl_free(L.undo);
    nl_free(L.order);
    ctx_release(&L.c);
    return rc;
}
