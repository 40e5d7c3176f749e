/* Dense kernels. Each fast path keeps a naive twin that tests compare it against.
 * Matrices are row-major. */
#ifndef NNLAB_KERNELS_H
#define NNLAB_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* c (m, n) = alpha * op(a) op(b) + beta * c, op(x) = x or x^T; a is (m, k) or (k, m), b is (k, n)
 * or (n, k). Goes to OpenBLAS cblas_sgemm, but where nl_sgemm_own says, with alpha 1 and not both
 * turned, to nnlab's AVX-512 kernels: nl_pgemm_rows for b not turned, nl_pgemm_nt for b turned
 * (nnlab/conv_gemm.h), whose sums do not depend on the shape's blocking. */
void nl_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
              const float *b, int ldb, float beta, float *c, int ldc);
/* 1 where nl_sgemm with this beta goes to nnlab's kernels: OpenBLAS runs kernels without AVX-512 on
 * a CPU that has it (as OPENBLAS_CORETYPE=Haswell makes it on one with AVX-512), the vector paths
 * are on and beta is 0 or 1, whatever the shape: OpenBLAS's AVX2 kernels sum an element in orders
 * that depend on the product's shape, so a product made by blocks of rows or columns (a team's
 * shares, Winograd's blocks of filters) would give other floats than the whole, and a product taken
 * turned other floats than the product itself. On a Zen 5 EPYC (one thread, 2026-11-29)
 * they ran 16 x 784 x 16 at 139 GFLOP/s against OpenBLAS's AVX2 kernels' 73, 64 x 200 x 64 at 188
 * against 98, and b turned, 64 x 64 x 200 at 152 against 93, 16 x 16 x 784 at 69 against 60. */
int nl_sgemm_own(float beta);
void nl_sgemm_naive(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                    int lda, const float *b, int ldb, float beta, float *c, int ldc);

/* nl_sgemm with b not turned, made as products of blocks of rows of c, each small enough (rows *
 * n * k <= NL_SGEMM_SMALL) that OpenBLAS's SkylakeX-family kernels take it through their
 * small-matrix path, which reads a and b in place, where the whole product would pack both. Its
 * sums run in another order, so the last bits may differ from nl_sgemm's. Where OpenBLAS runs
 * other kernels (no such path: the blocks would pack b again each), one call of nl_sgemm. */
#define NL_SGEMM_SMALL 1000000.0
void nl_sgemm_rows(int trans_a, int m, int n, int k, const float *a, int lda, const float *b,
                   int ldb, float beta, float *c, int ldc);
/* Rows per block of nl_sgemm_rows for a (m, n, k) product: m where it makes one call. */
int nl_sgemm_rows_block(int m, int n, int k);

/* cols (c*kh*kw, oh*ow) from img (c, h, w) with zero padding. */
void nl_im2col(float *cols, const float *img, int c, int h, int w, int kh, int kw, int sh, int sw,
               int ph, int pw, int oh, int ow);
/* img (c, h, w) += the columns folded back; the adjoint of nl_im2col. */
void nl_col2im(float *img, const float *cols, int c, int h, int w, int kh, int kw, int sh, int sw,
               int ph, int pw, int oh, int ow);
/* img (c, h, w) = the columns folded back, whatever img held: nl_col2im into img zeroed, the
 * same floats, without the zeroing pass where the vector rows write every pixel. */
void nl_col2im_set(float *img, const float *cols, int c, int h, int w, int kh, int kw, int sh,
                   int sw, int ph, int pw, int oh, int ow);

/* As nl_im2col and nl_col2im, with this image's columns inside a wider matrix: cols is
 * (c*kh*kw, ldc), ldc >= oh*ow, and the image owns its first oh*ow columns. A shard of n images
 * then shares one (c*kh*kw, n*oh*ow) matrix, image i's columns starting at cols + i*oh*ow, and a
 * convolution of the whole shard is one GEMM. */
void nl_im2col_ld(float *cols, int ldc, const float *img, int c, int h, int w, int kh, int kw,
                  int sh, int sw, int ph, int pw, int oh, int ow);
void nl_col2im_ld(float *img, const float *cols, int ldc, int c, int h, int w, int kh, int kw,
                  int sh, int sw, int ph, int pw, int oh, int ow);

