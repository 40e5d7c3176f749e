/* "conv": 2-D convolution (cross-correlation, as PyTorch's Conv2d) with stride and zero padding.
 *
 *   weight [F, C, kh, kw], read as the matrix (F, K), K = C*kh*kw; bias [F]
 *   in  (n, C, H, W)    out (n, F, oh, ow), P = oh*ow
 *
 * Ten lowerings, chosen by setup from the shape (l->lower; tests and benchmarks may force
 * one through l->lowering):
 *
 * - SAMPLE: each image is unrolled by im2col into a (K, P) matrix and goes through one GEMM of
 *   its own, out_s (F, P) = weight (F, K) cols_s (K, P). One image's columns stay in cache
 *   between unrolling and product, and the product lands in the output's layout. A pointwise
 *   convolution (1x1, stride 1, no padding) skips im2col: the image is its own columns.
 *   scratch: K*P floats, whatever the shard's size.
 * - SHARD: the whole shard's columns side by side, cols (K, n*P), image s owning columns
 *   [s*P, (s+1)*P), and one GEMM y (F, n*P) = weight cols, scattered into out (n, F, P) with the
 *   bias added in that same pass. The weights are packed once per shard, not once per image.
 *   Backward gathers dout into (F, n*P) the same way (the bias gradient summed in that pass).
 *   scratch: (K + F)*P floats per sample.
 * - DIRECT (stride 1 only): out_s straight from in_s by nl_conv_s1 (core/engine/kernels.c),
 *   eight filters' outputs over 32 pixels held in AVX-512 registers, no im2col. The input
 *   gradient is the same kernel run as the transposed convolution (weights turned (C, F, kh, kw)
 *   and flipped, padding kh - 1 - ph), with no col2im; the weight gradient is a direct
 *   correlation (nl_conv_s1_dweight) for 3-wide windows, SAMPLE's im2col and GEMM otherwise.
 *   Each sums in another order than the products, so its results differ in the last bits.
 *   scratch: K*P + F*K floats, whatever the shard's size.
 * - WINOGRAD, WINOGRAD2 (3x3, stride 1, padding at most 2): Winograd's minimal filtering
 *   F(4x4, 3x3) and F(2x2, 3x3) (nnlab/winograd.h, core/engine/winograd.c). The filters are
 *   transformed to u (a*a, F, C) at every call (the weights change every step), the input tiles
 *   of all the shard's images side by side to v (a*a, C, T), T = n * tiles, so that a small
 *   plane still makes wide products; then a*a GEMMs mm[xi] (F, T) = u[xi] (F, C) v[xi] (C, T)
 *   and the output transform, which adds the bias or runs the folded output pass. F(4x4) takes
 *   36 products per channel pair for 16 outputs where the direct sum takes 144, F(2x2) 16 for 4
 *   where it takes 36. Backward is forward's exact adjoint (so the gradients are those of what
 *   forward computed): dmm = A dy A^T per tile; du[xi] = dmm[xi] v[xi]^T, folded back by G^T du G
 *   into the weight gradient; dv[xi] = u[xi]^T dmm[xi], folded back by B dv B^T onto the input
 *   pixels the tiles read (overlaps add); u and v are transformed again rather than kept. The
 *   results differ from the direct sum's by a few 1e-6 of the largest value (test_kernels
 *   measures up to 5.4e-6 for F(4x4), 2.2e-6 for F(2x2)). The shard goes through in chunks of
 * images whose transformed tiles and products stay in the L2 cache (wino_chunk). scratch: a*a*F*C
 *   floats, plus a*a*tiles*(C + F) per image of a chunk (a = 6 or 4), and a*a*F*C more where the
 *   shard takes more than one chunk (conv_scratch); where it takes one, du comes first and
 *   becomes the weight gradient before u is transformed into its floats.
 * - PLANE2 (3x3, stride 1, padding 1, a 2x2 input): on a 2x2 plane every output pixel reads
 *   every input pixel through a tap of its own: 16 (output, input) pairs per channel pair, where
 *   im2col's columns hold 36 taps, 20 of them on the padding. nl_conv_plane2 (nnlab/conv_plane.h,
 *   core/engine/conv_plane.c) does the 16, the shard's images in the 16 lanes of AVX-512 and four
 *   filters' outputs in registers; the input gradient is its transpose (nl_conv_plane2_din), the
 *   weight gradient the same 16 pairs again (nl_conv_plane2_dweight), 16 channels in the lanes,
 *   from SHARD's gathered output gradient and the images turned channel-minor in the place of
 *   SHARD's columns. A shard of under 4 images goes forward and takes its input gradient as
 *   SHARD. Each sums in another order than the products, so its results differ in the last bits.
 *   scratch: SHARD's, and (C + F)*64 floats.
 * - S2LANES (3x3, stride 2, padding 1, to a 2x2 or 4x4 output): the forward by
 *   nl_conv_s2_lanes, the images in lanes as PLANE2's, the taps on the top and left padding left
 *   out (11 of 36 per channel pair on a 2x2 output, 23 of 144 on a 4x4); the gradients are
 *   SHARD's, but on a 4x4 input (a 2x2 output) the lanes kernels' over the 25 pairs that do not
 *   read the padding (nl_conv_s2_lanes_dweight, 16 channels in the lanes, from the images turned
 *   where SHARD's columns go; nl_conv_s2_lanes_din, the images in the lanes, from a shard of 4
 *   images or more), in other orders than the products, so other last bits. scratch: SHARD's,
 *   and 16*(C*(H + 2)*(W + 2) + F*P) floats.
 * - PHASES (stride 2): SAMPLE, but each image is first split into its four phase planes (even
 *   and odd rows and columns, core/engine/conv_s2.c) and each row of its columns is read from one
 *   plane as a flat run of whole vectors instead of row by row with a permute every 14 or 7
 *   pixels; the input gradient's columns are added back the same way into din's planes (din
 *   split, added into, merged back). The same columns, the same products and the same sums in
 *   the same order as SAMPLE's, so the same results bit for bit. The weight gradient is taken
 *   turned, dweight^T += cols_s dout_s^T, where OpenBLAS would pack both operands of SAMPLE's
 *   product (backward_phases). scratch: K*P floats plus the planes, C*4*ceil(H/2)*ow, plus
 *   F*(K + P) for the turned matrices. A 1x1 stride-2 window without padding, SAMPLE by the rule
 *   below, picks its columns from the image's even rows and columns (nl_s2_pick) and goes back
 *   by backward_phases too (scratch: K*P + F*(K + P)).
 * - PACKED: SAMPLE's columns, but the products are nnlab's own (nnlab/conv_gemm.h, core/engine/
 *   conv_gemm.c): the weights are packed once per shard into panels of 6 rows (their transpose
 *   once for the input gradient), and each image's product out_s = bias + weight cols_s keeps a
 *   tile of 6 rows by 64 columns in registers, reading the columns where im2col wrote them, a
 *   block of whole channels at a time (block_channels: the block's columns still in the L1
 *   cache). The weight gradient is dweight (F, K) += dout_s (F, P) colst_s (P, K), dout_s packed
 *   and colst_s the columns written transposed (nl_im2col_t). Each output is one chain of fused
 *   multiply-adds in the order of K (from the bias for the forward), another order than
 *   OpenBLAS's, so the results differ from SAMPLE's in the last bits. scratch: the packed
 *   transposed weights, an image's packed dout, and 2*K*P floats (or the packed weights and K*P).
 * - ONECHAN (one input channel, stride 1, no padding, output rows of 24: lenet's conv1): the
 *   forward by nl_conv1c (nnlab/conv_gemm.h), no im2col: a pair of output rows is three vectors
 *   of 16 pixels (the middle one half from each row), each read from the image at its tap's
 *   shift, five filters' 15 vectors in registers, from the bias, taps in row-major order. The
 *   weight gradient (windows at most 5 wide) by nl_conv1c_dweight from the same vectors of the
 *   image and of dout, three filters' five taps in registers, each weight's products over the
 *   shard's images summed in 16 lanes and the lanes summed once at the end (another order than
 *   SAMPLE's, so other last bits); the input gradient SAMPLE's. scratch: SAMPLE's, and 16
 *   floats per weight.
 *
 * The rule, from tests/bench_conv.c (`meson test --benchmark -C build bench_conv -v`): one
 * forward and backward of 16 images, thread CPU time, fastest of 5 rounds, single-threaded
 * OpenBLAS 0.3.21 with its SkylakeX kernels (core/engine/kernels.c) on this project's 2-core Intel
 * Xeon (family 6 model 207, AVX-512, 2 MiB L2 per core), with im2col and col2im in AVX-512 vectors;
 * measured 2026-11-26 with the machine shared (load average 12), so indicative:
 *                                   F     K     P   per image   per shard (GFLOP/s)
 *    lenet conv2                   50   500    64      52.0      49.0
 *    resnet8 stage 1               16   144   784      37.3      31.8
 *    resnet8 stage 3               64   576    49      54.7      62.0
 *    ResNet-18 64x64 layer1        64   576   256      94.6      82.8
 *    ResNet-18 64x64 layer2       128  1152    64      92.5     105.7
 *    ResNet-18 64x64 layer3       256  2304    16      59.5     117.5
 *    ResNet-18 64x64 layer4       512  4608     4      20.2      87.6
 *    ResNet-18 64x64 4 1x1 s2     512   256     4      66.0      77.1
 *    ResNet-18 224x224 layer3     256  2304   196     121.2     111.8
 *    ResNet-18 224x224 layer4     512  4608    49      95.5     123.1
 * OpenBLAS packs the (F, K) weights at every call; per image that costs in proportion to F*K
 * and pays back over only P columns. The gathering and scattering of the shard path costs a
 * few percent everywhere. Hence SHARD where P <= 16, or where P <= 64 and F*K >= 32768 floats,
 * and n > 1 (and the layer is not DIRECT); SAMPLE elsewhere (lenet keeps it on both
 * convolutions, so its results are unchanged bit for bit; the bound on F*K was 262144 before
 * OpenBLAS ran its SkylakeX kernels here and im2col its vectors). SHARD sums the weight and bias
 * gradients over the shard inside one product instead of image after image, so its results
 * differ from SAMPLE's in the last bits; tests/test_kernels.c holds both against direct loops.
 *
 * For narrow layers the products are too small for OpenBLAS to run near its rate, and the
 * unrolling costs as much as the product. With bench_conv's B lowering set to DIRECT for the
 * 3x3 stride-1 shapes (a one-line change to tests/bench_conv.c; 2026-11-27, load average 1.4,
 * fastest of 7), GFLOP/s per image against direct: resnet8 stage 1 (16 -> 16, 28x28) 48.3
 * against 82.1; stage 2 (32 -> 32, 14x14) 65.0 against 79.3; stage 3 (64 -> 64, 7x7, rows of 7
 * in 16 lanes) 67.1 against 35.6. Hence DIRECT, before the other two, for 3x3 stride-1 layers
 * with C and F at most 32 and rows at least 14 wide, where the vector paths are on (after
 * Winograd's rule below, only resnet8's stem, one channel in, keeps it).
 *
 * Winograd's lowerings against the others, bench_conv with all five columns (2026-11-27 06:26
 * UTC, load average 9.1, fastest of 5; GFLOP/s of the direct sum's flops, forward and both
 * gradients, the forward alone in parentheses):
 *                          SAMPLE         SHARD          DIRECT         WINO4          WINO2
 *    resnet8 stage 1     42.7 (43.8)    27.3 (25.2)    74.1 (82.9)    91.3 (72.5)    71.2 (61.9)
 *    resnet8 stage 2     57.8 (58.2)    45.0 (41.3)    76.5 (89.0)   127.8 (128.2)  100.9 (80.5)
 *    resnet8 stage 3     64.8 (60.0)    66.4 (65.2)    34.7 (48.7)   177.7 (179.5)  135.6 (138.9)
 *    ResNet-18 64 layer1 92.6 (95.5)    72.9 (68.4)    85.6 (100.2)  246.1 (265.4)  170.0 (187.6)
 *    ResNet-18 64 layer2 94.1 (89.1)    93.5 (90.5)    38.0 (57.1)   204.2 (192.1)  160.1 (173.8)
 *    ResNet-18 64 layer3 59.5 (58.0)   114.8 (105.1)   17.0 (28.7)   102.7 (90.1)   137.1 (131.4)
 *    ResNet-18 64 layer4 20.6 (19.7)    90.7 (82.6)     5.7 (14.6)    27.8 (26.2)    61.7 (59.7)
 *    ResNet-18 224 l3   127.6 (122.2)  115.6 (113.5)   68.9 (94.3)   238.6 (210.0)  206.9 (191.3)
 *    ResNet-18 224 l4   103.4 (94.5)   130.7 (129.8)   31.8 (46.9)   201.7 (189.4)  160.3 (146.6)
 * F(4x4) does a quarter of the products' work on planes of 8x8 and up; on a 4x4 plane its single
 * tile per image wastes little but its transforms cost more than F(2x2)'s, and on a 2x2 plane
 * (layer4) either Winograd's a*a products, each only n tiles wide, pack all of u (16 to 36 times
 * F*C floats) for too little work, where SHARD's one product packs the weights once. Hence,
 * before every other rule and where the vector paths are on (the naive transforms are slow),
 * WINOGRAD for 3x3 stride-1 layers with C and F at least 16 on planes wider and taller than 4,
 * WINOGRAD2 on planes of 3x3 and 4x4 (ResNet-18 at 64x64: layer1 and layer2 F(4x4), layer3
 * F(2x2), layer4 SHARD; resnet8: every 3x3 stride-1 layer but its stem F(4x4)). resnet8's first
 * stage trains faster so (91 against 74) though its forward alone is a little slower (73
 * against 83); a training step of the whole resnet8 (batch 32, one thread, thread CPU time,
 * fastest of 29) took 26.3 ms against 28.1 with that stage left DIRECT, inference 7.2 against
 * 7.2. Since the transforms of planes 22 to 30 wide run a tile row at a time (core/engine/
 * winograd.c), that stage's WINO4 forward is faster than DIRECT's as well: bench_conv alternating
 * with the build before (2026-11-27 09:33 UTC, load average 2.4 to 2.7, fastest of 7), 140.2
 * (125.2) and 126.1 (108.7) against 110.8 (87.7) and 95.6 (75.7), DIRECT 85.1 (100.9) and 78.1
 * (87.4).
 * ResNet-18's layer1 at 3x64x64 (16x16, padding 1) took the transforms' gathering paths until
 * 0.4.6 stacked its tile rows (core/engine/winograd.c): bench_conv's WINO4 column for it, on the
 * AMD EPYC of README's figures, was 148.1 (141.5) with 0.4.5 (2026-11-28 12:00 UTC, WINO2 162.0
 * (158.7)) and is 262.4 (259.9) and 259.7 (263.8) with 0.4.6 (13:18, load average 0.1; WINO2
 * 171.8 (166.4) and 171.9 (161.8)).
 *
 * The lanes kernels against the products, bench_conv (2026-11-27 09:16 UTC, load average 5,
 * fastest of 5; GFLOP/s of the direct sum's flops, forward and both gradients, the forward alone
 * in parentheses; PLANE2's column for layer4, S2LANES's for the stride-2 rows):
 *                                 SAMPLE         SHARD          lanes
 *    ResNet-18 64 layer4        21.3 (20.3)    94.0 (88.7)   160.0 (306.6)
 *    ResNet-18 64 layer3.0 s2   62.6 (62.6)    93.7 (94.9)   100.2 (121.0)
 *    ResNet-18 64 layer4.0 s2   22.6 (22.0)    83.8 (83.8)    92.9 (119.9)
 *    ResNet-18 64 layer2.0 s2   85.9 (85.0)    83.6 (82.3)        -
 *    ResNet-18 64 conv1 7x7 s2  70.4 (76.9)    57.8 (57.5)        -
 * PLANE2's weight gradient was SHARD's product then, over im2col's 36 taps per channel pair; its
 * own kernel over the 16 pairs took layer4's column from 149.6 and 149.3 to 185.6 and 183.9
 * (alternating, 2026-11-28 on the AMD EPYC of README's figures, load average 1; the forward alone
 * 234.0 and 235.3 against 232.3 and 230.6).
 * S2LANES's gradients on a 4x4 input were SHARD's then too; the lanes kernels took layer4.0's
 * column from 83.3 and 83.1 to 109.0 and 112.4 (alternating, the same machine and day; the forward
 * alone 127.1 and 127.3 against 125.9 and 127.9).
 * (an S2LANES forward on layer2.0's 8x8 output, tiles of two rows of 8, ran 5-25% slower than
 * SHARD's in the whole network and was left out). Hence, where the vector paths are on and C and
 * F are at least 16: PLANE2 for 3x3 stride-1 layers with padding 1 on 2x2 planes (ResNet-18's
 * layer4 at 64x64), S2LANES for 3x3 stride-2 layers with padding 1 to 2x2 and 4x4 outputs
 * (layer3.0.conv1 and layer4.0.conv1 at 64x64), both before SHARD's rule.
 * Stride 2: resnet8's 3x3 stride-2 convolutions (16 -> 32 on 28x28, 32 -> 64 on 14x14) ran
 * SAMPLE at 52 to 66 GFLOP/s, forward and both gradients, where a profile put about 60% of
 * their time in im2col and col2im. bench_conv, all columns alternating (2026-11-27 09:43 UTC,
 * load average 9.9, fastest of 5; the forward alone in parentheses):
 *                                 SAMPLE         SHARD          PHASES
 *    resnet8 s2c1 3x3 s2         52.3 (61.4)    46.7 (46.6)    64.0 (74.9)
 *    resnet8 s3c1 3x3 s2         63.0 (64.1)    65.8 (67.5)    75.4 (78.2)
 *    resnet8 s2sc 1x1 s2         47.2 (46.1)    33.1 (34.8)    36.2 (39.8)
 *    resnet8 s3sc 1x1 s2         58.1 (62.5)    48.1 (44.8)    43.7 (52.9)
 *    mobilenet-tiny stem 3x3 s2  37.5 (38.1)    34.7 (32.6)    46.2 (46.5)
 *    ResNet-18 224 layer2 s2    100.3 (102.6)   85.5 (83.0)   103.7 (105.7)
 *    ResNet-18 224 layer3 s2    117.2 (115.6)  114.0 (108.1)  120.0 (118.8)
 * (at load 2.8 to 3.6 an hour earlier: s2c1 58.9 against 74.1, s3c1 66.4 against 83.2). A 1x1
 * window reads one plane of the four, which im2col gathers as cheaply as the split does, and
 * then its columns are copied once more. Hence PHASES, where SAMPLE would run and the vector
 * paths are on, for stride-2 windows of more than one tap whose output has at most 1024 pixels
 * and whose planes' rows fit an output row (nl_s2_fits: "same" padding); 1x1 stays SAMPLE, and
 * ResNet-18 at 64x64 keeps S2LANES on layer3.0.conv1 and layer4.0.conv1 (the rules before).
 * PHASES also goes before SHARD's rule for such windows with 16 < P <= 64 whose weights take under
 * 1 MiB (F*K < 262144 floats: packed again for every image, from the L2 cache): on the AMD EPYC
 * of README's figures (Zen 4, 1 MiB L2 per core; 2026-11-28, load average 1, per-layer wall time
 * over 18 steps of ResNet-18 training at 3x64x64, batch 32, one thread, two rounds alternating)
 * layer2.0.conv1 (64 -> 128, P 64, F*K 73728) took 214 and 217 ms against SHARD's 250 and 258
 * (bench_conv: 84.7 against 74.4 GFLOP/s), where ResNet-18 at 224x224's layer4.0.conv1 (256 ->
 * 512, P 49, F*K 1.18M) took 580 and 588 against SHARD's 491 and 488 (3 steps).
 *
 * LeNet's conv2 (20 -> 50, 5x5 on 12x12: F 50, K 500, P 64) is neither SHARD's (F*K = 25000) nor
 * anything else's: SAMPLE ran its products at 85 to 105 GFLOP/s, where OpenBLAS packed its 25000
 * weights again for each image's 64 columns. The parts of one image, single-threaded, fastest of
 * 5 x 2000 (2026-11-27, load average 2.7; sgemm 512x512 runs at 156 here): the forward product
 * 17.8 us (180 GFLOP/s) by nl_pgemm against 28.4 us (113) by nl_sgemm, dcols 18.3 us against 24.6,
 * dweight 21.6 us against 31.9; packing the weights 7 us once per shard. bench_conv, forward and
 * both gradients (the forward alone in parentheses): SAMPLE 92.6 (88.1), PACKED 117.0 (112.5);
 * lenet's conv1 (K 25, P 576) 84.3 against 53.4, where the weight gradient's products are 25
 * columns wide; resnet8's 1x1 stride-2 shortcuts (K 16 and 32, P 196 and 49) 40.5 against 30.2 and
 * 48.5 against 43.0. ResNet-18's 7x7 stride-2 stem at 3x64x64 (F 64, K 147, P 1024) on the AMD
 * EPYC (the same runs as PHASES's above): SAMPLE 356 and 356 ms over 18 steps, PACKED 301 and 310
 * (bench_conv, with the input gradient the network does not take: 70.0 against 83.0 GFLOP/s); at
 * 3x224x224 (P 12544) 796 and 817 against 801 and 903 over 4 steps. Hence PACKED, where SAMPLE
 * would run and the vector paths are on, for P <= 64 and K >= 256, and for windows of more than
 * one tap with P <= 1024 and K >= 128: of the shipped models, lenet's conv2 and ResNet-18's conv1
 * at inputs of 64x64 and less. LeNet's conv1 (1 -> 20, 5x5
 * on 28x28) ran its forward as im2col (2.0 us an image) and a product of K = 25 (4.0 us, and the
 * bias written first); nl_conv1c takes 3.8 us for both (the same measurement). Its weight
 * gradient, im2col and OpenBLAS's (20, 576) by (576, 25) product, 9.2 us against 8.0 for
 * nl_conv1c_dweight (load average 3.4); in lenet's training (per-layer thread CPU time over 320
 * steps of 64 images, load average 7.6) conv1's backward took 0.197 and 0.204 s with SAMPLE's
 * gradients, 0.178 and 0.185 with these. Hence ONECHAN wherever it fits and the vector paths
 * are on, before SHARD's rule.
 *
 * The products whose right operand is not turned (the forward's, the input gradient's, and
 * Winograd's three) go through nl_sgemm_rows (core/engine/kernels.c): where OpenBLAS runs its
 * SkylakeX-family kernels, a product of more than 10^6 multiply-adds is made in blocks of rows
 * of up to that many, which its small-matrix path takes without packing either operand, where
 * the whole product would pack both. On the AMD EPYC of README's figures (2026-11-28, load average
 * 1), ResNet-18 at 3x64x64, batch 32, one thread, per-layer wall time over 23 steps (two rounds
 * alternating with the build before): layer2's Winograd layers 248, 239, 240 ms -> 221, 216, 225
 * and 232, 229, 231 -> 222, 219, 226; layer3's 336, 329, 337 -> 309, 308, 305; layer2.0.conv1
 * (PHASES) 276 and 286 -> 254 and 262; layer1's (64 channels: products of 64 x 64 x 64, small
 * already) unchanged. Whole steps (`nnlab bench`, six rounds alternating, images/s, medians):
 * one thread 148 -> 156, two threads 263 -> 288. Products whose right operand is turned (the
 * weight gradients' dout cols^T) stay whole: OpenBLAS's small path ran them slower (92.5 against
 * 73.2 GFLOP/s; nl_sgemm_rows_block).
 *
 * In inference a forward-only executor may fold the batchnorm that alone reads this layer, and
 * the ReLU after it, into the output pass (nl_fwd.scale, shift, act; core/engine/model.c): the
 * product is written without the bias and each channel then goes once through
 * act(y * scale + shift), the pass that SHARD's scattering makes anyway (WINOGRAD's output
 * transform likewise; PLANE2 and S2LANES run it over each image's output after their kernels),
 * so the batchnorm's and the ReLU's passes over memory disappear.
 *
 * Where a resnet8 training step goes (batch 32, one thread, per-layer thread CPU time over 202
 * steps, 2026-11-27 18:12 UTC, load average 1; 15.3 ms a step): the four WINOGRAD layers 52%
 * (s1c1 0.83 ms forward, 1.60 backward; within backward, perf puts 18% of the samples in the
 * input gradient's products and 23% in the weight gradient's, the rest in the transforms), the
 * two PHASES layers 26% (s2c1 0.70 and 1.32: the products 53% of backward, the rest the split,
 * the columns again, the transposes and the merge), the batchnorms 15%, the 1x1 stride-2
 * shortcuts 4.6%, conv1 2%. The products run near sgemm's rate; what is left reads and writes
 * memory. Measured the same way, alternating with the build before, and not kept: an AVX-512
 * product of its own for the 1x1 shortcuts (0.15 and 0.29 ms against 0.14 and 0.28: they wait on
 * their input), batchnorm image by image instead of channel by channel (15.6 to 15.8 ms a step
 * against 15.0 to 15.1), Winograd chunks of 2 MiB (s1c1 1.12 and 2.08 against 0.86 and 1.67) or
 * 512 KiB (even), PHASES keeping its forward's columns for the weight gradient (s2c1 0.89 to 0.97
 * forward against 0.68: read back from memory, dearer than made again), batchnorm's forward sums
 * taken inside the convolution image by image (the batchnorms 0.02 ms faster each, the
 * convolutions 0.03 slower), an own product for the Winograd GEMMs of 32 channels or fewer (s2c2
 * forward 0.64 against 0.56), and the transposed input transform for planes of up to 1024 pixels
 * (s1c1's and s1c2's backward 1.68 and 1.60 against 1.69 and 1.61, medians of five rounds: within
 * the noise, for another summation order). What would pay is fewer passes across layers:
 * batchnorm's backward inside the next Winograd output adjoint, its normalisation and ReLU inside
 * the next convolution's input transform.
 *
 * Against PyTorch layer by layer (tests/bench/compare_layers.py, 2026-11-28 18:38 UTC, AMD EPYC,
 * batch 32, two threads; README's "Layer by layer against PyTorch"): resnet8's 3x3 stride-1
 * layers take 1.46 to 1.85 times less time per step here, its batchnorms with their ReLUs and adds
 * 3.2 to 3.9 times, the 1x1 shortcuts 2.5 to 3.2, but its stride-2 3x3 layers about the same
 * (s2c1 1.16, s3c1 1.04), as ResNet-18's 7x7 stem (0.97), layer2.0.conv1 (1.02) and
 * layer3.0.conv1 (0.90): oneDNN's direct kernels run them at 60 to 70 GFLOP/s a thread, PHASES at
 * 69 to 83 in the network and its forward at 88 alone (16 images in a small program, the split,
 * the columns and the product). Tried and not kept the same
 * day: a direct stride-2 forward from the phase planes (eight filters by three vectors of output
 * pixels in registers, each tap a masked load of its plane at the tap's shift, no columns): 90
 * GFLOP/s against PHASES's 88 on s2c1's shape alone, 75 against 86 on s3c1's (7x7 planes: a
 * fourth vector of one lane per plane), so no room for what the forward could win; the stride-2
 * layers are as fast as this machine's multiply-adds allow a direct method, and a Winograd form
 * over the four phases (two-tap filters) cuts the products by at most 1.65 where the transforms
 * already cost as much as the products.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "nnlab/conv_gemm.h"
#include "nnlab/conv_plane.h"
#include "nnlab/conv_s2.h"
#include "nnlab/kernels.h"
#include "nnlab/rng.h"
#include "nnlab/winograd.h"

struct conv_dims {
    struct nl__window win;
    int f;               /* filters */
    int k;               /* C*kh*kw */
    int p;               /* oh*ow */
    size_t in_size;      /* C*H*W */
    struct nl_wino wino; /* WINOGRAD, WINOGRAD2: the tiles */
    struct nl_s2 *s2;    /* PHASES: the phase planes' plan, else NULL */
    /* forward: the bias of the f filters (NULL: none); prepared u (ub_products) holds uf
     * filters, the layer's, of which these f start at uf0 (a split call's part) */
    const float *bias;
    int uf, uf0;
    int wt; /* forward: f->prep holds the weights turned (wt_turned), not u */
};

