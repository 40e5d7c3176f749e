/* Recurrent layers: "lstm UNITS" and "gru UNITS", one layer, one direction, as PyTorch's nn.LSTM
 * and nn.GRU (num_layers=1), with backpropagation through time.
 *
 *   weight_ih_l0 [G*H, I], weight_hh_l0 [G*H, H], bias_ih_l0 [G*H], bias_hh_l0 [G*H];
 *   G = 4 for lstm (gates in PyTorch's order i, f, g, o), 3 for gru (r, z, n)
 *   in  (n, I, 1, L) a sequence [, tokens (n, 1, 1, L)]
 *   out (n, H, 1, 1) the last hidden state, or with states=all (n, H, 1, L) every step's
 *
 * The initial state is zero. With the tokens as second input (in=embed,input), a step whose
 * token is padding leaves the state as it was and outputs 0 (states=all): the last state is the
 * state after the last word, as PyTorch's pack_padded_sequence gives it. Without them every step
 * counts, as nn.LSTM on the padded tensor.
 *
 * lstm: i = s(x Wi + bi + h Ui + ci), f, g = tanh(.), o likewise; c' = f c + i g; h' = o tanh(c')
 * gru:  r = s(x Wr + br + h Ur + cr), z likewise, n = tanh(x Wn + bn + r (h Un + cn)),
 *       h' = (1 - z) n + z h
 *
 * aux, per sample: the states h (L + 1, H) (row 0 the initial zeros), for lstm the cells
 * c (L + 1, H), the gates after their nonlinearity (L, G*H), and for gru h Un + cn (L, H).
 * scratch, per call: the inputs step-major (L, I), their projections (L, G*H), the projections'
 * gradients (L, G*H), the inputs' gradients (L, I) and 4 G*H floats. */
#include <math.h>
#include <string.h>

#include "layers.h"
#include "nnlab/kernels.h"

struct rnn_dims {
    int lstm;
    int in, h, g, len; /* I, H, G, L */
    size_t aux_floats;
};

static void rnn_dims(const struct nl_layer *l, struct rnn_dims *d)
{
    d->lstm = strcmp(l->ops->kind, "lstm") == 0;
    d->in = l->in[0].c;
    d->h = l->units;
    d->g = d->lstm ? 4 : 3;
    d->len = l->in[0].w;
    size_t L = (size_t)d->len, H = (size_t)d->h;
    d->aux_floats = (L + 1) * H * (d->lstm ? 2 : 1) + L * (size_t)d->g * H + (d->lstm ? 0 : L * H);
}

static int rnn_setup(struct nl_layer *l, struct nl_error *err)
{
    struct rnn_dims d;
    int rc = nl__layer_begin(l, err);

    if (rc < 0)
        return rc;
    if (l->units <= 0)
        return nl__layer_fail(l, err, "%s needs a positive number of units, not %d", l->ops->kind,
                              l->units);
    if (l->in[0].h != 1)
        return nl__layer_fail(l, err,
                              "%s takes a sequence (C x 1 x L), not %dx%dx%d (an embedding gives "
                              "one)",
                              l->ops->kind, l->in[0].c, l->in[0].h, l->in[0].w);
    if (l->ninputs == 2 && (l->in[1].c != 1 || l->in[1].h != 1 || l->in[1].w != l->in[0].w))
        return nl__layer_fail(l, err,
                              "the second input must be the tokens (1x1x%d) that mark padding, "
                              "not %dx%dx%d",
                              l->in[0].w, l->in[1].c, l->in[1].h, l->in[1].w);
    rnn_dims(l, &d);
    if ((size_t)d.g * (size_t)d.h * ((size_t)d.in + (size_t)d.h) > (1u << 30) ||
        d.aux_floats > (1u << 28))
        return nl__layer_fail(l, err, "%s of %d units on %dx1x%d is too large", l->ops->kind, d.h,
                              d.in, d.len);
    l->out = (struct nl_shape){d.h, 1, l->all_states ? d.len : 1};
    int gh = d.g * d.h;
    int wih[4] = {gh, d.in}, whh[4] = {gh, d.h}, b[4] = {gh};
    nl__layer_add_param(l, "weight_ih_l0", 2, wih, d.in, d.h, l->init);
    nl__layer_add_param(l, "weight_hh_l0", 2, whh, d.h, d.h, l->init);
    nl__layer_add_param(l, "bias_ih_l0", 1, b, d.in, d.h, NL_INIT_ZERO);
    nl__layer_add_param(l, "bias_hh_l0", 1, b, d.h, d.h, NL_INIT_ZERO);
    l->aux_bytes = d.aux_floats * sizeof(float);
    l->scratch_fixed =
        2 * (size_t)d.len * (size_t)d.in + 2 * (size_t)d.len * (size_t)gh + 4 * (size_t)gh;
    return 0;
}

