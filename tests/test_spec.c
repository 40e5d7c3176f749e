/* Tests of the model spec parser (core/engine/spec.c): the shipped models, every kind and key,
 * wiring with in=, automatic names, comments and line ends, one check per kind of mistake (code,
 * the "ORIGIN:LINE:" prefix and the offending word), unknown-key warnings, and loading from disk.
 */
#include "nnlab/alloc.h"
#include "nnlab/spec.h"

#include "tap.h"

#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

struct warnings {
    int count;
    char text[8][NL_ERR_MAX];
};

static void collect(void *ud, const char *msg)
{
    struct warnings *w = ud;

    if (w->count < 8)
        snprintf(w->text[w->count], sizeof w->text[0], "%s", msg);
    w->count++;
}

/* Parses text with origin "t"; returns the spec or NULL (err filled). */
static struct nl_spec *parse(const char *text, struct warnings *w, struct nl_error *err)
{
    struct nl_spec *s = (struct nl_spec *)1;

    memset(err, 0, sizeof *err);
    if (nl_spec_parse(&s, text, "t", w ? collect : NULL, w, err) < 0) {
        ok(s == NULL, "failed parse leaves *out NULL");
        return NULL;
    }
    return s;
}

static const struct nl_layer *find(const struct nl_spec *s, const char *name)
{
    for (int i = 0; s && i < s->nlayers; i++)
        if (strcmp(s->layers[i].name, name) == 0)
            return &s->layers[i];
    return NULL;
}

static void test_shipped(void)
{
    const char *const *names = nl_spec_shipped_names();
    int n = 0, lenet = 0, mlp = 0;

    for (; names[n]; n++) {
        lenet |= strcmp(names[n], "lenet") == 0;
        mlp |= strcmp(names[n], "mlp") == 0;
    }
    ok(lenet && mlp, "shipped names list lenet and mlp (%d names)", n);
    ok(nl_spec_shipped_names() == names, "shipped names: the same list on every call");
    like(nl_spec_shipped_text("lenet"), "conv1: conv 20 5x5", "shipped text of lenet");
    ok(nl_spec_shipped_text("nope") == NULL, "shipped text of an unknown name is NULL");
    ok(nl_spec_shipped_text(NULL) == NULL, "shipped text of NULL is NULL");
}

static void test_lenet(void)
{
    static const char *const want[] = {"conv1", "pool1", "relu1", "conv2", "pool2",
                                       "relu2", "fc1",   "relu3", "fc2"};
    static const char *const kinds[] = {"conv", "maxpool", "relu", "conv", "maxpool",
                                        "relu", "dense",   "relu", "dense"};
    struct nl_spec *s = NULL;
    struct nl_error err = {0};
    const struct nl_layer *l;

    is_int(nl_spec_load(&s, "lenet", NULL, NULL, &err), 0, "load lenet: %s", err.msg);
    if (!s)
        return;
    is_str(s->origin, "lenet", "lenet: origin is the shipped name");
    is_str(s->text, nl_spec_shipped_text("lenet"), "lenet: text kept as read");
    is_int(s->nlayers, 9, "lenet: 9 layers");
    for (int i = 0; i < s->nlayers && i < 9; i++) {
        is_str(s->layers[i].name, want[i], "lenet layer %d name", i);
        ok(s->layers[i].ops && s->layers[i].ops == nl_layer_kind(kinds[i]),
           "lenet layer %d is a %s", i, kinds[i]);
        is_int(s->layers[i].ninputs, 1, "lenet layer %d has one input", i);
        is_int(s->layers[i].inputs[0], i - 1, "lenet layer %d reads the one before", i);
    }
    l = &s->layers[0];
    is_int(l->line, 3, "conv1 on line 3");
    is_int(l->filters, 20, "conv1: 20 filters");
    ok(l->kh == 5 && l->kw == 5, "conv1: 5x5 window");
    ok(l->sh == 0 && l->sw == 0 && l->ph == 0 && l->pw == 0, "conv1: default stride, no pad");
    ok(l->no_bias == 0 && l->init == NL_INIT_DEFAULT, "conv1: bias, default init");
    l = &s->layers[1];
    ok(l->kh == 2 && l->kw == 2 && l->sh == 0 && l->sw == 0, "pool1: 2x2, default stride");
    is_int(s->layers[2].line, 5, "relu1 on line 5");
    is_int(s->layers[3].filters, 50, "conv2: 50 filters");
    is_int(s->layers[6].units, 500, "fc1: 500 units");
    is_int(s->layers[8].units, NL_UNITS_CLASSES, "fc2: N units");
    is_int(s->layers[8].line, 11, "fc2 on line 11");
    nl_spec_free(s);
}