/* Prepared weights turned in blocks of UB_COLS filters (ub_products, wt_product), multiplied
 * turned where a call has fewer than UB_TURN tiles or pixels. */
#define UB_COLS 64
#define UB_TURN 64

static enum nl_lowering forward_runs(const struct nl_layer *l, const struct nl_fwd *f,
                                     const struct conv_dims *d);
static size_t conv_scratch(const struct nl_layer *l, int n);

/* Floats of u that forward_winograd transforms and multiplies at a time where the shard is one
 * chunk: a block of filters, whose products read it from the L2 cache (512 KiB); only where u is
 * larger than WINO_U floats (1 MiB, half the L2 cache). See wino_block. */
#define WINO_ROWS (128u << 10)
#define WINO_U    (256u << 10)

static int wino_tile(enum nl_lowering lower)
{
    return lower == NL_LOWER_WINOGRAD ? 4 : 2;
}

/* Images per chunk of WINOGRAD's products: as many as keep a chunk's v and mm (a*a*tiles*(C + F)
 * floats per image) within 1 MiB, half the L2 cache, so that the products read what the input
 * transform wrote and the output transform what they wrote while it is still there; but at least
 * 64 tiles, so that each chunk's a*a GEMMs are wide enough to pay for packing u[xi]. bench_conv,
 * forward of 16 images of ResNet-18's layer1 (64 channels, 16x16): 139 GFLOP/s in one chunk,
 * 261 in chunks of 4 images. */
static int wino_chunk(const struct nl_wino *p, int n)
{
    const size_t per = (size_t)p->a * p->a * p->tiles * ((size_t)p->c + p->f) * sizeof(float);
    size_t k = ((size_t)1 << 20) / per;

    if (k * p->tiles < 64)
        k = (64 + (size_t)p->tiles - 1) / p->tiles;
    return k > (size_t)n ? n : (int)k;
}

/* Filters (other = C; forward) or input channels (other = F; the input gradient, a multiple of
 * 16) of u that a shard of n images makes and multiplies at a time, or 0 for all of u at once:
 * blocks only where the shard is one chunk of 2 images or more, u is larger than WINO_U floats
 * and WINO_ROWS floats hold 16 rows or more, so that packing the other operand (v, or dmm) again
 * for each block costs less than u's trip through memory: ResNet-18's layer2 and layer3 at
 * 3x64x64 on two threads, not resnet8's stage 3 (u 147K floats) nor ResNet-18's layer4 at
 * 3x224x224 (blocks of 7 filters). */
