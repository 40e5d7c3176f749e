/* The table of a run's settings (include/nnlab/trainer.h): nl_train_opts's fields that a run
 * stores in its record and that a cluster's workers receive, with their text form. The JSON
 * names are the ones runs have always stored, so the settings of older runs still read; a
 * setting they lack keeps its default. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnlab/trainer.h"

#define AT(field) offsetof(struct nl_train_opts, field)

/* Order matters for reading: optim first, as it sets its optimizer's defaults that the next
 * rows may change. */
const struct nl_setting nl_settings[] = {
    {"epochs", NL_SETTING_INT, AT(epochs), 0},
    {"batch", NL_SETTING_INT, AT(batch), 0},
    {"optim", NL_SETTING_OPTIM, AT(optim.kind), 0},
    {"schedule", NL_SETTING_SCHEDULE, AT(schedule), 0},
    {"warmup", NL_SETTING_FLOAT, AT(schedule.warmup_epochs), 0},
    {"lr", NL_SETTING_FLOAT, AT(optim.lr), 0},
    {"momentum", NL_SETTING_FLOAT, AT(optim.momentum), 0},
    {"nesterov", NL_SETTING_BOOL, AT(optim.nesterov), 0},
    {"weight_decay", NL_SETTING_FLOAT, AT(optim.weight_decay), 0},
    {"beta1", NL_SETTING_FLOAT, AT(optim.beta1), 0},
    {"beta2", NL_SETTING_FLOAT, AT(optim.beta2), 0},
    {"eps", NL_SETTING_FLOAT, AT(optim.eps), 0},
    {"alpha", NL_SETTING_FLOAT, AT(optim.alpha), 0},
    {"threads", NL_SETTING_INT, AT(threads), 0},
    {"seed", NL_SETTING_U64, AT(seed), 0},
    {"clip_value", NL_SETTING_FLOAT, AT(clip_value), 0},
    {"clip_norm", NL_SETTING_FLOAT, AT(clip_norm), 0},
    {"augment.flip", NL_SETTING_BOOL, AT(augment.flip), 0},
    {"augment.crop", NL_SETTING_INT, AT(augment.crop), 0},
    {"augment.resized_crop", NL_SETTING_RESIZED_CROP, AT(augment.scale_min), 1},
    {"augment.brightness", NL_SETTING_FLOAT, AT(augment.brightness), 1},
    {"augment.contrast", NL_SETTING_FLOAT, AT(augment.contrast), 1},
    {"augment.saturation", NL_SETTING_FLOAT, AT(augment.saturation), 1},
    {"early_stop_acc", NL_SETTING_DOUBLE, AT(target_accuracy), 0},
    {"patience", NL_SETTING_INT, AT(patience), 0},
    {"on_nan", NL_SETTING_ON_NAN, AT(on_nan), 0},
    {"checkpoint_every", NL_SETTING_LONG, AT(checkpoint_every), 0},
    {"compress", NL_SETTING_COMPRESS, AT(bf16), 0},
    {"loss", NL_SETTING_LOSS, AT(loss), 0},
    {"overlap", NL_SETTING_OVERLAP, AT(overlap), 0},
};
const int nl_nsettings = (int)(sizeof nl_settings / sizeof nl_settings[0]);
const char *const nl_overlap_names[] = {"auto", "on", "off"};

int nl_setting_is_text(const struct nl_setting *f)
{
    return f->type >= NL_SETTING_OPTIM;
}

const struct nl_setting *nl_setting_find(const char *name)
{
    for (int i = 0; i < nl_nsettings; i++)
        if (strcmp(nl_settings[i].name, name) == 0)
            return &nl_settings[i];
    return NULL;
}

int nl_setting_format(const struct nl_setting *f, const struct nl_train_opts *o, char *buf,
                      size_t size)
{
    const void *p = (const char *)o + f->offset;
    int i;
    float x;

    switch (f->type) {
    case NL_SETTING_INT:
    case NL_SETTING_BOOL:
    case NL_SETTING_COMPRESS:
        memcpy(&i, p, sizeof i);
        if (f->type == NL_SETTING_INT)
            snprintf(buf, size, "%d", i);
        else if (f->type == NL_SETTING_BOOL)
            snprintf(buf, size, "%s", i ? "true" : "false");
        else
            snprintf(buf, size, "%s", i ? "bf16" : "none");
        return !(f->omit_off && i == 0);
    case NL_SETTING_LONG: {
        long v;
        memcpy(&v, p, sizeof v);
        snprintf(buf, size, "%ld", v);
        return !(f->omit_off && v == 0);
    }
    case NL_SETTING_U64: {
        uint64_t v;
        memcpy(&v, p, sizeof v);
        snprintf(buf, size, "%" PRIu64, v);
        return !(f->omit_off && v == 0);
    }
    case NL_SETTING_FLOAT:
        memcpy(&x, p, sizeof x);
        snprintf(buf, size, "%.9g", (double)x);
        return !(f->omit_off && x == 0);
    case NL_SETTING_DOUBLE: {
        double v;
        memcpy(&v, p, sizeof v);
        snprintf(buf, size, "%.17g", v);
        return !(f->omit_off && v == 0);
    }
    case NL_SETTING_OPTIM:
        snprintf(buf, size, "%s", nl_optim_kind_name(o->optim.kind));
        return 1;
    case NL_SETTING_SCHEDULE:
        nl_schedule_format(&o->schedule, buf, size);
        return 1;
    case NL_SETTING_ON_NAN:
        snprintf(buf, size, "%s", o->on_nan == NL_ON_NAN_SKIP_BATCH ? "skip-batch" : "stop");
        return 1;
    case NL_SETTING_LOSS:
        snprintf(buf, size, "%s",
                 nl_loss_names[(unsigned)o->loss <= NL_LOSS_HUBER ? o->loss : NL_LOSS_DEFAULT]);
        return 1;
    case NL_SETTING_OVERLAP:
        snprintf(buf, size, "%s",
                 nl_overlap_names[(unsigned)o->overlap <= NL_OVERLAP_OFF ? o->overlap
                                                                         : NL_OVERLAP_AUTO]);
        return 1;
    case NL_SETTING_RESIZED_CROP: {
        const struct nl_augment *a = &o->augment;
        snprintf(buf, size, "%.9g-%.9g:%.9g-%.9g", (double)a->scale_min, (double)a->scale_max,
                 (double)a->ratio_min, (double)a->ratio_max);
        return !(f->omit_off && a->scale_max == 0);
    }
    }
    return 0;
}