static void test_mlp(void)
{
    static const char *const want[] = {"fc1", "relu1", "fc2", "relu2", "fc3"};
    struct nl_spec *s = NULL;
    struct nl_error err = {0};

    is_int(nl_spec_load(&s, "mlp", NULL, NULL, &err), 0, "load mlp: %s", err.msg);
    if (!s)
        return;
    is_int(s->nlayers, 5, "mlp: 5 layers");
    for (int i = 0; i < s->nlayers && i < 5; i++)
        is_str(s->layers[i].name, want[i], "mlp layer %d name", i);
    is_int(s->layers[0].units, 512, "mlp fc1: 512 units");
    is_int(s->layers[2].units, 256, "mlp fc2: 256 units");
    is_int(s->layers[4].units, NL_UNITS_CLASSES, "mlp fc3: N units");
    nl_spec_free(s);
}

static void test_every_key(void)
{
    static const char text[] = "c: conv 8 3 stride=2 pad=1 bias=no init=xavier\n"
                               "c2: conv 4 3x5 stride=1x2 pad=0x2 bias=yes init=he in=c\n"
                               "mp: maxpool 3 stride=2 pad=1 in=input\n"
                               "ap: avgpool 2x3 stride=1x2 pad=0x1 in=c2\n"
                               "relu in=mp\n"
                               "tanh\n"
                               "sigmoid in=relu1\n"
                               "flatten\n"
                               "dropout\n"
                               "dropout 0.25\n"
                               "dropout 0\n"
                               "d: dense 10 bias=no init=zero\n"
                               "d2: dense N init=he in=d\n"
                               "d3: dense 1 bias=yes\n";
    struct nl_error err;
    struct nl_spec *s = parse(text, NULL, &err);
    const struct nl_layer *l;

    ok(s != NULL, "every kind with every key parses: %s", err.msg);
    if (!s)
        return;
    is_int(s->nlayers, 14, "every kind: 14 layers");
    l = find(s, "c");
    ok(l && l->filters == 8 && l->kh == 3 && l->kw == 3, "conv 8 3: 8 filters, 3x3");
    ok(l && l->sh == 2 && l->sw == 2 && l->ph == 1 && l->pw == 1, "stride=2 pad=1");
    ok(l && l->no_bias == 1 && l->init == NL_INIT_XAVIER, "bias=no init=xavier");
    ok(l && l->ninputs == 1 && l->inputs[0] == -1, "first layer reads the input");
    l = find(s, "c2");
    ok(l && l->filters == 4 && l->kh == 3 && l->kw == 5, "conv 4 3x5");
    ok(l && l->sh == 1 && l->sw == 2 && l->ph == 0 && l->pw == 2, "stride=1x2 pad=0x2");
    ok(l && l->no_bias == 0 && l->init == NL_INIT_HE, "bias=yes init=he");
    ok(l && l->ninputs == 1 && l->inputs[0] == 0, "in=c");
    l = find(s, "mp");
    ok(l && l->kh == 3 && l->kw == 3 && l->sh == 2 && l->sw == 2 && l->ph == 1 && l->pw == 1,
       "maxpool 3 stride=2 pad=1");
    ok(l && l->ops == nl_layer_kind("maxpool"), "mp is a maxpool");
    ok(l && l->ninputs == 1 && l->inputs[0] == -1, "in=input");
    l = find(s, "ap");
    ok(l && l->kh == 2 && l->kw == 3 && l->sh == 1 && l->sw == 2 && l->ph == 0 && l->pw == 1,
       "avgpool 2x3 stride=1x2 pad=0x1");
    ok(l && l->ops == nl_layer_kind("avgpool"), "ap is an avgpool");
    ok(l && l->inputs[0] == 1, "ap: in=c2");
    l = find(s, "relu1");
    ok(l && l->ops == nl_layer_kind("relu") && l->inputs[0] == 2, "relu1: in=mp");
    l = find(s, "tanh1");
    ok(l && l->ops == nl_layer_kind("tanh") && l->inputs[0] == 4, "tanh1 reads relu1");
    l = find(s, "sigmoid1");
    ok(l && l->ops == nl_layer_kind("sigmoid") && l->inputs[0] == 4,
       "sigmoid1: in= an automatic name");
    l = find(s, "flatten1");
    ok(l && l->ops == nl_layer_kind("flatten") && l->inputs[0] == 6, "flatten1");
    l = find(s, "dropout1");
    is_float(l ? l->p : -1, 0.5, 0, "dropout: default p 0.5");
    l = find(s, "dropout2");
    is_float(l ? l->p : -1, 0.25, 0, "dropout 0.25");
    l = find(s, "dropout3");
    is_float(l ? l->p : -1, 0.0, 0, "dropout 0");
    l = find(s, "d");
    ok(l && l->units == 10 && l->no_bias == 1 && l->init == NL_INIT_ZERO,
       "dense 10 bias=no init=zero");
    ok(l && l->inputs[0] == 10, "d reads dropout3");
    l = find(s, "d2");
    ok(l && l->units == NL_UNITS_CLASSES && l->init == NL_INIT_HE && l->inputs[0] == 11,
       "dense N init=he in=d");
    l = find(s, "d3");
    ok(l && l->units == 1 && l->no_bias == 0 && l->inputs[0] == 12, "dense 1 bias=yes");
    for (int i = 0; i < s->nlayers; i++)
        ok(s->layers[i].out.c == 0 && s->layers[i].nparams == 0 && s->layers[i].param_count == 0 &&
               s->layers[i].frozen == 0,
           "%s: fields past the wiring left zero", s->layers[i].name);
    nl_spec_free(s);
}