static int wino_block(const struct nl_wino *p, int n, int other, int lanes)
{
    const size_t aa = (size_t)p->a * p->a, rows = WINO_ROWS / (aa * (size_t)other);
    if (n < 2 || wino_chunk(p, n) < n || aa * p->f * p->c <= WINO_U || rows < 16)
        return 0;
    return lanes ? (int)(rows & ~(size_t)15) : (int)rows;
}

static void conv_dims(const struct nl_layer *l, struct conv_dims *d, struct nl_s2 *s2)
{
    nl__window_get(l, 0, &d->win);
    d->f = l->filters;
    d->k = d->win.c * d->win.kh * d->win.kw;
    d->p = d->win.oh * d->win.ow;
    d->in_size = nl_shape_size(l->in[0]);
    if (l->lower == NL_LOWER_WINOGRAD || l->lower == NL_LOWER_WINOGRAD2)
        nl_wino_plan(&d->wino, wino_tile(l->lower), d->win.c, d->win.h, d->win.w, d->f, d->win.ph,
                     d->win.pw, d->win.oh, d->win.ow);
    d->s2 = NULL;
    d->bias = NULL;
    d->uf = d->f;
    d->uf0 = 0;
    d->wt = 0;
    if (l->lower == NL_LOWER_PHASES) {
        nl_s2_plan(s2, d->win.c, d->win.h, d->win.w, d->win.kh, d->win.kw, d->win.ph, d->win.pw,
                   d->win.oh, d->win.ow);
        d->s2 = s2;
    }
}

static size_t packed_block_floats(const struct nl__window *g, int f);

static int conv_setup(struct nl_layer *l, struct nl_error *err)
{
    struct nl__window win;
    int rc = nl__layer_begin(l, err);

    if (rc < 0)
        return rc;
    if (l->filters <= 0)
        return nl__layer_fail(l, err, "conv needs a positive number of filters, not %d",
                              l->filters);
    rc = nl__window_setup(l, 0, &win, err);
    if (rc < 0)
        return rc;

    size_t k = (size_t)win.c * (size_t)win.kh * (size_t)win.kw;
    size_t p = (size_t)win.oh * (size_t)win.ow;
    if ((size_t)l->filters * p > INT_MAX || (size_t)l->filters * k > INT_MAX)
        return nl__layer_fail(l, err, "%d filters of %dx%d on input %dx%dx%d are too many",
                              l->filters, win.kh, win.kw, win.c, win.h, win.w);

    l->out = (struct nl_shape){l->filters, win.oh, win.ow};
    int wdims[4] = {l->filters, win.c, win.kh, win.kw};
    int fan_in = (int)k, fan_out = l->filters * win.kh * win.kw;
    nl__layer_add_param(l, "weight", 4, wdims, fan_in, fan_out, l->init);
    if (!l->no_bias) {
        int bdims[4] = {l->filters};
        nl__layer_add_param(l, "bias", 1, bdims, fan_in, fan_out, NL_INIT_ZERO);
    }
    const int direct_fits =
        win.sh == 1 && win.sw == 1 && win.kw <= 8 && win.ph < win.kh && win.pw < win.kw;
    const int wino_fits = direct_fits && win.kh == 3 && win.kw == 3;
    const int plane2_fits = wino_fits && win.ph == 1 && win.pw == 1 && win.h == 2 && win.w == 2;
    const int s2lanes_fits = win.kh == 3 && win.kw == 3 && win.sh == 2 && win.sw == 2 &&
                             win.ph == 1 && win.pw == 1 && nl_conv_s2_lanes_fits(win.h, win.w);
    const int phases_fits =
        nl_s2_fits(win.h, win.w, win.kh, win.kw, win.sh, win.sw, win.ph, win.pw, win.oh, win.ow);
    const int onechan_fits =
        nl_conv1c_fits(win.c, win.kh, win.kw, win.sh, win.sw, win.ph, win.pw, win.oh, win.ow);
    if (l->lowering == NL_LOWER_SHARD || l->lowering == NL_LOWER_SAMPLE)
        l->lower = l->lowering;
    else if (l->lowering == NL_LOWER_PLANE2 && !plane2_fits)
        return nl__layer_fail(l, err,
                              "conv %dx%d stride %dx%d pad %dx%d on %dx%d cannot run the 2x2-plane "
                              "lowering (3x3, stride 1, padding 1, a 2x2 input)",
                              win.kh, win.kw, win.sh, win.sw, win.ph, win.pw, win.h, win.w);
    else if (l->lowering == NL_LOWER_PLANE2)
        l->lower = NL_LOWER_PLANE2;
    else if (l->lowering == NL_LOWER_S2LANES && !s2lanes_fits)
        return nl__layer_fail(l, err,
                              "conv %dx%d stride %dx%d pad %dx%d on %dx%d cannot run the stride-2 "
                              "lanes lowering (3x3, stride 2, padding 1, an output of 2x2 or "
                              "4x4)",
                              win.kh, win.kw, win.sh, win.sw, win.ph, win.pw, win.h, win.w);
    else if (l->lowering == NL_LOWER_S2LANES)
        l->lower = NL_LOWER_S2LANES;
    else if (l->lowering == NL_LOWER_PHASES && !phases_fits)
        return nl__layer_fail(l, err,
                              "conv %dx%d stride %dx%d on %dx%d cannot run the phase planes' "
                              "lowering (stride 2, at most 9 taps and 1024 outputs, output rows at "
                              "least half as wide as the input's)",
                              win.kh, win.kw, win.sh, win.sw, win.h, win.w);
    else if (l->lowering == NL_LOWER_PHASES)
        l->lower = NL_LOWER_PHASES;
    else if ((l->lowering == NL_LOWER_WINOGRAD || l->lowering == NL_LOWER_WINOGRAD2) && !wino_fits)
        return nl__layer_fail(l, err,
                              "conv %dx%d stride %dx%d pad %dx%d cannot run Winograd's lowering "
                              "(3x3, stride 1, padding at most 2)",
                              win.kh, win.kw, win.sh, win.sw, win.ph, win.pw);
    else if (l->lowering == NL_LOWER_WINOGRAD || l->lowering == NL_LOWER_WINOGRAD2)
        l->lower = l->lowering;
    else if (l->lowering == NL_LOWER_DIRECT && !direct_fits)
        return nl__layer_fail(l, err,
                              "conv %dx%d stride %dx%d pad %dx%d cannot run direct (stride 1, "
                              "a window at most 8 wide and padding under the window's size)",
                              win.kh, win.kw, win.sh, win.sw, win.ph, win.pw);
    else if (l->lowering == NL_LOWER_DIRECT)
        l->lower = NL_LOWER_DIRECT;
    else if (l->lowering == NL_LOWER_PACKED)
        l->lower = NL_LOWER_PACKED;
    else if (l->lowering == NL_LOWER_ONECHAN && !onechan_fits)
        return nl__layer_fail(l, err,
                              "conv %dx%d stride %dx%d pad %dx%d on %dx%dx%d cannot run the "
                              "one-channel lowering (one input channel, stride 1, no padding, "
                              "output rows of 24 in pairs)",
                              win.kh, win.kw, win.sh, win.sw, win.ph, win.pw, win.c, win.h, win.w);
    else if (l->lowering == NL_LOWER_ONECHAN)
        l->lower = NL_LOWER_ONECHAN;
    else if (l->lowering != NL_LOWER_AUTO)
        return nl__layer_fail(l, err, "conv has no lowering %d", (int)l->lowering);
    else if (wino_fits && win.c >= 16 && l->filters >= 16 && win.oh >= 3 && win.ow >= 3 &&
             nl_kernels_vector_on())
        l->lower = win.oh > 4 && win.ow > 4 ? NL_LOWER_WINOGRAD : NL_LOWER_WINOGRAD2;
    else if (plane2_fits && win.c >= 16 && l->filters >= 16 && nl_kernels_vector_on())
        l->lower = NL_LOWER_PLANE2; /* the rule at the top of this file */
    else if (s2lanes_fits && win.c >= 16 && l->filters >= 16 && nl_kernels_vector_on())
        l->lower = NL_LOWER_S2LANES; /* the rule at the top of this file */
    else if (direct_fits && win.kh == 3 && win.kw == 3 && win.c <= 32 && l->filters <= 32 &&
             win.ow >= 14 && nl_kernels_vector_on())
        l->lower = NL_LOWER_DIRECT; /* the rule at the top of this file */
    else if (onechan_fits && nl_kernels_vector_on())
        l->lower = NL_LOWER_ONECHAN; /* the rule at the top of this file */
    else if (p <= 16 || (p <= 64 && (size_t)l->filters * k >= 32768 &&
                         !(phases_fits && win.kh * win.kw > 1 && (size_t)l->filters * k < 262144 &&
                           nl_kernels_vector_on())))
        l->lower = NL_LOWER_SHARD;
    else if (phases_fits && win.kh * win.kw > 1 && nl_kernels_vector_on())
        l->lower = NL_LOWER_PHASES; /* SAMPLE's products, bit for bit; the rule at the top */
    else if (((p <= 64 && k >= 256) || (p <= 1024 && k >= 128 && win.kh * win.kw > 1)) &&
             nl_kernels_vector_on())
        l->lower = NL_LOWER_PACKED; /* the rule at the top of this file */
    else
        l->lower = NL_LOWER_SAMPLE;
    if (l->lower == NL_LOWER_WINOGRAD || l->lower == NL_LOWER_WINOGRAD2) {
        struct nl_wino w;
        nl_wino_plan(&w, wino_tile(l->lower), win.c, win.h, win.w, l->filters, win.ph, win.pw,
                     win.oh, win.ow);
        const size_t aa = (size_t)w.a * w.a;
        l->scratch_fixed = 2 * aa * (size_t)l->filters * win.c;
        l->scratch_per_sample = aa * w.tiles * ((size_t)win.c + l->filters);
    } else if (l->lower == NL_LOWER_SHARD)
        l->scratch_per_sample = (k + (size_t)l->filters) * p;
    else if (l->lower == NL_LOWER_PLANE2) {
        /* the kernels' blocks; SHARD's matrices for the weight gradient, SAMPLE's columns for a
         * shard too small to fill the lanes */
        const size_t blocks = nl_conv_plane2_scratch(win.c, l->filters);
        l->scratch_fixed = blocks > k * p ? blocks : k * p;
        l->scratch_per_sample = (k + (size_t)l->filters) * p;
    } else if (l->lower == NL_LOWER_S2LANES) {
        /* as PLANE2: the kernel's block, SHARD's matrices, SAMPLE's columns */
        const size_t blocks = nl_conv_s2_lanes_scratch(win.c, win.h, win.w, l->filters);
        l->scratch_fixed = blocks > k * p ? blocks : k * p;
        l->scratch_per_sample = (k + (size_t)l->filters) * p;
    } else if (l->lower == NL_LOWER_DIRECT)
        l->scratch_fixed = k * p + (size_t)l->filters * k;
    else if (l->lower == NL_LOWER_PACKED) {
        /* forward: the packed weights and an image's columns; backward: the packed transposed
         * weights, an image's packed dout, its transposed columns and its dcols */
        const size_t whole = nl_pgemm_packed_floats(l->filters, (int)k),
                     blocks = packed_block_floats(&win, l->filters);
        const size_t fwd = (whole > blocks ? whole : blocks) + k * p;
        const size_t bwd = nl_pgemm_packed_floats((int)k, l->filters) +
                           nl_pgemm_packed_floats(l->filters, (int)p) + 2 * k * p;
        l->scratch_fixed = fwd > bwd ? fwd : bwd;
    } else if (l->lower == NL_LOWER_PHASES) /* columns, planes, dweight^T and dout_s^T */
        l->scratch_fixed =
            k * p + nl_s2_floats(win.c, win.h, win.ow) + (size_t)l->filters * (k + p);
    else if (l->lower == NL_LOWER_ONECHAN) /* SAMPLE's, and the weight gradient's lanes */
        l->scratch_fixed = k * p + (size_t)l->filters * k * 16;
    else if (win.kh == 1 && win.kw == 1 && win.sh == 2 && win.sw == 2 && win.ph == 0 &&
             win.pw == 0) /* SAMPLE by backward_phases (pick): columns, dweight^T, dout_s^T */
        l->scratch_fixed = k * p + (size_t)l->filters * (k + p);
    else
        l->scratch_fixed = k * p;
    return 0;
}

/* A 1x1 window with stride 1 and no padding: an image (C, H, W) is its own (K, P) columns. */
static int pointwise(const struct nl__window *g)
{
    return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0;
}

/* A 1x1 window with stride 2 and no padding: the columns are the image's even rows and columns
 * (nl_s2_pick), one phase plane of the four, picked without a split. */
static int pick(const struct nl__window *g)
{
    return g->kh == 1 && g->kw == 1 && g->sh == 2 && g->sw == 2 && g->ph == 0 && g->pw == 0;
}

/* cols (K, P): image img (C, H, W) unrolled, or img itself when the conv is pointwise. PHASES
 * splits img into its phase planes (scratch after cols) and reads the columns from them. */
static const float *sample_cols(float *cols, const float *img, const struct conv_dims *d)
{
    const struct nl__window *g = &d->win;

    if (pointwise(g))
        return img;
    if (pick(g)) {
        nl_s2_pick(cols, img, g->c, g->h, g->w, g->oh, g->ow);
        return cols;
    }
    if (d->s2) {
        float *phases = cols + (size_t)d->k * d->p;
        nl_s2_split(phases, img, d->s2);
        nl_s2_cols(cols, phases, d->s2);
        return cols;
    }
    nl_im2col(cols, img, g->c, g->h, g->w, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, g->oh, g->ow);
    return cols;
}

/* cols (K, n*P): the shard's columns side by side, image s's in columns [s*P, (s+1)*P), written
 * row after row (the matrix is often larger than the L2 cache; the shard's images less so). */
static void shard_cols(float *cols, const float *in, int n, const struct conv_dims *d)
{
    const struct nl__window *g = &d->win;
    const size_t ld = (size_t)n * d->p;

    if (!pointwise(g)) {
        nl_im2col_batch(cols, in, n, d->in_size, g->c, g->h, g->w, g->kh, g->kw, g->sh, g->sw,
                        g->ph, g->pw, g->oh, g->ow);
        return;
    }
    for (int c = 0; c < g->c; c++)
        for (int s = 0; s < n; s++)
            memcpy(cols + c * ld + (size_t)s * d->p, in + (size_t)s * d->in_size + (size_t)c * d->p,
                   (size_t)d->p * sizeof *cols);
}

/* The folded output pass (inference: f->scale) over one image's output (F, P), while it is
 * still in cache: each channel through act(y * scale + shift). */
static void fold_image(float *out, const struct nl_fwd *f, const struct conv_dims *d)
{
    for (int fo = 0; fo < d->f; fo++)
        nl_scale_shift(out + (size_t)fo * d->p, out + (size_t)fo * d->p, (size_t)d->p, f->scale[fo],
                       f->shift[fo], f->act);
}

