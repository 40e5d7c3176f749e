/* Convolution on a 2x2 plane: ResNet-18's last stage at 64x64 inputs (512 channels, 3x3,
 * padding 1). Every output pixel reads every input pixel, each through a tap of its own, so the
 * 16 (output, input) pairs per channel pair are all the work there is; im2col's columns hold 36
 * taps per channel pair of which 20 read the padding. These kernels do the 16, with the images
 * of a shard in the 16 lanes of AVX-512 (the weight gradient: 16 channels;
 * core/engine/conv_plane.c). */
#ifndef NNLAB_CONV_PLANE_H
#define NNLAB_CONV_PLANE_H

#include <stddef.h>

/* Floats of scratch that nl_conv_plane2 and nl_conv_plane2_din take for c input and f output
 * channels: one block of 16 images of the input and the output, turned image-minor. */
size_t nl_conv_plane2_scratch(int c, int f);

/* out (n, f, 2, 2) = the 3x3 convolution, stride 1, padding 1, of in (n, c, 2, 2) by
 * weight [f, c, 3, 3], plus bias (f) when not NULL. Each output sums its c*4 terms channel after
 * channel, in the input pixels' row-major order, in fused multiply-adds; the naive twin sums
 * the same terms in the same order in double and rounds once, so the two agree to rounding. */
void nl_conv_plane2(float *out, const float *in, const float *weight, const float *bias, int n,
                    int c, int f, float *scratch);
void nl_conv_plane2_naive(float *out, const float *in, const float *weight, const float *bias,
                          int n, int c, int f);

/* Its input gradient: din (n, c, 2, 2) += the transposed convolution of dout (n, f, 2, 2) by
 * the same weights, each input pixel's f*4 terms summed filter after filter, output pixels in
 * row-major order. */
void nl_conv_plane2_din(float *din, const float *dout, const float *weight, int n, int c, int f,
                        float *scratch);
void nl_conv_plane2_din_naive(float *din, const float *dout, const float *weight, int n, int c,
                              int f);

/* Its weight gradient, in two steps. nl_conv_lanes_turn writes xt (n, pixels, c) from
 * in (n, c, pixels), here (n, c, 2, 2): each image's pixels turned channel-minor.
 * nl_conv_plane2_dweight then adds to the rows [f0, f1) of dweight [f, c, 3, 3] the products of dy,
 * the output gradient gathered filter-major (f, ld): filter fo's row at dy + fo * ld, image s's
 * four pixels at s * 4 of it (ld at least 4n), with xt: each weight sums its 1, 2 or 4 (output,
 * input) pairs image after image, output pixels in row-major order and input pixels likewise within
 * each, from 0, in fused multiply-adds, and is then added to dweight. The AVX-512 path holds 16
 * channels of two filters' nine taps in registers while it walks the images. The naive twin sums
 * the same terms in the same order in double and rounds once, so the two agree to rounding; a range
 * of rows gives those rows of the whole bit for bit. */
void nl_conv_lanes_turn(float *xt, const float *in, int n, int c, int pixels);
void nl_conv_plane2_dweight(float *dweight, const float *dy, size_t ld, const float *xt, int n,
                            int c, int f0, int f1);
void nl_conv_plane2_dweight_naive(float *dweight, const float *dy, size_t ld, const float *xt,
                                  int n, int c, int f0, int f1);

/* 3x3 convolution, stride 2, padding 1, forward: out (n, f, oh, ow) of in (n, c, h, w),
 * oh = (h - 1) / 2 + 1, by weight [f, c, 3, 3], plus bias (f) when not NULL. The AVX-512 path
 * takes square outputs of 2x2 and 4x4 (nl_conv_s2_lanes_fits), the images of a block of 16
 * in the lanes, each output's terms summed chunk of channels after chunk, channel after channel,
 * taps in row-major order, in fused multiply-adds; the naive twin sums the same terms in the
 * same order in double, so the two agree to rounding. scratch: nl_conv_s2_lanes_scratch floats
 * (the block of 16 images padded and turned image-minor, and its outputs). */