/* The error of a parser underneath, prefixed with the setting's name. */
static int prefixed(struct nl_error *err, const struct nl_setting *f)
{
    char why[NL_ERR_MAX];
    snprintf(why, sizeof why, "%s", err->msg);
    return nl_error_set(err, NL_EFORMAT, "setting %s: %s", f->name, why);
}

static int bad(const struct nl_setting *f, const char *text, struct nl_error *err)
{
    return nl_error_set(err, NL_EFORMAT, "setting %s: '%s' is not a valid value", f->name, text);
}

/* A whole number of text within [lo, hi]. */
static int whole(const char *text, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

int nl_setting_parse(const struct nl_setting *f, struct nl_train_opts *o, const char *text,
                     struct nl_error *err)
{
    void *p = (char *)o + f->offset;
    char *end;
    long long v;

    switch (f->type) {
    case NL_SETTING_INT:
    case NL_SETTING_LONG: {
        if (!whole(text, f->type == NL_SETTING_INT ? INT32_MIN : LONG_MIN,
                   f->type == NL_SETTING_INT ? INT32_MAX : LONG_MAX, &v))
            return bad(f, text, err);
        if (f->type == NL_SETTING_INT) {
            int i = (int)v;
            memcpy(p, &i, sizeof i);
        } else {
            long l = (long)v;
            memcpy(p, &l, sizeof l);
        }
        return 0;
    }
    case NL_SETTING_U64: {
        errno = 0;
        unsigned long long u = strtoull(text, &end, 10);
        if (errno || end == text || *end || text[0] == '-')
            return bad(f, text, err);
        uint64_t w = u;
        memcpy(p, &w, sizeof w);
        return 0;
    }
    case NL_SETTING_BOOL:
    case NL_SETTING_COMPRESS: {
        const char *yes = f->type == NL_SETTING_BOOL ? "true" : "bf16";
        const char *no = f->type == NL_SETTING_BOOL ? "false" : "none";
        int i = strcmp(text, yes) == 0;
        if (!i && strcmp(text, no) != 0)
            return bad(f, text, err);
        memcpy(p, &i, sizeof i);
        return 0;
    }
    case NL_SETTING_FLOAT:
    case NL_SETTING_DOUBLE: {
        double d = strtod(text, &end);
        if (end == text || *end)
            return bad(f, text, err);
        if (f->type == NL_SETTING_FLOAT) {
            float x = (float)d;
            memcpy(p, &x, sizeof x);
        } else {
            memcpy(p, &d, sizeof d);
        }
        return 0;
    }
    case NL_SETTING_OPTIM: {
        enum nl_optim_kind kind;
        if (nl_optim_kind_parse(&kind, text, err) < 0)
            return prefixed(err, f);
        nl_optim_defaults(&o->optim, kind);
        return 0;
    }
    case NL_SETTING_SCHEDULE:
        if (nl_schedule_parse(&o->schedule, text, err) < 0)
            return prefixed(err, f);
        return 0;
    case NL_SETTING_ON_NAN:
        if (strcmp(text, "stop") != 0 && strcmp(text, "skip-batch") != 0)
            return bad(f, text, err);
        o->on_nan = strcmp(text, "skip-batch") == 0 ? NL_ON_NAN_SKIP_BATCH : NL_ON_NAN_STOP;
        return 0;
    case NL_SETTING_LOSS: {
        int k = nl_loss_parse(text);
        if (k < 0)
            return bad(f, text, err);
        o->loss = (enum nl_loss)k;
        return 0;
    }
    case NL_SETTING_OVERLAP:
        for (int k = NL_OVERLAP_AUTO; k <= NL_OVERLAP_OFF; k++)
            if (strcmp(text, nl_overlap_names[k]) == 0) {
                o->overlap = k;
                return 0;
            }
        return bad(f, text, err);
    case NL_SETTING_RESIZED_CROP: {
        char spec[160];
        struct nl_augment a;
        snprintf(spec, sizeof spec, "resized-crop:%s", text);
        if (nl_augment_parse(&a, spec, err) < 0)
            return prefixed(err, f);
        o->augment.scale_min = a.scale_min;
        o->augment.scale_max = a.scale_max;
        o->augment.ratio_min = a.ratio_min;
        o->augment.ratio_max = a.ratio_max;
        return 0;
    }
    }
    return bad(f, text, err);
}