/* SAMPLE's forward by bands of output rows: where one image's columns (K, P) are larger than
 * BAND_FLOATS (512 KiB) and its plane has at least twice as many pixels as the layer has filters,
 * the columns of a band of rows are unrolled and multiplied while they are in the L2 cache, the
 * weights (F, K), smaller, read again for each band. ResNet-18's 7x7 stem at 3x224x224 unrolled
 * 147 x 12544 columns (7.4 MB) through memory and back. A band's im2col reads rows from
 * y0 * sh - ph with the plane's own height, so the channels keep their stride; its product
 * writes the band's columns of each output channel (ldc P). Each output is still one chain of
 * multiply-adds over K in order (nnlab/conv_gemm.h), its initial value the bias or zero: the same
 * floats whole or banded. A pointwise or picked window reads no columns and is not banded. */
#define BAND_FLOATS (128u << 10)

static int band_rows(const struct conv_dims *d)
{
    const struct nl__window *g = &d->win;
    const size_t rows = BAND_FLOATS / ((size_t)d->k * g->ow);

    if (pointwise(g) || pick(g) || (size_t)d->k * d->p <= BAND_FLOATS || d->p < 2 * d->f)
        return g->oh;
    return rows < 1 ? 1 : rows > (size_t)g->oh ? g->oh : (int)rows;
}

/* Output rows [y0, y1) of one image img into out (F, P), through scratch cols. */
static void sample_rows(const struct nl_fwd *f, const struct conv_dims *d, float *cols,
                        const float *img, float *out, int y0, int y1)
{
    const struct nl__window *g = &d->win;
    const int bp = (y1 - y0) * g->ow;
    const float *bias = f->scale ? NULL : d->bias;
    float *o = out + (size_t)y0 * g->ow;

    nl_im2col_ld(cols, bp, img, g->c, g->h, g->w, g->kh, g->kw, g->sh, g->sw, g->ph - y0 * g->sh,
                 g->pw, y1 - y0, g->ow);
    for (int fo = 0; bias && fo < d->f; fo++)
        for (int i = 0; i < bp; i++)
            o[(size_t)fo * d->p + i] = bias[fo];
    nl_sgemm_rows(0, d->f, bp, d->k, f->w, d->k, cols, bp, bias ? 1.0f : 0.0f, o, d->p);
    for (int fo = 0; f->scale && fo < d->f; fo++)
        nl_scale_shift(o + (size_t)fo * d->p, o + (size_t)fo * d->p, (size_t)bp, f->scale[fo],
                       f->shift[fo], f->act);
}

/* SAMPLE's output rows [y0, y1) of every image, band after band. */
static void forward_bands(const struct nl_fwd *f, const struct conv_dims *d, int y0, int y1)
{
    const int rows = band_rows(d);

    for (int s = 0; s < f->n; s++)
        for (int r0 = y0; r0 < y1; r0 += rows)
            sample_rows(f, d, f->scratch, f->in[0] + (size_t)s * d->in_size,
                        f->out + (size_t)s * d->f * d->p, r0, r0 + rows < y1 ? r0 + rows : y1);
}

/* Prepared weights turned (conv_prep), for a layer whose forward of one image out of training
 * is SAMPLE's one product (or the phase planes') on a plane of fewer than WT_PIXELS pixels and
 * K of WT_K or more, where its scratch holds y^T too (wt_turned): the weights
 * (F, K) as ceil(F / UB_COLS) blocks, block j the transpose (K, width) of filters [j*UB_COLS,
 * + width), as prepared Winograd u. The product then runs turned, y^T (P, F) = cols^T (P, K) W^T
 * (K, F), the filters in the vector lanes and the weights read once, in order, where the 49
 * columns of ResNet-18's layer4 at 3x224x224 filled the 64 lanes of a tile to 77%; y^T is laid
 * back as (F, P) before the folded output pass. Each output is one chain of fused multiply-adds
 * over K from zero as SAMPLE's product (conv_gemm.c): the same floats. A small program on the AMD
 * EPYC of README's figures ((512, 4608) by (4608, 49), the weights out of the caches, one
 * thread, 2026-11-29): 1771 us as SAMPLE's product, 1539 turned from the blocks; half the
 * filters (a split call's part) 847 against 717. In the network (`nnlab bench --mode infer
 * --batch 1 --layers`, two rounds alternating): at 3x224x224, layer4's 3x3 layers on one thread
 * 1.90 to 2.16 ms -> 1.71 to 1.96, the phase planes' layer3.0.conv1 (196 pixels) 0.84 to 0.89 ->
 * 0.70 to 0.76, on two 0.61 to 0.64 -> 0.49 to 0.51; at 3x64x64, where layer4's plane is 2x2,
 * the whole network on two threads 239 to 253 images/s -> 348 to 355. Below K = 512 (the 1x1
 * downsampling layers) the turned product was no faster. */
#define WT_PIXELS 256
#define WT_K      512

static int wt_turned(const struct nl_layer *l, const struct conv_dims *d)
{
    const struct nl_fwd one = {.n = 1};
    const enum nl_lowering runs = forward_runs(l, &one, d);
    const size_t s2 = d->s2 ? nl_s2_floats(d->win.c, d->win.h, d->win.ow) : 0;

    /* y^T after the columns and phase planes, in the scratch of one image */
    return (runs == NL_LOWER_SAMPLE || runs == NL_LOWER_PHASES) && d->p < WT_PIXELS &&
           d->k >= WT_K && band_rows(d) >= d->win.oh &&
           ((size_t)d->k + d->f) * d->p + s2 <= conv_scratch(l, 1);
}

/* yt (P, f) = cols^T W^T for the filters [uf0, uf0 + f) of d from the turned blocks wt. */
static void wt_product(const float *wt, const struct conv_dims *d, const float *cols, float *yt)
{
    for (int g = d->uf0; g < d->uf0 + d->f;) {
        const int b0 = g / UB_COLS * UB_COLS, width = d->uf - b0 < UB_COLS ? d->uf - b0 : UB_COLS;
        const int end = b0 + width < d->uf0 + d->f ? b0 + width : d->uf0 + d->f;
        nl_sgemm(1, 0, d->p, end - g, d->k, 1.0f, cols, d->p, wt + (size_t)b0 * d->k + (g - b0),
                 width, 0.0f, yt + (g - d->uf0), d->f);
        g = end;
    }
}

/* SAMPLE: out_s (F, P) = weight (F, K) cols_s (K, P) + bias, image after image. One image's
 * columns (K*P floats: 56 KiB for lenet's conv1, 125 KiB for conv2) stay in cache between the
 * unrolling and the product, and the product lands in the output's own layout; larger ones go by
 * bands (band_rows). */
static void forward_sample(const struct nl_layer *l, const struct nl_fwd *f,
                           const struct conv_dims *d)
{
    const float *bias = d->bias;
    const size_t out_size = (size_t)d->f * d->p;

    if (band_rows(d) < d->win.oh) {
        forward_bands(f, d, 0, d->win.oh);
        return;
    }
    for (int s = 0; s < f->n; s++) {
        float *out = f->out + (size_t)s * out_size;
        const float *cols = sample_cols(f->scratch, f->in[0] + (size_t)s * d->in_size, d);
        if (d->wt && (f->scale || !bias)) { /* prepared weights turned (wt_turned) */
            float *yt = f->scratch + (size_t)d->k * d->p +
                        (d->s2 ? nl_s2_floats(d->win.c, d->win.h, d->win.ow) : 0);
            wt_product(f->prep, d, cols, yt);
            for (int fo = 0; fo < d->f; fo++)
                for (int i = 0; i < d->p; i++)
                    out[(size_t)fo * d->p + i] = yt[(size_t)i * d->f + fo];
            if (f->scale)
                fold_image(out, f, d);
            continue;
        }
        if (f->scale) {
            nl_sgemm_rows(0, d->f, d->p, d->k, f->w, d->k, cols, d->p, 0.0f, out, d->p);
            fold_image(out, f, d);
            continue;
        }
        if (bias)
            for (int fo = 0; fo < d->f; fo++)
                for (int i = 0; i < d->p; i++)
                    out[(size_t)fo * d->p + i] = bias[fo];
        nl_sgemm_rows(0, d->f, d->p, d->k, f->w, d->k, cols, d->p, bias ? 1.0f : 0.0f, out, d->p);
    }
}

/* SHARD: y (F, n*P) = weight (F, K) cols (K, n*P), then out_s (F, P) = y's columns of image s
 * plus the bias, in one pass (or through the folded output pass, f->scale). */
static void forward_shard(const struct nl_layer *l, const struct nl_fwd *f,
                          const struct conv_dims *d)
{
    const float *bias = d->bias;
    const int n = f->n, ld = n * d->p;
    float *cols = f->scratch, *y = f->scratch + (size_t)d->k * ld;

    shard_cols(cols, f->in[0], n, d);
    nl_sgemm_rows(0, d->f, ld, d->k, f->w, d->k, cols, ld, 0.0f, y, ld);
    for (int s = 0; s < n; s++)
        for (int fo = 0; fo < d->f; fo++) {
            float *dst = f->out + ((size_t)s * d->f + fo) * d->p;
            const float *src = y + (size_t)fo * ld + (size_t)s * d->p;
            const float b = bias ? bias[fo] : 0.0f;
            if (f->scale) {
                nl_scale_shift(dst, src, (size_t)d->p, f->scale[fo], f->shift[fo], f->act);
                continue;
            }
            for (int i = 0; i < d->p; i++)
                dst[i] = src[i] + b;
        }
}

/* PACKED's forward by blocks of whole channels: cn channels from c0, rows [c0*taps,
 * (c0 + cn)*taps) of the columns (K, P), each block's columns written by im2col just before its
 * products, so that they are still in the L1 cache when the products read them. lenet's conv2
 * (20 channels of 25 taps): blocks of 4 channels, 100 rows of 64 columns (25 KiB), where the
 * whole columns (128 KiB) went out to the L2 cache and came back. Each output's sum runs over K
 * in the same order, the block's end storing it and the next block's start loading it as
 * nl_pgemm does between its own blocks of K: the same floats. Where a window has more than 100
 * taps, a block is one channel. One image's im2col and product, thread CPU time, fastest of
 * 9 x 1000, the 64 images of a shard in turn (2026-11-27 15:15 UTC, load average 9, so
 * indicative): 20.8 and 21.0 us against 22.2 and 22.0 whole. The same for the weight gradient's
 * transposed columns (64 of K's columns at a time, the channels they span, 27 written for 20)
 * and for the input gradient's dcols (folded back block by block) made no difference there
 * (28.0 and 28.1 us against 27.9 and 29.2; 23.2 and 23.7 against 23.8 and 23.7): nl_im2col_t
 * took as long per channel in the L1 cache as whole (0.92 us for 4 channels, 5.1 for 20). */
#define BLOCK_ROWS 100
static int block_channels(const struct nl__window *g)
{
    const int taps = g->kh * g->kw;

    return taps >= BLOCK_ROWS ? 1 : BLOCK_ROWS / taps;
}

/* Whether the forward goes by blocks: columns that im2col writes. */
static int packed_blocks(const struct nl__window *g)
{
    return !pointwise(g) && !pick(g);
}

/* Floats of the forward's packed weights by blocks of K's rows. */
static size_t packed_block_floats(const struct nl__window *g, int f)
{
    const int taps = g->kh * g->kw, cb = block_channels(g);
    size_t floats = 0;

    for (int c0 = 0; c0 < g->c; c0 += cb)
        floats += nl_pgemm_packed_floats(f, (g->c - c0 < cb ? g->c - c0 : cb) * taps);
    return floats;
}

/* PACKED: the weights packed once (nl_pgemm_pack), by blocks of K's rows, then image after image
 * out_s (F, P) = bias + weight cols_s by nl_pgemm block after block (or the folded output pass
 * after it). */
static void forward_packed(const struct nl_layer *l, const struct nl_fwd *f,
                           const struct conv_dims *d)
{
    const struct nl__window *g = &d->win;
    const float *bias = f->scale ? NULL : d->bias;
    const size_t out_size = (size_t)d->f * d->p, plane = (size_t)g->h * g->w;
    const int taps = g->kh * g->kw, cb = block_channels(g);
    float *ap = f->scratch;

    if (!packed_blocks(g)) {
        float *cols = ap + nl_pgemm_packed_floats(d->f, d->k);
        nl_pgemm_pack(ap, f->w, d->k, 0, d->f, d->k);
        for (int s = 0; s < f->n; s++) {
            float *out = f->out + (size_t)s * out_size;
            const float *cs = sample_cols(cols, f->in[0] + (size_t)s * d->in_size, d);
            nl_pgemm(out, d->p, ap, cs, d->p, d->f, d->p, d->k, bias, 0);
            if (f->scale)
                fold_image(out, f, d);
        }
        return;
    }
    float *cols = ap + packed_block_floats(g, d->f), *at = ap;
    for (int c0 = 0; c0 < g->c; c0 += cb) {
        const int rows = (g->c - c0 < cb ? g->c - c0 : cb) * taps;
        nl_pgemm_pack(at, f->w + (size_t)c0 * taps, d->k, 0, d->f, rows);
        at += nl_pgemm_packed_floats(d->f, rows);
    }
    for (int s = 0; s < f->n; s++) {
        float *out = f->out + (size_t)s * out_size;
        const float *img = f->in[0] + (size_t)s * d->in_size;
        at = ap;
        for (int c0 = 0; c0 < g->c; c0 += cb) {
            const int cn = g->c - c0 < cb ? g->c - c0 : cb, rows = cn * taps;
            nl_im2col(cols, img + c0 * plane, cn, g->h, g->w, g->kh, g->kw, g->sh, g->sw, g->ph,
                      g->pw, g->oh, g->ow);
            nl_pgemm(out, d->p, at, cols, d->p, d->f, d->p, rows, c0 == 0 ? bias : NULL, c0 > 0);
            at += nl_pgemm_packed_floats(d->f, rows);
        }
        if (f->scale)
            fold_image(out, f, d);
    }
}

/* ONECHAN: out_s (F, oh, ow) straight from in_s by nl_conv1c, image after image (or the folded
 * output pass after it). */
static void forward_onechan(const struct nl_layer *l, const struct nl_fwd *f,
                            const struct conv_dims *d)
{
    const struct nl__window *g = &d->win;
    const float *bias = f->scale ? NULL : d->bias;
    const size_t out_size = (size_t)d->f * d->p;

    for (int s = 0; s < f->n; s++) {
        float *out = f->out + (size_t)s * out_size;
        nl_conv1c(out, f->in[0] + (size_t)s * d->in_size, f->w, bias, g->h, g->w, d->f, g->kh,
                  g->kw, g->oh, g->ow);
        if (f->scale)
            fold_image(out, f, d);
    }
}

/* DIRECT: out_s (F, oh, ow) straight from in_s by nl_conv_s1, image after image. */
static void forward_direct(const struct nl_layer *l, const struct nl_fwd *f,
                           const struct conv_dims *d)
{
    const struct nl__window *g = &d->win;
    const float *bias = f->scale ? NULL : d->bias;
    const size_t out_size = (size_t)d->f * d->p;

    for (int s = 0; s < f->n; s++) {
        float *out = f->out + (size_t)s * out_size;
        nl_conv_s1(out, f->in[0] + (size_t)s * d->in_size, f->w, bias, g->c, g->h, g->w, d->f,
                   g->kh, g->kw, g->ph, g->pw, g->oh, g->ow, 0);
        if (f->scale)
            fold_image(out, f, d);
    }
}

