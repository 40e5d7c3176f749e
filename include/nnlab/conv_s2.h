/* Stride-2 unrolling through an image's four phase planes (core/engine/conv_s2.c): the PHASES
 * lowering of conv (core/engine/layers/conv.c).
 *
 * An image (C, H, W) is split into its phase planes, phase (pr, pc) holding the pixels of rows
 * pr, pr + 2, ... and columns pc, pc + 2, ...; each plane is stored with rows ow floats apart,
 * so that for a window of stride 2 the row (ci, ki, kj) of the columns (K, P) of nl_im2col is
 * one phase plane read as a flat run shifted by dy*ow + dx, the lanes that fall in the padding
 * masked off. The columns come out as nl_im2col's, float for float; nl_s2_cols_adjoint adds as
 * nl_col2im does, each pixel's terms in the columns' row order, so splitting din, adding and
 * merging back gives nl_col2im's sums bit for bit.
 *
 *   phases (C, 4, hp, ow), hp = (H + 1) / 2, phase index pr*2 + pc; a plane's columns past
 *   (W - pc + 1) / 2 and rows past (H - pr + 1) / 2 are never read.
 */
#ifndef NNLAB_CONV_S2_H
#define NNLAB_CONV_S2_H

#include <stddef.h>
#include <stdint.h>

enum { NL_S2_TAPS = 9, NL_S2_VECS = 64 }; /* the largest window and columns/16 that fit */

struct nl_s2 {
    int c, h, w, kh, kw, ph, pw, oh, ow, hp;
    int vecs;                              /* ceil(oh*ow / 16) */
    uint16_t mask[NL_S2_TAPS][NL_S2_VECS]; /* tap ki*kw + kj: the live lanes of each vector */
    int shift[NL_S2_TAPS];                 /* tap: dy*ow + dx within its phase plane */
    int phase[NL_S2_TAPS];                 /* tap: pr*2 + pc */
    int used;                              /* bit pr*2 + pc: a tap reads that phase */
};

/* Whether a window fits: stride 2 both ways, at most 9 taps, at most 1024 output pixels, and
 * each phase plane's row no wider than an output row. */
int nl_s2_fits(int h, int w, int kh, int kw, int sh, int sw, int ph, int pw, int oh, int ow);

/* The floats of one image's phase planes: C*4*hp*ow. */
size_t nl_s2_floats(int c, int h, int ow);

void nl_s2_plan(struct nl_s2 *p, int c, int h, int w, int kh, int kw, int ph, int pw, int oh,
                int ow);

/* phases (C, 4, hp, ow) = img (C, H, W) split, the phases some tap reads (p->used) only;
 * nl_s2_merge writes those back into img, leaving its other pixels as they are. */
void nl_s2_split(float *phases, const float *img, const struct nl_s2 *p);
void nl_s2_merge(float *img, const float *phases, const struct nl_s2 *p);

/* cols (K, P) = nl_im2col's columns of the image whose phases these are. */
void nl_s2_cols(float *cols, const float *phases, const struct nl_s2 *p);

/* phases += cols (K, P) folded back, row after row: the adjoint of nl_s2_cols. */
void nl_s2_cols_adjoint(float *phases, const float *cols, const struct nl_s2 *p);

/* A 1x1 window of stride 2 without padding reads one phase plane of the four, which needs no
 * split: cols (C, oh*ow) = img (C, H, W) at the even rows and columns, oh = (H + 1) / 2 and
 * ow = (W + 1) / 2 (nl_im2col's columns, float for float); nl_s2_pick_adjoint adds them back
 * there as nl_col2im does, leaving the other pixels as they are. */
void nl_s2_pick(float *cols, const float *img, int c, int h, int w, int oh, int ow);
void nl_s2_pick_adjoint(float *img, const float *cols, int c, int h, int w, int oh, int ow);

/* dst (cols, rows) = src (rows, cols) transposed: PHASES' weight gradient is taken transposed
 * (core/engine/layers/conv.c). The same floats moved, on either path. */
void nl_s2_transpose(float *dst, const float *src, int rows, int cols);

#endif
