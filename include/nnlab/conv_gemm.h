/* Small matrix products for convolutions whose products are too small for OpenBLAS to run near
 * its rate (LeNet's: 50 filters, K = 500, 64 output pixels): the left matrix is packed once per
 * shard into panels of NL_PGEMM_MR rows, the right one is read in place, row by row, and the
 * output tile (up to 6 rows by 64 columns) stays in AVX-512 registers (core/engine/conv_gemm.c).
 * Each output sums its terms in fused multiply-adds in the order of k, starting from its initial
 * value (0, the bias or the output itself); the naive twins do the same with fmaf, so the two
 * agree bit for bit. */
#ifndef NNLAB_CONV_GEMM_H
#define NNLAB_CONV_GEMM_H

#include <stddef.h>

#define NL_PGEMM_MR 6

/* The panel height h for m rows: NL_PGEMM_MR, or 5 where that divides m and NL_PGEMM_MR does
 * not (LeNet's 50 filters: ten panels of 5 rather than eight of 6 and a slow one of 2). */
int nl_pgemm_mr(int m);

/* Floats of a (m, k) packed: ceil(m / h) panels of h * k. */
size_t nl_pgemm_packed_floats(int m, int k);

/* ap = a (m, k) packed: panel i holds rows [h*i, h*i + h) k-major,
 * ap[(i*k + kk)*h + r] = a[h*i + r][kk], the rows past m zero (h = nl_pgemm_mr(m)). a is
 * row-major with row stride lda; with trans, a is given as its transpose, (k, m) with row stride
 * lda. */
void nl_pgemm_pack(float *ap, const float *a, int lda, int trans, int m, int k);

/* c (m, n) = init + ap (m, k) b (k, n): b row-major with row stride ldb, c with ldc; init is c
 * itself when accumulate, else bias[row] when bias is not NULL, else 0. */
void nl_pgemm(float *c, int ldc, const float *ap, const float *b, int ldb, int m, int n, int k,
              const float *bias, int accumulate);
void nl_pgemm_naive(float *c, int ldc, const float *ap, const float *b, int ldb, int m, int n,
                    int k, const float *bias, int accumulate);

/* c (m, n) = init + op(a) (m, k) b (k, n), a not packed: op(a) = a (m, k) with row stride lda,
 * or with trans_a its transpose, a given as (k, m); init is c itself when accumulate, else 0. The
 * tiles of nl_pgemm read a where it lies (each panel's rows by their stride, or the turned
 * matrix's rows, which hold a panel's k-th column side by side as a packed panel does), so the
 * call allocates and packs nothing; each output is one chain of fused multiply-adds in the order
 * of k, the floats of nl_pgemm_pack and nl_pgemm on the whole of a. */
void nl_pgemm_rows(int trans_a, int m, int n, int k, const float *a, int lda, const float *b,
                   int ldb, int accumulate, float *c, int ldc);
/* c (m, n) = init + a (m, k) b (n, k)^T, both given by rows (strides lda, ldb); init is c itself
 * when accumulate, else 0. Where m and n are both at least NL_PGEMM_NT_TILES, b is turned a block
 * at a time into a buffer on the stack (64 rows by 256 columns, 64 KiB) and goes through
 * nl_pgemm's tiles with a read in place: each output is one chain of fused multiply-adds in the
 * order of k, as nl_pgemm_rows computes c from a and b^T given turned, so the two agree bit for
 * bit. A thinner product (a dense layer's batch of one, whose b, the weights, would be turned
 * whole for one row) takes each output as a dot product: lane j of 16 sums the terms k = j, j +
 * 16, ... in fused multiply-adds, the lanes are added pairwise (i and i + 8, then i + 4, then i +
 * 2, then the last two), then added to c's initial value. Either way b a^T computed so is c
 * turned, to the bit. The naive twin computes the same sums. */
#define NL_PGEMM_NT_TILES 16
void nl_pgemm_nt(int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                 int accumulate, float *c, int ldc);
void nl_pgemm_nt_naive(int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                       int accumulate, float *c, int ldc);
/* colst (oh*ow, c*kh*kw) = the columns of nl_im2col transposed: row p holds output pixel p's
 * window, channel-major then row-major in the window, zeros on the padding. */
void nl_im2col_t(float *colst, const float *img, int c, int h, int w, int kh, int kw, int sh,
                 int sw, int ph, int pw, int oh, int ow);
void nl_im2col_t_naive(float *colst, const float *img, int c, int h, int w, int kh, int kw, int sh,
                       int sw, int ph, int pw, int oh, int ow);

/* One input channel, stride 1, no padding, output rows of 24 (lenet's conv1: 28x28, 5x5), with
 * no im2col: two output rows are three vectors of 16 pixels, each read from the image with its
 * tap's shift (nl_conv1c_fits says where). out (f, oh, ow) = bias + the taps of img (h, w) by
 * weight [f, 1, kh, kw], each output one chain of fused multiply-adds over the taps in row-major
 * order from the bias (from 0 where bias is NULL); the naive twin computes the same chains with
 * fmaf, so the two agree bit for bit. */
int nl_conv1c_fits(int c, int kh, int kw, int sh, int sw, int ph, int pw, int oh, int ow);
void nl_conv1c(float *out, const float *img, const float *weight, const float *bias, int h, int w,
               int f, int kh, int kw, int oh, int ow);
void nl_conv1c_naive(float *out, const float *img, const float *weight, const float *bias, int h,
                     int w, int f, int kh, int kw, int oh, int ow);

/* Its weight gradient, for windows at most 5 wide (nl_conv1c_dweight_fits): part (f, kh*kw, 16)
 * += each tap's products of dout (f, oh, ow) by the image's pixels under it, pixel q of each pair
 * of output rows (0 to 47) into lane q % 16, one chain of fused multiply-adds per lane over the
 * pairs of rows and then the three vectors of a pair; across a shard's images the same chains go
 * on. nl_conv1c_dweight_finish then adds to dweight (count floats) each tap's 16 lanes summed in
 * lane order. The naive twin computes the same chains with fmaf, so the two agree bit for bit. */
int nl_conv1c_dweight_fits(int kw);
void nl_conv1c_dweight(float *part, const float *dout, const float *img, int w, int f, int kh,
                       int kw, int oh, int ow);
void nl_conv1c_dweight_naive(float *part, const float *dout, const float *img, int w, int f, int kh,
                             int kw, int oh, int ow);
void nl_conv1c_dweight_finish(float *dweight, const float *part, size_t count);

#endif
