/* Winograd's minimal filtering for 3x3 stride-1 convolutions, F(m x m, 3 x 3): the transforms
 * of core/engine/winograd.c around which conv's WINOGRAD lowering (core/engine/layers/conv.c)
 * runs its a*a matrix products. An output tile of m x m pixels is read from an input tile of
 * a x a, a = m + 2; tile (ty, tx) of an image reads rows ty*m - ph .. +a and columns tx*m - pw
 * .. +a (zero outside the image) and writes rows ty*m .. +m, columns tx*m .. +m (those inside
 * the output). Tiles are numbered t = s*tiles + ty*tiles_x + tx over the images s of a shard,
 * so the products of a small plane are still wide.
 *
 *   Y = A^T [ (G g G^T) (.) (B^T d B) ] A    per tile and pair of channels, summed over C
 *
 * with m = 4 (a = 6, the points 0, 1, -1, 2, -2 and infinity: 36 products for 16 outputs where
 * the direct sum takes 144) or m = 2 (a = 4, the points 0, 1, -1 and infinity: 16 for 4, more
 * exact, and suited to planes of 4x4 and smaller). Layouts, xi = the product's index in the
 * a x a tile, row-major:
 *   u  (a*a, F, C)      the filters transformed, G g G^T
 *   v  (a*a, C, T)      the input tiles transformed, B^T d B, T = n * tiles
 *   mm (a*a, F, T)      the products, mm[xi] = u[xi] v[xi] (conv's GEMMs)
 * Each forward transform has its exact adjoint, so conv's gradients are those of what forward
 * computed. The fast paths run 16 tiles (or channels) in the lanes of AVX-512 vectors with
 * gathers and scatters (on planes 22 to 30 wide, the input transform, its adjoint and the output
 * transform take a tile row's tiles instead, with row loads, permutes and row stores; on planes
 * of 4 tiles a row, 13 to 16 wide under F(4x4), and of 6 to 8 tiles a row within 32 columns, all
 * four transforms take four or two tile rows at once the same way); each has a naive twin of plain
 * loops that the tests compare it against (they differ in the last bits: the fast paths skip the
 * zero coefficients and fuse products). */
#ifndef NNLAB_WINOGRAD_H
#define NNLAB_WINOGRAD_H

#include <stddef.h>

struct nl_wino {
    int m, a;           /* output tile m x m (2 or 4), input tile a x a, a = m + 2 */
    int c, h, w;        /* input (C, H, W) */
    int f;              /* filters */
    int ph, pw, oh, ow; /* zero padding, output plane */
    int tiles_x, tiles; /* tiles per output row, per image */
    /* The input transform of one image's channels [c0, c0 + c) of a wider input (a split call's
     * part, core/engine/layers/conv.c): the channels of v's layout, into which the caller points
     * v at row c0 of the first matrix; 0 (nl_wino_plan): c. Only nl_wino_input reads it, and only
     * with n = 1. */
    int vc;
    /* mm turned for the output transform: product xi of filter f for tile t at
     * mm[(xi * T + t) * mt + f], each of the a*a matrices (T, mt) rather than (F, T), as the
     * products of few tiles write it (core/engine/layers/conv.c); 0 (nl_wino_plan): (F, T).
     * Only nl_wino_output and its naive twin read it. */
    int mt;
    /* The output's channel plane where the transform writes a band of rows of a taller output (a
     * split call's part: out points at the band's first row, and the band's origin is moved by
     * the padding, ph less the band's first row); 0 (nl_wino_plan): oh*ow. Only nl_wino_output
     * and its naive twin read it, and only with n = 1. */
    int op;
};

/* Fills p for a 3x3 stride-1 convolution whose output plane is oh x ow; m is 2 or 4. */
void nl_wino_plan(struct nl_wino *p, int m, int c, int h, int w, int f, int ph, int pw, int oh,
                  int ow);

