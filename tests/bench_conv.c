/* Convolution lowering benchmark (meson benchmark, not a timed test): each lowering of
 * core/engine/layers/conv.c and gconv.c on the shapes of the shipped CNNs and of ResNet-18 (its
 * stem and stride-2 convolutions too), one forward and one backward (input and weight
 * gradients) of a shard of 16 images, the lowerings alternating (Winograd's two, the direct
 * loops and the lanes kernels where the shape takes them; the figures count the direct sum's
 * multiply-adds, so Winograd's are effective rates). Times are the
 * thread's CPU time (CLOCK_THREAD_CPUTIME_ID), the fastest of
 * NNLAB_BENCH_REPEAT (default 7) rounds: a shared, loaded machine slows them far less than it
 * slows wall-clock figures. It prints, per shape, GFLOP/s of each lowering and which one setup
 * chooses by itself, so the rule at the top of conv.c can be checked on another machine:
 *
 *   meson test --benchmark -C build bench_conv -v
 *
 * NNLAB_BENCH_SHAPES=TEXT keeps only the shapes whose name contains TEXT.
 *
 * Then the depthwise kernels themselves, the fast row-by-row loops against their tap-by-tap
 * twins (nl_dwconv_ref), on the same shard, alternating likewise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nnlab/alloc.h"
#include "nnlab/kernels.h"
#include "nnlab/layer.h"
#include "nnlab/winograd.h"

#define SHARD 16

struct shape {
    const char *what;
    int c, h, w, f, k, s, p, groups;
};

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct setup {
    struct nl_layer l;
    float *in, *out, *w, *dw, *din, *dout, *scratch;
    void *aux;
};

static int make(struct setup *u, const struct shape *sh, enum nl_lowering lowering)
{
    struct nl_error err = {0};

    memset(u, 0, sizeof *u);
    u->l = (struct nl_layer){.ops = nl_layer_kind(sh->groups > 1 ? "gconv" : "conv"),
                             .ninputs = 1,
                             .filters = sh->f,
                             .kh = sh->k,
                             .kw = sh->k,
                             .sh = sh->s,
                             .sw = sh->s,
                             .ph = sh->p,
                             .pw = sh->p,
                             .groups = sh->groups,
                             .no_bias = 1,
                             .lowering = lowering,
                             .in = {{sh->c, sh->h, sh->w}}};
    if (u->l.ops->setup(&u->l, &err) != 0) {
        if (lowering != NL_LOWER_DIRECT && lowering != NL_LOWER_WINOGRAD &&
            lowering != NL_LOWER_WINOGRAD2 && lowering != NL_LOWER_PLANE2 &&
            lowering != NL_LOWER_S2LANES && lowering != NL_LOWER_PHASES &&
            lowering != NL_LOWER_ONECHAN)
            fprintf(stderr, "bench_conv: %s: %s\n", sh->what, err.msg);
        return -1;
    }
    size_t in = SHARD * nl_shape_size(u->l.in[0]), out = SHARD * nl_shape_size(u->l.out);
    size_t scratch = u->l.scratch_fixed + SHARD * u->l.scratch_per_sample;
    u->in = nl_alloc_floats(in);
    u->din = nl_alloc_floats(in);
    u->out = nl_alloc_floats(out);
    u->dout = nl_alloc_floats(out);
    u->w = nl_alloc_floats(u->l.param_count);
    u->dw = nl_alloc_floats(u->l.param_count);
    u->scratch = nl_alloc_floats(scratch ? scratch : 1);
    u->aux = nl_calloc(SHARD * u->l.aux_bytes + 1, 1);
    if (!u->in || !u->din || !u->out || !u->dout || !u->w || !u->dw || !u->scratch || !u->aux)
        return -1;
    for (size_t i = 0; i < in; i++)
        u->in[i] = (float)(i % 17) / 17.0f - 0.5f;
    for (size_t i = 0; i < out; i++)
        u->dout[i] = (float)(i % 13) / 13.0f - 0.5f;
    for (size_t i = 0; i < u->l.param_count; i++)
        u->w[i] = (float)(i % 11) / 110.0f - 0.05f;
    memset(u->din, 0, in * sizeof(float));
    memset(u->dw, 0, u->l.param_count * sizeof(float));
    return 0;
}

static void release(struct setup *u)
{
    nl_free(u->in);
    nl_free(u->din);
    nl_free(u->out);
    nl_free(u->dout);
    nl_free(u->w);
    nl_free(u->dw);
    nl_free(u->scratch);
    nl_free(u->aux);
}

/* CPU seconds of one forward and one backward of the shard; *fwd: of the forward alone. */
static double step(struct setup *u, double *fwd)
{
    struct nl_fwd f = {
        .n = SHARD, .in = {u->in}, .out = u->out, .w = u->w, .aux = u->aux, .scratch = u->scratch};
    struct nl_bwd b = {.n = SHARD,
                       .in = {u->in},
                       .out = u->out,
                       .dout = u->dout,
                       .din = {u->din},
                       .w = u->w,
                       .dw = u->dw,
                       .aux = u->aux,
                       .scratch = u->scratch};
    double t0 = cpu_now();
    u->l.ops->forward(&u->l, &f);
    double t1 = cpu_now();
    u->l.ops->backward(&u->l, &b);
    double t2 = cpu_now();
    if (fwd)
        *fwd = t1 - t0;
    return t2 - t0;
}

