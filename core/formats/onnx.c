/* ONNX export, written directly in protobuf's wire format.
 *
 * Wire format (protobuf encoding, as the ONNX runtimes' parsers read it)
 * ------------------------------------------------------------------------
 * A message is a sequence of fields; each field is a key, varint(field_number << 3 | wire_type),
 * then its value: wire type 0 a varint (int32, int64, enums; negative values as 10-byte two's
 * complement), 2 a varint length then that many bytes (strings, bytes, embedded messages),
 * 5 four little-endian bytes (float). Repeated fields repeat the key; repeated numbers are written
 * unpacked (one key per value), which every parser accepts. An embedded message is written into
 * its own buffer first, so that its length is known, then appended; the weights go into the
 * graph's buffer once, as raw_data.
 *
 * The fields written (numbers from onnx/onnx.proto):
 *   ModelProto          1 ir_version = 5, 2 producer_name = "nnlab", 3 producer_version,
 *                       7 graph, 8 opset_import, 14 metadata_props
 *   OperatorSetIdProto  2 version = 10 (the default domain)
 *   StringStringEntry   1 key, 2 value
 *   GraphProto          1 node, 2 name, 5 initializer, 10 doc_string, 11 input, 12 output
 *   NodeProto           1 input, 2 output, 3 name, 4 op_type, 5 attribute
 *   AttributeProto      1 name, 2 f, 3 i, 4 s, 8 ints, 20 type (FLOAT 1, INT 2, STRING 3,
 *                       INTS 7)
 *   TensorProto         1 dims, 2 data_type (FLOAT 1, INT64 7), 8 name, 9 raw_data
 *   ValueInfoProto      1 name, 2 type; TypeProto 1 tensor_type; TypeProto.Tensor 1 elem_type,
 *                       2 shape; TensorShapeProto 1 dim; Dimension 1 dim_value, 2 dim_param
 *
 * The graph
 * ---------
 * Opset 10, IR version 5 (see OPSET below). Input "input", float [batch, C, H, W] (batch symbolic):
 * for 8-bit image datasets the pixel values 0-255 in the dataset's channel order (RGB or gray), for
 * CSV datasets the raw features as (F, 1, 1). Normalisation is inside the graph, as nnlab computes
 * it: Mul by input.scale (1/255 or 1), Sub input.mean, Div input.std, per channel. Outputs "logits"
 * [batch, classes] and "probabilities", their Softmax. A regression model (a CSV dataset imported
 * with --task regression) has one output unit that predicts the standardised target: its outputs
 * are "logits" [batch, 1] and "prediction" [batch, 1] = logits * target.std + target.mean (a Mul
 * and an Add with the train split's target statistics), the value `nnlab predict` prints, in the
 * target's units. Metadata: nnlab.classes (class names, one a line; a regression's one "class"
 * is its target column), nnlab.task ("classification" or "regression") and nnlab.input (the
 * sentence above).
 *
 * Each layer becomes nodes whose last output is named as the layer; initializers carry the
 * PyTorch tensor names of the safetensors export (conv1.weight, layer1.0.bn1.running_var):
 *   conv, gconv    Conv (kernel_shape, strides, pads, group)
 *   dense          Flatten (axis 1) + Gemm (transB = 1; a zero bias when the layer has none,
 *                  as opset 10's Gemm requires C)
 *   maxpool        MaxPool;  avgpool AveragePool (count_include_pad = 1, as nnlab divides by
 *                  the whole window; a padded one as Pad + AveragePool without pads, which
 *                  every runtime computes alike); globalavgpool GlobalAveragePool
 *   batchnorm      BatchNormalization (epsilon)
 *   relu, tanh, sigmoid   Relu, Tanh, Sigmoid;  relu6 Clip (min 0, max 6)
 *   leakyrelu      LeakyRelu (alpha);  gelu Erf composed: x * 0.5 * (1 + erf(x / sqrt 2))
 *   softmax        Softmax (axis 1) over the channels; on a plane larger than 1x1, between two
 *                  Transposes to [batch, H, W, C] (opset 10's Softmax flattens from its axis)
 *   add, concat    Add, Concat (axis 1);  flatten Flatten (axis 1)
 *   dropout        Dropout (ratio; the identity at inference)
 * A layer of any other kind is refused by name. Tensors of rank 2 ([batch, F], after dense or
 * flatten) are reshaped to [batch, F, 1, 1] where a layer needs rank 4 or meets a rank-4
 * tensor. Helper tensors are named LAYER/what ('/' is never in a layer's name); a layer named as
 * a fixed tensor (logits, probabilities, input.mean, ...) or as another layer's parameter
 * (conv1.weight) is refused, since ONNX names every tensor once. */