/* The columns of n images side by side: cols (c*kh*kw, n*oh*ow), image i (c, h, w) at
 * img + i*stride owning columns [i*oh*ow, (i+1)*oh*ow); the same floats as nl_im2col_ld image
 * by image, written row by row. nl_col2im_batch is its adjoint, each image's sums in the order
 * of nl_col2im_ld's. */
void nl_im2col_batch(float *cols, const float *img, int n, size_t stride, int c, int h, int w,
                     int kh, int kw, int sh, int sw, int ph, int pw, int oh, int ow);
void nl_col2im_batch(float *img, const float *cols, int n, size_t stride, int c, int h, int w,
                     int kh, int kw, int sh, int sw, int ph, int pw, int oh, int ow);

/* Direct convolution of one image with stride 1 (no im2col): out (f, oh, ow) = the taps of
 * weight [f, c, kh, kw] over img (c, h, w) zero-padded by (ph, pw), oh = h + 2ph - kh + 1,
 * plus bias (f) when not NULL, or added to out itself when acc is set (bias then unused).
 * kw <= 8. The AVX-512 path holds eight filters' outputs over 32 pixels (two 16-column pieces of
 * a row, or two rows of up to 16) in registers and walks the input once per tap; the naive twin
 * sums the same terms in the same order (channel, tap row, tap column) one pixel at a time, and
 * agrees to rounding (the vector path fuses each multiply and add). */
void nl_conv_s1(float *out, const float *img, const float *weight, const float *bias, int c, int h,
                int w, int f, int kh, int kw, int ph, int pw, int oh, int ow, int acc);
void nl_conv_s1_naive(float *out, const float *img, const float *weight, const float *bias, int c,
                      int h, int w, int f, int kh, int kw, int ph, int pw, int oh, int ow, int acc);

/* Its weight gradient, direct: dweight [f, c, kh, kw] += the correlation of dout (f, oh, ow)
 * with img (c, h, w) zero-padded by (ph, pw). The AVX-512 path (kw = 3) sums four filters'
 * three taps of a row in 16 lanes over the whole plane, then across the lanes; the naive twin
 * sums each tap pixel by pixel, and agrees to rounding. */
void nl_conv_s1_dweight(float *dweight, const float *dout, const float *img, int c, int h, int w,
                        int f, int kh, int kw, int ph, int pw, int oh, int ow);
void nl_conv_s1_dweight_naive(float *dweight, const float *dout, const float *img, int c, int h,
                              int w, int f, int kh, int kw, int ph, int pw, int oh, int ow);

/* Depthwise convolution of one image, direct (no im2col): filter f of the c*mult reads only
 * channel f / mult. out (c*mult, oh, ow) = the taps of weight [c*mult, 1, kh, kw] over img
 * (c, h, w) with zero padding, plus bias (c*mult) when not NULL. Its twin is the per-group
 * im2col and GEMM of core/engine/layers/gconv.c (tests/test_kernels.c holds both against loops). */
void nl_dwconv(float *out, const float *img, const float *weight, const float *bias, int c, int h,
               int w, int mult, int kh, int kw, int sh, int sw, int ph, int pw, int oh, int ow);
/* Its gradients, each += and skipped when NULL: din (c, h, w), dweight [c*mult, 1, kh, kw] and
 * dbias (c*mult), from dout (c*mult, oh, ow). */
void nl_dwconv_backward(float *din, float *dweight, float *dbias, const float *dout,
                        const float *img, const float *weight, int c, int h, int w, int mult,
                        int kh, int kw, int sh, int sw, int ph, int pw, int oh, int ow);
/* Their twins: tap after tap over the whole plane. The fast ones (row by row, a kernel row's
 * taps in one pass) add the same products in the same order, so they agree bit for bit, except
 * the weight gradient where the AVX-512 path runs (strides of 1 or 2 in x): it sums each tap in
 * 16 lanes, and agrees to rounding. */
void nl_dwconv_ref(float *out, const float *img, const float *weight, const float *bias, int c,
                   int h, int w, int mult, int kh, int kw, int sh, int sw, int ph, int pw, int oh,
                   int ow);
void nl_dwconv_backward_ref(float *din, float *dweight, float *dbias, const float *dout,
                            const float *img, const float *weight, int c, int h, int w, int mult,
                            int kh, int kw, int sh, int sw, int ph, int pw, int oh, int ow);