static float sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

static int step_valid(const float *const *in, int ninputs, int s, int len, int t)
{
    return ninputs < 2 || in[1][(size_t)s * len + t] != 0.0f;
}

/* y (m) = a (m, k) x (k) + b (m) */
static void matvec(float *y, const float *a, const float *x, const float *b, int m, int k)
{
    for (int i = 0; i < m; i++) {
        const float *row = a + (size_t)i * k;
        float acc = b ? b[i] : 0.0f;
        for (int j = 0; j < k; j++)
            acc += row[j] * x[j];
        y[i] = acc;
    }
}

static void rnn_forward(const struct nl_layer *l, const struct nl_fwd *f)
{
    struct rnn_dims d;
    rnn_dims(l, &d);
    const int I = d.in, H = d.h, L = d.len, GH = d.g * d.h;
    const float *wih = f->w + l->params[0].offset, *whh = f->w + l->params[1].offset;
    const float *bih = f->w + l->params[2].offset, *bhh = f->w + l->params[3].offset;
    float *x = f->scratch, *xg = x + (size_t)L * I, *hg = xg + 2 * (size_t)L * GH + (size_t)L * I;

    for (int s = 0; s < f->n; s++) {
        const float *in = f->in[0] + (size_t)s * I * L;
        float *aux = (float *)f->aux + (size_t)s * d.aux_floats;
        float *hs = aux, *cs = d.lstm ? hs + (size_t)(L + 1) * H : NULL;
        float *act = hs + (size_t)(L + 1) * H * (d.lstm ? 2 : 1);
        float *hn = d.lstm ? NULL : act + (size_t)L * GH;
        float *out = f->out + (size_t)s * nl_shape_size(l->out);

        /* xg (L, GH) = x (L, I) wih^T + bih */
        for (int i = 0; i < I; i++)
            for (int t = 0; t < L; t++)
                x[(size_t)t * I + i] = in[(size_t)i * L + t];
        for (int t = 0; t < L; t++)
            memcpy(xg + (size_t)t * GH, bih, (size_t)GH * sizeof *xg);
        nl_sgemm(0, 1, L, GH, I, 1.0f, x, I, wih, I, 1.0f, xg, GH);
        memset(hs, 0, (size_t)H * sizeof *hs);
        if (cs)
            memset(cs, 0, (size_t)H * sizeof *cs);
        for (int t = 0; t < L; t++) {
            const float *hp = hs + (size_t)t * H;
            float *hc = hs + (size_t)(t + 1) * H, *a = act + (size_t)t * GH;
            const float *g = xg + (size_t)t * GH;
            if (!step_valid(f->in, l->ninputs, s, L, t)) {
                memcpy(hc, hp, (size_t)H * sizeof *hc);
                if (cs)
                    memcpy(cs + (size_t)(t + 1) * H, cs + (size_t)t * H, (size_t)H * sizeof *cs);
                memset(a, 0, (size_t)GH * sizeof *a);
                if (hn)
                    memset(hn + (size_t)t * H, 0, (size_t)H * sizeof *hn);
                continue;
            }
            matvec(hg, whh, hp, bhh, GH, H);
            if (d.lstm) {
                const float *cp = cs + (size_t)t * H;
                float *cc = cs + (size_t)(t + 1) * H;
                for (int k = 0; k < H; k++) {
                    float ig = sigmoid(g[k] + hg[k]), fg = sigmoid(g[H + k] + hg[H + k]);
                    float gg = tanhf(g[2 * H + k] + hg[2 * H + k]);
                    float og = sigmoid(g[3 * H + k] + hg[3 * H + k]);
                    a[k] = ig;
                    a[H + k] = fg;
                    a[2 * H + k] = gg;
                    a[3 * H + k] = og;
                    cc[k] = fg * cp[k] + ig * gg;
                    hc[k] = og * tanhf(cc[k]);
                }
            } else {
                float *hnt = hn + (size_t)t * H;
                for (int k = 0; k < H; k++) {
                    float r = sigmoid(g[k] + hg[k]), z = sigmoid(g[H + k] + hg[H + k]);
                    hnt[k] = hg[2 * H + k];
                    float nn = tanhf(g[2 * H + k] + r * hnt[k]);
                    a[k] = r;
                    a[H + k] = z;
                    a[2 * H + k] = nn;
                    hc[k] = (1.0f - z) * nn + z * hp[k];
                }
            }
        }
        if (l->all_states) {
            for (int k = 0; k < H; k++)
                for (int t = 0; t < L; t++)
                    out[(size_t)k * L + t] =
                        step_valid(f->in, l->ninputs, s, L, t) ? hs[(size_t)(t + 1) * H + k] : 0.0f;
        } else {
            memcpy(out, hs + (size_t)L * H, (size_t)H * sizeof *out);
        }
    }
}