#include "nnlab/onnx.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nnlab/alloc.h"

/* Opset 10 (IR version 5): the newest whose Clip takes its bounds as attributes, the form that
 * OpenCV's dnn module (4.6) and other light runtimes read; later opsets moved them to inputs. */
#define IR_VERSION 5
#define OPSET      10

enum { WIRE_VARINT = 0, WIRE_LEN = 2, WIRE_FIXED32 = 5 };
enum { ATTR_FLOAT = 1, ATTR_INT = 2, ATTR_STRING = 3, ATTR_INTS = 7 };
enum { ELEM_FLOAT = 1, ELEM_INT64 = 7 };

/* A growing byte buffer; oom is sticky and checked once at the end. */
struct buf {
    unsigned char *p;
    size_t len, cap;
    int oom;
};

static void put_raw(struct buf *b, const void *data, size_t n)
{
    if (b->oom || n == 0)
        return;
    if (b->cap - b->len < n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n)
            cap *= 2;
        unsigned char *p = nl_realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

static void put_varint(struct buf *b, uint64_t v)
{
    unsigned char tmp[10];
    size_t n = 0;

    do {
        tmp[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    put_raw(b, tmp, n);
}

static void put_key(struct buf *b, int field, int wire)
{
    put_varint(b, (uint64_t)field << 3 | (uint64_t)wire);
}

static void field_int(struct buf *b, int field, int64_t v)
{
    put_key(b, field, WIRE_VARINT);
    put_varint(b, (uint64_t)v);
}

static void field_bytes(struct buf *b, int field, const void *data, size_t n)
{
    put_key(b, field, WIRE_LEN);
    put_varint(b, n);
    put_raw(b, data, n);
}

static void field_str(struct buf *b, int field, const char *s)
{
    field_bytes(b, field, s, strlen(s));
}

static void field_float(struct buf *b, int field, float v)
{
    uint32_t u;
    unsigned char le[4];

    memcpy(&u, &v, 4);
    for (int k = 0; k < 4; k++)
        le[k] = (unsigned char)(u >> (8 * k));
    put_key(b, field, WIRE_FIXED32);
    put_raw(b, le, 4);
}

/* Appends sub as embedded message `field` of b and empties sub for reuse. */
static void field_msg(struct buf *b, int field, struct buf *sub)
{
    if (sub->oom)
        b->oom = 1;
    field_bytes(b, field, sub->p, sub->len);
    sub->len = 0;
}

static void buf_free(struct buf *b)
{
    nl_free(b->p);
    memset(b, 0, sizeof *b);
}

/* ---- graph building ---- */

struct graph {
    struct buf nodes, inits, tmp, attrs;
    const struct nl_model *m;
    int *rank;          /* (nlayers) rank of each layer's output tensor: 2 or 4 */
    int in_rank;        /* of the normalised input: 4 */
    const char **names; /* (nlayers) the tensor name of each layer's output: its name */
    int count;          /* nodes so far, for unique helper names */
};

static void attr_int(struct graph *g, const char *name, int64_t v)
{
    struct buf *a = &g->tmp;
    field_str(a, 1, name);
    field_int(a, 3, v);
    field_int(a, 20, ATTR_INT);
    field_msg(&g->attrs, 5, a);
}

static void attr_float(struct graph *g, const char *name, float v)
{
    struct buf *a = &g->tmp;
    field_str(a, 1, name);
    field_float(a, 2, v);
    field_int(a, 20, ATTR_FLOAT);
    field_msg(&g->attrs, 5, a);
}

static void attr_str(struct graph *g, const char *name, const char *v)
{
    struct buf *a = &g->tmp;
    field_str(a, 1, name);
    field_str(a, 4, v);
    field_int(a, 20, ATTR_STRING);
    field_msg(&g->attrs, 5, a);
}

static void attr_ints(struct graph *g, const char *name, const int64_t *v, int n)
{
    struct buf *a = &g->tmp;
    field_str(a, 1, name);
    for (int k = 0; k < n; k++)
        field_int(a, 8, v[k]);
    field_int(a, 20, ATTR_INTS);
    field_msg(&g->attrs, 5, a);
}

/* Adds a node with the attributes gathered in g->attrs (which it empties). */
static void node(struct graph *g, const char *op, const char *name, const char *const *in, int nin,
                 const char *out)
{
    struct buf *n = &g->tmp;

    for (int k = 0; k < nin; k++)
        field_str(n, 1, in[k]);
    field_str(n, 2, out);
    field_str(n, 3, name);
    field_str(n, 4, op);
    put_raw(n, g->attrs.p, g->attrs.len);
    if (g->attrs.oom)
        n->oom = 1;
    g->attrs.len = 0;
    field_msg(&g->nodes, 1, n);
    g->count++;
}

/* A node of one input and no attributes. */
static void node1(struct graph *g, const char *op, const char *name, const char *in,
                  const char *out)
{
    node(g, op, name, &in, 1, out);
}

/* A TensorProto's fields up to its raw_data into t: dims, data type and name, then raw_data's
 * key and length (bytes); the bytes are the caller's to add. */
static void tensor_head(struct buf *t, const char *name, const int64_t *dims, int ndim, int elem,
                        uint64_t bytes)
{
    for (int k = 0; k < ndim; k++)
        field_int(t, 1, dims[k]);
    field_int(t, 2, elem);
    field_str(t, 8, name);
    put_key(t, 9, WIRE_LEN);
    put_varint(t, bytes);
}

/* Adds a float initializer of the given dims, converting data to little-endian. */
static void init_floats(struct graph *g, const char *name, const int64_t *dims, int ndim,
                        const float *data, size_t count)
{
    struct buf *t = &g->tmp;

    tensor_head(t, name, dims, ndim, ELEM_FLOAT, count * 4);
    /* The tensor's header is in t; the data goes straight into the graph's buffer behind it. */
    put_key(&g->inits, 5, WIRE_LEN);
    put_varint(&g->inits, t->len + count * 4);
    put_raw(&g->inits, t->p, t->len);
    if (t->oom)
        g->inits.oom = 1;
    t->len = 0;
    for (size_t i = 0; i < count; i++) {
        uint32_t u;
        unsigned char le[4];
        memcpy(&u, &data[i], 4);
        for (int k = 0; k < 4; k++)
            le[k] = (unsigned char)(u >> (8 * k));
        put_raw(&g->inits, le, 4);
    }
}

static void init_zeros(struct graph *g, const char *name, const int64_t *dims, int ndim,
                       size_t count)
{
    const float zero = 0.0f;
    struct buf *t = &g->tmp;

    tensor_head(t, name, dims, ndim, ELEM_FLOAT, count * 4);
    for (size_t i = 0; i < count; i++)
        put_raw(t, &zero, 4); /* zero has the same bytes in either byte order */
    field_msg(&g->inits, 5, t);
}

static void init_int64s(struct graph *g, const char *name, const int64_t *v, int n)
{
    struct buf *t = &g->tmp;
    unsigned char le[8];
    int64_t dim = n;

    tensor_head(t, name, &dim, 1, ELEM_INT64, (uint64_t)n * 8);
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 8; k++)
            le[k] = (unsigned char)((uint64_t)v[i] >> (8 * k));
        put_raw(t, le, 8);
    }
    field_msg(&g->inits, 5, t);
}

static void init_scalar(struct graph *g, const char *name, float v)
{
    init_floats(g, name, NULL, 0, &v, 1);
}

/* The layer's parameter k as an initializer named LAYER.PARAM. */
static void init_param(struct graph *g, const struct nl_layer *l, int k, char *name, size_t size)
{
    const struct nl_param *p = &l->params[k];
    int64_t dims[4];

    for (int d = 0; d < p->ndim; d++)
        dims[d] = p->dims[d];
    snprintf(name, size, "%s.%s", l->name, p->name);
    init_floats(g, name, dims, p->ndim, g->m->params + l->param_offset + p->offset, p->count);
}

/* ValueInfoProto of a float tensor [batch, dims...]. */
static void value_info(struct buf *out, int field, const char *name, const int64_t *dims, int n)
{
    struct buf vi = {0}, type = {0}, tensor = {0}, shape = {0}, dim = {0};

    field_str(&dim, 2, "batch");
    field_msg(&shape, 1, &dim);
    for (int k = 0; k < n; k++) {
        field_int(&dim, 1, dims[k]);
        field_msg(&shape, 1, &dim);
    }
    field_int(&tensor, 1, ELEM_FLOAT);
    field_msg(&tensor, 2, &shape);
    field_msg(&type, 1, &tensor);
    field_str(&vi, 1, name);
    field_msg(&vi, 2, &type);
    field_msg(out, field, &vi);
    buf_free(&vi);
    buf_free(&type);
    buf_free(&tensor);
    buf_free(&shape);
    buf_free(&dim);
}

/* ---- layers ---- */

/* The name and rank of a layer's input j. */
static const char *input_name(const struct graph *g, const struct nl_layer *l, int j, int *rank)
{
    int src = l->inputs[j];
    *rank = src < 0 ? g->in_rank : g->rank[src];
    return src < 0 ? "input/normalised" : g->names[src];
}

/* A rank-4 view of tensor `name` of shape s: itself when already rank 4, else a Reshape to
 * [batch, c, h, w] written into out (size NL_NAME_MAX + 32). */
static const char *as_rank4(struct graph *g, const char *name, int rank, struct nl_shape s,
                            char *out, size_t size)
{
    char shape_name[NL_NAME_MAX + 48];
    const int64_t dims[4] = {-1, s.c, s.h, s.w};

    if (rank == 4)
        return name;
    snprintf(shape_name, sizeof shape_name, "%s/shape4", name);
    snprintf(out, size, "%s/rank4", name);
    init_int64s(g, shape_name, dims, 4);
    const char *in[2] = {name, shape_name};
    node(g, "Reshape", out, in, 2, out);
    return out;
}

/* kernel_shape, strides and, when padded, pads of a window. */
static void window_attrs(struct graph *g, const struct nl_layer *l, int pool, int padded)
{
    /* A stride of 0 is the kind's default: the window for pools, 1 for convolutions. */
    const int64_t sh = l->sh ? l->sh : pool ? l->kh : 1, sw = l->sw ? l->sw : pool ? l->kw : 1;
    const int64_t kernel[2] = {l->kh, l->kw}, strides[2] = {sh, sw},
                  pads[4] = {l->ph, l->pw, l->ph, l->pw};

    attr_ints(g, "kernel_shape", kernel, 2);
    attr_ints(g, "strides", strides, 2);
    if (padded)
        attr_ints(g, "pads", pads, 4);
}

/* Emits the nodes of layer i. Returns 0, or -1 when its kind has no ONNX form. */
static int emit_layer(struct graph *g, int i)
{
    const struct nl_layer *l = &g->m->layers[i];
    const char *kind = l->ops->kind, *out = l->name;
    char a[NL_NAME_MAX + 48], b[NL_NAME_MAX + 48], c[NL_NAME_MAX + 48], d[NL_NAME_MAX + 48];
    char w[2 * NL_NAME_MAX + 8], bias[2 * NL_NAME_MAX + 8];
    int rank = 4, r0;
    const char *x = input_name(g, l, 0, &r0);

    if (strcmp(kind, "conv") == 0 || strcmp(kind, "gconv") == 0) {
        x = as_rank4(g, x, r0, l->in[0], a, sizeof a);
        init_param(g, l, 0, w, sizeof w);
        const char *in[3] = {x, w, bias};
        if (l->nparams > 1)
            init_param(g, l, 1, bias, sizeof bias);
        window_attrs(g, l, 0, 1);
        attr_int(g, "group", strcmp(kind, "gconv") == 0 && l->groups > 1 ? l->groups : 1);
        node(g, "Conv", out, in, l->nparams > 1 ? 3 : 2, out);
    } else if (strcmp(kind, "dense") == 0) {
        snprintf(a, sizeof a, "%s/flatten", l->name);
        attr_int(g, "axis", 1);
        node1(g, "Flatten", a, x, a);
        init_param(g, l, 0, w, sizeof w);
        const char *in[3] = {a, w, bias};
        if (l->nparams > 1) {
            init_param(g, l, 1, bias, sizeof bias);
        } else {
            const int64_t dims[1] = {l->units};
            snprintf(bias, sizeof bias, "%s/zero_bias", l->name);
            init_zeros(g, bias, dims, 1, (size_t)l->units);
        }
        attr_int(g, "transB", 1);
        node(g, "Gemm", out, in, 3, out);
        rank = 2;
    } else if (strcmp(kind, "maxpool") == 0) {
        x = as_rank4(g, x, r0, l->in[0], a, sizeof a);
        window_attrs(g, l, 1, 1);
        node1(g, "MaxPool", out, x, out);
    } else if (strcmp(kind, "avgpool") == 0) {
        x = as_rank4(g, x, r0, l->in[0], a, sizeof a);
        if (l->ph > 0 || l->pw > 0) {
            /* Zero padding as its own node: the window then divides by its whole size, as
             * count_include_pad = 1 says but some runtimes (OpenCV 4.6) do not do. */
            const int64_t pads[8] = {0, 0, l->ph, l->pw, 0, 0, l->ph, l->pw};
            snprintf(b, sizeof b, "%s/pad", l->name);
            attr_str(g, "mode", "constant");
            attr_ints(g, "pads", pads, 8);
            attr_float(g, "value", 0.0f);
            node1(g, "Pad", b, x, b);
            x = b;
        }
        window_attrs(g, l, 1, 0);
        attr_int(g, "count_include_pad", 1);
        node1(g, "AveragePool", out, x, out);
    } else if (strcmp(kind, "globalavgpool") == 0) {
        x = as_rank4(g, x, r0, l->in[0], a, sizeof a);
        node1(g, "GlobalAveragePool", out, x, out);
    } else if (strcmp(kind, "batchnorm") == 0) {
        char names[4][2 * NL_NAME_MAX + 8];
        const char *in[5] = {x, names[0], names[1], names[2], names[3]};
        for (int k = 0; k < 4; k++)
            init_param(g, l, k, names[k], sizeof names[k]);
        attr_float(g, "epsilon", l->eps > 0.0f ? l->eps : 1e-5f);
        node(g, "BatchNormalization", out, in, 5, out);
        rank = r0;
    } else if (strcmp(kind, "relu") == 0 || strcmp(kind, "tanh") == 0 ||
               strcmp(kind, "sigmoid") == 0) {
        node1(g, kind[0] == 'r' ? "Relu" : kind[0] == 't' ? "Tanh" : "Sigmoid", out, x, out);
        rank = r0;
    } else if (strcmp(kind, "relu6") == 0) {
        attr_float(g, "min", 0.0f);
        attr_float(g, "max", 6.0f);
        node1(g, "Clip", out, x, out);
        rank = r0;
    } else if (strcmp(kind, "leakyrelu") == 0) {
        attr_float(g, "alpha", l->slope);
        node1(g, "LeakyRelu", out, x, out);
        rank = r0;
    } else if (strcmp(kind, "gelu") == 0) {
        /* out = (x * 0.5) * (1 + erf(x * (1 / sqrt 2))), in nnlab's order of operations. */
        char k1[NL_NAME_MAX + 48], k2[NL_NAME_MAX + 48], k3[NL_NAME_MAX + 48];
        snprintf(k1, sizeof k1, "%s/rsqrt2", l->name);
        snprintf(k2, sizeof k2, "%s/one", l->name);
        snprintf(k3, sizeof k3, "%s/half", l->name);
        init_scalar(g, k1, (float)M_SQRT1_2);
        init_scalar(g, k2, 1.0f);
        init_scalar(g, k3, 0.5f);
        snprintf(a, sizeof a, "%s/scaled", l->name);
        snprintf(b, sizeof b, "%s/erf", l->name);
        snprintf(c, sizeof c, "%s/erf1", l->name);
        snprintf(d, sizeof d, "%s/halfx", l->name);
        const char *m1[2] = {x, k1}, *m2[2] = {b, k2}, *m3[2] = {x, k3}, *m4[2] = {d, c};
        node(g, "Mul", a, m1, 2, a);
        node1(g, "Erf", b, a, b);
        node(g, "Add", c, m2, 2, c);
        node(g, "Mul", d, m3, 2, d);
        node(g, "Mul", out, m4, 2, out);
        rank = r0;
    } else if (strcmp(kind, "softmax") == 0) {
        rank = r0;
        if (r0 == 4 && l->in[0].h * l->in[0].w > 1) {
            const int64_t to_last[4] = {0, 2, 3, 1}, back[4] = {0, 3, 1, 2};
            snprintf(a, sizeof a, "%s/nhwc", l->name);
            snprintf(b, sizeof b, "%s/softmax", l->name);
            attr_ints(g, "perm", to_last, 4);
            node1(g, "Transpose", a, x, a);
            attr_int(g, "axis", 3);
            node1(g, "Softmax", b, a, b);
            attr_ints(g, "perm", back, 4);
            node1(g, "Transpose", out, b, out);
        } else {
            attr_int(g, "axis", 1);
            node1(g, "Softmax", out, x, out);
        }
    } else if (strcmp(kind, "add") == 0 || strcmp(kind, "concat") == 0) {
        const char *in[NL_MAX_INPUTS];
        char views[NL_MAX_INPUTS][NL_NAME_MAX + 48];
        int all4 = 0;
        for (int j = 0; j < l->ninputs; j++) {
            int r;
            input_name(g, l, j, &r);
            all4 |= r == 4;
        }
        rank = all4 ? 4 : 2;
        for (int j = 0; j < l->ninputs; j++) {
            int r;
            const char *name = input_name(g, l, j, &r);
            in[j] = all4 ? as_rank4(g, name, r, l->in[j], views[j], sizeof views[j]) : name;
        }
        if (kind[0] == 'c')
            attr_int(g, "axis", 1);
        node(g, kind[0] == 'a' ? "Add" : "Concat", out, in, l->ninputs, out);
    } else if (strcmp(kind, "flatten") == 0) {
        attr_int(g, "axis", 1);
        node1(g, "Flatten", out, x, out);
        rank = 2;
    } else if (strcmp(kind, "dropout") == 0) {
        attr_float(g, "ratio", l->p);
        node1(g, "Dropout", out, x, out);
        rank = r0;
    } else {
        return -1;
    }
    g->rank[i] = rank;
    return 0;
}

/* ---- the file ---- */

static int write_file(const char *path, const struct buf *head, const struct buf *graph,
                      const struct buf *tail, struct nl_error *err)
{
    char tmp[4096];
    struct buf key = {0};

    if (snprintf(tmp, sizeof tmp, "%s.XXXXXX", path) >= (int)sizeof tmp)
        return nl_error_set(err, NL_EINVAL, "%s: path too long", path);
    put_key(&key, 7, WIRE_LEN);
    put_varint(&key, graph->len);
    if (key.oom)
        return nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
    int fd = mkstemp(tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        int rc = nl_error_set(err, NL_EIO, "%s: cannot create: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        buf_free(&key);
        return rc;
    }
    int bad = fwrite(head->p, 1, head->len, f) != head->len ||
              fwrite(key.p, 1, key.len, f) != key.len ||
              fwrite(graph->p, 1, graph->len, f) != graph->len ||
              fwrite(tail->p, 1, tail->len, f) != tail->len;
    buf_free(&key);
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        bad = 1;
    if (fclose(f) != 0)
        bad = 1;
    if (!bad && rename(tmp, path) != 0)
        bad = 1;
    if (bad) {
        int rc = nl_error_set(err, NL_EIO, "%s: cannot write: %s", path, strerror(errno));
        unlink(tmp);
        return rc;
    }
    return 0;
}

static void metadata(struct buf *b, struct buf *tmp, const char *key, const char *value)
{
    field_str(tmp, 1, key);
    field_str(tmp, 2, value);
    field_msg(b, 14, tmp);
}

/* Every tensor of the graph needs its own name. Helper tensors hold '/', which layer names do
 * not; what may clash is a layer named as a fixed tensor or as another layer's parameter
 * (a layer called "conv1.weight" beside conv1). Returns the index of such a layer, or -1;
 * *what the name it clashes with. */
static int name_clash(const struct nl_model *m, const char **what)
{
    static const char *const fixed[] = {"logits",      "probabilities", "prediction", "target.std",
                                        "target.mean", "input.scale",   "input.mean", "input.std"};
    char tensor[2 * NL_NAME_MAX + 8];

    for (int i = 0; i < m->nlayers; i++) {
        const char *name = m->layers[i].name;
        for (size_t k = 0; k < sizeof fixed / sizeof fixed[0]; k++)
            if (strcmp(name, fixed[k]) == 0) {
                *what = fixed[k];
                return i;
            }
        for (int j = 0; j < m->nlayers; j++) {
            const struct nl_layer *l = &m->layers[j];
            size_t len = strlen(l->name);
            if (strncmp(name, l->name, len) != 0 || name[len] != '.')
                continue;
            for (int k = 0; k < l->nparams; k++) {
                snprintf(tensor, sizeof tensor, "%s.%s", l->name, l->params[k].name);
                if (strcmp(name, tensor) == 0) {
                    *what = "a parameter of another layer";
                    return i;
                }
            }
        }
    }
    return -1;
}

int nl_onnx_save(const struct nl_model *m, const struct nl_onnx_opts *o, const char *path,
                 struct nl_error *err)
{
    struct graph g = {.m = m, .in_rank = 4};
    struct buf graph = {0}, head = {0}, tail = {0}, tmp = {0};
    const struct nl_shape s = m->input;
    const int last = m->nlayers - 1;
    int rc = 0;

    if (o->nnorm != s.c || !o->mean || !o->std)
        return nl_error_set(err, NL_EINVAL,
                            "%s: the normalisation has %d channels, the model's input %d", path,
                            o->nnorm, s.c);
    const char *clash_what = NULL;
    int clash = name_clash(m, &clash_what);
    if (clash >= 0)
        return nl_error_set(err, NL_EINVAL,
                            "%s: layer '%s' is named as %s in the ONNX graph ('%s'); rename it",
                            path, m->layers[clash].name, clash_what, m->layers[clash].name);
    g.rank = nl_calloc((size_t)m->nlayers, sizeof *g.rank);
    g.names = nl_calloc((size_t)m->nlayers, sizeof *g.names);
    if (!g.rank || !g.names) {
        rc = nl_error_set(err, NL_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    for (int i = 0; i < m->nlayers; i++)
        g.names[i] = m->layers[i].name;

    /* The input normalisation: (input * scale - mean) / std, per channel. */
    {
        const int64_t cdims[3] = {s.c, 1, 1};
        init_scalar(&g, "input.scale", o->scale);
        init_floats(&g, "input.mean", cdims, 3, o->mean, (size_t)s.c);
        init_floats(&g, "input.std", cdims, 3, o->std, (size_t)s.c);
        const char *mul[2] = {"input", "input.scale"}, *sub[2] = {"input/scaled", "input.mean"},
                   *div[2] = {"input/centred", "input.std"};
        node(&g, "Mul", "input/scaled", mul, 2, "input/scaled");
        node(&g, "Sub", "input/centred", sub, 2, "input/centred");
        node(&g, "Div", "input/normalised", div, 2, "input/normalised");
    }
    for (int i = 0; i < m->nlayers; i++) {
        if (emit_layer(&g, i) < 0) {
            const struct nl_layer *l = &m->layers[i];
            if (l->line > 0)
                rc = nl_error_set(err, NL_EINVAL,
                                  "%s: layer '%s' (line %d): kind '%s' has no ONNX form", path,
                                  l->name, l->line, l->ops->kind);
            else
                rc = nl_error_set(err, NL_EINVAL, "%s: layer '%s': kind '%s' has no ONNX form",
                                  path, l->name, l->ops->kind);
            goto out;
        }
    }
    attr_int(&g, "axis", 1);
    node1(&g, "Flatten", "logits", g.names[last], "logits");
    const char *output = o->regression ? "prediction" : "probabilities";
    if (o->regression) {
        if (m->nclasses != 1 || !(o->target_std > 0) || !isfinite(o->target_mean)) {
            rc = nl_error_set(err, NL_EINVAL,
                              "%s: a regression model needs one output and the target's "
                              "statistics (it has %d outputs)",
                              path, m->nclasses);
            goto out;
        }
        const char *mul[2] = {"logits", "target.std"}, *add[2] = {"logits/scaled", "target.mean"};
        init_scalar(&g, "target.std", (float)o->target_std);
        init_scalar(&g, "target.mean", (float)o->target_mean);
        node(&g, "Mul", "logits/scaled", mul, 2, "logits/scaled");
        node(&g, "Add", "prediction", add, 2, "prediction");
    } else {
        attr_int(&g, "axis", 1);
        node1(&g, "Softmax", "probabilities", "logits", "probabilities");
    }

    /* GraphProto: nodes, name, initializers, doc, input, outputs. */
    put_raw(&graph, g.nodes.p, g.nodes.len);
    buf_free(&g.nodes);
    field_str(&graph, 2, m->spec_origin && *m->spec_origin ? m->spec_origin : "nnlab");
    put_raw(&graph, g.inits.p, g.inits.len);
    if (g.nodes.oom || g.inits.oom || g.tmp.oom || g.attrs.oom)
        graph.oom = 1;
    buf_free(&g.inits);
    if (o->doc)
        field_str(&graph, 10, o->doc);
    {
        const int64_t in_dims[3] = {s.c, s.h, s.w}, out_dims[1] = {m->nclasses};
        value_info(&graph, 11, "input", in_dims, 3);
        value_info(&graph, 12, "logits", out_dims, 1);
        value_info(&graph, 12, output, out_dims, 1);
    }

    /* ModelProto, around the graph. */
    field_int(&head, 1, IR_VERSION);
    field_str(&head, 2, "nnlab");
    field_str(&head, 3, o->producer_version ? o->producer_version : "");
    field_int(&tmp, 2, OPSET);
    field_msg(&tail, 8, &tmp);
    metadata(&tail, &tmp, "nnlab.task", o->regression ? "regression" : "classification");
    metadata(&tail, &tmp, "nnlab.input",
             o->scale != 1.0f
                 ? "float [batch, C, H, W]: pixel values 0-255 in the dataset's channel order "
                   "(RGB or gray); the graph normalises them"
                 : "float [batch, F, 1, 1]: the raw features; the graph standardises them");
    {
        struct buf names = {0};
        for (int k = 0; o->class_names && k < m->nclasses; k++) {
            if (k)
                put_raw(&names, "\n", 1);
            put_raw(&names, o->class_names[k], strlen(o->class_names[k]));
        }
        put_raw(&names, "", 1); /* the terminating NUL, for field_str */
        if (names.oom)
            tail.oom = 1;
        else
            metadata(&tail, &tmp, "nnlab.classes", (const char *)names.p);
        buf_free(&names);
    }
    if (graph.oom || head.oom || tail.oom || tmp.oom) {
        rc = nl_error_set(err, NL_ENOMEM, "%s: out of memory encoding the model", path);
        goto out;
    }
    rc = write_file(path, &head, &graph, &tail, err);
out:
    buf_free(&g.nodes);
    buf_free(&g.inits);
    buf_free(&g.tmp);
    buf_free(&g.attrs);
    buf_free(&graph);
    buf_free(&head);
    buf_free(&tail);
    buf_free(&tmp);
    nl_free(g.rank);
    nl_free(g.names);
    return rc;
}