/* The sum of x (n): eight interleaved float partial sums, added in double at the end, so the
 * additions do not wait on one another. Its twin adds one element after another in double. */
float nl_sum(const float *x, int n);
float nl_sum_naive(const float *x, int n);

/* The embedding's weight gradient: dw (vocab, dim) += dout[s, :, t] (dout (n, dim, len)) on row
 * ids[s, t] (ids (n, len), token ids held as floats; one outside [0, vocab) is 1) for every step
 * whose id is not 0 (padding); marks[id] = 1 for each row added to, unless marks is NULL. The
 * fast one reads dout in blocks of 16 steps a channel at a time; the naive one a step's column
 * (stride len). Both add a row's terms in step order, so they agree bit for bit. */
void nl_embedding_backward(float *dw, unsigned char *marks, const float *dout, const float *ids,
                           int n, int len, int dim, int vocab);
void nl_embedding_backward_naive(float *dw, unsigned char *marks, const float *dout,
                                 const float *ids, int n, int len, int dim, int vocab);

/* ReLU over n floats: out = x > 0 ? x : 0 (out may be x). Backward: din = (set) or += (not
 * set) out > 0 ? dout : 0. The vector paths give the naive twins' floats bit for bit. */
void nl_relu(float *out, const float *x, size_t n);
void nl_relu_backward(float *din, const float *out, const float *dout, size_t n, int set);
void nl_relu_naive(float *out, const float *x, size_t n);
void nl_relu_backward_naive(float *din, const float *out, const float *dout, size_t n, int set);

/* Max pooling of one sample x (c, h, w), the padding never picked: out (c, oh, ow) the
 * first maximum of each window in row-major order (NaN where the window holds one), arg the
 * index in x of the value taken (NULL: none, the values alone, as inference wants them). The
 * vector path (strides of 1 or 2 in x) gives the naive twin's floats and indices. */
void nl_maxpool(float *out, int32_t *arg, const float *x, int c, int h, int w, int kh, int kw,
                int sh, int sw, int ph, int pw, int oh, int ow);
void nl_maxpool_naive(float *out, int32_t *arg, const float *x, int c, int h, int w, int kh, int kw,
                      int sh, int sw, int ph, int pw, int oh, int ow);

/* Batchnorm's output pass over n floats: y = g * ((x - mu) * is) + b (y may be x). And the sum
 * of two inputs: out = a + b. The vector paths give the naive twins' floats bit for bit. */
void nl_bn_apply(float *y, const float *x, size_t n, float mu, float is, float g, float b);
void nl_bn_apply_naive(float *y, const float *x, size_t n, float mu, float is, float g, float b);
void nl_add(float *out, const float *a, const float *b, size_t n);
void nl_add_naive(float *out, const float *a, const float *b, size_t n);

/* Batchnorm's passes. The sums run over one channel of a shard: n planes of `plane` floats, plane
 * s at s * stride. shifted_sums: *s1 += sum (x - x0), *s2 += sum (x - x0)^2. grad_sums: *sdy +=
 * sum dy, *sdyc += sum dy * (x - mu). Both sum in sixteen float lanes, added in double at the
 * end. backward_apply, over one plane of n floats: dx = (set) or += g * (dy - a1 - ((x - mu) *
 * is) * a2). The vector paths give the naive twins' results bit for bit. */
void nl_bn_shifted_sums(const float *x, int n, size_t stride, size_t plane, float x0, double *s1,
                        double *s2);
void nl_bn_shifted_sums_naive(const float *x, int n, size_t stride, size_t plane, float x0,
                              double *s1, double *s2);
void nl_bn_grad_sums(const float *dy, const float *x, int n, size_t stride, size_t plane, float mu,
                     double *sdy, double *sdyc);
void nl_bn_grad_sums_naive(const float *dy, const float *x, int n, size_t stride, size_t plane,
                           float mu, double *sdy, double *sdyc);
void nl_bn_backward_apply(float *dx, const float *dy, const float *x, size_t n, float g, float a1,
                          float a2, float mu, float is, int set);
void nl_bn_backward_apply_naive(float *dx, const float *dy, const float *x, size_t n, float g,
                                float a1, float a2, float mu, float is, int set);