/* A kind that reads several inputs, if core/engine/layer.c has one that takes no arguments. */
static void test_multiple_inputs(void)
{
    static const char *const with_args[] = {"conv", "dense", "maxpool", "avgpool", "dropout"};
    const struct nl_layer_ops *multi = NULL;
    char text[256];
    struct nl_error err;
    struct nl_spec *s;

    for (const struct nl_layer_ops *const *k = nl_layer_kinds(); *k && !multi; k++) {
        int plain = (*k)->max_inputs >= 2;
        for (size_t i = 0; i < sizeof with_args / sizeof with_args[0]; i++)
            plain = plain && strcmp((*k)->kind, with_args[i]) != 0;
        if (plain)
            multi = *k;
    }
    if (!multi) {
        diag("no kind reads several inputs; in= with two names checked on errors only");
        return;
    }
    snprintf(text, sizeof text, "a: dense 4\nb: dense 4 in=input\n%s in=a,b,input\n", multi->kind);
    s = parse(text, NULL, &err);
    ok(s != NULL, "%s in=a,b,input: %s", multi->kind, err.msg);
    if (s) {
        const struct nl_layer *l = &s->layers[2];
        ok(l->ninputs == 3 && l->inputs[0] == 0 && l->inputs[1] == 1 && l->inputs[2] == -1,
           "in=a,b,input wired to 0, 1, -1");
        nl_spec_free(s);
    }
    if (multi->min_inputs >= 2) {
        snprintf(text, sizeof text, "dense 4\n%s\n", multi->kind);
        ok(parse(text, NULL, &err) == NULL, "%s without in=", multi->kind);
        like(err.msg, "t:2: ", "%s without in=: line", multi->kind);
        like(err.msg, "with in=", "%s without in=: says to name inputs", multi->kind);
    }
}