/* One forward and backward of the shard through the depthwise kernels, fast or reference. */
static double dw_step(const struct shape *sh, int fast, float *out, float *in, float *w, float *b,
                      float *dout, float *din, float *dw, float *db)
{
    const int o = (sh->h + 2 * sh->p - sh->k) / sh->s + 1;
    const size_t in_size = (size_t)sh->c * sh->h * sh->w, out_size = (size_t)sh->f * o * o;
    double t0 = cpu_now();
    for (int s = 0; s < SHARD; s++) {
        if (fast) {
            nl_dwconv(out + s * out_size, in + s * in_size, w, b, sh->c, sh->h, sh->w, 1, sh->k,
                      sh->k, sh->s, sh->s, sh->p, sh->p, o, o);
            nl_dwconv_backward(din + s * in_size, dw, db, dout + s * out_size, in + s * in_size, w,
                               sh->c, sh->h, sh->w, 1, sh->k, sh->k, sh->s, sh->s, sh->p, sh->p, o,
                               o);
        } else {
            nl_dwconv_ref(out + s * out_size, in + s * in_size, w, b, sh->c, sh->h, sh->w, 1, sh->k,
                          sh->k, sh->s, sh->s, sh->p, sh->p, o, o);
            nl_dwconv_backward_ref(din + s * in_size, dw, db, dout + s * out_size, in + s * in_size,
                                   w, sh->c, sh->h, sh->w, 1, sh->k, sh->k, sh->s, sh->s, sh->p,
                                   sh->p, o, o);
        }
    }
    return cpu_now() - t0;
}