/* The activations an output pass can apply (the ReLU and ReLU6 layers' functions). */
enum { NL_ACT_NONE = 0, NL_ACT_RELU = 1, NL_ACT_RELU6 = 2 };

/* An output pass that folds a batchnorm and an activation in inference: y (n) = act(x * s + t),
 * x * s rounded before t is added (y may be x). And out (n) = act(a + b), a residual add with
 * the ReLU after it. The vector paths give the naive twins' floats bit for bit. */
void nl_scale_shift(float *y, const float *x, size_t n, float s, float t, int act);
void nl_scale_shift_naive(float *y, const float *x, size_t n, float s, float t, int act);
void nl_add_act(float *out, const float *a, const float *b, size_t n, int act);
void nl_add_act_naive(float *out, const float *a, const float *b, size_t n, int act);

/* Whether the AVX-512 paths of im2col, col2im, ReLU, max pooling, batchnorm's passes, add and
 * the folded output passes run (core/engine/kernels.c): on where
 * the CPU has AVX-512 after nl_kernels_init; nl_kernels_vector(0) turns them off, 1 back on where
 * the CPU allows. Returns whether they are on now. For tests and benchmarks, before any thread. */
int nl_kernels_vector(int on);
int nl_kernels_vector_on(void);

/* Makes OpenBLAS run single-threaded inside the calling threads and, where OpenBLAS took a
 * newer CPU for a generic one, chooses its kernels from the CPU's feature flags (see
 * core/engine/kernels.c); call once at start, before any other thread. */
void nl_kernels_init(void);

/* Which OpenBLAS kernels run, and why, after nl_kernels_init: "OpenBLAS SkylakeX kernels ...". */
const char *nl_kernels_blas_note(void);

/* Training-time fusion (core/engine/model.c): a batchnorm or residual add that alone feeds a
 * ReLU or ReLU6 (act, NL_ACT_*) writes that activation's output y, and takes its gradient dy.
 * bn_apply_act: y (n) = act(g * ((x - mu) * is) + b + res), x of the batchnorm's input, res
 * (n) the other input of a residual add fused in too, or NULL for none. The backward
 * kernels mask dy where act's derivative, judged from y, is 0 (y > 0 for ReLU, 0 < y < 6 for
 * ReLU6, nowhere for none), as the activation's own backward does, then do what nl_bn_grad_sums,
 * nl_bn_backward_apply and the add's backward do with the masked gradient; y is laid out as dy
 * (and x). add_act_backward writes d0 and d1 (n), each skipped when NULL, in one pass: = where
 * bit 0 (d0) or 1 (d1) of set is on, += elsewhere. bn_backward_apply_res is
 * bn_backward_apply_act and add_act_backward(dres, NULL, ...) in one pass (dy and y read once):
 * dx where bit 0 of set is on, dres where bit 1 is, written, else added into. All give the
 * unfused layers' floats bit for bit, vector paths and naive twins alike. */
void nl_bn_apply_act(float *y, const float *x, const float *res, size_t n, float mu, float is,
                     float g, float b, int act);
void nl_bn_apply_act_naive(float *y, const float *x, const float *res, size_t n, float mu, float is,
                           float g, float b, int act);
void nl_bn_grad_sums_act(const float *dy, const float *y, const float *x, int n, size_t stride,
                         size_t plane, float mu, int act, double *sdy, double *sdyc);
void nl_bn_grad_sums_act_naive(const float *dy, const float *y, const float *x, int n,
                               size_t stride, size_t plane, float mu, int act, double *sdy,
                               double *sdyc);
void nl_bn_backward_apply_act(float *dx, const float *dy, const float *y, const float *x, size_t n,
                              float g, float a1, float a2, float mu, float is, int act, int set);
void nl_bn_backward_apply_act_naive(float *dx, const float *dy, const float *y, const float *x,
                                    size_t n, float g, float a1, float a2, float mu, float is,
                                    int act, int set);
void nl_bn_backward_apply_res(float *dx, float *dres, const float *dy, const float *y,
                              const float *x, size_t n, float g, float a1, float a2, float mu,
                              float is, int act, unsigned set);