static void test_names(void)
{
    struct nl_error err;
    struct nl_spec *s;

    /* relu1 is taken by a later explicit name, so the unnamed relus are relu2, relu3, relu4. */
    s = parse("relu\nrelu\nrelu1: tanh\nrelu\nconv 2 3\nconv2: dense 3\nconv 2 3\n", NULL, &err);
    ok(s != NULL, "automatic names: %s", err.msg);
    if (s) {
        is_str(s->layers[0].name, "relu2", "first unnamed relu skips the taken relu1");
        is_str(s->layers[1].name, "relu3", "second unnamed relu");
        is_str(s->layers[2].name, "relu1", "explicit relu1 kept");
        is_str(s->layers[3].name, "relu4", "third unnamed relu");
        is_str(s->layers[4].name, "conv1", "first unnamed conv");
        is_str(s->layers[6].name, "conv3", "second unnamed conv skips conv2");
        nl_spec_free(s);
    }

    s = parse("Conv_A-1: conv 2 3\n_x: relu\n"
              "n2345678901234567890123456789012345678901234567: relu\n",
              NULL, &err);
    ok(s != NULL, "names with capitals, '_', '-', digits; 47 characters: %s", err.msg);
    if (s) {
        is_str(s->layers[0].name, "Conv_A-1", "name Conv_A-1");
        is_str(s->layers[1].name, "_x", "name _x");
        is_int((long long)strlen(s->layers[2].name), NL_NAME_MAX - 1, "longest name kept");
        nl_spec_free(s);
    }

    /* PyTorch module paths: dotted, with digit segments; in= takes them. */
    s = parse("layer1.0.conv1: conv 2 3 pad=1\nlayer1.0.bn1: batchnorm\n"
              "features.17.conv.0.2: relu\nx: add in=layer1.0.conv1,features.17.conv.0.2\n",
              NULL, &err);
    ok(s != NULL, "dotted names (PyTorch module paths): %s", err.msg);
    if (s) {
        is_str(s->layers[0].name, "layer1.0.conv1", "name layer1.0.conv1 kept as written");
        is_str(s->layers[2].name, "features.17.conv.0.2", "name features.17.conv.0.2");
        ok(s->layers[3].ninputs == 2 && s->layers[3].inputs[0] == 0 && s->layers[3].inputs[1] == 2,
           "in= resolves dotted names");
        nl_spec_free(s);
    }

    s = parse("c:conv 2 3\nd :dense 3\ne : relu\n", NULL, &err);
    ok(s != NULL, "name with or without spaces around ':': %s", err.msg);
    if (s) {
        ok(strcmp(s->layers[0].name, "c") == 0 && strcmp(s->layers[1].name, "d") == 0 &&
               strcmp(s->layers[2].name, "e") == 0,
           "names c, d, e");
        nl_spec_free(s);
    }
}

static void test_layout(void)
{
    static const char text[] = "\xef\xbb\xbf# a comment line\r\n"
                               "\r\n"
                               "   \t \r\n"
                               "\tc1:\tconv\t2  3x3\t# trailing comment\r\n"
                               "  relu#no space before the comment\r\n"
                               "#\r\n"
                               "dense 3 \t";
    struct nl_error err;
    struct nl_spec *s = parse(text, NULL, &err);

    ok(s != NULL, "comments, CRLF, tabs, BOM, no final newline: %s", err.msg);
    if (!s)
        return;
    is_int(s->nlayers, 3, "layout: 3 layers");
    is_str(s->layers[0].name, "c1", "layout: c1");
    is_int(s->layers[0].line, 4, "layout: c1 on line 4");
    ok(s->layers[0].filters == 2 && s->layers[0].kh == 3 && s->layers[0].kw == 3,
       "layout: conv 2 3x3");
    is_str(s->layers[1].name, "relu1", "layout: relu1");
    is_int(s->layers[1].line, 5, "layout: relu1 on line 5");
    is_int(s->layers[2].units, 3, "layout: dense 3");
    is_int(s->layers[2].line, 7, "layout: dense on line 7");
    nl_spec_free(s);
}

