/* The payload codecs of net/proto.h, whose header comment tables every frame. */
#include "proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnlab/alloc.h"

int nl_setup_encode(const struct nl_setup *s, char **out, size_t *len, struct nl_error *err)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);

    if (!f)
        return nl_error_set(err, NL_ENOMEM, "out of memory for a worker's setup");
    /* The run's settings from their table, then what only a member needs. */
    struct nl_train_opts o = s->o;
    o.bf16 = s->bf16;
    fprintf(f, "rank %d\nsize %d\n", s->rank, s->size);
    for (int i = 0; i < nl_nsettings; i++) {
        char value[192];
        if (nl_setting_format(&nl_settings[i], &o, value, sizeof value))
            fprintf(f, "%s %s\n", nl_settings[i].name, value);
    }
    fprintf(f, "plaintext %d\ntimeout %d\nregression %d\n", s->plaintext, s->timeout_ms,
            s->regression);
    for (int e = 0; e < s->nwatched; e++)
        fprintf(f, "watched %a\n", s->watched[e]);
    fprintf(f, "generation %d\nstart %ld\nstate %d\nheartbeat %d\n", s->generation, s->start,
            s->has_state, s->heartbeat_ms);
    /* One frozen layer a line: names are identifiers, and lines are short. */
    for (const char *name = s->frozen; name && *name;) {
        size_t l = strcspn(name, ",");
        fprintf(f, "frozen %.*s\n", (int)l, name);
        name += l + (name[l] == ',');
    }
    fprintf(f, "ntrain %u\nshape %d %d %d\nclasses %d\ndtype %d\nhash %s\n", s->ntrain, s->shape.c,
            s->shape.h, s->shape.w, s->nclasses, s->dtype, s->data_hash);
    if (s->vocab > 0)
        fprintf(f, "vocab %d\n", s->vocab);
    if (s->embed_columns > 0)
        fprintf(f, "embed %d %d\n", s->embed_columns, s->embed_rows);
    for (int i = 0; i < s->nnorm; i++)
        fprintf(f, "norm %a %a\n", (double)s->mean[i], (double)s->std[i]);
    for (int i = 0; i < s->size; i++)
        fprintf(f, "member %s %s %d\n", s->members[i].name, s->members[i].addr, s->members[i].port);
    fprintf(f, "spec\n%s", s->spec);
    if (fclose(f) != 0) {
        free(buf);
        return nl_error_set(err, NL_ENOMEM, "out of memory for a worker's setup");
    }
    *out = nl_malloc(n + 1);
    if (!*out) {
        free(buf);
        return nl_error_set(err, NL_ENOMEM, "out of memory for a worker's setup");
    }
    memcpy(*out, buf, n + 1);
    *len = n;
    free(buf);
    return 0;
}

void nl_setup_release(struct nl_setup *s)
{
    nl_free(s->members);
    nl_free(s->spec);
    nl_free(s->frozen);
    nl_free(s->watched);
    s->members = NULL;
    s->spec = NULL;
    s->frozen = NULL;
    s->watched = NULL;
    s->nwatched = 0;
}

/* Appends ",name" (or "name") to *list. */
static int append_name(char **list, const char *name)
{
    size_t old = *list ? strlen(*list) : 0, n = strlen(name);
    char *l = nl_realloc(*list, old + n + 2);
    if (!l)
        return -1;
    if (old)
        l[old++] = ',';
    memcpy(l + old, name, n + 1);
    *list = l;
    return 0;
}