void nl_bn_backward_apply_res_naive(float *dx, float *dres, const float *dy, const float *y,
                                    const float *x, size_t n, float g, float a1, float a2, float mu,
                                    float is, int act, unsigned set);
/* The two _act passes with no residual, act's mask judged from w * ((x - mu) * is) + b (forward's
 * v, of which it stored act(v)) instead of read from the output: the same floats bit for bit. */
void nl_bn_grad_sums_mask(const float *dy, const float *x, int n, size_t stride, size_t plane,
                          float mu, float is, float w, float b, int act, double *sdy, double *sdyc);
void nl_bn_grad_sums_mask_naive(const float *dy, const float *x, int n, size_t stride, size_t plane,
                                float mu, float is, float w, float b, int act, double *sdy,
                                double *sdyc);
void nl_bn_backward_apply_mask(float *dx, const float *dy, const float *x, size_t n, float g,
                               float a1, float a2, float mu, float is, float w, float b, int act,
                               int set);
void nl_bn_backward_apply_mask_naive(float *dx, const float *dy, const float *x, size_t n, float g,
                                     float a1, float a2, float mu, float is, float w, float b,
                                     int act, int set);
/* The element-wise passes above over all c channels of one image (c * plane floats), each
 * channel k with its own parameters mu[k], is[k], ...: the floats of a call per channel of the
 * kernels above, bit for bit (vector paths for planes of 1, 2, 4, 8 and 16 floats, nl_bn_chans_fit;
 * elsewhere and the naive twins, those kernels' naive twins channel by channel). mask_chans with
 * NL_ACT_NONE is nl_bn_backward_apply's pass. */
int nl_bn_chans_fit(size_t plane);
void nl_bn_apply_act_chans(float *y, const float *x, const float *res, size_t plane, int c,
                           const float *mu, const float *is, const float *g, const float *b,
                           int act);
void nl_bn_apply_act_chans_naive(float *y, const float *x, const float *res, size_t plane, int c,
                                 const float *mu, const float *is, const float *g, const float *b,
                                 int act);
void nl_bn_backward_apply_res_chans(float *dx, float *dres, const float *dy, const float *y,
                                    const float *x, size_t plane, int c, const float *g,
                                    const float *a1, const float *a2, const float *mu,
                                    const float *is, int act, unsigned set);
void nl_bn_backward_apply_res_chans_naive(float *dx, float *dres, const float *dy, const float *y,
                                          const float *x, size_t plane, int c, const float *g,
                                          const float *a1, const float *a2, const float *mu,
                                          const float *is, int act, unsigned set);
void nl_bn_backward_apply_mask_chans(float *dx, const float *dy, const float *x, size_t plane,
                                     int c, const float *g, const float *a1, const float *a2,
                                     const float *mu, const float *is, const float *w,
                                     const float *b, int act, int set);
void nl_bn_backward_apply_mask_chans_naive(float *dx, const float *dy, const float *x, size_t plane,
                                           int c, const float *g, const float *a1, const float *a2,
                                           const float *mu, const float *is, const float *w,
                                           const float *b, int act, int set);
void nl_add_act_backward(float *d0, float *d1, const float *y, const float *dy, size_t n, int act,
                         unsigned set);
void nl_add_act_backward_naive(float *d0, float *d1, const float *y, const float *dy, size_t n,
                               int act, unsigned set);

/* Asks the caches for x[0, n) ahead of its use; changes no result (core/engine/kernels.c). */
void nl_prefetch(const float *x, size_t n);

/* SGD's update over n parameters (core/engine/optim.c): gi = g + wd * w; with v (momentum mu > 0)
 * v = mu * v + gi, w -= lr * (nesterov ? gi + mu * v : v); without (v NULL) w -= lr * gi. With
 * clear, g is zeroed in the same pass, ready for the next step's sums. add_clear: g (n) += h, then
 * h = 0, one thread's gradient summed into another's. The vector paths give the naive twins'
 * floats bit for bit. */
void nl_sgd_update(float *w, float *v, float *g, size_t n, float lr, float mu, float wd,
                   int nesterov, int clear);
void nl_sgd_update_naive(float *w, float *v, float *g, size_t n, float lr, float mu, float wd,
                         int nesterov, int clear);
void nl_add_clear(float *g, float *h, size_t n);
void nl_add_clear_naive(float *g, float *h, size_t n);

#endif