/* Prepared u (conv_prep) is kept turned, in blocks of UB_COLS filters: each of the a*a matrices
 * u[xi] (F, C) as ceil(F / UB_COLS) blocks, block j the transpose (C, width) of filters
 * [j*UB_COLS, + width), width = UB_COLS but for the last, row after row. Its products read it
 * either way: as the left matrix turned, mm[xi] (F, T) = u[xi] v[xi] (T tiles), whose tiles
 * broadcast six filters' floats from one row of a block; or, where the call has fewer than
 * UB_TURN tiles (ResNet-18's layer3 and layer2 at 3x224x224 and one image: 16 and 49), as the
 * right matrix of the turned product mm[xi]^T (T, F) = v[xi]^T u[xi]^T, which fills the vector
 * lanes with filters rather than with the few tiles and reads u once, in order, four vectors of
 * a row per six tiles' broadcasts; the output transform then reads mm turned (nl_wino.mt). Either
 * way each product is one chain of fused multiply-adds over C in order (conv_gemm.c), as with u
 * unturned: the same floats. A small program on the AMD EPYC of README's figures (36 products of
 * (256, 256) by (256, 16), u 9.4 MB out of the caches, one thread, 2026-11-29): 945 us
 * unturned, 745 turned from a plain (C, F), 610 from the blocks; (128, 256) by (256, 16), a split
 * call's half, 449 against 272; (128, 128) by (128, 49) 408 against 342. In the network
 * (`nnlab bench --model resnet18-224 --batch 1 --mode infer --layers`, two rounds): layer3's
 * layers on two threads 0.71 to 0.76 ms -> 0.51 to 0.54, layer2's (turned from 49 tiles) on one
 * thread 0.80 to 0.83 -> 0.65 to 0.71 and on two 0.41 to 0.45 -> 0.31 to 0.33; layer1's (196
 * tiles) turned, on two threads 0.54 to 0.62 -> 1.05 to 1.07: the gathers of mm. */
static int ub_turned(int tiles)
{
    return tiles < UB_TURN;
}

/* The products of the prepared filters [g0, g1) of d (uf of them, C channels) by v (a*a
 * matrices (C, tt), vs floats apart): mm[xi] rows (filter g at mm + xi * xs + (g - g0) * tt), or
 * turned (tile t of filter g at mm + xi * xs + t * ldm + g - g0). */
static void ub_products(const float *ub, const struct conv_dims *d, const float *v, size_t vs,
                        int tt, int g0, int g1, float *mm, size_t xs, int turned, int ldm)
{
    const struct nl_wino *p = &d->wino;
    const int c = p->c, aa = p->a * p->a;

    for (int xi = 0; xi < aa; xi++) {
        const float *uxi = ub + (size_t)xi * d->uf * c, *vxi = v + (size_t)xi * vs;
        float *mxi = mm + (size_t)xi * xs;
        for (int g = g0; g < g1;) {
            const int b0 = g / UB_COLS * UB_COLS;
            const int width = d->uf - b0 < UB_COLS ? d->uf - b0 : UB_COLS;
            const int end = b0 + width < g1 ? b0 + width : g1;
            const float *blk = uxi + (size_t)b0 * c + (g - b0);
            if (turned)
                nl_sgemm(1, 0, tt, end - g, c, 1.0f, vxi, tt, blk, width, 0.0f, mxi + (g - g0),
                         ldm);
            else
                nl_sgemm_rows(1, end - g, tt, c, blk, width, vxi, tt, 0.0f,
                              mxi + (size_t)(g - g0) * tt, tt);
            g = end;
        }
    }
}

/* WINOGRAD: u (a*a, F, C) = the filters transformed (or f->prep, made by conv_prep from the same
 * weights once for many calls: inference, a frozen layer; kept turned, ub_products); then chunk
 * by chunk of images (wino_chunk), v (a*a, C, T) = the chunk's T = n*tiles input tiles
 * transformed, mm[xi] (F, T) = u[xi] (F, C) v[xi] (C, T) for each of the a*a products of a tile,
 * and the output transform (nnlab/winograd.h) with the bias or the folded output pass. scratch:
 * u, then v and mm.
 *
 * A shard of one chunk whose u is larger than WINO_U floats (wino_block) takes v first,
 * then u by blocks of filters, each block's products mm[xi]'s rows right after its transform, so
 * that they read it from the L2 cache rather than from memory: the same products element by
 * element, the same floats (test_kernels). Each thread of a step makes all of u for its shard
 * (ResNet-18's layer2 and layer3 at 3x64x64: 2.4 and 4.2 MB a convolution), so that two threads
 * wrote and read twice one thread's u, at the speed of memory that the two cores share. Thread CPU
 * time per step, ResNet-18 at 3x64x64, batch 32, two threads (ms per thread, three rounds
 * alternating, 2026-11-27 at load average 4.2 to 5.6, real-time priority): layer2's forward 5.20
 * to 5.55 against 5.90 to 6.18, layer3's 6.30 to 6.78 against 7.17 to 7.54; one thread (two chunks
 * of 16 images, u made once) unchanged. */
static void forward_winograd(const struct nl_layer *l, const struct nl_fwd *f,
                             const struct conv_dims *d)
{
    const struct nl_wino *p = &d->wino;
    const int aa = p->a * p->a;
    const size_t fc = (size_t)d->f * p->c, out_size = (size_t)d->f * d->p;
    const float *bias = f->scale ? NULL : d->bias;
    const int step = wino_chunk(p, f->n);
    float *u = f->prep ? (float *)f->prep : f->scratch, *v = f->prep ? f->scratch : u + aa * fc;

    const int rows = f->prep ? 0 : wino_block(p, f->n, p->c, 0);
    if (rows > 0) {
        /* one chunk: v first, then u and the products by blocks of filters (see above) */
        const int tt = f->n * p->tiles;
        const size_t ct = (size_t)p->c * tt, ft = (size_t)d->f * tt;
        float *mm = v + aa * ct;
        nl_wino_input(v, f->in[0], f->n, p);
        for (int f0 = 0; f0 < d->f; f0 += rows) {
            struct nl_wino q = *p;
            q.f = d->f - f0 < rows ? d->f - f0 : rows;
            const size_t qc = (size_t)q.f * p->c;
            nl_wino_filter(u, f->w + (size_t)f0 * p->c * 9, &q);
            for (int xi = 0; xi < aa; xi++)
                nl_sgemm(0, 0, q.f, tt, p->c, 1.0f, u + xi * qc, p->c, v + xi * ct, tt, 0.0f,
                         mm + xi * ft + (size_t)f0 * tt, tt);
        }
        nl_wino_output(f->out, mm, bias, f->scale, f->shift, f->act, f->n, p);
        return;
    }
    if (!f->prep)
        nl_wino_filter(u, f->w, p);
    for (int s0 = 0; s0 < f->n; s0 += step) {
        const int n = f->n - s0 < step ? f->n - s0 : step, tt = n * p->tiles;
        const size_t ct = (size_t)p->c * tt, ft = (size_t)d->f * tt;
        float *mm = v + aa * ct;
        struct nl_wino q = *p;
        nl_wino_input(v, f->in[0] + (size_t)s0 * d->in_size, n, p);
        if (f->prep) {
            const int turned = ub_turned(tt);
            q.mt = turned ? d->f : 0;
            ub_products(f->prep, d, v, ct, tt, d->uf0, d->uf0 + d->f, mm, ft, turned, d->f);
        } else {
            for (int xi = 0; xi < aa; xi++)
                nl_sgemm_rows(0, d->f, tt, p->c, u + xi * fc, p->c, v + xi * ct, tt, 0.0f,
                              mm + xi * ft, tt);
        }
        nl_wino_output(f->out + (size_t)s0 * out_size, mm, bias, f->scale, f->shift, f->act, n, &q);
    }
}

/* Inference on few tiles (WINO_DIRECT): where u is larger than WINO_DIRECT floats for each tile
 * of the call, the forward of a forward-only call goes as SHARD (one image: SAMPLE) from the
 * weights themselves. Each of WINOGRAD's a*a products is then (F, C) by (C, T) for a handful of
 * columns, so that the call's time is u's trip from memory, whatever T: ResNet-18's layer4 at
 * 3x224x224 (512 channels on 7x7, u 9.4M floats, 4 tiles an image) took 9.4 to 9.5 ms an image
 * at batch 1 and 8.2 to 8.5 ms for four images, against 1.9 to 2.0 and 7.3 to 7.4 as SAMPLE and
 * SHARD (`nnlab bench --model resnet18-224 --mode infer --threads 1 --layers`, 2026-11-29, Zen 5
 * EPYC); its layer3 (u 2.4M floats, 16 tiles) 1.52 against 1.77 at batch 1, and layer2 (49
 * tiles) 0.72 against 1.58, stay WINOGRAD. The floats are SAMPLE's: a call's outputs then
 * depend on whether it has few images, as PyTorch's choice of algorithm by shape makes them.
 * Training keeps WINOGRAD, whose backward reads what its forward made. */
#define WINO_DIRECT (512u << 10)

static size_t conv_scratch(const struct nl_layer *l, int n);

/* Judged on all the layer's filters, so that each part of a split call (conv_forward) takes the
 * lowering the whole call takes. */
static int wino_direct(const struct nl_layer *l, const struct nl_fwd *f, const struct conv_dims *d)
{
    const struct nl_wino *p = &d->wino;
    const size_t filters = (size_t)l->filters;
    const size_t u = (size_t)p->a * p->a * filters * p->c, tiles = (size_t)f->n * p->tiles;
    const size_t need = f->n > 1 ? ((size_t)d->k + filters) * d->p * f->n : (size_t)d->k * d->p;

    return !f->training && u > WINO_DIRECT * tiles && need <= conv_scratch(l, f->n);
}

/* A split call's WINOGRAD on one image with prepared u: each part transforms the input channels
 * [c0, c1) of nl_block_range(C, 1, part, parts) into v in the shared scratch (part 0's; struct
 * nl_wino's vc), the parts meet, and each multiplies and transforms out its filters [f0, f1) of
 * nl_block_range(F, 16, part, parts) from the whole of v, its mm in its own scratch (part 0's
 * after v). The filters' split alone had every part transform the whole input: at 3x224x224,
 * ResNet-18's layer1 (64 channels on 56x56) spent 420 us of each part's 880 there, against 490 of
 * 1400 on one thread. The values of v, the products and the output transform are one thread's:
 * the same floats. */
static void forward_winograd_split(const struct nl_fwd *f, const struct conv_dims *d)
{
    const struct nl_wino *p = &d->wino;
    const int aa = p->a * p->a, tt = p->tiles;
    const size_t ct = (size_t)p->c * tt;
    float *v = f->shared;
    size_t c0, c1, f0, f1;

    nl_block_range((size_t)p->c, 1, f->part, f->parts, &c0, &c1);
    if (c0 < c1) {
        struct nl_wino q = *p;
        q.c = (int)(c1 - c0);
        q.vc = p->c;
        nl_wino_input(v + c0 * tt, f->in[0] + c0 * p->h * p->w, 1, &q);
    }
    f->sync(f->sync_arg);
    nl_block_range((size_t)d->f, 16, f->part, f->parts, &f0, &f1);
    if (f0 >= f1)
        return;
    struct nl_wino q = *p;
    q.f = (int)(f1 - f0);
    const size_t ft = (size_t)q.f * tt;
    const int turned = ub_turned(tt);
    float *mm = f->part == 0 ? v + aa * ct : f->scratch;
    q.mt = turned ? q.f : 0;
    ub_products(f->prep, d, v, ct, tt, d->uf0 + (int)f0, d->uf0 + (int)f1, mm, ft, turned, q.f);
    nl_wino_output(f->out + f0 * d->p, mm, f->scale || !d->bias ? NULL : d->bias + f0,
                   f->scale ? f->scale + f0 : NULL, f->shift ? f->shift + f0 : NULL, f->act, 1, &q);
}

/* Whether a split call's WINOGRAD on one image goes by bands of tile rows
 * (forward_winograd_bands) rather than by channels and then filters (forward_winograd_split):
 * where an image's transformed tiles and their products, a*a*T*(C + F) floats, are at least
 * half of u, a*a*F*C, and the part's band fits its scratch. By filters, each part reads half of
 * u but the whole of v, half of it written by the other core; by bands, each part reads all of
 * u, read-only, and nothing the other part wrote but the rows around its band. Two threads
 * each running four such layers in a chain, in turn (a small program; one image, u prepared,
 * products by nl_sgemm_rows, each part's output rows copied into place; AMD EPYC of README's
 * figures, 2026-11-29): 64 channels on 56x56 (ResNet-18's layer1 at 3x224x224) 459 to 485 us a
 * layer by bands against 648 to 656 by filters; 128 on 28x28 (layer2) 312 to 340 against 389 to
 * 403; 256 on 14x14 (layer3) 949 to 972 against 561 to 567. In the network (one image at 224 on
 * two threads, `nnlab bench --layers`, four rounds alternating), layer1's and layer2's seven
 * layers 2.79 to 3.50 ms against 2.86 to 4.64: the same in the host's good spells, 14% less in
 * its slow ones, where moving data between the cores costs most. */
static int wino_bands(const struct nl_layer *l, const struct conv_dims *d, int parts)
{
    const struct nl_wino *p = &d->wino;
    const size_t aa = (size_t)p->a * p->a, tiles = (size_t)p->tiles;
    const size_t u = aa * (size_t)d->f * p->c, vm = aa * tiles * ((size_t)p->c + d->f);

    return p->tiles / p->tiles_x >= parts && 2 * vm >= u && vm <= conv_scratch(l, 1);
}

/* A split call's WINOGRAD on one image with prepared u, by bands (wino_bands): each part takes
 * the rows of output tiles [r0, r1) of nl_block_range(tile rows, 1, part, parts) for every
 * filter: its tiles' input transform (the band's origin moved by the padding, so that it reads
 * the image rows around it), their products and the output transform into its rows of out
 * (nl_wino.op), v and mm in its own scratch. No part waits for another. Each tile's values, its
 * products (one chain of fused multiply-adds over C in order) and its outputs are the whole
 * call's: the same floats. */
static void forward_winograd_bands(const struct nl_fwd *f, const struct conv_dims *d)
{
    const struct nl_wino *p = &d->wino;
    const int aa = p->a * p->a;
    size_t r0, r1;

    nl_block_range((size_t)(p->tiles / p->tiles_x), 1, f->part, f->parts, &r0, &r1);
    if (r0 >= r1)
        return;
    const int y0 = (int)r0 * p->m, y1 = (int)r1 * p->m < p->oh ? (int)r1 * p->m : p->oh;
    struct nl_wino q;
    nl_wino_plan(&q, p->m, p->c, p->h, p->w, d->f, p->ph - y0, p->pw, y1 - y0, p->ow);
    q.op = p->oh * p->ow;
    const int tt = q.tiles, turned = ub_turned(tt);
    const size_t ct = (size_t)p->c * tt, ft = (size_t)d->f * tt;
    float *v = f->scratch, *mm = v + aa * ct;
    q.mt = turned ? d->f : 0;
    nl_wino_input(v, f->in[0], 1, &q);
    ub_products(f->prep, d, v, ct, tt, d->uf0, d->uf0 + d->f, mm, ft, turned, d->f);
    nl_wino_output(f->out + (size_t)y0 * p->ow, mm, f->scale || !d->bias ? NULL : d->bias, f->scale,
                   f->shift, f->act, 1, &q);
}