static void rnn_backward(const struct nl_layer *l, const struct nl_bwd *b)
{
    struct rnn_dims d;
    rnn_dims(l, &d);
    const int I = d.in, H = d.h, L = d.len, GH = d.g * d.h;
    const float *wih = b->w + l->params[0].offset, *whh = b->w + l->params[1].offset;
    float *dwih = b->dw ? b->dw + l->params[0].offset : NULL;
    float *dwhh = b->dw ? b->dw + l->params[1].offset : NULL;
    float *dbih = b->dw ? b->dw + l->params[2].offset : NULL;
    float *dbhh = b->dw ? b->dw + l->params[3].offset : NULL;
    float *x = b->scratch, *dxg = x + (size_t)L * I + (size_t)L * GH;
    float *dx = dxg + (size_t)L * GH, *dhg = dx + (size_t)L * I, *dh = dhg + GH, *dc = dh + GH,
          *tmp = dc + GH;

    for (int s = 0; s < b->n; s++) {
        const float *in = b->in[0] + (size_t)s * I * L;
        const float *aux = (const float *)b->aux + (size_t)s * d.aux_floats;
        const float *hs = aux, *cs = d.lstm ? hs + (size_t)(L + 1) * H : NULL;
        const float *act = hs + (size_t)(L + 1) * H * (d.lstm ? 2 : 1);
        const float *hn = d.lstm ? NULL : act + (size_t)L * GH;
        const float *dout = b->dout + (size_t)s * nl_shape_size(l->out);

        if (l->all_states)
            memset(dh, 0, (size_t)H * sizeof *dh);
        else
            memcpy(dh, dout, (size_t)H * sizeof *dh);
        memset(dc, 0, (size_t)H * sizeof *dc);
        memset(dxg, 0, (size_t)L * GH * sizeof *dxg);
        for (int t = L - 1; t >= 0; t--) {
            int valid = step_valid(b->in, l->ninputs, s, L, t);
            if (l->all_states && valid)
                for (int k = 0; k < H; k++)
                    dh[k] += dout[(size_t)k * L + t];
            if (!valid)
                continue; /* the state passed through: so do its gradients */
            const float *hp = hs + (size_t)t * H, *a = act + (size_t)t * GH;
            float *dg = dxg + (size_t)t * GH;
            if (d.lstm) {
                const float *cp = cs + (size_t)t * H, *cc = cs + (size_t)(t + 1) * H;
                for (int k = 0; k < H; k++) {
                    float ig = a[k], fg = a[H + k], gg = a[2 * H + k], og = a[3 * H + k];
                    float tc = tanhf(cc[k]);
                    float dct = dc[k] + dh[k] * og * (1.0f - tc * tc);
                    dg[k] = dct * gg * ig * (1.0f - ig);
                    dg[H + k] = dct * cp[k] * fg * (1.0f - fg);
                    dg[2 * H + k] = dct * ig * (1.0f - gg * gg);
                    dg[3 * H + k] = dh[k] * tc * og * (1.0f - og);
                    dc[k] = dct * fg;
                }
                memcpy(dhg, dg, (size_t)GH * sizeof *dhg);
                for (int k = 0; k < H; k++)
                    tmp[k] = 0.0f;
            } else {
                const float *hnt = hn + (size_t)t * H;
                for (int k = 0; k < H; k++) {
                    float r = a[k], z = a[H + k], nn = a[2 * H + k];
                    float dn = dh[k] * (1.0f - z) * (1.0f - nn * nn);
                    float dz = dh[k] * (hp[k] - nn) * z * (1.0f - z);
                    float dr = dn * hnt[k] * r * (1.0f - r);
                    dg[k] = dr;
                    dg[H + k] = dz;
                    dg[2 * H + k] = dn;
                    dhg[k] = dr;
                    dhg[H + k] = dz;
                    dhg[2 * H + k] = dn * r;
                    tmp[k] = dh[k] * z; /* the direct path h -> h' */
                }
            }
            /* dh_prev = tmp + whh^T dhg; the weight and bias gradients of this step. */
            for (int k = 0; k < H; k++)
                dh[k] = tmp[k];
            for (int j = 0; j < GH; j++) {
                const float *row = whh + (size_t)j * H;
                float gj = dhg[j];
                if (gj == 0.0f)
                    continue;
                for (int k = 0; k < H; k++)
                    dh[k] += row[k] * gj;
                if (dwhh) {
                    float *drow = dwhh + (size_t)j * H;
                    for (int k = 0; k < H; k++)
                        drow[k] += gj * hp[k];
                }
            }
            if (dbhh)
                for (int j = 0; j < GH; j++)
                    dbhh[j] += dhg[j];
            if (dbih)
                for (int j = 0; j < GH; j++)
                    dbih[j] += dg[j];
        }
        if (dwih) {
            /* dwih (GH, I) += dxg^T (GH, L) x (L, I) */
            for (int i = 0; i < I; i++)
                for (int t = 0; t < L; t++)
                    x[(size_t)t * I + i] = in[(size_t)i * L + t];
            nl_sgemm(1, 0, GH, I, L, 1.0f, dxg, GH, x, I, 1.0f, dwih, I);
        }
        if (b->din[0]) {
            /* dx (L, I) = dxg (L, GH) wih (GH, I), back to (I, L) */
            float *din = b->din[0] + (size_t)s * I * L;
            nl_sgemm(0, 0, L, I, GH, 1.0f, dxg, GH, wih, I, 0.0f, dx, I);
            for (int i = 0; i < I; i++)
                for (int t = 0; t < L; t++)
                    din[(size_t)i * L + t] += dx[(size_t)t * I + i];
        }
    }
}

const struct nl_layer_ops nl__lstm_ops = {
    .kind = "lstm",
    .min_inputs = 1,
    .max_inputs = 2,
    .setup = rnn_setup,
    .forward = rnn_forward,
    .backward = rnn_backward,
};

const struct nl_layer_ops nl__gru_ops = {
    .kind = "gru",
    .min_inputs = 1,
    .max_inputs = 2,
    .setup = rnn_setup,
    .forward = rnn_forward,
    .backward = rnn_backward,
};