static void test_large(void)
{
    enum { N = 3000, LONG = 100000 };
    size_t len = 0, cap = (size_t)N * 8 + 2 * LONG + 64;
    char *text = malloc(cap);
    struct nl_error err;
    struct nl_spec *s;

    if (!text) {
        ok(0, "allocating a large spec");
        return;
    }
    memset(text, ' ', LONG);
    len = LONG; /* a line of spaces, then one comment line longer than any buffer */
    text[len++] = '\n';
    text[len++] = '#';
    memset(text + len, 'x', LONG);
    len += LONG;
    text[len++] = '\n';
    for (int i = 0; i < N; i++)
        len += (size_t)snprintf(text + len, cap - len, "relu\n");
    text[len] = '\0';
    s = parse(text, NULL, &err);
    ok(s != NULL, "%d layers after long lines: %s", N, err.msg);
    if (s) {
        is_int(s->nlayers, N, "all layers kept");
        is_str(s->layers[N - 1].name, "relu3000", "the last is relu3000");
        is_int(s->layers[N - 1].inputs[0], N - 2, "and reads relu2999");
        is_int(s->layers[N - 1].line, N + 2, "on line %d", N + 2);
        nl_spec_free(s);
    }
    free(text);
}

/* Checks that text fails with NL_EINVAL and a message holding "t:LINE:" and word. */
static void check_error(const char *text, int line, const char *word)
{
    struct nl_error err;
    char where[32], shown[80];
    size_t n = 0;

    /* The text on one line, for the TAP description. */
    for (const char *c = text; *c && n + 3 < sizeof shown; c++) {
        if (*c == '\n') {
            shown[n++] = '\\';
            shown[n++] = 'n';
        } else {
            shown[n++] = (unsigned char)*c < 0x20 ? '?' : *c;
        }
    }
    shown[n] = '\0';
    snprintf(where, sizeof where, "t:%d: ", line);
    ok(parse(text, NULL, &err) == NULL, "rejected: %s", shown);
    is_int(err.code, NL_EINVAL, "  code NL_EINVAL");
    like(err.msg, where, "  message names %s", where);
    like(err.msg, word, "  message says %s", word);
}