/* PLANE2: out (n, F, 2, 2) by nl_conv_plane2, with the bias or then the folded output pass. */
static void forward_plane2(const struct nl_layer *l, const struct nl_fwd *f,
                           const struct conv_dims *d)
{
    const float *bias = f->scale ? NULL : d->bias;

    nl_conv_plane2(f->out, f->in[0], f->w, bias, f->n, d->win.c, d->f, f->scratch);
    for (int s = 0; f->scale && s < f->n; s++)
        fold_image(f->out + (size_t)s * d->f * d->p, f, d);
}

/* S2LANES: out (n, F, oh, ow) by nl_conv_s2_lanes, with the bias or then the folded pass. */
static void forward_s2lanes(const struct nl_layer *l, const struct nl_fwd *f,
                            const struct conv_dims *d)
{
    const struct nl__window *g = &d->win;
    const float *bias = f->scale ? NULL : d->bias;

    nl_conv_s2_lanes(f->out, f->in[0], f->w, bias, f->n, g->c, g->h, g->w, d->f, f->scratch);
    for (int s = 0; f->scale && s < f->n; s++)
        fold_image(f->out + (size_t)s * d->f * d->p, f, d);
}

/* PLANE2 and S2LANES fill 16 lanes with images; below PLANE2_MIN images a shard goes as SHARD
 * (one image: SAMPLE), whose products waste less on so few. */
#define PLANE2_MIN 4

/* The lowering whose forward conv_forward runs for f: the layer's own, but for Winograd on few
 * tiles out of training (wino_direct) and the shard lowerings on fewer images than they fill, which
 * run as SHARD (SAMPLE for one image). SAMPLE, PHASES and the rest go through forward_sample. */
static enum nl_lowering forward_runs(const struct nl_layer *l, const struct nl_fwd *f,
                                     const struct conv_dims *d)
{
    const int n = f->n;

    switch (l->lower) {
    case NL_LOWER_WINOGRAD:
    case NL_LOWER_WINOGRAD2:
        return !wino_direct(l, f, d) ? l->lower : n > 1 ? NL_LOWER_SHARD : NL_LOWER_SAMPLE;
    case NL_LOWER_PLANE2:
    case NL_LOWER_S2LANES:
        return n >= PLANE2_MIN ? l->lower : n > 1 ? NL_LOWER_SHARD : NL_LOWER_SAMPLE;
    case NL_LOWER_SHARD:
        return n > 1 ? NL_LOWER_SHARD : NL_LOWER_SAMPLE;
    default:
        return l->lower;
    }
}

/* Whether conv_forward runs f through forward_sample. */
static int runs_sample(const struct nl_layer *l, const struct nl_fwd *f, const struct conv_dims *d)
{
    switch (forward_runs(l, f, d)) {
    case NL_LOWER_PLANE2:
    case NL_LOWER_S2LANES:
    case NL_LOWER_WINOGRAD:
    case NL_LOWER_WINOGRAD2:
    case NL_LOWER_DIRECT:
    case NL_LOWER_PACKED:
    case NL_LOWER_ONECHAN:
    case NL_LOWER_SHARD:
        return 0;
    default:
        return 1;
    }
}

enum nl_lowering nl_conv_forward_lowering(const struct nl_layer *l, int n, int training)
{
    struct conv_dims d;
    struct nl_s2 s2;
    const struct nl_fwd f = {.n = n, .training = training};

    conv_dims(l, &d, &s2);
    const enum nl_lowering runs = forward_runs(l, &f, &d);
    /* forward_sample takes the phase planes' layer by bands through plain im2col */
    return runs == NL_LOWER_PHASES && band_rows(&d) < d.win.oh ? NL_LOWER_SAMPLE : runs;
}

int nl_conv_forward_turned(const struct nl_layer *l, int n, int training, int prepared, int folded)
{
    struct conv_dims d;
    struct nl_s2 s2;
    const struct nl_fwd f = {.n = n, .training = training};

    if (!prepared)
        return 0;
    conv_dims(l, &d, &s2);
    const enum nl_lowering runs = forward_runs(l, &f, &d);
    if (runs == NL_LOWER_WINOGRAD || runs == NL_LOWER_WINOGRAD2)
        return ub_turned(wino_chunk(&d.wino, n) * d.wino.tiles);
    return runs_sample(l, &f, &d) && wt_turned(l, &d) && (folded || l->no_bias);
}

/* A part of a split call (nl_exec_forward_split: one image, part of parts out of training)
 * computes the output rows [y0, y1) of nl_block_range(OH, 1, part, parts) where the image goes
 * through forward_sample, unrolls columns and its plane has at least twice as many pixels as
 * the layer has filters (sample_rows: each part unrolls only its rows' columns). Otherwise it
 * computes the filters [f0, f1) of nl_block_range(F, 16, part, parts) by the layer's lowering,
 * as a layer of those filters alone: their weights, bias, folded scale and shift, output
 * channels, and prepared u's rows (d.ufc apart); its input transform or unrolling is every
 * part's, made again in each part's scratch; but a Winograd layer's one image with prepared u
 * goes by bands of tile rows (forward_winograd_bands) or by channels and then filters
 * (forward_winograd_split), as wino_bands says. Each output is the whole call's sum. A split
 * call of more than one image runs whole on part 0. */
static void conv_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    struct conv_dims d;
    struct nl_s2 s2;
    struct nl_fwd part, plain;
    conv_dims(l, &d, &s2);
    d.bias = l->no_bias ? NULL : f->w + l->params[1].offset;
    d.wt = f->prep && wt_turned(l, &d);
    if (d.wt && !runs_sample(l, f, &d)) { /* a Winograd layer's many images: u made here */
        plain = *f;
        plain.prep = NULL;
        d.wt = 0;
        f = &plain;
    }
    if (f->parts > 1 && !f->training && f->n == 1 && runs_sample(l, f, &d) && !pointwise(&d.win) &&
        !pick(&d.win) && d.p >= 2 * d.f) {
        size_t y0, y1;
        nl_block_range((size_t)d.win.oh, 1, f->part, f->parts, &y0, &y1);
        if (y0 < y1)
            forward_bands(f, &d, (int)y0, (int)y1);
        return;
    }
    const enum nl_lowering runs = forward_runs(l, f, &d);
    if (f->parts > 1 && !f->training && f->n == 1 && f->prep && f->sync &&
        (runs == NL_LOWER_WINOGRAD || runs == NL_LOWER_WINOGRAD2)) {
        if (wino_bands(l, &d, f->parts))
            forward_winograd_bands(f, &d);
        else
            forward_winograd_split(f, &d);
        return;
    }
    if (f->parts > 1 && !f->training) {
        size_t f0 = 0, f1 = (size_t)d.f;
        if (f->n == 1)
            nl_block_range((size_t)d.f, 16, f->part, f->parts, &f0, &f1);
        else if (f->part != 0)
            f1 = 0;
        if (f0 >= f1)
            return;
        part = *f;
        part.w = f->w + f0 * (size_t)d.k;
        part.out = f->out + f0 * (size_t)d.p;
        part.scale = f->scale ? f->scale + f0 : NULL;
        part.shift = f->shift ? f->shift + f0 : NULL;
        d.uf0 = (int)f0;
        d.bias = d.bias ? d.bias + f0 : NULL;
        d.f = (int)(f1 - f0);
        if (l->lower == NL_LOWER_WINOGRAD || l->lower == NL_LOWER_WINOGRAD2)
            nl_wino_plan(&d.wino, wino_tile(l->lower), d.win.c, d.win.h, d.win.w, d.f, d.win.ph,
                         d.win.pw, d.win.oh, d.win.ow);
        f = &part;
    }
    switch (runs) {
    case NL_LOWER_PLANE2:
        forward_plane2(l, f, &d);
        break;
    case NL_LOWER_S2LANES:
        forward_s2lanes(l, f, &d);
        break;
    case NL_LOWER_WINOGRAD:
    case NL_LOWER_WINOGRAD2:
        forward_winograd(l, f, &d);
        break;
    case NL_LOWER_DIRECT:
        forward_direct(l, f, &d);
        break;
    case NL_LOWER_PACKED:
        forward_packed(l, f, &d);
        break;
    case NL_LOWER_ONECHAN:
        forward_onechan(l, f, &d);
        break;
    case NL_LOWER_SHARD:
        forward_shard(l, f, &d);
        break;
    default:
        forward_sample(l, f, &d);
        break;
    }
}

/* Whether PHASES, din's first writer, rewrites every pixel of din (every phase plane read by
 * some tap): then din starts from planes zeroed in the cache rather than from din zeroed in
 * memory and split, the same +0.0 to add to. */
static int s2_writes_all(const struct nl_layer *l, const struct nl_bwd *b,
                         const struct conv_dims *d)
{
    return d->s2 && d->s2->used == 15 && (b->set & 1);
}

/* Whether a 1x1 stride-2 window (SAMPLE picking its columns, backward_phases) is din's first
 * writer: then each image's din is cleared just before its picked gradient is added, while it
 * is in the cache, rather than the whole shard's in one pass ahead (1.6 MB on resnet8's s2sc,
 * gone from the cache by the time it is added to). The same +0.0 to add to. */
static int picks_first(const struct nl_layer *l, const struct nl_bwd *b, const struct conv_dims *d)
{
    return l->lower == NL_LOWER_SAMPLE && pick(&d->win) && !d->s2 && (b->set & 1);
}

/* SAMPLE, image after image: dweight (F, K) += dout_s (F, P) cols_s^T (P, K), dbias (F) += row
 * sums of dout_s, then dcols (K, P) = weight^T (K, F) dout_s (F, P) folded back onto din_s. */
static void backward_sample(const struct nl_layer *l, const struct nl_bwd *b,
                            const struct conv_dims *d)
{
    const struct nl__window *g = &d->win;
    const size_t out_size = (size_t)d->f * d->p;
    float *db = b->dw && !l->no_bias ? b->dw + l->params[1].offset : NULL;

    for (int s = 0; s < b->n; s++) {
        const float *dout = b->dout + (size_t)s * out_size;
        if (b->dw) {
            const float *cols = sample_cols(b->scratch, b->in[0] + (size_t)s * d->in_size, d);
            nl_sgemm(0, 1, d->f, d->k, d->p, 1.0f, dout, d->p, cols, d->p, 1.0f, b->dw, d->k);
        }
        if (db) {
            for (int fo = 0; fo < d->f; fo++)
                db[fo] += nl_sum(dout + (size_t)fo * d->p, d->p);
        }
        if (b->din[0]) {
            float *din = b->din[0] + (size_t)s * d->in_size;
            if ((b->set & 1) && !s2_writes_all(l, b, d)) /* din's first writer: see conv_backward */
                memset(din, 0, d->in_size * sizeof *din);
            if (pointwise(g)) {
                /* din_s is dcols itself. */
                nl_sgemm_rows(1, d->k, d->p, d->f, b->w, d->k, dout, d->p, 1.0f, din, d->p);
                continue;
            }
            nl_sgemm_rows(1, d->k, d->p, d->f, b->w, d->k, dout, d->p, 0.0f, b->scratch, d->p);
            if (d->s2) { /* din_s split, dcols added in nl_col2im's order, merged back */
                float *phases = b->scratch + (size_t)d->k * d->p;
                if (s2_writes_all(l, b, d))
                    memset(phases, 0, nl_s2_floats(g->c, g->h, g->ow) * sizeof *phases);
                else
                    nl_s2_split(phases, din, d->s2);
                nl_s2_cols_adjoint(phases, b->scratch, d->s2);
                nl_s2_merge(din, phases, d->s2);
                continue;
            }
            nl_col2im(din, b->scratch, g->c, g->h, g->w, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw,
                      g->oh, g->ow);
        }
    }
}

/* PHASES, image after image as SAMPLE, but the weight gradient is taken transposed: dweight^T
 * (K, F) += cols_s (K, P) dout_s^T (P, F), dout_s turned (P, F) first and dweight turned once
 * before the shard and once after. OpenBLAS's products that contract over the rows of both
 * operands (dout_s cols_s^T) packed both and ran at about 82 GFLOP/s on resnet8's s2c1 (32
 * filters, K = 144, P = 196), where the plain product takes its small-matrix kernel without
 * packing: 21.9 against 13.8 us per image, a scalar turning included (s3c1: 16.5 against 12.5;
 * thread CPU time, 2026-11-27, load average 4.4); turned by nl_s2_transpose's gathers, the
 * whole backward of an s2c1 image took 37.8 us where SAMPLE's products took 51.6 (s3c1 35.0
 * against 43.8; load average 5.8). Each element is the same sum in the same
 * order, started from dweight's value, so the results are SAMPLE's bit for bit where the products
 * are OpenBLAS's SkylakeX family or nnlab's own (nl_sgemm_own); OpenBLAS's AVX2 kernels, which run
 * with the vector paths off, sum c and c^T in other orders (test_kernels). OpenBLAS takes
 * its small-matrix kernel for the products over rows of both operands too where F*K is at most
 * TURN_ABOVE (0.3.21's SkylakeX bound), and sums in another order there: those weight gradients
 * (resnet8's s2sc, 32 filters of 16 channels) stay SAMPLE's products, which turning did not
 * speed up (8.4 against 8.1 us a backward per image). The 1x1 stride-2 convolutions (SAMPLE by
 * their lowering) come here too, picking their columns (nl_s2_pick) and adding the input
 * gradient's back (nl_s2_pick_adjoint) without im2col's and col2im's window loops: s2sc 13.0 ->
 * 10.2 us per image forward and backward, s3sc 11.7 -> 7.2 (load average 6.3). A resnet8
 * training step (batch 32, one thread, task-clock of 240 steps less 40, three rounds alternating
 * with the build before, 2026-11-27 12:50 UTC, load average 2.5 to 3.3) took 16.4 ms against
 * 17.7 (medians). tests/bench_conv.c, whose lowerings alternate so that each step starts with
 * the others' data in the caches, shows the 1x1 rows faster (s2sc 42.6 -> 56.6 GFLOP/s, s3sc
 * 47.8 -> 82.5) and the 3x3 rows within their noise (s2c1 63.1 -> 60.5, s3c1 71.6 -> 67.3). */