int nl_conv_s2_lanes_fits(int h, int w);
size_t nl_conv_s2_lanes_scratch(int c, int h, int w, int f);
void nl_conv_s2_lanes(float *out, const float *in, const float *weight, const float *bias, int n,
                      int c, int h, int w, int f, float *scratch);
void nl_conv_s2_lanes_naive(float *out, const float *in, const float *weight, const float *bias,
                            int n, int c, int h, int w, int f);

/* Its gradients on a 4x4 input (a 2x2 output: ResNet-18's layer4.0.conv1 at 3x64x64), where
 * the 25 (output, input) pairs per channel pair that do not read the padding are all the work
 * (im2col's columns hold 36). nl_conv_s2_lanes_dweight adds to the rows [f0, f1) of
 * dweight [f, c, 3, 3] the products of dy, gathered filter-major (f, ld) as for
 * nl_conv_plane2_dweight, with xt (n, 16, c), the images turned channel-minor by
 * nl_conv_lanes_turn: 16 channels in the lanes, two filters' nine taps in registers, each weight
 * summing its pairs image after image, output pixels in row-major order, from 0, then added.
 * nl_conv_s2_lanes_din adds to din (n, c, 4, 4) the transposed convolution of dout (n, f, 2, 2):
 * the images of a block of 16 in the lanes, one input channel's 16 pixels in registers, each
 * summing filter after filter, output pixels in row-major order. The naive twins sum the same
 * terms in the same order in double and round once. scratch (din): nl_conv_s2_lanes_din_scratch
 * floats. */
int nl_conv_s2_lanes_grad_fits(int h, int w);
void nl_conv_s2_lanes_dweight(float *dweight, const float *dy, size_t ld, const float *xt, int n,
                              int c, int f0, int f1);
void nl_conv_s2_lanes_dweight_naive(float *dweight, const float *dy, size_t ld, const float *xt,
                                    int n, int c, int f0, int f1);
size_t nl_conv_s2_lanes_din_scratch(int c, int f);
void nl_conv_s2_lanes_din(float *din, const float *dout, const float *weight, int n, int c, int f,
                          float *scratch);
void nl_conv_s2_lanes_din_naive(float *din, const float *dout, const float *weight, int n, int c,
                                int f);

/* The lanes weight gradients of a training step whose threads split them by output channels
 * (struct nl_wsplit, include/nnlab/layer.h): each part t posted dy[t] (f, ld[t]), gathered as for
 * nl_conv_plane2_dweight, and xt[t], its ld[t] / 4 images turned (nl_conv_lanes_turn). */
struct nl_lanes_parts {
    int parts;
    const float *const *dy, *const *xt; /* (parts) each */
    const int *ld;                      /* (parts) */
};

/* Rows [f0, f1) of the weight gradient [f, c, 3, 3] over every part's matrices, PLANE2's (s2 0)
 * or the stride-2 kernel's on a 4x4 input (s2 1), handed out two rows at a time (the last alone
 * where f1 - f0 is odd) rather than stored: put(ud, fo, rows, g) gets rows fo .. fo + rows - 1
 * in g (rows, c, 3, 3), which is buf (2 * c * 9 floats) and is overwritten after put returns.
 * Each float is what nl_conv_plane2_dweight (nl_conv_s2_lanes_dweight) called for part 0, then
 * part 1, ... would leave in rows of zeros: 0 + p_0 + p_1 + ..., bit for bit, the naive twin's
 * likewise of the naive kernels. What this spares a caller that steps the weights from g at once
 * (core/engine/trainer.c): the gradient's rows written to memory, read back and cleared. */
void nl_conv_lanes_dweight_rows(const struct nl_lanes_parts *p, int c, int f0, int f1, int s2,
                                float *buf, void (*put)(void *ud, int fo, int rows, const float *g),
                                void *ud);
void nl_conv_lanes_dweight_rows_naive(const struct nl_lanes_parts *p, int c, int f0, int f1, int s2,
                                      float *buf,
                                      void (*put)(void *ud, int fo, int rows, const float *g),
                                      void *ud);

#endif