static void test_errors(void)
{
    char text[256];
    struct nl_error err;

    check_error("relu\nconv3d 20 5x5\n", 2, "unknown kind 'conv3d' (known: ");
    check_error("conv3d 20 5x5\n", 1, "conv, dense");
    check_error("Conv 20 5x5\n", 1, "unknown kind 'Conv'");
    check_error("conv\n", 1, "conv needs a filter count and a window, e.g. 'conv 20 5x5'");
    check_error("conv 20\n", 1, "conv needs a filter count and a window");
    check_error("conv 20 x5\n", 1, "bad number 'x5' for the window");
    check_error("conv 20 5x\n", 1, "bad number '5x' for the window");
    check_error("conv 20 5x5x5\n", 1, "'5x5x5'");
    check_error("conv 20 0x5\n", 1, "window '0x5' is less than 1");
    check_error("conv twenty 5\n", 1, "bad number 'twenty' for the filter count");
    check_error("conv 0 5\n", 1, "filter count '0' is less than 1");
    check_error("conv -3 5\n", 1, "bad number '-3' for the filter count");
    check_error("conv 99999999999 5\n", 1, "filter count '99999999999' is too large");
    check_error("conv 20 5x5 7\n", 1, "extra argument '7'");
    check_error("relu\n\nrelu 3\n", 3, "extra argument '3': relu takes no arguments");
    check_error("dense\n", 1, "dense needs a unit count");
    check_error("dense 0\n", 1, "unit count '0' is less than 1");
    check_error("dense n\n", 1, "bad number 'n' for the unit count");
    check_error("dense 10 20\n", 1, "extra argument '20'");
    check_error("maxpool\n", 1, "maxpool needs a window, e.g. 'maxpool 2'");
    check_error("avgpool 2x\n", 1, "bad number '2x' for the window");
    check_error("dropout 1.5\n", 1, "dropout probability 1.5 not in [0, 1)");
    check_error("dropout 1\n", 1, "dropout probability 1 not in [0, 1)");
    check_error("dropout -0.1\n", 1, "dropout probability -0.1 not in [0, 1)");
    check_error("dropout 0,5\n", 1, "bad number '0,5' for the dropout probability");
    check_error("dropout .\n", 1, "bad number '.'");
    check_error("dropout 0.5 0.2\n", 1, "extra argument '0.2'");

    check_error("# x\nconv1: conv 2 3\nconv1: relu\n", 3, "name 'conv1' already used on line 2");
    check_error("relu\nrelu1: relu\nrelu1: tanh\n", 3, "name 'relu1' already used on line 2");
    check_error("1a: relu\n", 1, "invalid name '1a'");
    check_error(".a: relu\n", 1, "invalid name '.a'");
    check_error("a.: relu\n", 1, "invalid name 'a.'");
    check_error("a..b: relu\n", 1, "invalid name 'a..b'");
    check_error("a.b/c: relu\n", 1, "invalid name 'a.b/c'");
    check_error("a.b: relu\na.b: tanh\n", 2, "name 'a.b' already used on line 1");
    check_error("a.b: relu\nrelu in=a.c\n", 2, "in=: no layer named 'a.c'");
    check_error(": relu\n", 1, "missing name before ':'");
    check_error("input: relu\n", 1, "name 'input' is reserved");
    check_error("n234567890123456789012345678901234567890123456789: relu\n", 1,
                "is longer than 47 characters");
    check_error("relu\nfc1:\n", 2, "missing a layer kind after 'fc1:'");
    check_error("my layer: relu\n", 1, "unexpected ':'");
    check_error("relu in=a:b\n", 1, "unexpected ':'");

    check_error("relu\nrelu\nrelu\nrelu\nrelu in=foo\n", 5,
                "in=: no layer named 'foo' before "
                "line 5");
    check_error("relu in=later\nlater: relu\n", 1, "'later' is on line 2");
    check_error("me: relu in=me\n", 1, "'me' cannot read itself");
    check_error("relu in=input,\n", 1, "empty name in 'in=input,'");
    check_error("relu in=,input\n", 1, "empty name");
    check_error("relu in=input,input\n", 1, "relu takes 1 input, in= names 2");
    snprintf(text, sizeof text, "relu in=input");
    for (int i = 0; i < NL_MAX_INPUTS; i++)
        strcat(text, ",input");
    check_error(text, 1, "in= names more than 4 layers");

    check_error("conv 2 3 stride=\n", 1, "empty value for key 'stride'");
    check_error("conv 2 3 =2\n", 1, "space around '='");
    check_error("conv 2 3 stride = 2\n", 1, "space around '='");
    check_error("conv 2 3 stride=0\n", 1, "stride '0' is less than 1");
    check_error("conv 2 3 stride=ax2\n", 1, "bad number 'ax2' for the stride");
    check_error("conv 2 3 pad=-1\n", 1, "bad number '-1' for the pad");
    check_error("conv 2 3 bias=maybe\n", 1, "bad value 'maybe' for bias (yes or no)");
    check_error("dense 2 init=lecun\n", 1, "bad value 'lecun' for init (he, xavier or zero)");
    check_error("maxpool 2 stride=1 stride=2\n", 1, "key 'stride' given twice");
    check_error("conv 2 stride=2 3\n", 1, "argument '3' after key=value options");
    check_error("relu\nrelu foo=1 2\n", 2, "argument '2' after key=value");

    /* Quoted text is clipped; control characters are not copied into messages. */
    check_error("conv3dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd\n", 1,
                "dddd...' (known: ");
    check_error("con\x01v\n", 1, "unknown kind 'con?v'");

    ok(parse("", NULL, &err) == NULL, "empty text rejected");
    is_str(err.msg, "t: no layers", "empty text: 't: no layers'");
    ok(parse("# nothing\n\n   \n", NULL, &err) == NULL, "only comments rejected");
    is_str(err.msg, "t: no layers", "only comments: 't: no layers'");
    is_int(err.code, NL_EINVAL, "no layers: NL_EINVAL");
    {
        struct nl_spec *s = (struct nl_spec *)1;
        is_int(nl_spec_parse(&s, NULL, "x", NULL, NULL, &err), NL_EINVAL, "NULL text");
        ok(s == NULL, "NULL text: *out NULL");
        is_int(nl_spec_parse(&s, "relu", NULL, NULL, NULL, NULL), 0, "NULL origin, NULL err");
        ok(s && s->nlayers == 1 && s->origin && s->origin[0], "NULL origin: a placeholder");
        nl_spec_free(s);
        is_int(nl_spec_parse(&s, "relu 1", NULL, NULL, NULL, NULL), NL_EINVAL,
               "an error with NULL err still returns its code");
    }
}