static void dw_kernels(const struct shape *shapes, size_t count, int repeat)
{
    printf("\ndepthwise kernels, one forward and backward of %d images, GFLOP/s\n", SHARD);
    printf("%-34s %9s %9s %9s\n", "SHAPE", "REF", "FAST", "FAST/REF");
    for (size_t i = 0; i < count; i++) {
        const struct shape *sh = &shapes[i];
        if (sh->groups <= 1)
            continue;
        const int o = (sh->h + 2 * sh->p - sh->k) / sh->s + 1;
        const size_t in_n = (size_t)SHARD * sh->c * sh->h * sh->w,
                     out_n = (size_t)SHARD * sh->f * o * o;
        const size_t wn = (size_t)sh->f * sh->k * sh->k;
        float *in = nl_alloc_floats(in_n), *din = nl_alloc_floats(in_n);
        float *out = nl_alloc_floats(out_n), *dout = nl_alloc_floats(out_n);
        float *w = nl_alloc_floats(wn), *dw = nl_alloc_floats(wn);
        float *b = nl_alloc_floats((size_t)sh->f), *db = nl_alloc_floats((size_t)sh->f);
        for (size_t k = 0; k < in_n; k++)
            in[k] = (float)(k % 13) * 0.1f - 0.6f;
        for (size_t k = 0; k < out_n; k++)
            dout[k] = (float)(k % 7) * 0.1f - 0.3f;
        for (size_t k = 0; k < wn; k++)
            w[k] = (float)(k % 5) * 0.1f - 0.2f;
        double best[2] = {1e30, 1e30};
        for (int r = 0; r <= repeat; r++)
            for (int fast = 0; fast < 2; fast++) {
                double t = dw_step(sh, fast, out, in, w, b, dout, din, dw, db);
                if (r > 0 && t < best[fast]) /* round 0 touches the buffers */
                    best[fast] = t;
            }
        double flops = 3.0 * 2.0 * SHARD * (double)sh->f * o * o * sh->k * sh->k;
        printf("%-34s %9.1f %9.1f %8.2fx\n", sh->what, flops / best[0] / 1e9, flops / best[1] / 1e9,
               best[0] / best[1]);
        nl_free(in);
        nl_free(din);
        nl_free(out);
        nl_free(dout);
        nl_free(w);
        nl_free(dw);
        nl_free(b);
        nl_free(db);
    }
}

/* Winograd F(4x4, 3x3)'s parts on the 3x3 stride-1 shapes that take it, one chunk of images as
 * conv.c's wino_chunk cuts it (v and mm within 1 MiB, at least 64 tiles, at most 32 images):
 * microseconds of thread CPU time per image (the filter transform and its adjoint: per call),
 * fastest of five times the rounds, each part timed on its own. A training step runs the input
 * transform twice (forward, and again for the weight gradient: input_t where conv takes it),
 * every other part once; du's products (gemm_du, and gemm_du_t on input_t's layout) add into du,
 * as every chunk after a shard's first does. */
static double part_time(int which, const struct nl_wino *p, int n, float *u, float *du, float *v,
                        float *mm, float *in, float *out, float *w, float *dw)
{
    const int aa = p->a * p->a, tt = n * p->tiles;
    const size_t fc = (size_t)p->f * p->c, ct = (size_t)p->c * tt, ft = (size_t)p->f * tt;
    double t0 = cpu_now();
    switch (which) {
    case 0:
        nl_wino_filter(u, w, p);
        break;
    case 1:
        nl_wino_input(v, in, n, p);
        break;
    case 2:
        for (int xi = 0; xi < aa; xi++)
            nl_sgemm(0, 0, p->f, tt, p->c, 1.0f, u + xi * fc, p->c, v + xi * ct, tt, 0.0f,
                     mm + xi * ft, tt);
        break;
    case 3:
        nl_wino_output(out, mm, NULL, NULL, NULL, 0, n, p);
        break;
    case 4:
        nl_wino_output_adjoint(mm, out, n, p);
        break;
    case 5:
        for (int xi = 0; xi < aa; xi++)
            nl_sgemm(0, 1, p->f, p->c, tt, 1.0f, mm + xi * ft, tt, v + xi * ct, tt, 1.0f,
                     du + xi * fc, p->c);
        break;
    case 6:
        for (int xi = 0; xi < aa; xi++)
            nl_sgemm(1, 0, p->c, tt, p->f, 1.0f, u + xi * fc, p->c, mm + xi * ft, tt, 0.0f,
                     v + xi * ct, tt);
        break;
    case 7:
        nl_wino_input_adjoint(in, v, n, p);
        break;
    case 8:
        nl_wino_filter_adjoint(dw, du, p);
        break;
    case 9:
        nl_wino_input_t(v, in, n, p);
        break;
    default:
        for (int xi = 0; xi < aa; xi++)
            nl_sgemm(0, 0, p->f, p->c, tt, 1.0f, mm + xi * ft, tt, v + xi * ct, p->c, 1.0f,
                     du + xi * fc, p->c);
        break;
    }
    return cpu_now() - t0;
}