/* u (a*a, F, C) = G g G^T of each weight g [F, C, 3, 3]. */
void nl_wino_filter(float *u, const float *weight, const struct nl_wino *p);
void nl_wino_filter_naive(float *u, const float *weight, const struct nl_wino *p);
/* The same for the weights of p->c of wc channels: u (a*a, F, p->c) from weight [F, wc, 3, 3],
 * read from the channel weight points at (a block of channels, offset by the caller), the floats
 * nl_wino_filter gives those channels. */
void nl_wino_filter_cols(float *u, const float *weight, const struct nl_wino *p, int wc);
void nl_wino_filter_cols_naive(float *u, const float *weight, const struct nl_wino *p, int wc);
/* dweight [F, C, 3, 3] += G^T du G, the adjoint of nl_wino_filter. */
void nl_wino_filter_adjoint(float *dweight, const float *du, const struct nl_wino *p);
void nl_wino_filter_adjoint_naive(float *dweight, const float *du, const struct nl_wino *p);

/* v (a*a, C, n*tiles) = B^T d B of each input tile d of in (n, C, H, W); with p->vc, each of
 * v's matrices has vc rows, C of them written. */
void nl_wino_input(float *v, const float *in, int n, const struct nl_wino *p);
void nl_wino_input_naive(float *v, const float *in, int n, const struct nl_wino *p);
/* vt (a*a, n*tiles, C): the same values as nl_wino_input's, each of the a*a matrices transposed,
 * so that the weight gradient's products du[xi] (F, C) = dmm[xi] (F, T) vt[xi] (T, C) contract
 * over rows of vt instead of over rows of both operands. nl_wino_input_t_fast says where its
 * vector path runs (16 channels in the lanes: C a multiple of 16, planes of at most 256 pixels);
 * elsewhere it is the naive twin's loops. */
int nl_wino_input_t_fast(const struct nl_wino *p);
void nl_wino_input_t(float *vt, const float *in, int n, const struct nl_wino *p);
void nl_wino_input_t_naive(float *vt, const float *in, int n, const struct nl_wino *p);
/* din (n, C, H, W) += B dv B^T of each tile, onto the pixels it was read from (tiles overlap:
 * their sums add; what fell in the padding is dropped). */
void nl_wino_input_adjoint(float *din, const float *dv, int n, const struct nl_wino *p);
void nl_wino_input_adjoint_naive(float *din, const float *dv, int n, const struct nl_wino *p);
/* din (n, C, H, W) = the same adjoint, written rather than added (din's earlier contents are
 * ignored): the floats of nl_wino_input_adjoint into din zeroed, bit for bit, without a pass
 * that clears din first where the paths allow (tile rows stacked in the lanes). */
void nl_wino_input_adjoint_set(float *din, const float *dv, int n, const struct nl_wino *p);
void nl_wino_input_adjoint_set_naive(float *din, const float *dv, int n, const struct nl_wino *p);

/* out (n, F, oh, ow) = A^T mm A of each tile, the outputs past the plane's edge dropped, plus
 * bias[f] (bias may be NULL); or, where scale is not NULL, act(y * scale[f] + shift[f]) (the
 * folded output pass of nnlab/layer.h's nl_fwd, act NL_ACT_* of nnlab/kernels.h). */
void nl_wino_output(float *out, const float *mm, const float *bias, const float *scale,
                    const float *shift, int act, int n, const struct nl_wino *p);
void nl_wino_output_naive(float *out, const float *mm, const float *bias, const float *scale,
                          const float *shift, int act, int n, const struct nl_wino *p);
/* dmm (a*a, F, n*tiles) = A dy A^T of each tile of dout (n, F, oh, ow), 0 past the edge: the
 * adjoint of nl_wino_output's product part. */
void nl_wino_output_adjoint(float *dmm, const float *dout, int n, const struct nl_wino *p);
void nl_wino_output_adjoint_naive(float *dmm, const float *dout, int n, const struct nl_wino *p);

#endif