#define TURN_ABOVE 1200
static void backward_phases(const struct nl_layer *l, const struct nl_bwd *b,
                            const struct conv_dims *d)
{
    const struct nl__window *g = &d->win;
    const size_t out_size = (size_t)d->f * d->p, kp = (size_t)d->k * d->p;
    const size_t planes = d->s2 ? nl_s2_floats(g->c, g->h, g->ow) : 0;
    float *db = b->dw && !l->no_bias ? b->dw + l->params[1].offset : NULL;
    float *cols = b->scratch, *phases = cols + kp, *dwt = phases + planes;
    float *dyt = dwt + (size_t)d->k * d->f;
    const int turn = b->dw && (size_t)d->f * d->k > TURN_ABOVE;

    if (turn)
        nl_s2_transpose(dwt, b->dw, d->f, d->k);
    for (int s = 0; s < b->n; s++) {
        const float *dout = b->dout + (size_t)s * out_size;
        if (b->dw) {
            sample_cols(cols, b->in[0] + (size_t)s * d->in_size, d);
            if (turn) {
                nl_s2_transpose(dyt, dout, d->f, d->p);
                nl_sgemm(0, 0, d->k, d->f, d->p, 1.0f, cols, d->p, dyt, d->f, 1.0f, dwt, d->f);
            } else
                nl_sgemm(0, 1, d->f, d->k, d->p, 1.0f, dout, d->p, cols, d->p, 1.0f, b->dw, d->k);
        }
        if (db)
            for (int fo = 0; fo < d->f; fo++)
                db[fo] += nl_sum(dout + (size_t)fo * d->p, d->p);
        if (b->din[0]) {
            float *din = b->din[0] + (size_t)s * d->in_size;
            nl_sgemm_rows(1, d->k, d->p, d->f, b->w, d->k, dout, d->p, 0.0f, cols, d->p);
            if (!d->s2) {
                if (picks_first(l, b, d))
                    memset(din, 0, d->in_size * sizeof *din);
                nl_s2_pick_adjoint(din, cols, g->c, g->h, g->w, g->oh, g->ow);
                continue;
            }
            if (s2_writes_all(l, b, d))
                memset(phases, 0, planes * sizeof *phases);
            else
                nl_s2_split(phases, din, d->s2);
            nl_s2_cols_adjoint(phases, cols, d->s2);
            nl_s2_merge(din, phases, d->s2);
        }
    }
    if (turn)
        nl_s2_transpose(b->dw, dwt, d->k, d->f);
}

/* SHARD: dy (F, n*P) gathered from dout (with the bias gradient's row sums), then
 * dweight (F, K) += dy cols^T and dcols (K, n*P) = weight^T dy, each one product for the shard;
 * dcols is folded back image by image. PLANE2 takes dy from here, the weight gradient from
 * nl_conv_plane2_dweight over its images turned (nl_conv_lanes_turn) where the columns go, and
 * the input gradient from nl_conv_plane2_din. */
/* Whether the weight gradient goes through a lanes kernel from the images turned channel-minor
 * (nl_conv_lanes_turn) where SHARD's columns go: PLANE2's, and S2LANES's on a 4x4 input. */
static int lanes_grad(const struct nl_layer *l, const struct conv_dims *d)
{
    return l->lower == NL_LOWER_PLANE2 ||
           (l->lower == NL_LOWER_S2LANES && nl_conv_s2_lanes_grad_fits(d->win.h, d->win.w));
}

static void lanes_dweight(const struct nl_layer *l, const struct conv_dims *d, float *dw,
                          const float *dy, size_t ld, const float *xt, int n, int f0, int f1)
{
    if (l->lower == NL_LOWER_PLANE2)
        nl_conv_plane2_dweight(dw, dy, ld, xt, n, d->win.c, f0, f1);
    else
        nl_conv_s2_lanes_dweight(dw, dy, ld, xt, n, d->win.c, f0, f1);
}

/* The lanes kernels' rows of the weight gradient, two at a time, to the caller's step. */
static void step_rows(void *ud, int fo, int rows, const float *g)
{
    struct nl_wsplit *s = ud;
    s->update(s, 0, (size_t)fo, (size_t)fo + (size_t)rows, g);
}

/* This thread's rows of a weight gradient split by output channels (struct nl_wsplit): rows
 * [lo, hi) of dweight (F, K) += dy_t (F, ld_t) cols_t^T (ld_t, K) for every thread t in order
 * (PLANE2: nl_conv_plane2_dweight of dy_t and thread t's turned images), and dbias's rows += row
 * sums of dy_t likewise. Each thread's product of depth ld_t at most
 * SPLIT_DEPTH (core/engine/trainer.c) is one block of OpenBLAS's K loop, so that the block's row
 * goes 0 + p_0 + p_1 ...: the floats of each thread's whole product in a block of its own, summed
 * over the threads in their order (test_train holds the two against each other). With s->fuse,
 * the lanes kernels hand their rows to s->update as they are made (nl_conv_lanes_dweight_rows,
 * in buf: 2 * C * 9 floats), the bias's likewise, and nothing is written into s->dw. */
static void shard_split(const struct nl_layer *l, struct nl_wsplit *s, const struct conv_dims *d,
                        float *buf)
{
    size_t lo, hi;
    nl_block_range((size_t)d->f, 1, s->part, s->parts, &lo, &hi);
    float *dw = s->dw + l->params[0].offset;
    float *db = l->no_bias ? NULL : s->dw + l->params[1].offset;

    s->fused = s->fuse && lanes_grad(l, d);
    if (s->fused) {
        const struct nl_lanes_parts parts = {
            .parts = s->parts, .dy = s->dy, .xt = s->cols, .ld = s->ld};
        if (lo < hi)
            nl_conv_lanes_dweight_rows(&parts, d->win.c, (int)lo, (int)hi,
                                       l->lower != NL_LOWER_PLANE2, buf, step_rows, s);
        for (size_t r0 = lo; db && r0 < hi; r0 += 64) {
            const size_t r1 = r0 + 64 < hi ? r0 + 64 : hi;
            float sums[64];
            for (size_t fo = r0; fo < r1; fo++) {
                sums[fo - r0] = 0.0f;
                for (int t = 0; t < s->parts; t++)
                    sums[fo - r0] += nl_sum(s->dy[t] + fo * (size_t)s->ld[t], s->ld[t]);
            }
            s->update(s, 1, r0, r1, sums);
        }
        return;
    }
    for (int t = 0; t < s->parts && lo < hi; t++) {
        const size_t ld = (size_t)s->ld[t];
        if (lanes_grad(l, d))
            lanes_dweight(l, d, s->dw + l->params[0].offset, s->dy[t], ld, s->cols[t],
                          (int)(ld / 4), (int)lo, (int)hi);
        else
            nl_sgemm(0, 1, (int)(hi - lo), d->k, (int)ld, 1.0f, s->dy[t] + lo * ld, (int)ld,
                     s->cols[t], (int)ld, 1.0f, dw + lo * d->k, d->k);
        for (size_t fo = lo; db && fo < hi; fo++)
            db[fo] += nl_sum(s->dy[t] + fo * ld, ld);
    }
}

/* The lanes kernels' input gradient, where a shard of n images fills enough lanes; 0 where
 * SHARD's product and col2im take it. */
static int lanes_din(const struct nl_layer *l, const struct nl_bwd *b, const struct conv_dims *d,
                     int n, float *scratch)
{
    if (!lanes_grad(l, d) || n < PLANE2_MIN)
        return 0;
    if (l->lower == NL_LOWER_PLANE2)
        nl_conv_plane2_din(b->din[0], b->dout, b->w, n, d->win.c, d->f, scratch);
    else
        nl_conv_s2_lanes_din(b->din[0], b->dout, b->w, n, d->win.c, d->f, scratch);
    return 1;
}

static void backward_shard(const struct nl_layer *l, const struct nl_bwd *b,
                           const struct conv_dims *d)
{
    const struct nl__window *g = &d->win;
    const int n = b->n, ld = n * d->p;
    float *cols = b->scratch, *dy = b->scratch + (size_t)d->k * ld;
    float *db = b->dw && !l->no_bias ? b->dw + l->params[1].offset : NULL;

    for (int fo = 0; fo < d->f; fo++) {
        float *row = dy + (size_t)fo * ld;
        for (int s = 0; s < n; s++)
            memcpy(row + (size_t)s * d->p, b->dout + ((size_t)s * d->f + fo) * d->p,
                   (size_t)d->p * sizeof *row);
        if (db)
            db[fo] += nl_sum(row, ld);
    }
    /* the lanes kernels' columns are the images turned channel-minor */
    const int lanes = lanes_grad(l, d);
    if (b->dw) {
        if (lanes) {
            nl_conv_lanes_turn(cols, b->in[0], n, g->c, g->h * g->w);
            lanes_dweight(l, d, b->dw, dy, (size_t)ld, cols, n, 0, d->f);
        } else {
            shard_cols(cols, b->in[0], n, d);
            nl_sgemm(0, 1, d->f, d->k, ld, 1.0f, dy, ld, cols, ld, 1.0f, b->dw, d->k);
        }
    }
    if (b->split) {
        if (lanes)
            nl_conv_lanes_turn(cols, b->in[0], n, g->c, g->h * g->w);
        else
            shard_cols(cols, b->in[0], n, d);
        b->split->post(b->split, dy, cols, ld);
        /* the lanes kernels' input gradient reads neither matrix: its blocks go after them, and
         * it runs while the other threads come to the meeting; shard_split's rows then go there
         * (the kernels' blocks, nl_conv_plane2_scratch or nl_conv_s2_lanes_scratch floats, are
         * more than 2 * C * 9) */
        float *after = b->scratch + ((size_t)d->k + d->f) * ld;
        const int early = b->din[0] && lanes_din(l, b, d, n, after);
        b->split->w_done = early || !b->din[0];
        b->split->wait(b->split);
        shard_split(l, b->split, d, after);
        b->split->leave(b->split);
        if (early)
            return;
    }
    if (!b->din[0])
        return;
    if (lanes_din(l, b, d, n, b->scratch))
        return; /* dy and cols are spent: the kernel's blocks go in their place */
    nl_sgemm_rows(1, d->k, ld, d->f, b->w, d->k, dy, ld, 0.0f, cols, ld);
    if (!pointwise(g)) {
        nl_col2im_batch(b->din[0], cols, n, d->in_size, g->c, g->h, g->w, g->kh, g->kw, g->sh,
                        g->sw, g->ph, g->pw, g->oh, g->ow);
        return;
    }
    for (int c = 0; c < g->c; c++)
        for (int s = 0; s < n; s++) {
            float *dst = b->din[0] + (size_t)s * d->in_size + (size_t)c * d->p;
            const float *row = cols + (size_t)c * ld + (size_t)s * d->p;
            for (int i = 0; i < d->p; i++)
                dst[i] += row[i];
        }
}

/* PACKED, image after image: dweight (F, K) += dout_s (F, P) colst_s (P, K), dout_s packed and
 * colst_s the transposed columns (nl_im2col_t); dbias as SAMPLE's; dcols (K, P) = weight^T (K, F)
 * dout_s (F, P), weight^T packed once, folded back onto din_s by col2im. */
static void backward_packed(const struct nl_layer *l, const struct nl_bwd *b,
                            const struct conv_dims *d)
{
    const struct nl__window *g = &d->win;
    const size_t out_size = (size_t)d->f * d->p, kp = (size_t)d->k * d->p;
    float *db = b->dw && !l->no_bias ? b->dw + l->params[1].offset : NULL;
    float *apt = b->scratch, *apd = apt + nl_pgemm_packed_floats(d->k, d->f);
    float *colst = apd + nl_pgemm_packed_floats(d->f, d->p), *dcols = colst + kp;

    if (b->din[0])
        nl_pgemm_pack(apt, b->w, d->k, 1, d->k, d->f);
    for (int s = 0; s < b->n; s++) {
        const float *dout = b->dout + (size_t)s * out_size;
        if (b->dw) {
            nl_im2col_t(colst, b->in[0] + (size_t)s * d->in_size, g->c, g->h, g->w, g->kh, g->kw,
                        g->sh, g->sw, g->ph, g->pw, g->oh, g->ow);
            nl_pgemm_pack(apd, dout, d->p, 0, d->f, d->p);
            nl_pgemm(b->dw, d->k, apd, colst, d->k, d->f, d->k, d->p, NULL, 1);
        }
        if (db)
            for (int fo = 0; fo < d->f; fo++)
                db[fo] += nl_sum(dout + (size_t)fo * d->p, d->p);
        if (!b->din[0])
            continue;
        float *din = b->din[0] + (size_t)s * d->in_size;
        const int first = b->set & 1; /* din's first writer: din_s written, not added to */
        if (pointwise(g)) {           /* din_s is dcols itself */
            nl_pgemm(din, d->p, apt, dout, d->p, d->k, d->p, d->f, NULL, !first);
            continue;
        }
        nl_pgemm(dcols, d->p, apt, dout, d->p, d->k, d->p, d->f, NULL, 0);
        if (first)
            nl_col2im_set(din, dcols, g->c, g->h, g->w, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw,
                          g->oh, g->ow);
        else
            nl_col2im(din, dcols, g->c, g->h, g->w, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, g->oh,
                      g->ow);
    }
}

/* ONECHAN: dweight by nl_conv1c_dweight, the shard's images into 16 lanes per weight, summed
 * once at the end (windows at most 5 wide; wider ones go as SAMPLE); dbias as SAMPLE's; the input
 * gradient SAMPLE's. */
static void backward_onechan(const struct nl_layer *l, const struct nl_bwd *b,
                             const struct conv_dims *d)
{
    const struct nl__window *g = &d->win;
    const size_t out_size = (size_t)d->f * d->p, weights = (size_t)d->f * d->k;
    float *db = b->dw && !l->no_bias ? b->dw + l->params[1].offset : NULL;
    float *part = b->scratch + (size_t)d->k * d->p;

    if (!b->dw || !nl_conv1c_dweight_fits(g->kw)) {
        backward_sample(l, b, d);
        return;
    }
    memset(part, 0, weights * 16 * sizeof *part);
    for (int s = 0; s < b->n; s++) {
        const float *dout = b->dout + (size_t)s * out_size;
        nl_conv1c_dweight(part, dout, b->in[0] + (size_t)s * d->in_size, g->w, d->f, g->kh, g->kw,
                          g->oh, g->ow);
        if (db)
            for (int fo = 0; fo < d->f; fo++)
                db[fo] += nl_sum(dout + (size_t)fo * d->p, d->p);
    }
    nl_conv1c_dweight_finish(b->dw, part, weights);
    if (b->din[0]) {
        struct nl_bwd din_only = *b;
        din_only.dw = NULL;
        backward_sample(l, &din_only, d);
    }
}

/* DIRECT: dweight += the direct correlation of dout_s with in_s (nl_conv_s1_dweight) where the
 * window is 3 wide, else SAMPLE's im2col and GEMM; dbias as SAMPLE's; din_s += the direct
 * convolution of dout_s (F, oh, ow) by the weights turned (C, F, kh, kw) and flipped in both axes,
 * padded by (kh - 1 - ph, kw - 1 - pw): the transposed convolution, with no col2im. */