static void wino_parts(const struct shape *shapes, size_t count, int repeat, const char *only)
{
    static const char *const names[] = {"filter",   "input",   "gemm",     "output",
                                        "out_adj",  "gemm_du", "gemm_dv",  "in_adj",
                                        "filt_adj", "input_t", "gemm_du_t"};
    enum { NPART = 11 };
    printf("\nWinograd F(4x4, 3x3) by part, one chunk, us per image (filter parts: per chunk)\n");
    printf("%-22s %4s", "SHAPE", "N");
    for (int k = 0; k < NPART; k++)
        printf(" %8s", names[k]);
    printf("\n");
    for (size_t i = 0; i < count; i++) {
        const struct shape *sh = &shapes[i];
        if (sh->groups > 1 || sh->k != 3 || sh->s != 1 || sh->h < 5 ||
            (only && !strstr(sh->what, only)))
            continue;
        struct nl_wino p;
        nl_wino_plan(&p, 4, sh->c, sh->h, sh->w, sh->f, sh->p, sh->p, sh->h + 2 * sh->p - 2,
                     sh->w + 2 * sh->p - 2);
        const size_t per = (size_t)36 * p.tiles * ((size_t)p.c + p.f) * sizeof(float);
        size_t k = ((size_t)1 << 20) / per;
        if (k * p.tiles < 64)
            k = (64 + (size_t)p.tiles - 1) / p.tiles;
        const int n = k > 32 ? 32 : (int)k; /* the shard of a batch of 32 on one thread */
        const size_t fc = (size_t)p.f * p.c, tt = (size_t)n * p.tiles;
        float *u = nl_alloc_floats(36 * fc), *du = nl_alloc_floats(36 * fc);
        float *v = nl_alloc_floats(36 * p.c * tt), *mm = nl_alloc_floats(36 * p.f * tt);
        float *in = nl_alloc_floats((size_t)n * p.c * p.h * p.w);
        float *out = nl_alloc_floats((size_t)n * p.f * p.oh * p.ow);
        float *w = nl_alloc_floats(9 * fc), *dw = nl_alloc_floats(9 * fc);
        if (!u || !du || !v || !mm || !in || !out || !w || !dw)
            exit(1);
        for (size_t j = 0; j < (size_t)n * p.c * p.h * p.w; j++)
            in[j] = (float)(j % 17) / 17.0f - 0.5f;
        for (size_t j = 0; j < 9 * fc; j++)
            w[j] = dw[j] = (float)(j % 11) / 110.0f - 0.05f;
        double best[NPART];
        for (int q = 0; q < NPART; q++)
            best[q] = 1e30;
        for (int r = 0; r <= repeat * 5; r++)
            for (int q = 0; q < NPART; q++) {
                double t = part_time(q, &p, n, u, du, v, mm, in, out, w, dw);
                if (r > 0 && t < best[q])
                    best[q] = t;
            }
        printf("%-22s %4d", sh->what, n);
        for (int q = 0; q < NPART; q++)
            printf(" %8.2f", best[q] * 1e6 / (q == 0 || q == 8 ? 1 : n));
        printf("\n");
        nl_free(u);
        nl_free(du);
        nl_free(v);
        nl_free(mm);
        nl_free(in);
        nl_free(out);
        nl_free(w);
        nl_free(dw);
    }
}