static void test_warnings(void)
{
    struct warnings w = {0};
    struct nl_error err;
    struct nl_spec *s;

    s = parse("conv 2 3 foo=1 stride=2\n"
              "# comment\n"
              "dense 3 stride=2 pad=1 bias=no\n"
              "relu init=he in=conv1\n",
              &w, &err);
    ok(s != NULL, "unknown keys are not errors: %s", err.msg);
    is_int(w.count, 3, "three warnings: one a line");
    is_str(w.text[0], "t:1: unknown key 'foo' for conv (ignored)", "warning for foo on conv");
    is_str(w.text[1], "t:3: 2 unknown keys for dense, the first 'stride' (ignored)",
           "one warning for stride and pad on dense, with the count");
    is_str(w.text[2], "t:4: unknown key 'init' for relu (ignored)", "warning for init on relu");
    if (s) {
        ok(s->layers[0].sh == 2 && s->layers[1].sh == 0 && s->layers[1].no_bias == 1,
           "known keys still applied; ignored ones not");
        is_int(s->layers[2].inputs[0], 0, "in= on relu applied");
        nl_spec_free(s);
    }
    /* A million unknown keys on one line: one warning, not a million. */
    {
        const size_t n = 1000000;
        char *text = malloc(16 + 4 * n), *p = text;
        memcpy(p, "dense 3", 7);
        p += 7;
        for (size_t i = 0; i < n; i++) {
            memcpy(p, " x=1", 4);
            p += 4;
        }
        *p = '\0';
        struct warnings w2 = {0};
        s = parse(text, &w2, &err);
        ok(s != NULL, "a line of a million unknown keys parses");
        is_int(w2.count, 1, "with one warning");
        is_str(w2.text[0], "t:1: 1000000 unknown keys for dense, the first 'x' (ignored)",
               "that counts them");
        nl_spec_free(s);
        free(text);
    }
    s = parse("conv 2 3 foo=1\n", NULL, &err);
    ok(s != NULL, "unknown key without a warning callback");
    nl_spec_free(s);
    nl_spec_free(NULL);
    ok(1, "nl_spec_free(NULL)");
}

static int write_file(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    int good = f && fwrite(text, 1, len, f) == len;

    if (f && fclose(f) != 0)
        good = 0;
    return good;
}