int nl_setup_decode(struct nl_setup *s, const char *text, size_t len, struct nl_error *err)
{
    const char *p = text, *end = text + len;
    int line = 0, nmembers = 0;
    char key[32], a[80], b[80], c[80];
    const struct nl_setting *f;

    memset(s, 0, sizeof *s);
    nl_train_defaults(&s->o);
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
        char buf[256];
        line++;
        if (l >= sizeof buf)
            goto bad;
        memcpy(buf, p, l);
        buf[l] = '\0';
        p += l + (nl ? 1 : 0);
        if (strcmp(buf, "spec") == 0) {
            s->spec = nl_malloc((size_t)(end - p) + 1);
            if (!s->spec)
                return nl_error_set(err, NL_ENOMEM, "out of memory for the setup");
            memcpy(s->spec, p, (size_t)(end - p));
            s->spec[end - p] = '\0';
            break;
        }
        a[0] = b[0] = c[0] = '\0';
        int got = sscanf(buf, "%31s %79s %79s %79s", key, a, b, c);
        if (got < 2)
            goto bad;
        if (strcmp(key, "rank") == 0) {
            s->rank = atoi(a);
        } else if (strcmp(key, "size") == 0) {
            s->size = atoi(a);
            if (s->size < 1 || s->size > 4096 || s->members)
                goto bad;
            s->members = nl_calloc((size_t)s->size, sizeof *s->members);
            if (!s->members)
                return nl_error_set(err, NL_ENOMEM, "out of memory for the setup");
        } else if ((f = nl_setting_find(key)) != NULL) {
            if (got != 2 || nl_setting_parse(f, &s->o, a, err) < 0)
                goto bad;
        } else if (strcmp(key, "watched") == 0) {
            /* One a line, in epoch order; no run has more epochs than an int counts. */
            if (s->nwatched >= 1 << 24)
                goto bad;
            double *w = nl_realloc(s->watched, (size_t)(s->nwatched + 1) * sizeof *w);
            if (!w) {
                nl_setup_release(s);
                return nl_error_set(err, NL_ENOMEM, "out of memory for the setup");
            }
            s->watched = w;
            s->watched[s->nwatched++] = strtod(a, NULL);
        } else if (strcmp(key, "frozen") == 0) {
            if (append_name(&s->frozen, a) < 0)
                return nl_error_set(err, NL_ENOMEM, "out of memory for the setup");
        } else if (strcmp(key, "plaintext") == 0) {
            s->plaintext = atoi(a) != 0;
        } else if (strcmp(key, "timeout") == 0) {
            s->timeout_ms = atoi(a);
        } else if (strcmp(key, "regression") == 0) {
            s->regression = atoi(a) != 0;
        } else if (strcmp(key, "generation") == 0) {
            s->generation = atoi(a);
        } else if (strcmp(key, "start") == 0) {
            s->start = strtol(a, NULL, 10);
        } else if (strcmp(key, "state") == 0) {
            s->has_state = atoi(a);
        } else if (strcmp(key, "heartbeat") == 0) {
            s->heartbeat_ms = atoi(a);
        } else if (strcmp(key, "ntrain") == 0) {
            s->ntrain = (uint32_t)strtoul(a, NULL, 10);
        } else if (strcmp(key, "shape") == 0 && got == 4) {
            s->shape = (struct nl_shape){atoi(a), atoi(b), atoi(c)};
        } else if (strcmp(key, "classes") == 0) {
            s->nclasses = atoi(a);
        } else if (strcmp(key, "vocab") == 0) {
            s->vocab = atoi(a);
            if (s->vocab < 0)
                goto bad;
        } else if (strcmp(key, "embed") == 0 && got >= 3) {
            s->embed_columns = atoi(a);
            s->embed_rows = atoi(b);
            if (s->embed_columns < 1 || s->embed_rows < 2 || s->embed_rows > (1 << 24))
                goto bad;
        } else if (strcmp(key, "dtype") == 0) {
            s->dtype = atoi(a);
        } else if (strcmp(key, "hash") == 0) {
            snprintf(s->data_hash, sizeof s->data_hash, "%s", a);
        } else if (strcmp(key, "norm") == 0 && got >= 3) {
            if (s->nnorm >= NL_PROTO_MAX_NORM)
                goto bad;
            s->mean[s->nnorm] = strtof(a, NULL);
            s->std[s->nnorm++] = strtof(b, NULL);
        } else if (strcmp(key, "member") == 0 && got == 4) {
            if (!s->members || nmembers >= s->size)
                goto bad;
            struct nl_member *m = &s->members[nmembers++];
            snprintf(m->name, sizeof m->name, "%s", a);
            snprintf(m->addr, sizeof m->addr, "%s", b);
            m->port = atoi(c);
        } else {
            goto bad;
        }
    }
    if (!s->spec || !s->members || nmembers != s->size || s->rank < 0 || s->rank >= s->size ||
        s->o.batch < 1 || s->o.epochs < 1 || s->ntrain == 0 ||
        s->nclasses < (s->regression ? 1 : 2) || (unsigned)s->o.loss > NL_LOSS_HUBER ||
        s->shape.c < 1 || s->shape.h < 1 || s->shape.w < 1 || (s->dtype != 0 && s->dtype != 1) ||
        s->nnorm != s->shape.c || s->start < 0 || s->generation < 0 || s->heartbeat_ms < 0) {
        nl_setup_release(s);
        return nl_error_set(err, NL_EFORMAT, "the driver's setup is incomplete");
    }
    s->bf16 = s->o.bf16;
    return 0;
bad:
    nl_setup_release(s);
    return nl_error_set(err, NL_EFORMAT, "the driver's setup: line %d is not understood", line);
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void putd(unsigned char *p, double d)
{
    uint64_t v;
    memcpy(&v, &d, sizeof v);
    put64(p, v);
}

static double getd(const unsigned char *p)
{
    uint64_t v = get64(p);
    double d;
    memcpy(&d, &v, sizeof d);
    return d;
}

void nl_metric_encode(unsigned char out[NL_METRIC_SIZE], const struct nl_metric *m)
{
    put64(out, (uint64_t)(uint32_t)m->epoch | (uint64_t)(uint32_t)m->iter << 32);
    put64(out + 8, (uint64_t)(uint32_t)m->samples | (uint64_t)(uint32_t)m->correct << 32);
    putd(out + 16, m->loss_sum);
    putd(out + 24, m->compute_seconds);
    putd(out + 32, m->comm_seconds);
    put64(out + 40, m->bytes_sent);
}