int main(void)
{
    static const struct shape shapes[] = {
        {"lenet conv1", 1, 28, 28, 20, 5, 1, 0, 1},
        {"lenet conv2", 20, 12, 12, 50, 5, 1, 0, 1},
        {"resnet8 stage 1", 16, 28, 28, 16, 3, 1, 1, 1},
        {"resnet8 stage 2", 32, 14, 14, 32, 3, 1, 1, 1},
        {"resnet8 stage 3", 64, 7, 7, 64, 3, 1, 1, 1},
        {"resnet8 s2c1 3x3 s2", 16, 28, 28, 32, 3, 2, 1, 1},
        {"resnet8 s3c1 3x3 s2", 32, 14, 14, 64, 3, 2, 1, 1},
        {"resnet8 s2sc 1x1 s2", 16, 28, 28, 32, 1, 2, 0, 1},
        {"resnet8 s3sc 1x1 s2", 32, 14, 14, 64, 1, 2, 0, 1},
        {"mobilenet-tiny stem 3x3 s2", 1, 28, 28, 16, 3, 2, 1, 1},
        {"mobilenet-tiny b1e 1x1", 16, 14, 14, 64, 1, 1, 0, 1},
        {"mobilenet-tiny b3e 1x1", 24, 7, 7, 96, 1, 1, 0, 1},
        {"mobilenet-tiny b1d depthwise", 64, 14, 14, 64, 3, 1, 1, 64},
        {"mobilenet-tiny b2d depthwise s2", 64, 14, 14, 64, 3, 2, 1, 64},
        {"resnet18-64 layer1", 64, 16, 16, 64, 3, 1, 1, 1},
        {"resnet18-64 layer2", 128, 8, 8, 128, 3, 1, 1, 1},
        {"resnet18-64 layer3", 256, 4, 4, 256, 3, 1, 1, 1},
        {"resnet18-64 layer4", 512, 2, 2, 512, 3, 1, 1, 1},
        {"resnet18-64 layer4 1x1 s2", 256, 4, 4, 512, 1, 2, 0, 1},
        {"resnet18-64 conv1 7x7 s2", 3, 64, 64, 64, 7, 2, 3, 1},
        {"resnet18-64 layer2.0 3x3 s2", 64, 16, 16, 128, 3, 2, 1, 1},
        {"resnet18-64 layer3.0 3x3 s2", 128, 8, 8, 256, 3, 2, 1, 1},
        {"resnet18-64 layer4.0 3x3 s2", 256, 4, 4, 512, 3, 2, 1, 1},
        {"resnet18-224 layer3", 256, 14, 14, 256, 3, 1, 1, 1},
        {"resnet18-224 layer4", 512, 7, 7, 512, 3, 1, 1, 1},
        {"resnet18-224 layer2 3x3 s2", 64, 56, 56, 128, 3, 2, 1, 1},
        {"resnet18-224 layer3 3x3 s2", 128, 28, 28, 256, 3, 2, 1, 1},
    };
    const char *env = getenv("NNLAB_BENCH_REPEAT");
    const char *only = getenv("NNLAB_BENCH_SHAPES");
    int repeat = env ? atoi(env) : 7;

    if (repeat < 1)
        repeat = 1;
    nl_kernels_init();
    printf("one forward and backward of %d images, thread CPU time, fastest of %d rounds\n", SHARD,
           repeat);
    /* The plain convolutions under each lowering that takes them, alternating; GFLOP/s of the
     * forward and backward together (the forward alone in parentheses), of the direct sum's
     * multiply-adds, so that the Winograd lowerings' figures are effective rates. */
    static const enum nl_lowering lows[] = {
        NL_LOWER_SAMPLE, NL_LOWER_SHARD,   NL_LOWER_DIRECT, NL_LOWER_WINOGRAD, NL_LOWER_WINOGRAD2,
        NL_LOWER_PLANE2, NL_LOWER_S2LANES, NL_LOWER_PHASES, NL_LOWER_PACKED,   NL_LOWER_ONECHAN};
    static const char *const low_names[] = {"SAMPLE", "SHARD",   "DIRECT", "WINO4",  "WINO2",
                                            "PLANE2", "S2LANES", "PHASES", "PACKED", "ONECHAN"};
    enum { NLOW = sizeof lows / sizeof lows[0] };
    printf("%-28s %7s", "SHAPE", "MFLOP");
    for (int j = 0; j < NLOW; j++)
        printf(" %14s", low_names[j]);
    printf("  %s\n", "SETUP CHOOSES");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const struct shape *sh = &shapes[i];
        if (sh->groups > 1 || (only && !strstr(sh->what, only)))
            continue;
        struct setup u[NLOW], uauto;
        int have[NLOW];
        if (make(&uauto, sh, NL_LOWER_AUTO) < 0)
            return 1;
        for (int j = 0; j < NLOW; j++) {
            have[j] = make(&u[j], sh, lows[j]) == 0;
            if (have[j])
                step(&u[j], NULL); /* first touch */
        }
        double best[NLOW], bestf[NLOW];
        for (int j = 0; j < NLOW; j++)
            best[j] = bestf[j] = 1e30;
        for (int r = 0; r < repeat; r++)
            for (int j = 0; j < NLOW; j++) {
                double tf, t;
                if (!have[j])
                    continue;
                t = step(&u[j], &tf);
                if (t < best[j])
                    best[j] = t;
                if (tf < bestf[j])
                    bestf[j] = tf;
            }
        double madds = (double)SHARD * nl_shape_size(uauto.l.out) * sh->c * sh->k * sh->k;
        double flops = 3.0 * 2.0 * madds; /* forward, input and weight gradients */
        printf("%-28s %7.1f", sh->what, flops / 1e6);
        for (int j = 0; j < NLOW; j++) {
            char cell[32] = "-";
            if (have[j])
                snprintf(cell, sizeof cell, "%.1f (%.1f)", flops / best[j] / 1e9,
                         flops / 3.0 / bestf[j] / 1e9);
            printf(" %14s", cell);
        }
        printf("  %s\n", nl_lowering_name(uauto.l.lower));
        for (int j = 0; j < NLOW; j++)
            if (have[j])
                release(&u[j]);
        release(&uauto);
    }
    printf("SAMPLE: one GEMM per image; SHARD: one per shard; DIRECT: direct loops; WINO4, WINO2: "
           "Winograd F(4x4, 3x3), F(2x2, 3x3); PLANE2: the 2x2-plane kernels; S2LANES: the "
           "stride-2 lanes forward (nnlab/conv_plane.h); PHASES: SAMPLE's columns from the phase "
           "planes; PACKED: the weights packed once, one own product per image "
           "(nnlab/conv_gemm.h); ONECHAN: one input channel, the forward direct over pairs of "
           "output rows\n");
    printf("\ngrouped convolutions, one forward and backward of %d images, GFLOP/s\n", SHARD);
    printf("%-34s %9s %9s %9s %9s  %s\n", "SHAPE", "MFLOP", "A_GFLOPS", "B_GFLOPS", "B/A",
           "SETUP CHOOSES");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const struct shape *sh = &shapes[i];
        if (sh->groups <= 1)
            continue;
        struct setup ua, ub, uauto;
        if (make(&ua, sh, NL_LOWER_GROUPS) < 0 || make(&ub, sh, NL_LOWER_DIRECT) < 0 ||
            make(&uauto, sh, NL_LOWER_AUTO) < 0)
            return 1;
        double best[2] = {1e30, 1e30};
        step(&ua, NULL); /* first touch */
        step(&ub, NULL);
        for (int r = 0; r < repeat; r++) {
            double ta = step(&ua, NULL), tb = step(&ub, NULL);
            if (ta < best[0])
                best[0] = ta;
            if (tb < best[1])
                best[1] = tb;
        }
        double madds =
            (double)SHARD * nl_shape_size(ua.l.out) * (sh->c / sh->groups) * sh->k * sh->k;
        double flops = 3.0 * 2.0 * madds;
        printf("%-34s %9.1f %9.1f %9.1f %8.2fx  %s\n", sh->what, flops / 1e6, flops / best[0] / 1e9,
               flops / best[1] / 1e9, best[0] / best[1], nl_lowering_name(uauto.l.lower));
        release(&ua);
        release(&ub);
        release(&uauto);
    }
    printf("A: one GEMM per image and group; B: direct loops\n");
    dw_kernels(shapes, sizeof shapes / sizeof shapes[0], repeat);
    wino_parts(shapes, sizeof shapes / sizeof shapes[0], repeat, only);
    return 0;
}