static void test_load(void)
{
    const char *tmp = getenv("TMPDIR");
    char dir[256], path[512], cwd[4096], msg[NL_ERR_MAX + 64];
    struct nl_spec *s = NULL;
    struct nl_error err = {0};
    struct warnings w = {0};
    const char *small = "c: conv 4 3 bar=1\r\nflatten\ndense N\n", *bad = "relu\nconv 2\n";
    static const char nul[] = "relu\n\0dense 3\n";

    snprintf(dir, sizeof dir, "%s/nnlab-test-spec-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir) || !getcwd(cwd, sizeof cwd)) {
        ok(0, "making a temporary directory");
        return;
    }
    snprintf(path, sizeof path, "%s/small.spec", dir);
    ok(write_file(path, small, strlen(small)), "wrote %s", path);
    is_int(nl_spec_load(&s, path, collect, &w, &err), 0, "load a file: %s", err.msg);
    if (s) {
        is_str(s->origin, path, "origin is the path");
        is_int(s->nlayers, 3, "file: 3 layers");
        is_int(s->layers[2].units, NL_UNITS_CLASSES, "file: dense N");
        nl_spec_free(s);
        s = NULL;
    }
    snprintf(msg, sizeof msg, "%s:1: unknown key 'bar' for conv (ignored)", path);
    is_str(w.text[0], msg, "warnings from a file name its path");

    snprintf(path, sizeof path, "%s/bad.spec", dir);
    ok(write_file(path, bad, strlen(bad)), "wrote %s", path);
    is_int(nl_spec_load(&s, path, NULL, NULL, &err), NL_EINVAL, "bad file: NL_EINVAL");
    snprintf(msg, sizeof msg, "%s:2: conv needs", path);
    like(err.msg, msg, "bad file: error names PATH:LINE");
    ok(s == NULL, "bad file: *out NULL");

    snprintf(path, sizeof path, "%s/nul.spec", dir);
    ok(write_file(path, nul, sizeof nul - 1), "wrote %s", path);
    is_int(nl_spec_load(&s, path, NULL, NULL, &err), NL_EFORMAT, "NUL byte: NL_EFORMAT");
    like(err.msg, "NUL byte", "NUL byte: said so");

    /* Without a '/', an existing file comes before a shipped model of the same name. */
    ok(chdir(dir) == 0, "chdir to %s", dir);
    ok(write_file("lenet", "dense 7\n", 8), "wrote ./lenet");
    is_int(nl_spec_load(&s, "lenet", NULL, NULL, &err), 0, "load ./lenet: %s", err.msg);
    ok(s && s->nlayers == 1 && s->layers[0].units == 7, "the file ./lenet wins");
    ok(s && strcmp(s->origin, "lenet") == 0, "origin lenet");
    nl_spec_free(s);
    s = NULL;
    is_int(nl_spec_load(&s, "bad.spec", NULL, NULL, &err), NL_EINVAL, "relative file read");
    like(err.msg, "bad.spec:2: ", "relative file: error names it");
    ok(mkdir("mlp", 0700) == 0, "made a directory ./mlp");
    is_int(nl_spec_load(&s, "mlp", NULL, NULL, &err), 0, "a directory ./mlp: shipped mlp used");
    ok(s && s->nlayers == 5, "shipped mlp");
    nl_spec_free(s);
    s = NULL;
    is_int(nl_spec_load(&s, "./mlp", NULL, NULL, &err), NL_EIO, "./mlp, a directory: NL_EIO");
    like(err.msg, "./mlp: Is a directory", "directory: said so");
    ok(chdir(cwd) == 0, "chdir back");

    snprintf(path, sizeof path, "%s/missing.spec", dir);
    is_int(nl_spec_load(&s, path, NULL, NULL, &err), NL_ENOENT, "missing path: NL_ENOENT");
    snprintf(msg, sizeof msg, "%s: No such file or directory", path);
    is_str(err.msg, msg, "missing path: PATH: No such file or directory");
    is_int(nl_spec_load(&s, "models/none", NULL, NULL, &err), NL_ENOENT,
           "a relative path with '/' is a path");
    is_str(err.msg, "models/none: No such file or directory", "relative path message");

    is_int(nl_spec_load(&s, "foo", NULL, NULL, &err), NL_ENOENT, "unknown name: NL_ENOENT");
    is_str(err.msg,
           "unknown model 'foo': not a file, and not a shipped model (embedbag, lenet, mlp, "
           "mobilenet-tiny, mobilenet_v2, resnet18, resnet8, textcnn)",
           "unknown name message");
    ok(s == NULL, "unknown name: *out NULL");
    is_int(nl_spec_load(&s, "", NULL, NULL, &err), NL_EINVAL, "empty name: NL_EINVAL");

    snprintf(path, sizeof path, "%s/small.spec", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/bad.spec", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/nul.spec", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/lenet", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/mlp", dir);
    rmdir(path);
    rmdir(dir);
}

int main(void)
{
    test_shipped();
    test_lenet();
    test_mlp();
    test_every_key();
    test_multiple_inputs();
    test_names();
    test_layout();
    test_large();
    test_errors();
    test_warnings();
    test_load();
    return done_testing();
}