void nl_metric_decode(struct nl_metric *m, const unsigned char in[NL_METRIC_SIZE])
{
    uint64_t a = get64(in), b = get64(in + 8);
    m->epoch = (int32_t)(uint32_t)a;
    m->iter = (int32_t)(uint32_t)(a >> 32);
    m->samples = (int32_t)(uint32_t)b;
    m->correct = (int32_t)(uint32_t)(b >> 32);
    m->loss_sum = getd(in + 16);
    m->compute_seconds = getd(in + 24);
    m->comm_seconds = getd(in + 32);
    m->bytes_sent = get64(in + 40);
}

void nl_overlap_encode(unsigned char out[NL_OVERLAP_SIZE], const struct nl_overlap_choice *c)
{
    put64(out, (uint64_t)c->step);
    putd(out + 8, c->sync_seconds);
    putd(out + 16, c->overlap_seconds);
    put64(out + 24, (uint64_t)(c->overlapped != 0));
}

void nl_overlap_decode(const unsigned char in[NL_OVERLAP_SIZE], struct nl_overlap_choice *c)
{
    c->step = (long)(int64_t)get64(in);
    c->sync_seconds = getd(in + 8);
    c->overlap_seconds = getd(in + 16);
    c->overlapped = get64(in + 24) != 0;
}

void nl_judge_encode(unsigned char out[NL_JUDGE_SIZE], int epoch, double watched)
{
    put64(out, (uint64_t)(uint32_t)epoch);
    putd(out + 8, watched);
}

void nl_judge_decode(const unsigned char in[NL_JUDGE_SIZE], int *epoch, double *watched)
{
    *epoch = (int)(int32_t)(uint32_t)get64(in);
    *watched = getd(in + 8);
}

void nl_state_head_encode(unsigned char out[NL_STATE_HEADER], const struct nl_state_head *h)
{
    put64(out, h->lo);
    put64(out + 8, h->hi);
    put64(out + 16, h->copies);
    put64(out + 24, h->step);
    put64(out + 32, h->step2);
}

void nl_state_head_decode(struct nl_state_head *h, const unsigned char in[NL_STATE_HEADER])
{
    h->lo = get64(in);
    h->hi = get64(in + 8);
    h->copies = get64(in + 16);
    h->step = get64(in + 24);
    h->step2 = get64(in + 32);
}

size_t nl_state_size(size_t own, int nstate, int copies)
{
    return NL_STATE_HEADER + (size_t)copies * own * (size_t)(1 + nstate) * sizeof(float);
}

size_t nl_setup_sample_bytes(const struct nl_setup *s)
{
    return nl_shape_size(s->shape) * (s->dtype == NL_U8 ? 1 : sizeof(float));
}

int nl_listen_encode(char out[NL_LISTEN_MAX], int port, long pid, const char *addr)
{
    return snprintf(out, NL_LISTEN_MAX, "%d %ld %s", port, pid, addr ? addr : "");
}

int nl_listen_decode(const void *payload, size_t len, int *port, long *pid, char addr[64])
{
    char text[NL_LISTEN_MAX];
    if (len >= sizeof text)
        return NL_EFORMAT;
    memcpy(text, payload, len);
    text[len] = '\0';
    addr[0] = '\0';
    *port = 0;
    *pid = 0;
    if (sscanf(text, "%d %ld %63s", port, pid, addr) < 2 || *port < 1 || *port > 65535 || *pid < 1)
        return NL_EFORMAT;
    return 0;
}

int nl_fault_encode(char *out, size_t cap, long done, const char *why)
{
    int k = snprintf(out, cap, "%ld %.300s", done, why);
    return k < (int)cap ? k : 0;
}

void nl_fault_decode(const void *payload, size_t len, long *done, char *msg, size_t msg_cap)
{
    char text[NL_ERR_MAX + 32];
    const size_t l = len < sizeof text - 1 ? len : sizeof text - 1;
    memcpy(text, payload, l);
    text[l] = '\0';
    char *end;
    *done = strtol(text, &end, 10);
    snprintf(msg, msg_cap, "%s", *end == ' ' ? end + 1 : end);
}

int nl_have_decode(const void *payload, size_t len, int *have)
{
    if (len != 1)
        return NL_EFORMAT;
    *have = *(const unsigned char *)payload != 0;
    return 0;
}

int nl_state_encode_slice(unsigned char **out, size_t *len, size_t lo, size_t hi, long step,
                          const float *master, const float *state, size_t ntrainable, int nstate,
                          struct nl_error *err)
{
    const size_t own = hi - lo;
    *len = nl_state_size(own, nstate, 1);
    *out = nl_malloc(*len);
    if (!*out)
        return nl_error_set(err, NL_ENOMEM, "out of memory for the optimizer state");
    nl_state_head_encode(*out, &(struct nl_state_head){lo, hi, 1, (uint64_t)step, 0});
    float *f = (float *)(void *)(*out + NL_STATE_HEADER);
    memcpy(f, master + lo, own * sizeof(float));
    for (int k = 0; k < nstate; k++)
        memcpy(f + own * (size_t)(1 + k), state + (size_t)k * ntrainable + lo, own * sizeof(float));
    return 0;
}