static void backward_direct(const struct nl_layer *l, const struct nl_bwd *b,
                            const struct conv_dims *d)
{
    const struct nl__window *g = &d->win;
    const size_t out_size = (size_t)d->f * d->p;
    const int taps = g->kh * g->kw;
    float *db = b->dw && !l->no_bias ? b->dw + l->params[1].offset : NULL;
    float *flip = b->scratch + (size_t)d->k * d->p; /* (C, F, kh, kw) */
    /* nl_conv_s1_dweight has a vector path for 3-wide windows; elsewhere the GEMM is faster. */
    const int direct_dw = g->kw == 3 && nl_kernels_vector_on();

    if (b->din[0])
        for (int fo = 0; fo < d->f; fo++)
            for (int c = 0; c < g->c; c++)
                for (int t = 0; t < taps; t++)
                    flip[((size_t)c * d->f + fo) * taps + (taps - 1 - t)] =
                        b->w[((size_t)fo * g->c + c) * taps + t];
    for (int s = 0; s < b->n; s++) {
        const float *dout = b->dout + (size_t)s * out_size;
        const float *in = b->in[0] + (size_t)s * d->in_size;
        if (b->dw && direct_dw)
            nl_conv_s1_dweight(b->dw, dout, in, g->c, g->h, g->w, d->f, g->kh, g->kw, g->ph, g->pw,
                               g->oh, g->ow);
        else if (b->dw) {
            const float *cols = sample_cols(b->scratch, in, d);
            nl_sgemm(0, 1, d->f, d->k, d->p, 1.0f, dout, d->p, cols, d->p, 1.0f, b->dw, d->k);
        }
        if (db)
            for (int fo = 0; fo < d->f; fo++)
                db[fo] += nl_sum(dout + (size_t)fo * d->p, d->p);
        if (b->din[0])
            nl_conv_s1(b->din[0] + (size_t)s * d->in_size, dout, flip, NULL, d->f, g->oh, g->ow,
                       g->c, g->kh, g->kw, g->kh - 1 - g->ph, g->kw - 1 - g->pw, g->h, g->w,
                       !(b->set & 1));
    }
}

/* WINOGRAD, the exact adjoint of its forward, chunk by chunk of images as forward: dmm (a*a, F,
 * T) = the adjoint of the output transform of dout; du[xi] (F, C) += dmm[xi] (F, T) v[xi]^T
 * (T, C), v the input transformed again, and after the last chunk dweight += the adjoint of the
 * filter transform of du; dv[xi] (C, T) = u[xi]^T (C, F) dmm[xi] (F, T), u the filters
 * transformed again, and din += the adjoint of the input transform of dv; dbias as SAMPLE's.
 * scratch: u, du (one region where the shard is one chunk: du, then u), then a chunk's v (later
 * dv) and dmm. A shard of one chunk whose u is larger than WINO_U floats (wino_block) makes u by
 * blocks of input channels (nl_wino_filter_cols), each block's rows of dv right after its
 * transform, as forward_winograd does by filters, and du by blocks of filters, each folded into
 * dweight's rows right after its products: the same floats (test_kernels). Thread CPU time per
 * step, ResNet-18 at 3x64x64, batch 32, two threads (ms per thread, three rounds alternating,
 * 2026-11-27, real-time priority): with u by blocks, at load average 4.3 to 7, layer2's backward
 * 10.58 to 11.03 against 11.31 to 12.30, layer3's 14.95 to 15.90 against 15.13 to 16.34; du by
 * blocks too, at load average 1.5 to 1.7, layer2's 10.13 to 10.67 against 10.24 to 11.00,
 * layer3's 13.25 to 14.03 against 13.72 to 15.05; one thread unchanged.
 *
 * Where nl_wino_input_t has its vector path (C a multiple of 16, planes of at most 256 pixels),
 * the input is transformed again into vt (a*a, T, C), the same values with each matrix
 * transposed, and du[xi] += dmm[xi] (F, T) vt[xi] (T, C) is a plain product: OpenBLAS's products
 * that contract over the rows of both operands ran at about half the rate of the plain ones on
 * these shapes. tests/bench_conv.c's Winograd parts (us per image, thread CPU time, fastest of
 * 25, 2026-11-27, load average 5 to 6, products into a zeroed du), the input transform and du's
 * products against the transposed input transform and the plain products: resnet8's stage 2
 * (32 channels, 14x14) 4.3 + 12.1 against 5.2 + 7.6; stage 3 (64 channels, 7x7) 4.4 + 14.8
 * against 3.7 + 9.5 (2.9 + 7.1 once the transform turned its planes by 16x16 transposes instead
 * of a gather a pixel); ResNet-18's layer1 at 64x64 (64 channels, 16x16) 13.6 + 52.1 against
 * 13.9 + 28.2; layer2 (128, 8x8) 8.8 + 44.2 against 8.1 + 42.2. The products sum in another
 * order, so the weight gradients differ in the last bits. */
static void backward_winograd(const struct nl_layer *l, const struct nl_bwd *b,
                              const struct conv_dims *d)
{
    const struct nl_wino *p = &d->wino;
    const int aa = p->a * p->a, step = wino_chunk(p, b->n);
    const size_t fc = (size_t)d->f * p->c, out_size = (size_t)d->f * d->p;
    /* A shard of one chunk: du first, folded into dweight before u takes its floats. */
    const int one = step >= b->n;
    float *u = b->scratch, *du = one ? u : u + aa * fc, *v = du + aa * fc;
    float *db = b->dw && !l->no_bias ? b->dw + l->params[1].offset : NULL;
    const int cb = wino_block(p, b->n, d->f, 1);

    if (b->din[0] && !one)
        nl_wino_filter(u, b->w, p);
    for (int s0 = 0; s0 < b->n; s0 += step) {
        const int n = b->n - s0 < step ? b->n - s0 : step, tt = n * p->tiles;
        const size_t ct = (size_t)p->c * tt, ft = (size_t)d->f * tt;
        float *dmm = v + aa * ct;
        nl_wino_output_adjoint(dmm, b->dout + (size_t)s0 * out_size, n, p);
        const int rows = b->dw ? wino_block(p, b->n, p->c, 0) : 0;
        if (rows > 0) {
            /* du and its fold into dweight by blocks of filters (see above) */
            const int fast = nl_wino_input_t_fast(p);
            if (fast)
                nl_wino_input_t(v, b->in[0], n, p);
            else
                nl_wino_input(v, b->in[0], n, p);
            for (int f0 = 0; f0 < d->f; f0 += rows) {
                struct nl_wino q = *p;
                q.f = d->f - f0 < rows ? d->f - f0 : rows;
                const size_t qc = (size_t)q.f * p->c;
                for (int xi = 0; xi < aa; xi++) {
                    const float *a = dmm + xi * ft + (size_t)f0 * tt;
                    if (fast)
                        nl_sgemm(0, 0, q.f, p->c, tt, 1.0f, a, tt, v + xi * ct, p->c, 0.0f,
                                 du + xi * qc, p->c);
                    else
                        nl_sgemm(0, 1, q.f, p->c, tt, 1.0f, a, tt, v + xi * ct, tt, 0.0f,
                                 du + xi * qc, p->c);
                }
                nl_wino_filter_adjoint(b->dw + (size_t)f0 * p->c * 9, du, &q);
            }
        } else if (b->dw && nl_wino_input_t_fast(p)) {
            nl_wino_input_t(v, b->in[0] + (size_t)s0 * d->in_size, n, p);
            for (int xi = 0; xi < aa; xi++)
                nl_sgemm_rows(0, d->f, p->c, tt, dmm + xi * ft, tt, v + xi * ct, p->c,
                              s0 == 0 ? 0.0f : 1.0f, du + xi * fc, p->c);
        } else if (b->dw) {
            nl_wino_input(v, b->in[0] + (size_t)s0 * d->in_size, n, p);
            for (int xi = 0; xi < aa; xi++)
                nl_sgemm(0, 1, d->f, p->c, tt, 1.0f, dmm + xi * ft, tt, v + xi * ct, tt,
                         s0 == 0 ? 0.0f : 1.0f, du + xi * fc, p->c);
        }
        if (b->dw && one && rows == 0)
            nl_wino_filter_adjoint(b->dw, du, p);
        if (b->din[0] && cb > 0) {
            /* u and the products by blocks of input channels (see above) */
            for (int c0 = 0; c0 < p->c; c0 += cb) {
                struct nl_wino q = *p;
                q.c = p->c - c0 < cb ? p->c - c0 : cb;
                const size_t qf = (size_t)d->f * q.c;
                nl_wino_filter_cols(u, b->w + (size_t)c0 * 9, &q, p->c);
                for (int xi = 0; xi < aa; xi++)
                    nl_sgemm(1, 0, q.c, tt, d->f, 1.0f, u + xi * qf, q.c, dmm + xi * ft, tt, 0.0f,
                             v + xi * ct + (size_t)c0 * tt, tt);
            }
        } else if (b->din[0]) {
            if (one)
                nl_wino_filter(u, b->w, p);
            for (int xi = 0; xi < aa; xi++)
                nl_sgemm_rows(1, p->c, tt, d->f, u + xi * fc, p->c, dmm + xi * ft, tt, 0.0f,
                              v + xi * ct, tt);
        }
        if (b->din[0]) {
            float *din = b->din[0] + (size_t)s0 * d->in_size;
            if (b->set & 1) /* the first writer: din written, not added to */
                nl_wino_input_adjoint_set(din, v, n, p);
            else
                nl_wino_input_adjoint(din, v, n, p);
        }
    }
    if (b->dw && !one)
        nl_wino_filter_adjoint(b->dw, du, p);
    if (db)
        for (int s = 0; s < b->n; s++)
            for (int fo = 0; fo < d->f; fo++)
                db[fo] += nl_sum(b->dout + (size_t)s * out_size + (size_t)fo * d->p, d->p);
}

/* Floats of scratch a call of at most n images uses: WINOGRAD's u, du beside it only where the
 * shard takes more than one chunk, and one chunk's v and mm (scratch_fixed and scratch_per_sample
 * count du and every image: a bound); the other lowerings' fields. */
static size_t conv_scratch(const struct nl_layer *l, int n)
{
    struct conv_dims d;

    if (l->lower != NL_LOWER_WINOGRAD && l->lower != NL_LOWER_WINOGRAD2)
        return l->scratch_fixed + (size_t)n * l->scratch_per_sample;
    conv_dims(l, &d, NULL);
    const int step = wino_chunk(&d.wino, n);
    const size_t u = (size_t)d.wino.a * d.wino.a * d.f * d.wino.c;
    return (step < n ? 2 : 1) * u + (size_t)step * l->scratch_per_sample;
}

/* Prepared weights (nl_prep): a Winograd layer's u, which its forward then reads instead of
 * making it in every call (forward_winograd), kept turned in blocks (ub_products); or, for a
 * layer whose one image is one product on few pixels (wt_turned), its weights turned the same
 * way (wt_product). The same floats either way. */
static size_t conv_prep_floats(const struct nl_layer *l)
{
    struct conv_dims d;
    struct nl_s2 s2;

    conv_dims(l, &d, &s2);
    if (wt_turned(l, &d))
        return (size_t)d.f * d.k;
    if (l->lower != NL_LOWER_WINOGRAD && l->lower != NL_LOWER_WINOGRAD2)
        return 0;
    return (size_t)d.wino.a * d.wino.a * d.f * d.wino.c;
}

static void conv_prep(const struct nl_layer *l, const float *w, float *out)
{
    struct conv_dims d;
    struct nl_s2 s2;
    float one[36 * 16];

    conv_dims(l, &d, &s2);
    if (wt_turned(l, &d)) { /* the weights turned, in blocks (wt_product) */
        for (int g = 0; g < d.f; g++) {
            const int b0 = g / UB_COLS * UB_COLS, width = d.f - b0 < UB_COLS ? d.f - b0 : UB_COLS;
            for (int k = 0; k < d.k; k++)
                out[(size_t)b0 * d.k + (size_t)k * width + (g - b0)] = w[(size_t)g * d.k + k];
        }
        return;
    }
    const int aa = d.wino.a * d.wino.a, c = d.wino.c;
    /* each filter's u, 16 channels at a time, laid into the turned blocks (ub_products) */
    for (int g = 0; g < d.f; g++) {
        const int b0 = g / UB_COLS * UB_COLS, width = d.f - b0 < UB_COLS ? d.f - b0 : UB_COLS;
        for (int c0 = 0; c0 < c; c0 += 16) {
            struct nl_wino q = d.wino;
            q.f = 1;
            q.c = c - c0 < 16 ? c - c0 : 16;
            nl_wino_filter_cols(one, w + ((size_t)g * c + c0) * 9, &q, c);
            for (int xi = 0; xi < aa; xi++)
                for (int k = 0; k < q.c; k++)
                    out[(size_t)xi * d.f * c + (size_t)b0 * c + (size_t)(c0 + k) * width + g - b0] =
                        one[xi * q.c + k];
        }
    }
}

/* din's first writer (bit 0 of b->set): WINOGRAD writes each chunk of images' din
 * (nl_wino_input_adjoint_set: written where the tile rows are stacked, else zeroed just before
 * it adds into it, while that chunk goes into the cache anyway); DIRECT writes each image's instead
 * of adding (its sums start from 0 either way), and PACKED too (nl_col2im_set); SAMPLE and SHARD
 * start from the whole shard's din zeroed, as a caller would have left it, and PHASES too unless it
 * rewrites every pixel (s2_writes_all); a 1x1 stride-2 window (picks_first) and SAMPLE (and
 * ONECHAN's input gradient, which is SAMPLE's) clear each image's din just before adding into it,
 * while it is in the cache, rather than the whole shard's in a pass ahead. The sums are the
 * same. */
static void conv_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    struct conv_dims d;
    struct nl_s2 s2;
    conv_dims(l, &d, &s2);
    const int wino = l->lower == NL_LOWER_WINOGRAD || l->lower == NL_LOWER_WINOGRAD2;
    const int shard = (l->lower == NL_LOWER_SHARD || l->lower == NL_LOWER_PLANE2 ||
                       l->lower == NL_LOWER_S2LANES) &&
                      b->n > 1;
    if (b->split && !shard)
        abort(); /* a caller's bug: a split is for shards of 2 samples or more (ops->split) */
    const int phases = l->lower == NL_LOWER_PHASES || (l->lower == NL_LOWER_SAMPLE && pick(&d.win));
    /* backward_sample (ONECHAN's input gradient too) clears each image's din itself */
    const int sample =
        !wino && !shard && !phases && l->lower != NL_LOWER_DIRECT && l->lower != NL_LOWER_PACKED;
    if (!wino && !sample && l->lower != NL_LOWER_DIRECT && l->lower != NL_LOWER_PACKED &&
        (b->set & 1) && b->din[0] && !s2_writes_all(l, b, &d) && !picks_first(l, b, &d))
        memset(b->din[0], 0, (size_t)b->n * d.in_size * sizeof *b->din[0]);
    if (wino)
        backward_winograd(l, b, &d);
    else if (l->lower == NL_LOWER_DIRECT)
        backward_direct(l, b, &d);
    else if (l->lower == NL_LOWER_PACKED)
        backward_packed(l, b, &d);
    else if (l->lower == NL_LOWER_ONECHAN)
        backward_onechan(l, b, &d);
    else if (shard)
        backward_shard(l, b, &d);
    else if (phases)
        backward_phases(l, b, &d);
    else
        backward_sample(l, b, &d);
}

/* The shard lowerings take their weight gradient split between threads (backward_shard). */
static int conv_split(const struct nl_layer *l)
{
    const int shard =
        l->lower == NL_LOWER_SHARD || l->lower == NL_LOWER_PLANE2 || l->lower == NL_LOWER_S2LANES;
    return shard ? (int)l->out.h * l->out.w : 0;
}

const struct nl_layer_ops nl__conv_ops = {
    .kind = "conv",
    .min_inputs = 1,
    .max_inputs = 1,
    .overwrites = 1,
    .folds = 3,
    .splits = 1,
    .setup = conv_setup,
    .forward = conv_forward,
    .backward = conv_backward,
    .scratch = conv_scratch,
    .split = conv_split,
    .prep_floats = conv_prep_floats,
    .prep = conv_prep,
};
